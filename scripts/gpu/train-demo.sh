#!/usr/bin/env bash
# nabla-train on the H200, beside PyTorch where there is a reference (one GPU-machine call):
#   1. the Fashion-MNIST demo (no arguments but the data path): ResNet-18, 10 epochs, against
#      ../shared/bench/torch_fmnist.py's same recipe;
#   2. the ImageNet path: ResNet-50 at 224, AMP fp16 + channels_last, 200 steps on real JPEGs
#      (tools/make_jpeg_set.py from the mate-backgrounds photos);
#   3. --batch-size auto under --memory-fraction 0.25, with --memory-report;
#   4. --oom-policy split: a batch that does not fit in --memory-fraction 0.08 is split.
# Usage: scripts/gpu/train-demo.sh BUILD FMNIST_DIR PHOTOS_DIR TORCH_FMNIST_PY [parts]
set -uo pipefail
build=$1 fmnist=$2 photos=$3 torch_fmnist=$4 parts=${5:-demo,imagenet,auto,split}
out=${OUT:-/tmp/nabla-gpu}
mkdir -p "$out"
[[ -x $build/apps/nabla-train ]] || tar -C "$build" -xJf "$build/gpu-bundle.tar.xz"
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
train="$build/apps/nabla-train"
status=0
has() { [[ ,$parts, == *,$1,* ]]; }

if has demo; then
  /usr/bin/time -f "%e s wall" "$train" --data "fashion-mnist:$fmnist" --checkpoint-dir "$out/demo" \
    --progress lines > "$out/demo.log" 2>&1 || status=1
  python3 "$torch_fmnist" "$fmnist" > "$out/torch_fmnist.log" 2>&1 || status=1
fi
if has imagenet; then
  python3 "$(dirname "$0")/../../tools/make_jpeg_set.py" --src "$photos" --out /tmp/jpegs > "$out/jpegs.log" 2>&1 || status=1
  "$train" --data /tmp/jpegs --arch resnet50 --amp fp16 --channels-last --batch-size 64 --epochs 30 \
    --max-steps 200 --workers 16 --checkpoint-dir "$out/imagenet" --progress lines > "$out/imagenet.log" 2>&1 || status=1
fi
if has auto; then
  "$train" --data synthetic --arch resnet50 --amp fp16 --channels-last --batch-size auto --memory-fraction 0.25 \
    --max-steps 30 --eval-batches 2 --memory-report --checkpoint-dir "$out/auto" --progress lines \
    > "$out/auto.log" 2>&1 || status=1
fi
if has split; then
  "$train" --data synthetic --arch resnet50 --batch-size 512 --memory-fraction 0.08 --oom-policy split \
    --max-steps 10 --eval-batches 1 --checkpoint-dir "$out/split" --progress lines > "$out/split.log" 2>&1 || status=1
fi

for f in demo torch_fmnist imagenet auto split; do
  [[ -f $out/$f.log ]] || continue
  echo "== $f"
  grep -E "epoch [0-9]+/[0-9]+:|done:|test_acc|batch-size auto|oom|split|error|Error|wall|peak|activations|parameters" \
    "$out/$f.log" | tail -16
done
exit $status
