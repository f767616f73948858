#!/usr/bin/env bash
# On the GPU machine: the nabla-bench tables, each beside PyTorch (--compare-pytorch runs
# bench/pytorch/nabla_bench_torch.py after nabla's rows, in the same call):
#   train       ResNet-50, batch 256, fp32 / fp16 / bf16 x NCHW / channels_last
#   infer       ResNet-50 eval latency, batch 16 / 32 / 64 / 256, fp32 / fp16 x NCHW / channels_last
#   concurrent  2, 4 and 6 inference jobs on the one GPU, each capped at memory fraction 0.15
# Logs and JSON go to $OUT; the tables are printed last. About 6-8 minutes on an H200 for "all";
# name one part to run only that.
# Usage: scripts/gpu/bench-tables.sh BUILD [all|train|infer|concurrent]
set -uo pipefail
build=${1:-build/cuda}
part=${2:-all}
out=${OUT:-/tmp/nabla-gpu}
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
[[ -x $build/apps/nabla-bench ]] || tar -C "$build" -xJf "$build/gpu-bundle.tar.xz"
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
bench="$build/apps/nabla-bench"
torch=(--compare-pytorch --torch-script "$repo/bench/pytorch/nabla_bench_torch.py")
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1

if [[ $part == all || $part == train ]]; then
  timeout 300 "$bench" train --arch resnet50 --batch-size 256 --amp off,fp16,bf16 --layout nchw,channels-last \
    --steps 30 --warmup 10 "${torch[@]}" --json "$out/bench_train.json" > "$out/bench_train.log" 2>&1 || status=1
fi
if [[ $part == all || $part == infer ]]; then
  timeout 240 "$bench" infer --arch resnet50 --batch-sizes 16,32,64,256 --amp off,fp16 \
    --layout nchw,channels-last --iters 50 --warmup 10 "${torch[@]}" --json "$out/bench_infer.json" \
    > "$out/bench_infer.log" 2>&1 || status=1
fi
if [[ $part == all || $part == concurrent ]]; then
  for jobs in 2 4 6; do
    timeout 120 "$bench" concurrent --jobs "$jobs" --memory-fraction 0.15 --batch-size 64 --amp fp16 \
      --iters 100 --warmup 10 --timeout 100 --log-dir "$out/concurrent_$jobs" \
      --json "$out/bench_concurrent_$jobs.json" > "$out/bench_concurrent_$jobs.log" 2>&1 || status=1
  done
fi

# The tables (each command prints its own at the end of its log), and any error lines.
cat "$out/gpu.txt"
for log in "$out"/bench_train.log "$out"/bench_infer.log "$out"/bench_concurrent_*.log; do
  [[ -f $log ]] || continue
  echo "== $(basename "$log")"
  grep -E 'skipped|^nabla-bench:|warning' "$log"
  sed -n -e '/^resnet50 train, batch/,$p' -e '/^resnet50 inference/,$p' -e '/concurrent resnet50 infer jobs/,$p' "$log"
done
exit $status
