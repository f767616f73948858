#!/usr/bin/env bash
# One GPU call for ResNet-50 step work (issue 23), from the mini bundle
# (scripts/gpu/mini-bundle.sh build/cuda tests/nabla_cuda_tests apps/nabla-bench
# tools/libnabla_cupti_trace.so tools/libcupti.so.13; carry build/gpu-extra/bundle.tar.xz).
# PARTS (default "first,suite,train,trace"), run in this order: first = the tests named in FIRST;
# torch (below) right after them, so a call cut short still has it; suite = the whole
# CUDA suite; train = ResNet-50 fp16 channels_last --cuda-graph with and without the conv + BN
# fusion; trace = a CUPTI trace of the graphed step; infer = fp16 channels_last inference at batch
# 16/32/64 replayed from a graph, folded (--fuse) and not; torch = the train step (and with infer,
# the folded inference) beside PyTorch eager and torch.compile; torch_bf16 = the train step in
# bfloat16 beside them; convs = every ResNet-50 convolution in float16 and bfloat16, nabla's
# routes (bench/nabla_bench_conv, in the bundle) and PyTorch's (bench/torch_conv_shapes.py);
# stem = nabla_bench_conv's stem rows; bn = every ResNet-50 batch norm on nabla's kernels
# (bench/nabla_bench_batch_norm). AMP (fp16) sets train's and trace's precision. Logs under $OUT;
# a short summary last.
set -uo pipefail
parts=${PARTS:-first,suite,train,trace}
first=${FIRST:-CudaConvBatchNorm.*:CudaParityPool.*:CudaParityConv.*}
source scripts/gpu/unpack.sh
tests="$x/tests/nabla_cuda_tests"
bench="$x/apps/nabla-bench"
rn50() { timeout "$1" "$bench" train --arch resnet50 --batch-size 256 --channels-last --amp "${AMP:-fp16}" "${@:2}"; }
if has first; then timeout 200 "$tests" --gtest_filter="$first" > "$out/first.log" 2>&1; echo "first rc=$?" >> "$out/rc"; fi
if has torch; then rn50 400 --steps 30 --cuda-graph --compare-pytorch > "$out/rn50_torch.log" 2>&1; fi
if has suite; then timeout 300 "$tests" > "$out/cuda.log" 2>&1; echo "suite rc=$?" >> "$out/rc"; fi
if has train; then
  rn50 90 --steps 30 --cuda-graph > "$out/rn50_graph_fused.log" 2>&1
  rn50 90 --steps 30 --cuda-graph --no-conv-bn-fusion > "$out/rn50_graph_unfused.log" 2>&1
fi
if has convs; then
  for d in fp16 bf16; do
    timeout 150 "$x/bench/nabla_bench_conv" 256 20 $d > "$out/convs_nabla_$d.log" 2>&1
    timeout 150 python3 bench/torch_conv_shapes.py 256 20 $d > "$out/convs_torch_$d.log" 2>&1
  done
fi
if has stem; then
  for d in fp16 bf16; do timeout 150 "$x/bench/nabla_bench_conv" 256 20 $d > "$out/stem_$d.log" 2>&1; done
fi
if has bn; then timeout 200 "$x/bench/nabla_bench_batch_norm" channels-last 20 > "$out/bn.log" 2>&1; fi
if has trace; then
  NABLA_CUPTI_TRACE="$out/graph-%p.csv" LD_PRELOAD="$x/tools/libnabla_cupti_trace.so" \
    rn50 90 --warmup 8 --steps 6 --cuda-graph > "$out/trace.log" 2>&1
fi
if has infer; then
  for fuse in "" --fuse; do
    timeout 120 "$bench" infer --batch-sizes 16,32,64 --amp fp16 --channels-last --iters 100 --cuda-graph $fuse \
      > "$out/infer${fuse:+_fused}.log" 2>&1
  done
  if has torch; then
    timeout 400 "$bench" infer --batch-sizes 16,32,64 --amp fp16 --channels-last --iters 100 --cuda-graph --fuse \
      --compare-pytorch > "$out/infer_torch.log" 2>&1
  fi
fi
if has torch_bf16; then AMP=bf16 rn50 400 --steps 30 --cuda-graph --compare-pytorch > "$out/rn50_torch_bf16.log" 2>&1; fi
echo "== rc"; cat "$out/rc" 2>/dev/null
if [ -f "$out/first.log" ]; then grep -E '^\[  FAILED|^\[  PASSED|Failure|fused [0-9]|Expected|Which is|error' "$out/first.log" | cut -c1-250 | head -40; fi
if [ -f "$out/cuda.log" ]; then echo "== suite: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+' "$out/cuda.log" | tr '\n' ' ')"; grep -E '^\[  FAILED  \] [A-Z]' "$out/cuda.log" | head; fi
for f in "$out"/infer*.log; do [ -f "$f" ] && { echo "-- $(basename "$f")"; grep -E 'infer: batch|rror' "$f" | cut -c1-200; sed -n '/^amp /,$p' "$f" | head -12; }; done
for f in "$out"/rn50_*.log; do [ -f "$f" ] && { echo "-- $(basename "$f")"; grep -E 'img/s total|rror|nabla|torch|compile' "$f" | cut -c1-250 | tail -8; }; done
[ -f "$out/bn.log" ] && { echo "-- bn.log"; grep -E 'weighted|rror' "$out/bn.log" | cut -c1-250; }
for f in "$out"/stem_*.log; do [ -f "$f" ] && { echo "-- $(basename "$f")"; grep -E '^conv |^stem|weighted|rror' "$f" | cut -c1-200; }; done
for f in "$out"/convs_*.log; do [ -f "$f" ] && { echo "-- $(basename "$f")"; grep -E 'weighted|rror' "$f" | cut -c1-200; }; done
for f in "$out"/graph-*.csv; do [ -s "$f" ] && python3 tools/cupti_trace/summarize.py --top 30 "$f" 2>&1 | cut -c1-150; done
xz -T8 "$out"/*.csv 2>/dev/null
true
