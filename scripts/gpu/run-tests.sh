#!/usr/bin/env bash
# Runs on the GPU test machine: every test binary of the CUDA build, with logs under $OUT, and a
# short table last. The binaries are built here (cmake --preset cuda) and carried over; libgomp
# travels beside them in build/cuda/gpu-lib (scripts/gpu/bundle.sh), since that machine has
# none of our -dev packages.
set -uo pipefail
build=${1:-build/cuda}
out=${OUT:-/tmp/nabla-gpu}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

declare -a rows
status=0
for bin in "$build"/tests/nabla_*_tests; do
  name=$(basename "$bin")
  "$bin" --gtest_output="xml:$out/$name.xml" > "$out/$name.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && status=1
  ran=$(grep -oE '^\[==========\] [0-9]+ tests' "$out/$name.log" | grep -oE '[0-9]+' | head -1)
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$out/$name.log" | grep -oE '[0-9]+$')
  skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$out/$name.log" | grep -oE '[0-9]+$')
  rows+=("$(printf '%-22s %6s %7s %8s %4s' "$name" "${ran:-0}" "${passed:-0}" "${skipped:-0}" "$rc")")
  [[ $rc -ne 0 ]] && grep -E '^\[  FAILED  \]|Failure|exception' "$out/$name.log" | head -20
done
echo
printf '%-22s %6s %7s %8s %4s\n' binary ran passed skipped rc
printf '%s\n' "${rows[@]}"
exit $status
