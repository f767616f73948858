#!/usr/bin/env bash
# One GPU call for ResNet-50 inference work (issue 23), from the mini bundle
# (scripts/gpu/mini-bundle.sh build/cuda tests/nabla_cuda_tests apps/nabla-bench
# bench/nabla_bench_batch_norm tests/nabla_nccl_tests tools/libnabla_cupti_trace.so
# tools/libcupti.so.13; carry build/gpu-extra/bundle.tar.xz).
# PARTS (default "first,trace,infer,torch"), in this order: first = the tests named in FIRST;
# suite = the whole CUDA suite; bn = the batch-norm microbenchmark (channels_last); trace = CUPTI
# timelines of the replayed fp16 channels_last forward at batch 16, folded and not; infer = fp16
# autocast and half-model inference at batch 16/32/64, folded and not, replayed; torch = the same
# beside PyTorch eager and reduce-overhead (folded), plus float32 NCHW at batch 16 (folded); nccl = the one-rank
# NCCL tests. Logs under $OUT; a short summary last.
set -uo pipefail
parts=${PARTS:-first,trace,infer,torch}
first=${FIRST:-CudaConvRelu.*}
source scripts/gpu/unpack.sh
tests="$x/tests/nabla_cuda_tests"
bench="$x/apps/nabla-bench"
infer() { timeout "$1" "$bench" infer --arch resnet50 --iters 100 "${@:2}"; }
if has first; then timeout 200 "$tests" --gtest_filter="$first" > "$out/first.log" 2>&1; echo "first rc=$?" >> "$out/rc"; fi
if has suite; then timeout 300 "$tests" > "$out/cuda.log" 2>&1; echo "suite rc=$?" >> "$out/rc"; fi
if has nccl; then timeout 120 "$x/tests/nabla_nccl_tests" --gtest_filter='CudaNccl.OneRank*' > "$out/nccl.log" 2>&1; echo "nccl rc=$?" >> "$out/rc"; fi
if has bn; then timeout 60 "$x/bench/nabla_bench_batch_norm" channels-last 20 > "$out/bn.log" 2>&1; fi
if has trace; then
  for fuse in "" --fuse; do
    NABLA_CUPTI_TRACE="$out/infer${fuse:+_fused}-%p.csv" LD_PRELOAD="$x/tools/libnabla_cupti_trace.so" \
      infer 60 --batch-sizes 16 --amp fp16 --channels-last --cuda-graph $fuse > "$out/trace${fuse:+_fused}.log" 2>&1
  done
fi
if has infer; then
  for fuse in "" --fuse; do
    infer 120 --batch-sizes 16,32,64 --amp fp16,half --channels-last --cuda-graph $fuse \
      > "$out/infer${fuse:+_fused}.log" 2>&1
  done
fi
if has torch; then
  infer 400 --batch-sizes 16,32,64 --amp fp16,half --channels-last --cuda-graph --fuse --compare-pytorch \
    > "$out/infer_torch.log" 2>&1
  infer 150 --batch-sizes 16 --amp off --layout nchw --cuda-graph --fuse --compare-pytorch \
    > "$out/infer_fp32_fused.log" 2>&1
fi
echo "== rc"; cat "$out/rc" 2>/dev/null
if [ -f "$out/first.log" ]; then grep -E '^\[  FAILED|^\[  PASSED|Failure|Expected|Which is|error' "$out/first.log" | cut -c1-250 | head -30; fi
for f in nccl; do [ -f "$out/$f.log" ] && { echo "== $f"; grep -E '^\[  FAILED|^\[  PASSED|Failure|Expected|Which is|rror' "$out/$f.log" | cut -c1-250 | head -20; }; done
if [ -f "$out/cuda.log" ]; then echo "== suite: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+' "$out/cuda.log" | tr '\n' ' ')"; grep -E '^\[  FAILED  \] [A-Z]' "$out/cuda.log" | head; fi
[ -f "$out/bn.log" ] && tail -25 "$out/bn.log"
for f in "$out"/infer*.log; do [ -f "$f" ] && { echo "-- $(basename "$f")"; grep -E 'rror' "$f" | cut -c1-200 | head -5; sed -n '/^amp /,$p' "$f" | head -12; sed -n '/inference (eval/,$p' "$f" | head -14; }; done
for f in "$out"/infer-*.csv "$out"/infer_fused-*.csv; do
  [ -s "$f" ] && python3 tools/cupti_trace/summarize.py --marker max_forward_kernel --top 25 "$f" 2>&1 | cut -c1-150
done
xz -T8 "$out"/*.csv 2>/dev/null
true
