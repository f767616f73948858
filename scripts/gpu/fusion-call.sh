#!/usr/bin/env bash
# One GPU call for the convolution + batch norm fusion (issue 23), from the full bundle
# (scripts/gpu/bundle.sh; carry build/cuda/gpu-bundle.tar.xz): the fusion tests first, the whole
# CUDA suite, ResNet-50 fp16 channels_last --cuda-graph training with the fusion (beside PyTorch
# eager in the same call) and without it, fp16 eager with it, and the per-shape fusion benchmark.
# Logs go under $OUT; a short summary comes last.
set -uo pipefail
out=${OUT:-/tmp/nabla-gpu}
build=build/cuda
mkdir -p "$out"
tar -C "$build" -xJf "$build/gpu-bundle.tar.xz"
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
tests="$build/tests/nabla_cuda_tests"
bench="$build/apps/nabla-bench"
timeout 90 "$tests" --gtest_filter='CudaConvBatchNorm.*' > "$out/first.log" 2>&1
first=$?
timeout 270 "$tests" > "$out/cuda.log" 2>&1
suite=$?
rn50() { timeout "$1" "$bench" train --arch resnet50 --batch-size 256 --channels-last --amp fp16 --steps 30 "${@:2}"; }
rn50 150 --cuda-graph --compare-pytorch --no-torch-compile > "$out/rn50_graph_fused_torch.log" 2>&1
rn50 70 --cuda-graph --no-conv-bn-fusion > "$out/rn50_graph_unfused.log" 2>&1
rn50 70 > "$out/rn50_eager_fused.log" 2>&1
timeout 60 "$build/bench/nabla_bench_conv_bn_fusion" 5 > "$out/conv_bn_fusion.log" 2>&1
echo "== fusion tests rc=$first"
grep -vE '^\[ RUN|^\[       OK' "$out/first.log" | cut -c1-300 | head -40
echo "== CUDA suite rc=$suite: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+' "$out/cuda.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \] [A-Z]' "$out/cuda.log" | head -10
for f in "$out"/rn50_*.log; do
  echo "-- $(basename "$f")"
  grep -E '^step:|img/s total|rror' "$f" | cut -c1-300
done
sed -n '/^resnet50 train, batch/,$p' "$out/rn50_graph_fused_torch.log"
echo "== conv_bn_fusion"
grep -E '^weighted|^shape' "$out/conv_bn_fusion.log"
