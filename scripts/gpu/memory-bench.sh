#!/usr/bin/env bash
# Issue 9's memory measurements on the H200, beside ../shared/bench/torch_ckpt.py in the same call:
# ResNet-50 at batch 256 with gradient checkpointing at 0, 4 and 8 segments, FP32 (NCHW, as
# torch_ckpt.py's fp32 mode) and AMP fp16 (channels_last, as its amp16 mode).
# Usage: scripts/gpu/memory-bench.sh BUILD [TORCH_CKPT_PY] (default: bench/pytorch/torch_ckpt_each.py,
# which goes on past the configuration where PyTorch fails)
set -uo pipefail
build=$1 torch_ckpt=${2:-$(dirname "$0")/../../bench/pytorch/torch_ckpt_each.py}
out=${OUT:-/tmp/nabla-gpu}
mkdir -p "$out"
[[ -x $build/apps/nabla-bench ]] || tar -C "$build" -xJf "$build/gpu-bundle.tar.xz"
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
: > "$out/memory.txt"
for seg in 0 4 8; do
  "$build/apps/nabla-bench" train --arch resnet50 --batch-size 256 --amp off --steps 15 --warmup 6 \
    --grad-checkpoint "$seg" >> "$out/memory.txt" 2>&1 || status=1
  "$build/apps/nabla-bench" train --arch resnet50 --batch-size 256 --amp fp16 --channels-last --steps 15 \
    --warmup 6 --grad-checkpoint "$seg" >> "$out/memory.txt" 2>&1 || status=1
done
python3 "$torch_ckpt" > "$out/torch_ckpt.txt" 2>&1 || status=1
echo "== nabla-bench train (ResNet-50, batch 256)"
grep -E "^resnet50 train" "$out/memory.txt"
grep -E "^\{" "$out/memory.txt" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if isinstance(r, dict) and r.get("bench") == "train":
        print(r.get("amp"), "segments", r.get("grad_checkpoint"), "img/s", round(r["img_s_total"], 1),
              "peak_alloc_GiB", round(r["peak_alloc_GiB"], 2))'
echo "== torch_ckpt.py"
cat "$out/torch_ckpt.txt"
exit $status
