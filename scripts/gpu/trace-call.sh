#!/usr/bin/env bash
# Trace call: a CUPTI kernel timeline of ResNet-50 fp16 CL b256 training, eager and graphed, fused.
set -uo pipefail
source scripts/gpu/unpack.sh
bench="$x/apps/nabla-bench"
rn50() { timeout "$1" "$bench" train --arch resnet50 --batch-size 256 --channels-last --amp fp16 "${@:2}"; }
NABLA_CUPTI_TRACE="$out/eager-%p.csv" LD_PRELOAD="$x/tools/libnabla_cupti_trace.so" rn50 120 --warmup 8 --steps 6 > "$out/eager.log" 2>&1
NABLA_CUPTI_TRACE="$out/graph-%p.csv" LD_PRELOAD="$x/tools/libnabla_cupti_trace.so" rn50 120 --warmup 8 --steps 6 --cuda-graph > "$out/graph.log" 2>&1
NABLA_CUPTI_TRACE="$out/unfused-%p.csv" LD_PRELOAD="$x/tools/libnabla_cupti_trace.so" rn50 120 --warmup 8 --steps 6 --cuda-graph --no-conv-bn-fusion > "$out/unfused.log" 2>&1
for f in eager graph unfused; do echo "-- $f"; grep -E 'img/s|rror' "$out/$f.log" | cut -c1-200 | tail -4; done
for f in eager graph unfused; do python3 tools/cupti_trace/summarize.py --top 25 $(ls -S "$out"/$f-*.csv | head -1) 2>&1 | cut -c1-160; done
xz -T8 "$out"/*.csv
