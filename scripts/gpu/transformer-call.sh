#!/usr/bin/env bash
# One GPU call for the transformer work (issue 24): the GPT-2 benchmark beside PyTorch eager and
# torch.compile, the byte-level demo on Debian's fortunes (copied to .gpu-data/fortunes and
# carried), then every GPU test binary; logs under $OUT. Carry build/cuda/gpu-bundle.tar.xz and
# .gpu-data.
set -uo pipefail
build=build/cuda
out=${OUT:-/tmp/nabla-gpu}
mkdir -p "$out"
tar -C "$build" -xJf "$build/gpu-bundle.tar.xz"
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 60 "$build/examples/train_gpt" --bench 2>&1 | tee "$out/gpt_nabla.log"
PYTHONUNBUFFERED=1 timeout 150 python3 bench/pytorch/torch_gpt2.py --modes eager,compile 2>&1 | tee "$out/gpt_torch.log"
timeout 80 "$build/examples/train_gpt" --text .gpu-data/fortunes --small --steps 1200 --sample 500 > "$out/gpt_demo.log" 2>&1
tail -14 "$out/gpt_demo.log"
for bin in cuda core apps nccl; do
  timeout 170 "$build/tests/nabla_${bin}_tests" > "$out/tests_$bin.log" 2>&1
  echo "== $bin rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+|^\[  SKIPPED \] [0-9]+' "$out/tests_$bin.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Z]|info \]' "$out/tests_$bin.log" | head -20
done
