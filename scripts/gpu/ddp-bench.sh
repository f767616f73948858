#!/usr/bin/env bash
# On a multi-GPU machine: ResNet-50 AMP fp16 channels_last at batch 256 per GPU with nabla-bench
# train on 1 GPU (plain, and DDP-wrapped over a one-rank NCCL group: --ddp) and on 2, 4 and 8 GPUs
# (DDP over NCCL, as many as the machine has), then PyTorch's torch_ddp.py (world 1, DDP-wrapped,
# and world N) in the same call, and a table: img/s, scaling efficiency against the DDP-wrapped
# 1-GPU figure (the method of TARGETS.md and torch_ddp.py) and against nabla's plain 1-GPU figure,
# and nabla/PyTorch where both ran.
# NVLink SHARP stays off, as the project's machines require.
# Usage: scripts/gpu/ddp-bench.sh BUILD [TORCH_DDP_SCRIPT]
set -uo pipefail
build=${1:-build/cuda}
torch_script=${2:-}
out=${OUT:-/tmp/nabla-gpu}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bench="$build/apps/nabla-bench"
gpus=$(nvidia-smi --list-gpus | wc -l)
nvidia-smi topo -m > "$out/topo.txt" 2>&1
common=(train --arch resnet50 --batch-size 256 --amp fp16 --channels-last)
"$bench" "${common[@]}" --json "$out/plain_world1.json" 2>&1 | tee "$out/ddp.log"
"$bench" "${common[@]}" --ddp --json "$out/ddp_world1.json" 2>&1 | tee -a "$out/ddp.log"
for n in 2 4 8; do
  ((n <= gpus)) || break
  "$bench" "${common[@]}" --nproc-per-node "$n" --json "$out/ddp_world$n.json" 2>&1 | tee -a "$out/ddp.log"
done
if [[ -n $torch_script ]]; then
  PYTHONUNBUFFERED=1 python3 "$torch_script" 2>&1 | tee "$out/torch_ddp.log"
fi
python3 - "$out" << 'PY'
import ast, glob, json, os, sys
out = sys.argv[1]
nabla = {}
for f in glob.glob(os.path.join(out, "ddp_world*.json")):
    j = json.load(open(f)); j = j[0] if isinstance(j, list) else j  # nabla-bench writes a list of rows
    nabla[j["world"]] = j["img_s_total"]
torch = {}
if os.path.exists(os.path.join(out, "torch_ddp.log")):
    for line in open(os.path.join(out, "torch_ddp.log")):
        if line.startswith("{'world'"):
            d = ast.literal_eval(line); torch[d["world"]] = d["img_s_total"]
plain = json.load(open(os.path.join(out, "plain_world1.json")))[0]["img_s_total"]
def pct(x): return f"{x:.1%}" if x is not None else "-"
print(f"nabla 1 GPU without DDP: {plain:.1f} img/s")
print(f"{'world':>5} {'nabla img/s':>12} {'scaling':>8} {'vs plain':>9} {'torch img/s':>12} {'torch scaling':>14} {'nabla/torch':>12}")
for w in sorted(nabla):
    s = nabla[w] / (w * nabla[1]) if 1 in nabla else None
    t = torch.get(w); ts = t / (w * torch[1]) if t and 1 in torch else None
    print(f"{w:>5} {nabla[w]:>12.1f} {pct(s):>8} {pct(nabla[w] / (w * plain)):>9} {t or float('nan'):>12.1f} "
          f"{pct(ts):>14} {(nabla[w] / t) if t else float('nan'):>12.3f}")
PY
