#!/usr/bin/env bash
# On the GPU machine: the input pipeline, nabla beside PyTorch on the same JPEG files, then
# ResNet-50 fp16 training on those files through the loader, reporting the time steps wait for data.
# tools/make_jpeg_set.py cuts the same crops torch_loader.py cuts (byte-identical train files).
# Usage: scripts/gpu/data-bench.sh BUILD PHOTO_DIR [TORCH_LOADER_SCRIPT]
set -uo pipefail
build=${1:-build/cuda}
photos=$2
torch_script=${3:-}
out=${OUT:-/tmp/nabla-gpu}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bench="$build/apps/nabla-bench"
# torch_loader.py's own set: 40 crops per photo.
python3 tools/make_jpeg_set.py --src "$photos" --out /tmp/jpeg_set > "$out/make_jpeg_set.log" 2>&1 || cat "$out/make_jpeg_set.log"
"$bench" data --root /tmp/jpeg_set/train --threads 1,4,8,16 --json "$out/data.json" 2>&1 | tee "$out/data_bench.log"
if [[ -n $torch_script ]]; then
  PYTHONUNBUFFERED=1 python3 "$torch_script" "$photos" 2>&1 | tee "$out/torch_loader.log"
fi
# A larger set for training (15 batches of 256 per epoch), the same kind of files.
python3 tools/make_jpeg_set.py --src "$photos" --per-photo 320 --val-per-photo 1 --out /tmp/jpeg_train \
  > "$out/make_jpeg_train.log" 2>&1 || cat "$out/make_jpeg_train.log"
"$bench" train --arch resnet50 --batch-size 256 --amp fp16 --channels-last --data /tmp/jpeg_train/train \
  --workers 16 --steps 40 --warmup 10 --json "$out/train_jpeg.json" 2>&1 | tee "$out/train_jpeg.log"
