#!/usr/bin/env bash
# On the 2-GPU machine: nabla-train's Fashion-MNIST demo (ResNet-18, 10 epochs) on 2 GPUs through
# --nproc-per-node 2, to compare with the 1-GPU run; then ResNet-50 AMP DDP throughput at other
# gradient bucket sizes (nabla-bench train --bucket-mb) and NCCL CTA limits, beside the 1-GPU
# figure, to see what the scaling depends on.
# Usage: scripts/gpu/ddp-train.sh BUILD FMNIST_DIR
set -uo pipefail
build=$1 fmnist=$2
out=${OUT:-/tmp/nabla-gpu}
mkdir -p "$out"
[[ -x $build/apps/nabla-train ]] || tar -C "$build" -xJf "$build/gpu-bundle.tar.xz"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
/usr/bin/time -f "%e s wall" "$build/apps/nabla-train" --data "fashion-mnist:$fmnist" --nproc-per-node 2 \
  --checkpoint-dir "$out/ddp-demo" --progress lines > "$out/ddp-demo.log" 2>&1 || status=1
rn50=(train --arch resnet50 --batch-size 256 --amp fp16 --channels-last)
"$build/apps/nabla-bench" "${rn50[@]}" >> "$out/buckets.log" 2>&1 || status=1
for mb in ${BUCKETS:-25 50 100}; do
  "$build/apps/nabla-bench" "${rn50[@]}" --nproc-per-node 2 --bucket-mb "$mb" >> "$out/buckets.log" 2>&1 || status=1
done
# Fewer SMs for NCCL's kernels leave more to the backward pass they overlap with.
for ctas in ${CTAS:-4 8}; do
  echo "NCCL_MAX_CTAS=$ctas" >> "$out/buckets.log"
  NCCL_MAX_CTAS=$ctas "$build/apps/nabla-bench" "${rn50[@]}" --nproc-per-node 2 >> "$out/buckets.log" 2>&1 || status=1
done
echo "== nabla-train --nproc-per-node 2 (Fashion-MNIST demo)"
grep -E "epoch [0-9]+/[0-9]+:|done:|wall|rank|error" "$out/ddp-demo.log" | tail -14
echo "== bucket sizes (ResNet-50 AMP channels_last, batch 256 per GPU, 2 GPUs)"
grep -E "resnet50 train:|^NCCL_MAX" "$out/buckets.log"
exit $status
