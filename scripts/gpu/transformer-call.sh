#!/usr/bin/env bash
# One GPU call for the transformer work (issue 24): the GPT-2 benchmark beside PyTorch, the new
# GPU tests, the byte-level demo on Debian's fortunes (copied to .gpu-data/fortunes and carried),
# then the whole GPU suite; logs under $OUT. Carry build/cuda/gpu-bundle.tar.xz and .gpu-data.
set -uo pipefail
build=build/cuda
out=${OUT:-/tmp/nabla-gpu}
mkdir -p "$out"
tar -C "$build" -xJf "$build/gpu-bundle.tar.xz"
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout 120 "$build/examples/train_gpt" --bench 2>&1 | tee "$out/gpt_nabla.log"
timeout 300 "$build/tests/nabla_cuda_tests" --gtest_filter='CudaAttention*:CudaParitySort*:CudaParityLayerNorm*:CudaParityLoss*:CudaParityElementwise*:CudaParityFrontend*:CudaAmp*' \
  > "$out/cuda_new.log" 2>&1
grep -E '^\[  FAILED|Failure|info \]|PASSED|FAILED TEST' "$out/cuda_new.log" | head -30
timeout 150 "$build/examples/train_gpt" --text .gpu-data/fortunes --small --steps 2000 --sample 500 > "$out/gpt_demo.log" 2>&1
tail -16 "$out/gpt_demo.log"
PYTHONUNBUFFERED=1 timeout 240 python3 bench/pytorch/torch_gpt2.py --modes eager,compile 2>&1 | tee "$out/gpt_torch.log"
timeout 200 bash scripts/gpu/run-tests.sh "$build" > "$out/tests.txt" 2>&1
tail -8 "$out/tests.txt"
