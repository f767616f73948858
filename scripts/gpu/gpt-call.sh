#!/usr/bin/env bash
# One GPU call for the GPT work (issue 24), from a mini bundle (scripts/gpu/mini-bundle.sh
# build/cuda examples/train_gpt tests/nabla_cuda_tests [apps/nabla-bench]; carry
# build/gpu-extra/bundle.tar.xz and .gpu-data, Debian's fortunes copied there):
#   1. the CUDA test cases named in $FIRST (a gtest filter), then the whole CUDA suite;
#   2. GPT-2 124M bf16 speed: nabla-bench gpt --profile 3 --compare-pytorch (nabla::profiler's
#      table, then PyTorch eager and torch.compile through bench/pytorch/torch_gpt2.py);
#   3. the 200-step float32 loss curves, nabla against PyTorch (bench/pytorch/gpt2_curve.py);
# logs under $OUT, a short summary last. Steps are skipped by listing them in $SKIP (tests,
# bench, curve).
set -uo pipefail
out=${OUT:-/tmp/nabla-gpu}
b=build/gpu-x
mkdir -p "$out" "$b"
tar -xJf build/gpu-extra/bundle.tar.xz -C "$b"
export LD_LIBRARY_PATH="$PWD/$b/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
skip=${SKIP:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
if [[ $skip != *tests* ]]; then
  if [[ -n ${FIRST:-} ]]; then
    timeout 120 "$b/tests/nabla_cuda_tests" --gtest_filter="$FIRST" > "$out/tests_first.log" 2>&1
    echo "== first ($FIRST) rc=$?"; grep -E '^\[  (PASSED|FAILED) ' "$out/tests_first.log" | head -20
  fi
  timeout 240 "$b/tests/nabla_cuda_tests" > "$out/tests_cuda.log" 2>&1
  echo "== cuda suite rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+|^\[  SKIPPED \] [0-9]+' "$out/tests_cuda.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Z]' "$out/tests_cuda.log" | head -20
fi
if [[ $skip != *bench* ]]; then
  PYTHONUNBUFFERED=1 timeout 300 "$b/apps/nabla-bench" gpt --profile 3 --compare-pytorch > "$out/gpt_bench.log" 2>&1
fi
if [[ $skip != *curve* ]]; then
  timeout 300 python3 bench/pytorch/gpt2_curve.py --nabla "$b/examples/train_gpt" --text .gpu-data/fortunes \
    --steps 200 --batch 8 --seq 1024 --out "$out/curve" > "$out/gpt_curve.log" 2>&1
  echo "== curve rc=$?"
fi
echo "== profile"; sed -n '/nabla::profiler/,/^total/p' "$out/gpt_bench.log" 2>/dev/null | head -45
echo "== curve"; tail -14 "$out/gpt_curve.log" 2>/dev/null
echo "== bench"; sed -n '/^GPT-2/,$p' "$out/gpt_bench.log" 2>/dev/null
