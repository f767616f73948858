#!/usr/bin/env bash
# On the GPU machine: nabla-bench train in FP32 (NCHW, TF32 convolutions), AMP fp16 and bf16
# (channels_last), then PyTorch's torch_resnet50.py on the same GPU in the same call, and a
# table of the ratios. Usage: scripts/gpu/train-bench.sh BUILD TORCH_SCRIPT [BATCH]
set -uo pipefail
build=${1:-build/cuda}
torch_script=${2:-}
batch=${3:-256}
out=${OUT:-/tmp/nabla-gpu}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bench="$build/apps/nabla-bench"
for cfg in "off:" "fp16:--channels-last" "bf16:--channels-last"; do
  amp=${cfg%%:*}
  flags=${cfg#*:}
  "$bench" train --arch resnet50 --batch-size "$batch" --amp "$amp" $flags --json "$out/train_$amp.json" \
    2>&1 | tee -a "$out/train.log"
done
if [[ -n $torch_script ]]; then
  PYTHONUNBUFFERED=1 python3 "$torch_script" 2>&1 | tee "$out/torch_resnet50.log"
fi
