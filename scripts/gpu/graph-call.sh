#!/usr/bin/env bash
# GPU call(s) for the CUDA-graph training step (issue 23), from the full bundle (scripts/gpu/
# bundle.sh; carry build/cuda/gpu-bundle.tar.xz and .gpu-data with Fashion-MNIST copied there from
# /usr/share/datasets/fashion-mnist). $PARTS (a comma list) picks what runs:
#   tests   the test cases in $FIRST first, every test binary of the bundle, then
#           CudaAmp.Resnet18Float16TrainingFollowsFloat32 three times in a row;
#   train   nabla-bench train ResNet-50 (batch 256, channels_last) eager and --cuda-graph, fp16 and bf16;
#   torch   the same with --cuda-graph --compare-pytorch (PyTorch eager and torch.compile);
#   infer   nabla-bench infer (fp16, channels_last, batch 16/32/64) eager, then --cuda-graph
#           --compare-pytorch (PyTorch eager and torch.compile(mode="reduce-overhead"));
#   fuse    nabla-bench infer --cuda-graph with and without --fuse (batch norms folded into the
#           convolutions), the fused one beside PyTorch eager and reduce-overhead;
#   cuda    only the CUDA test binary (with $FIRST first), not the other suites;
#   demo    nabla-train on Fashion-MNIST (the ResNet-18 demo) without and with --cuda-graph;
#   fusion  nabla_bench_conv_bn_fusion (ResNet-50's convolutions with the batch-norm work fused
#           in), and ResNet-50 fp16 --cuda-graph with --no-conv-bn-fusion, for the train rows.
# Logs go under $OUT; a short summary comes last.
set -uo pipefail
out=${OUT:-/tmp/nabla-gpu}
build=build/cuda
parts=${PARTS:-tests,train,demo}
mkdir -p "$out"
tar -C "$build" -xJf "$build/gpu-bundle.tar.xz"
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
has() { [[ ,$parts, == *,$1,* ]]; }
bench="$build/apps/nabla-bench"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
summary=()
if has cuda; then
  [[ -n ${FIRST:-} ]] && timeout 180 "$build/tests/nabla_cuda_tests" --gtest_filter="$FIRST" > "$out/tests_first.log" 2>&1
  [[ -n ${FIRST:-} ]] && summary+=("first rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$out/tests_first.log" | tr '\n' ' ')")
  timeout 300 "$build/tests/nabla_cuda_tests" > "$out/nabla_cuda_tests.log" 2>&1
  summary+=("nabla_cuda_tests rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' "$out/nabla_cuda_tests.log" | tr '\n' ' ')")
fi
if has tests; then
  if [[ -n ${FIRST:-} ]]; then
    timeout 180 "$build/tests/nabla_cuda_tests" --gtest_filter="$FIRST" > "$out/tests_first.log" 2>&1
    summary+=("first rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$out/tests_first.log" | tr '\n' ' ')")
  fi
  for bin in "$build"/tests/nabla_*_tests; do
    name=$(basename "$bin")
    timeout 300 "$bin" > "$out/$name.log" 2>&1
    rc=$?
    summary+=("$name rc=$rc $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+|^\[  SKIPPED \] [0-9]+' "$out/$name.log" | tr '\n' ' ')")
    [[ $rc -ne 0 ]] && summary+=("$(grep -E '^\[  FAILED  \] [A-Z]' "$out/$name.log" | head -10)")
  done
  timeout 240 "$build/tests/nabla_cuda_tests" --gtest_filter=CudaAmp.Resnet18Float16TrainingFollowsFloat32 \
    --gtest_repeat=3 > "$out/amp_repeat.log" 2>&1
  summary+=("amp x3 rc=$? $(grep -cE '^\[       OK \] CudaAmp' "$out/amp_repeat.log") OK, $(grep -c 'summed loss gap' "$out/amp_repeat.log") gaps: $(grep -o 'summed loss gap [0-9.]*' "$out/amp_repeat.log" | tr '\n' ' ')")
fi
rn50() { timeout 200 "$bench" train --arch resnet50 --batch-size 256 --channels-last --steps 30 "$@"; }
if has train; then
  for amp in fp16 bf16; do
    rn50 --amp $amp > "$out/rn50_${amp}_eager.log" 2>&1
    rn50 --amp $amp --cuda-graph > "$out/rn50_${amp}_graph.log" 2>&1
  done
fi
if has fusion; then
  timeout 150 "$build/bench/nabla_bench_conv_bn_fusion" 10 > "$out/conv_bn_fusion.log" 2>&1
  rn50 --amp fp16 --cuda-graph --no-conv-bn-fusion > "$out/rn50_fp16_graph_unfused.log" 2>&1
fi
if has torch; then
  timeout 540 "$bench" train --arch resnet50 --batch-size 256 --channels-last --steps 30 --amp fp16,bf16 \
    --cuda-graph --compare-pytorch > "$out/rn50_torch.log" 2>&1
fi
if has infer; then
  timeout 120 "$bench" infer --batch-sizes 16,32,64 --amp fp16 --channels-last --iters 100 > "$out/infer_eager.log" 2>&1
  timeout 400 "$bench" infer --batch-sizes 16,32,64 --amp fp16 --channels-last --iters 100 --cuda-graph \
    --compare-pytorch > "$out/infer_graph.log" 2>&1
fi
if has fuse; then
  timeout 120 "$bench" infer --batch-sizes 16,32,64 --amp fp16 --channels-last --iters 100 --cuda-graph \
    > "$out/infer_graph_unfused.log" 2>&1
  timeout 400 "$bench" infer --batch-sizes 16,32,64 --amp fp16 --channels-last --iters 100 --cuda-graph --fuse \
    --compare-pytorch > "$out/infer_graph_fused.log" 2>&1
fi
if has demo; then
  for flag in "" --cuda-graph; do
    name=demo${flag:+_graph}
    /usr/bin/time -f "%e s wall" timeout 200 "$build/apps/nabla-train" --data fashion-mnist:.gpu-data/fashion-mnist \
      --checkpoint-dir "$out/$name" --progress lines $flag > "$out/$name.log" 2>&1
  done
fi
echo "== train"
for f in "$out"/rn50_*.log; do [[ -f $f ]] && { echo "-- $(basename "$f")"; grep -E '^step:|img/s total' "$f"; }; done
[[ -f $out/rn50_torch.log ]] && sed -n '/^resnet50 train, batch/,$p' "$out/rn50_torch.log"
[[ -f $out/conv_bn_fusion.log ]] && { echo "== conv_bn_fusion"; grep -v '^  ' "$out/conv_bn_fusion.log"; }
echo "== infer"
for f in "$out"/infer_*.log; do [[ -f $f ]] && { echo "-- $(basename "$f")"; sed -n '/inference (eval/,$p' "$f"; }; done
echo "== demo"
for f in "$out"/demo*.log; do [[ -f $f ]] && { echo "-- $(basename "$f")"; grep -E 'epoch 10/|cuda-graph|s wall' "$f"; }; done
echo "== tests"; printf '%s\n' "${summary[@]}"
