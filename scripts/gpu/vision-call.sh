#!/usr/bin/env bash
# One GPU call for the vision-layers work (issue 27), from the mini bundle
# (scripts/gpu/mini-bundle.sh build/cuda tests/nabla_cuda_tests apps/nabla-bench
# bench/nabla_bench_depthwise examples/unet tools/libnabla_cupti_trace.so tools/libcupti.so.13;
# carry build/gpu-extra/bundle.tar.xz).
# PARTS (default "first,dw,ab,unet"), in this order: first = the tests named in FIRST; suite =
# the whole CUDA suite; dw = the depthwise microbenchmark, nabla (its kernels and cuDNN) then
# PyTorch; ab = MobileNetV2 and EfficientNet-B0 training steps (nabla's depthwise kernels are
# the only route; cuDNN's depthwise is timed by dw); unet = examples/unet to 0.9 IoU; trace = a CUPTI timeline of MobileNetV2's replayed
# step; models = every model of ARCHS beside PyTorch eager (and torch.compile with COMPILE=1).
# Logs under $OUT; a short summary last.
set -uo pipefail
parts=${PARTS:-first,dw,ab,unet}
first=${FIRST:-CudaParityDepthwiseConv.*:CudaParityConv.*:CudaParityVisionLayers.*}
archs=${ARCHS:-mobilenet_v2 mobilenet_v3_large efficientnet_b0 vit_b_16}
source scripts/gpu/unpack.sh
tests="$x/tests/nabla_cuda_tests"
bench="$x/apps/nabla-bench"
train() { timeout "$1" "$bench" train --arch "$2" --batch-size 256 --channels-last --amp fp16 --warmup 5 --steps 20 --cuda-graph "${@:3}"; }
if has first; then timeout 240 "$tests" --gtest_filter="$first" > "$out/first.log" 2>&1; echo "first rc=$?" >> "$out/rc"; fi
if has suite; then timeout 300 "$tests" > "$out/cuda.log" 2>&1; echo "suite rc=$?" >> "$out/rc"; fi
if has dw; then
  timeout 120 "$x/bench/nabla_bench_depthwise" 256 20 > "$out/dw.log" 2>&1
  (cd bench && timeout 120 python3 torch_depthwise_shapes.py 256 20) > "$out/dw_torch.log" 2>&1
fi
if has ab; then
  for a in mobilenet_v2 efficientnet_b0; do
    train 100 $a > "$out/ab_$a.log" 2>&1
  done
fi
if has unet; then timeout 300 "$x/examples/unet" --min-iou 0.9 > "$out/unet.log" 2>&1; echo "unet rc=$?" >> "$out/rc"; fi
if has trace; then
  NABLA_CUPTI_TRACE="$out/mbv2-%p.csv" LD_PRELOAD="$x/tools/libnabla_cupti_trace.so" \
    timeout 100 "$bench" train --arch mobilenet_v2 --batch-size 256 --channels-last --amp fp16 --warmup 8 --steps 6 --cuda-graph \
    > "$out/trace.log" 2>&1
fi
if has models; then
  for a in $archs; do
    train 300 $a --compare-pytorch $([ "${COMPILE:-0}" = 1 ] || echo --no-torch-compile) > "$out/model_$a.log" 2>&1
  done
fi
echo "== rc"; cat "$out/rc" 2>/dev/null
if [ -f "$out/first.log" ]; then grep -E '^\[  FAILED|^\[  PASSED|Failure|Expected|Which is|error' "$out/first.log" | cut -c1-250 | head -30; fi
if [ -f "$out/cuda.log" ]; then echo "== suite: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+' "$out/cuda.log" | tr '\n' ' ')"; grep -E '^\[  FAILED  \] [A-Z]' "$out/cuda.log" | head; fi
for f in dw dw_torch; do [ -f "$out/$f.log" ] && { echo "== $f"; cut -c1-120 "$out/$f.log"; }; done
for f in "$out"/ab_*.log "$out"/model_*.log "$out"/trace.log; do
  [ -f "$f" ] && { echo "-- $(basename "$f")"; grep -E 'rror|img/s|nabla |eager|compile' "$f" | cut -c1-200 | tail -6; }
done
[ -f "$out/unet.log" ] && { echo "== unet"; tail -3 "$out/unet.log"; }
for f in "$out"/mbv2-*.csv; do [ -s "$f" ] && python3 tools/cupti_trace/summarize.py --top 30 "$f" 2>&1 | cut -c1-150; done
xz -T8 "$out"/*.csv 2>/dev/null
true
