#!/usr/bin/env bash
# Runs every libFuzzer target of the `fuzz` preset for a bounded time over its seed corpus
# (tests/fuzz/corpus/<target>, read only) and dictionary (tests/fuzz/dict/<target>.dict, if any),
# FUZZ_JOBS targets at a time (default 2). Fails when any target finds a crash, a leak, a
# sanitizer report, a timeout or runs out of memory; the input that did it is kept under
# $FUZZ_OUT/<target>/artifacts. A table of executions, coverage and corpus sizes comes last.
#
#   cmake --preset fuzz && cmake --build --preset fuzz
#   scripts/fuzz/run.sh 30                    # CI: 30 s per target
#   scripts/fuzz/run.sh 3600 store_fuzz       # a CPU-hour for one target
#
# New inputs a run finds go to $FUZZ_OUT/<target>/corpus (default build/fuzz/runs), which later
# runs start from as well; copy the interesting ones into tests/fuzz/corpus by hand.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-30}
shift || true
build=build/fuzz
out=${FUZZ_OUT:-$build/runs}
jobs=${FUZZ_JOBS:-2}
positive() { [[ $2 =~ ^[0-9]+$ && $2 -gt 0 ]] || { echo "fuzz: $1 must be a positive whole number, got '$2'" >&2; exit 2; }; }
positive SECONDS "$seconds"
positive FUZZ_JOBS "$jobs"
if (($# > 0)); then
  targets=("$@")
else
  [[ -f $build/fuzz_targets.txt ]] || { echo "fuzz: no $build/fuzz_targets.txt; build the fuzz preset first" >&2; exit 2; }
  read -ra targets <<< "$(tr ';' ' ' < "$build/fuzz_targets.txt")"
fi

run_one() {
  local target=$1 work=$out/$1
  mkdir -p "$work/corpus" "$work/artifacts"
  local args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
              -artifact_prefix="$work/artifacts/")
  [[ -f tests/fuzz/dict/$target.dict ]] && args+=(-dict="tests/fuzz/dict/$target.dict")
  # The first folder receives what the run finds; the seeds stay as committed.
  if "$build/tests/fuzz/$target" "${args[@]}" "$work/corpus" "tests/fuzz/corpus/$target" > "$work/log" 2>&1; then
    echo 0 > "$work/rc"
  else
    echo $? > "$work/rc"
  fi
  # CPU seconds the target used (user + system of this subshell's children): with builds beside
  # it, or under nice, a run gets less CPU than its wall-clock limit, and the docs count CPU time.
  # `times` goes to a file first: in a pipe it would run in a subshell with no children.
  LC_ALL=C times > "$work/times"
  awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); printf "%d\n", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' \
    "$work/times" > "$work/cpu"
}

for target in "${targets[@]}"; do  # every target checked before any starts
  [[ -x $build/tests/fuzz/$target ]] || { echo "fuzz: $build/tests/fuzz/$target is not built" >&2; exit 2; }
done
for target in "${targets[@]}"; do
  rm -f "$out/$target/rc"
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  run_one "$target" &
done
wait

failed=0
printf '%-18s %8s %8s %12s %8s %8s %8s %8s  %s\n' target seconds cpu_s executions exec/s cov ft corpus result
for target in "${targets[@]}"; do
  log=$out/$target/log
  rc=$(cat "$out/$target/rc" 2>/dev/null || echo missing)
  # A target that died at start-up (or on a seed) leaves no status lines: dashes, not an exit here.
  execs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$log" 2>/dev/null | grep -oE '[0-9]+$' || echo 0)
  last=$(grep -E '^#[0-9]+' "$log" 2>/dev/null | tail -n 1 || true)
  cov=$(grep -oE 'cov: [0-9]+' <<< "$last" | grep -oE '[0-9]+' || echo -)
  ft=$(grep -oE 'ft: [0-9]+' <<< "$last" | grep -oE '[0-9]+' || echo -)
  corpus=$(grep -oE 'corp: [0-9]+' <<< "$last" | grep -oE '[0-9]+' || echo -)
  result=ok
  if [[ $rc != 0 ]]; then
    result="FAILED (rc $rc): $(grep -m1 -E 'ERROR: |runtime error|==ERROR|deadly signal|timeout' "$log" 2>/dev/null || true)"
    failed=1
  fi
  cpu=$(cat "$out/$target/cpu" 2>/dev/null || echo -)
  printf '%-18s %8s %8s %12s %8s %8s %8s %8s  %s\n' "$target" "$seconds" "$cpu" "$execs" "$((execs / seconds))" "$cov" "$ft" \
    "$corpus" "$result"
done
if ((failed)); then
  echo "fuzz: a target failed; its log and the input are under $out/<target>/" >&2
  for target in "${targets[@]}"; do
    [[ $(cat "$out/$target/rc" 2>/dev/null) == 0 ]] || { echo "--- $target"; tail -n 40 "$out/$target/log" 2>/dev/null; }
  done
  exit 1
fi
