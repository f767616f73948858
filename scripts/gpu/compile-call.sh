#!/usr/bin/env bash
# One GPU call for the step compiler (issue 43), with issue 45's before/after check riding along.
# Carry one or two mini bundles (scripts/gpu/mini-bundle.sh):
#   build/gpu-extra/bundle.tar.xz  the new build: apps/nabla-bench and the test binaries
#   build/gpu-base/bundle.tar.xz   (optional) apps/nabla-bench of the commit before issue 45
# It finds NVRTC on the machine (the ld.so cache, else a pip wheel's copy) and puts it on
# LD_LIBRARY_PATH; then, by PARTS (default tests,suite,fusion,llama,ab): tests = the fusion
# tests (or those TEST_FILTER names); suite = the whole CUDA suite; fusion = ResNet-50
# fp16 (the model zoo's, and --plain) and GPT-2 graphed with NABLA_FUSION=1 and =0 (a fresh
# kernel cache: the first fused runs compile cold); llama = the plainly written LLaMA graphed
# and fused beside PyTorch eager and torch.compile, graphed unfused, and eager; ab = ResNet-50
# fp16/bf16 and GPT-2 from the base build and this one in turns; gptplain = nabla-bench gpt
# --plain --cuda-graph --compare-pytorch (the user guide's GPT-2, fused); llamazoo = nabla-bench llama
# --model zoo, graphed and fused, and eager; generate = nabla-bench generate --compare-pytorch.
# gqa = the plain LLaMA with enable_gqa and with --repeat-kv; plainab = the plain ResNet-50 from
# the base build and this one (fused and not) and the model zoo's; llamatrace = kernel timelines
# of the plain LLaMA's graphed, fused step (CUPTI; the bundle must carry
# tools/libnabla_cupti_trace.so and tools/libcupti.so.13) and of torch.compile's step
# (torch.profiler), summarized by kind of kernel side by side; probe = where nvJPEG is on the
# machine (issue 47); llamaq = the plain LLaMA beside PyTorch only; decode = nabla-bench data
# --decode both, then bench/pytorch/torch_decode.py (torchvision's nvJPEG, PyTorch's DataLoader),
# on build/gpu-jpegs (carry it; or carry build/gpu-photos, Debian's photos copied from
# /usr/share/backgrounds/mate/nature, and the set is made here: JPEG_PER_PHOTO crops each, default
# 100, about 40 s); decodetrain = ResNet-50 training from those files,
# decoded on the GPU and on the CPU by 4 threads, beside the synthetic batch. Logs under $OUT; a
# table last.
set -uo pipefail
parts=${PARTS:-tests,suite,fusion,llama,ab}
source scripts/gpu/unpack.sh
unpack() {  # unpack NAME: build/gpu-NAME/bundle.tar.xz into build/gpu-NAME-x; echo that folder
  [[ -f build/gpu-$1/bundle.tar.xz ]] || return 1
  mkdir -p "build/gpu-$1-x" && tar -xJf "build/gpu-$1/bundle.tar.xz" -C "build/gpu-$1-x" && echo "$PWD/build/gpu-$1-x"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"

nvrtc=$(ldconfig -p | awk '/libnvrtc\.so\.13 /{print $NF; exit}')
if [[ -z $nvrtc ]]; then
  for dir in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) /usr/local/cuda/lib64; do
    nvrtc=$(find "$dir" -name 'libnvrtc.so.13' 2>/dev/null | head -n 1)
    [[ -n $nvrtc ]] && break
  done
  [[ -n $nvrtc ]] && export LD_LIBRARY_PATH="$(dirname "$nvrtc"):$LD_LIBRARY_PATH"
fi
echo "nvrtc: ${nvrtc:-not found}" | tee "$out/nvrtc.txt"
export NABLA_KERNEL_CACHE=$PWD/build/kernel-cache
rm -rf "$NABLA_KERNEL_CACHE"

if has tests; then
  timeout 120 "$x/tests/nabla_cuda_tests" --gtest_filter="${TEST_FILTER:-Fusion*:FusedStep*:*GraphedStep*:CudaParityIndexing*:CudaParityEmbedding*}" \
    > "$out/fusion_tests.log" 2>&1
  echo "fusion_tests rc=$?" >> "$out/rc"
fi
if has suite; then
  for bin in "$x"/tests/nabla_*_tests; do
    name=$(basename "$bin")
    filter='*'
    [[ $name == nabla_cuda_tests ]] || filter='*Cuda*'
    timeout 300 "$bin" --gtest_filter="$filter" > "$out/$name.log" 2>&1
    echo "$name rc=$?" >> "$out/rc"
  done
fi
rn50() { timeout 120 "$1/apps/nabla-bench" train --arch resnet50 --batch-size 256 --channels-last --amp "$2" \
  --steps 30 --cuda-graph "${@:3}"; }
gpt() { timeout 120 "$1/apps/nabla-bench" gpt "${@:2}"; }
if has plainab; then
  # The plainly written ResNet-50 (fp16, graphed): the commit before this build (build/gpu-base),
  # this build fused, and this build unfused.
  if base=$(unpack base); then
    rn50 "$base" fp16 --plain > "$out/ab_rn50_plain_fp16_base.log" 2>&1
  fi
  rn50 "$x" fp16 --plain > "$out/ab_rn50_plain_fp16_new.log" 2>&1
  NABLA_FUSION=0 rn50 "$x" fp16 --plain > "$out/ab_rn50_plain_fp16_newunfused.log" 2>&1
  rn50 "$x" fp16 > "$out/ab_rn50_zoo_fp16_new.log" 2>&1
fi
if has fusion; then
  for fuse in 1 0; do
    NABLA_FUSION=$fuse rn50 "$x" fp16 > "$out/rn50_fp16_fuse$fuse.log" 2>&1
    NABLA_FUSION=$fuse gpt "$x" --cuda-graph > "$out/gpt_graph_fuse$fuse.log" 2>&1
  done
  gpt "$x" > "$out/gpt_eager.log" 2>&1
  for fuse in 1 0; do
    NABLA_FUSION=$fuse rn50 "$x" fp16 --plain > "$out/rn50_plain_fp16_fuse$fuse.log" 2>&1
  done
fi
llama() { timeout "$1" "$x/apps/nabla-bench" llama "${@:2}"; }
if has llama; then
  NABLA_FUSION=1 NABLA_FUSION_DUMP="$out/llama_plans.txt" llama 300 --cuda-graph --compare-pytorch \
    > "$out/llama_graph_fuse1_torch.log" 2>&1
  NABLA_FUSION=0 llama 120 --cuda-graph > "$out/llama_graph_fuse0.log" 2>&1
  llama 150 ${LLAMA_EAGER_ARGS:-} > "$out/llama_eager.log" 2>&1
fi
if has llamaq; then
  # The plain LLaMA graphed and fused beside PyTorch eager and torch.compile, alone.
  NABLA_FUSION=1 NABLA_FUSION_DUMP="$out/llama_plans.txt" llama 300 --cuda-graph --compare-pytorch \
    > "$out/llama_graph_fuse1_torch.log" 2>&1
fi
jpegs=build/gpu-jpegs
if (has decode || has decodetrain) && compgen -G "build/gpu-photos/*.jpg" > /dev/null; then
  # An ImageNet-sized set larger than the carry allows, made on this machine from the photos.
  jpegs=/tmp/gpu-jpegs-made
  "${NABLA_TORCH_PYTHON:-python3}" tools/make_jpeg_set.py --imagenet --src build/gpu-photos \
    --per-photo "${JPEG_PER_PHOTO:-100}" --val-per-photo 1 --out "$jpegs" > "$out/make_jpeg_set.log" 2>&1 ||
    { cat "$out/make_jpeg_set.log"; jpegs=build/gpu-jpegs; }
fi
if has decode; then
  # Issue 47: the CPU loader and the GPU (nvJPEG) loader on the carried ImageNet-sized JPEGs
  # (build/gpu-jpegs, made by tools/make_jpeg_set.py --imagenet).
  timeout 240 "$x/apps/nabla-bench" data --root "$jpegs/train" --threads 4,16 --batch-size 128 \
    --repeat 8 --decode both > "$out/decode.log" 2>&1
  echo "decode rc=$?" >> "$out/rc"
  # torchvision's nvJPEG decode and PyTorch's DataLoader on the same files.
  timeout 200 "${NABLA_TORCH_PYTHON:-python3}" bench/pytorch/torch_decode.py --root "$jpegs/train" \
    --workers 4,16 --batch-size 128 --repeat 8 > "$out/torch_decode.log" 2>&1
fi
if has decodetrain; then
  # Issue 47's training check on the carried JPEGs: ResNet-50 fp16 channels_last graphed, the
  # synthetic batch, then fed from 4 loader threads decoding on the GPU and on the CPU.
  for run in synthetic gpu cpu; do
    data=(); [[ $run != synthetic ]] && data=(--data "$jpegs/train" --workers 4 --decode "$run")
    timeout 150 "$x/apps/nabla-bench" train --amp fp16 --channels-last --cuda-graph --steps 60 "${data[@]}" \
      > "$out/decodetrain_$run.log" 2>&1
  done
fi
if has llamatrace; then
  # Where the plain LLaMA's step and torch.compile's differ, kernel kind by kernel kind.
  NABLA_FUSION=1 NABLA_SAVED_REPORT=1 NABLA_FUSION_DUMP="$out/llamatrace_plans.txt" NABLA_CUPTI_TRACE="$out/llama-nabla-%p.csv" \
    LD_PRELOAD="$x/tools/libnabla_cupti_trace.so" \
    llama 150 --cuda-graph --warmup 8 --steps 10 > "$out/trace_llama_nabla.log" 2>&1
  timeout 200 "${NABLA_TORCH_PYTHON:-python3}" bench/pytorch/torch_llama.py --modes compile --steps 10 \
    --trace "$out/llama-torch-%m.csv" > "$out/trace_llama_torch.log" 2>&1
  summary() {  # summary CSV MARKER PHASES LOG: one timeline by kind of kernel and by phase, or where its run's log is
    if [[ -f $1 ]]; then
      python3 tools/cupti_trace/summarize.py --marker "$2" --gap-ms 5 --categories --top 30 --phases "$3" "$1"
    else
      echo "no trace: see $4"
    fi
  }
  {
    summary "$(ls -S "$out"/llama-nabla-*.csv 2>/dev/null | head -n 1)" adam_kernel \
      'forward=check_indices,backward=cross_entropy.*backward' trace_llama_nabla.log
    summary "$out/llama-torch-compile.csv" Adam 'forward=embedding,backward=log_softmax_backward' trace_llama_torch.log
  } > "$out/llama_trace_summary.txt" 2>&1
fi
if has llamazoo; then
  # nn::models::Llama at the same shapes (RotaryCache's kernel, grouped-query attention).
  NABLA_FUSION=1 llama 150 --model zoo --cuda-graph > "$out/llama_zoo_graph_fuse1.log" 2>&1
  llama 150 --model zoo > "$out/llama_zoo_eager.log" 2>&1
fi
if has gptplain; then
  # The user guide's GPT-2 written plainly, graphed and fused, beside PyTorch eager and compile.
  NABLA_FUSION=1 timeout 280 "$x/apps/nabla-bench" gpt --plain --cuda-graph --compare-pytorch \
    > "$out/gptplain_graph_fuse1_torch.log" 2>&1
fi
if has gqa; then
  # Issue 44's before/after: the plain LLaMA with enable_gqa against the same model repeating k
  # and v to every query head, graphed and fused.
  for kv in gqa repeat; do
    flag=; [[ $kv == repeat ]] && flag=--repeat-kv
    NABLA_FUSION=1 llama 150 --cuda-graph $flag > "$out/llama_kv_${kv}_graph.log" 2>&1
  done
fi
if has generate; then
  # nn::models::Llama generation (512-token prompt, 256 new, batch 1, bf16) with and without a
  # CUDA graph per token, beside bench/pytorch/torch_llama_generate.py.
  timeout 280 "$x/apps/nabla-bench" generate --compare-pytorch > "$out/generate.log" 2>&1
  echo "generate rc=$?" >> "$out/rc"
fi
if has probe; then
  # Issue 47: where the GPU machine keeps nvJPEG (its toolkit, or the nvidia/ wheels beside PyTorch).
  {
    ls -la /usr/local/cuda/lib64/libnvjpeg* /usr/local/cuda/include/nvjpeg.h 2>&1
    ldconfig -p | grep -i nvjpeg
    timeout 60 find / -xdev \( -name 'libnvjpeg*' -o -name 'nvjpeg.h' \) 2>/dev/null | head -20
    "${NABLA_TORCH_PYTHON:-python3}" -c 'import torch, torchvision; print(torch.__version__, torchvision.__version__)' 2>&1
    nproc
  } > "$out/probe_nvjpeg.txt" 2>&1
fi
if has ab; then
  # Issue 45's before/after: the commit before it (build/gpu-base) against this build, in turns,
  # ROUNDS times; this build's ResNet-50 fp16 also with the step compiler off.
  if base=$(unpack base); then
    for round in $(seq "${ROUNDS:-1}"); do
      for amp in fp16 bf16; do
        rn50 "$base" "$amp" > "$out/ab_rn50_${amp}_base_$round.log" 2>&1
        rn50 "$x" "$amp" > "$out/ab_rn50_${amp}_new_$round.log" 2>&1
      done
      NABLA_FUSION=0 rn50 "$x" fp16 > "$out/ab_rn50_fp16_newunfused_$round.log" 2>&1
      gpt "$base" > "$out/ab_gpt_base_$round.log" 2>&1
      gpt "$x" > "$out/ab_gpt_new_$round.log" 2>&1
    done
  fi
fi

echo
cat "$out/nvrtc.txt"
[[ -f $out/rc ]] && cat "$out/rc"
for log in "$out"/fusion_tests.log "$out"/nabla_*_tests.log; do
  [[ -f $log ]] || continue
  echo "$(basename "$log"): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\]' "$log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$log" | head -20
done
grep -h -A2 'Skipped' "$out/fusion_tests.log" 2>/dev/null | head -6
for log in "$out"/rn50_*.log "$out"/ab_rn50_*.log; do
  [[ -f $log ]] && echo "$(basename "$log" .log): $(grep -E 'fp16|bf16' "$log" | tail -n 1)"
done
for log in "$out"/llama_*.log "$out"/gptplain_*.log; do
  [[ -f $log ]] && echo "== $(basename "$log" .log)" && grep -E '^(nabla|PyTorch|torch\.compile)' "$log"
done
[[ -f $out/llama_eager.log ]] && grep -A 25 'nabla::profiler' "$out/llama_eager.log"
[[ -f $out/llama_trace_summary.txt ]] && grep -v '^ .* us  ' "$out/llama_trace_summary.txt"
# The fused step's saved set (the capture's backward: the last report) and where its peak is.
[[ -f $out/trace_llama_nabla.log ]] && awk '/^NABLA_SAVED_REPORT/ {n = 0} {block[n++] = $0}
  /^NABLA_SAVED_REPORT|^saved for backward|^  / {last = n} END {for (i = 0; i < last && i < 8; ++i) print block[i]}' \
  "$out/trace_llama_nabla.log"
[[ -f $out/probe_nvjpeg.txt ]] && cat "$out/probe_nvjpeg.txt"
[[ -f $out/decode.log ]] && grep -v '^$' "$out/decode.log" | tail -14
[[ -f $out/torch_decode.log ]] && grep -E '^\{' "$out/torch_decode.log"
for log in "$out"/decodetrain_*.log; do
  [[ -f $log ]] && echo "== $(basename "$log" .log)" && grep -v '^$' "$log" | tail -n 4
done
[[ -f $out/generate.log ]] && grep -E -A8 '^nn::models::Llama' "$out/generate.log"
for log in "$out"/gpt_*.log "$out"/ab_gpt_*.log; do
  [[ -f $log ]] && echo "$(basename "$log" .log): $(grep -E '^nabla ' "$log" | tail -n 1)"
done
grep -h "step compiler" "$out"/*.log 2>/dev/null | head -6
# Every log in one archive: a run leaves few files under $OUT.
tar -czf /tmp/logs.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/logs.tgz "$out/logs.tgz"
