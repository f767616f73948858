#!/usr/bin/env bash
# One GPU call that checks a change against the commit before it: the CUDA test suites of the new
# build, then ResNet-50 and GPT-2 training from the base build and the new build in turns, so
# drift over the call hits both alike. Mini bundles travel (scripts/gpu/mini-bundle.sh):
#   build/gpu-extra/bundle.tar.xz the new commit's apps/nabla-bench, tests/nabla_cuda_tests and
#                                 the suites with CUDA cases (core, apps), where they were bundled
#   build/gpu-base/bundle.tar.xz  the base commit's apps/nabla-bench (optional: without it only
#                                 the new build's figures are taken)
# PARTS (default "suite,rn50,gpt"): suite = every bundled test binary (the core and apps suites
# filtered to their CUDA cases); rn50 = nabla-bench train --arch resnet50 --batch-size 256
# --channels-last --cuda-graph in fp16 and bf16, base then new, ROUNDS times (default 1); gpt =
# nabla-bench gpt (GPT-2 124M, bf16, batch 16 x 1024), base then new, ROUNDS times. Logs under
# $OUT; a table of the step times and the suites' counts last.
set -uo pipefail
parts=${PARTS:-suite,rn50,gpt}
rounds=${ROUNDS:-1}
source scripts/gpu/unpack.sh
sides=new
if [[ -f build/gpu-base/bundle.tar.xz ]]; then
  mkdir -p build/gpu-base-x
  tar -xJf build/gpu-base/bundle.tar.xz -C build/gpu-base-x
  sides="base new"
fi
dir_of() { if [[ $1 == base ]]; then echo "$PWD/build/gpu-base-x"; else echo "$x"; fi; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"

if has suite; then
  for bin in "$x"/tests/nabla_*_tests; do
    name=$(basename "$bin")
    filter='*'
    [[ $name == nabla_cuda_tests ]] || filter='*Cuda*'
    timeout 420 "$bin" --gtest_filter="$filter" > "$out/$name.log" 2>&1
    echo "$name rc=$?" >> "$out/rc"
  done
fi
rn50() { timeout 150 "$1/apps/nabla-bench" train --arch resnet50 --batch-size 256 --channels-last --amp "$2" \
  --steps 30 --cuda-graph; }
for round in $(seq "$rounds"); do
  for amp in fp16 bf16; do
    has rn50 || break
    for side in $sides; do rn50 "$(dir_of "$side")" "$amp" > "$out/rn50_${amp}_${side}_$round.log" 2>&1; done
  done
  if has gpt; then
    for side in $sides; do
      timeout 150 "$(dir_of "$side")/apps/nabla-bench" gpt > "$out/gpt_${side}_$round.log" 2>&1
    done
  fi
done

echo
[[ -f $out/rc ]] && cat "$out/rc"
for log in "$out"/nabla_*_tests.log; do
  [[ -f $log ]] || continue
  echo "$(basename "$log"): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' "$log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$log" | head -20
done
for log in "$out"/rn50_*.log; do
  [[ -f $log ]] || continue
  echo "== $(basename "$log" .log)"
  grep -E 'fp16|bf16' "$log" | tail -n 1
done
for log in "$out"/gpt_*.log; do
  [[ -f $log ]] || continue
  echo "== $(basename "$log" .log)"
  tail -n 3 "$log"
done
