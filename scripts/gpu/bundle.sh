#!/usr/bin/env bash
# Prepares build/cuda for the GPU machine: copies the test, benchmark, example and app binaries
# into a staging folder, strips them there (the build tree keeps its symbols, and a binary
# running here is not touched), adds the one shared library they need that the machine may lack
# (libgomp), and packs them into build/cuda/gpu-bundle.tar.xz (the statically linked CUDA
# kernels make each binary ~25 MB, over the 64 MiB a run may carry unpacked). Carry that file;
# scripts/gpu/run-all.sh unpacks it.
set -euo pipefail
build=${1:-build/cuda}
stage="$build/gpu-stage"
rm -rf "$stage"
mkdir -p "$stage/gpu-lib"
cp -L "$(gcc -print-file-name=libgomp.so.1)" "$stage/gpu-lib/"
# The CPU-only suites run in CI; the GPU machine gets the suites with CUDA cases (core and apps
# hold a few: the allocator's memory categories, the OOM split on a real device).
for bin in "$build"/tests/nabla_cuda_tests "$build"/tests/nabla_nccl_tests "$build"/tests/nabla_core_tests "$build"/tests/nabla_apps_tests "$build"/bench/nabla_bench_* "$build"/examples/spiral "$build"/examples/custom_model "$build"/examples/train_gpt \
  "$build"/examples/custom_op "$build"/apps/nabla-*; do
  [[ -x $bin && -f $bin ]] || continue
  # Gloo and its dependencies are not on the GPU machine; its (CPU) tests run in CI.
  ldd "$bin" | grep -q libgloo && continue
  rel=${bin#"$build"/}
  mkdir -p "$stage/$(dirname "$rel")"
  cp "$bin" "$stage/$rel"
  strip --strip-unneeded "$stage/$rel"
done
# A dictionary larger than several binaries lets xz store their common CUDA code once.
tar -C "$stage" -cf - . | xz -T1 --lzma2=preset=6,dict=256MiB > "$build/gpu-bundle.tar.xz"
rm -rf "$stage"
ls -la "$build/gpu-bundle.tar.xz"
