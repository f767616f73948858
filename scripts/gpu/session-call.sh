#!/usr/bin/env bash
# One GPU call that checks a session's work end to end, from the full bundle (scripts/gpu/
# bundle.sh; carry build/cuda/gpu-bundle.tar.xz and .gpu-data, Debian's fortunes copied there):
#   1. the CUDA test cases named in $FIRST (a gtest filter), then every test binary of the bundle;
#   2. nabla-bench gpt --compare-pytorch --profile 3 (GPT-2 124M bf16 beside PyTorch eager and
#      torch.compile, and nabla::profiler's table);
#   3. nabla-bench train for ResNet-50 (fp16, channels_last); $RESNET_FLAGS adds flags (--compare-pytorch);
#   4. the byte-level GPT demo on the fortunes, with its sample;
# logs under $OUT and a short summary last. $SKIP lists steps to leave out (tests, gpt, resnet, demo).
set -uo pipefail
out=${OUT:-/tmp/nabla-gpu}
build=build/cuda
mkdir -p "$out"
tar -C "$build" -xJf "$build/gpu-bundle.tar.xz"
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
skip=${SKIP:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
summary=()
if [[ $skip != *tests* ]]; then
  if [[ -n ${FIRST:-} ]]; then
    timeout 120 "$build/tests/nabla_cuda_tests" --gtest_filter="$FIRST" > "$out/tests_first.log" 2>&1
    summary+=("first ($FIRST) rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$out/tests_first.log" | tr '\n' ' ')")
  fi
  for bin in "$build"/tests/nabla_*_tests; do
    name=$(basename "$bin")
    timeout 300 "$bin" > "$out/$name.log" 2>&1
    rc=$?
    summary+=("$name rc=$rc $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+|^\[  SKIPPED \] [0-9]+' "$out/$name.log" | tr '\n' ' ')")
    [[ $rc -ne 0 ]] && summary+=("$(grep -E '^\[  FAILED  \] [A-Z]' "$out/$name.log" | head -10)")
  done
fi
if [[ $skip != *gpt* ]]; then
  PYTHONUNBUFFERED=1 timeout 300 "$build/apps/nabla-bench" gpt --profile 3 --compare-pytorch > "$out/gpt_bench.log" 2>&1
fi
if [[ $skip != *resnet* ]]; then
  timeout 240 "$build/apps/nabla-bench" train --arch resnet50 --batch-size 256 --amp fp16 --channels-last ${RESNET_FLAGS:-} \
    --steps 20 > "$out/resnet50.log" 2>&1
fi
if [[ $skip != *demo* ]]; then
  timeout 150 "$build/examples/train_gpt" --text .gpu-data/fortunes --small --steps 1500 --sample 600 \
    > "$out/gpt_demo.log" 2>&1
fi
echo "== profile"; sed -n '/nabla::profiler/,/^total/p' "$out/gpt_bench.log" 2>/dev/null | head -30
echo "== demo"; tail -16 "$out/gpt_demo.log" 2>/dev/null
echo "== resnet50"; tail -5 "$out/resnet50.log" 2>/dev/null
echo "== tests"; printf '%s\n' "${summary[@]}"
echo "== gpt"; sed -n '/^GPT-2/,$p' "$out/gpt_bench.log" 2>/dev/null
