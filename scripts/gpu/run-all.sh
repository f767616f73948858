#!/usr/bin/env bash
# One GPU-machine call: the whole test suite, the allocator tests again with expandable segments,
# then the microbenchmarks; logs under $OUT, short tables last.
set -uo pipefail
build=${1:-build/cuda}
out=${OUT:-/tmp/nabla-gpu}
mkdir -p "$out"
[[ -f $build/gpu-bundle.tar.xz ]] && tar -C "$build" -xJf "$build/gpu-bundle.tar.xz"
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
bash "$(dirname "$0")/run-tests.sh" "$build" > "$out/tests.txt" 2>&1 || status=1

NABLA_CUDA_ALLOC_CONF=expandable_segments:true "$build/tests/nabla_cuda_tests" \
  --gtest_filter='CudaAllocator*:CudaGraph*:CudaRuntime*' > "$out/expandable.log" 2>&1 || status=1
NABLA_CUDA_ALLOC_CONF=backend:native "$build/tests/nabla_cuda_tests" \
  --gtest_filter='CudaRuntime*:CudaParityElementwise*' > "$out/native.log" 2>&1 || status=1

for bench in "$build"/bench/nabla_bench_*; do
  [[ -x $bench ]] || continue
  echo "== $(basename "$bench")" >> "$out/bench.txt"
  "$bench" >> "$out/bench.txt" 2>&1 || status=1
done

# The custom-model example trains on the GPU and round-trips a checkpoint.
if [[ -x $build/examples/custom_model ]]; then
  echo "== examples/custom_model" >> "$out/bench.txt"
  "$build/examples/custom_model" --checkpoint "$out/custom_model.safetensors" >> "$out/bench.txt" 2>&1 || status=1
  rm -f "$out/custom_model.safetensors"
fi

# The user-project example with its own CUDA kernel (built by tests/install/custom_op_test.sh
# with NABLA_CUSTOM_OP_OUT=build/cuda/examples/custom_op).
if [[ -x $build/examples/custom_op ]]; then
  echo "== examples/custom_op" >> "$out/bench.txt"
  "$build/examples/custom_op" >> "$out/bench.txt" 2>&1 || status=1
fi

# PyTorch beside nabla, in the same call, for the ratios in docs/performance.md.
if python3 -c 'import torch' 2> /dev/null; then
  echo "== torch_conv_shapes.py" >> "$out/bench.txt"
  python3 "$(dirname "$0")/../../bench/torch_conv_shapes.py" >> "$out/bench.txt" 2>&1 || status=1
fi

cat "$out/tests.txt" | grep -E '^\[  FAILED|Failure|exception' | head -40
echo "== expandable_segments:true"; tail -3 "$out/expandable.log"
echo "== backend:native"; tail -3 "$out/native.log"
cat "$out/bench.txt" 2>/dev/null
echo; tail -6 "$out/tests.txt"
exit $status
