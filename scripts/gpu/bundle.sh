#!/usr/bin/env bash
# Prepares build/cuda for the GPU machine: strips the test and benchmark binaries, adds the one
# shared library they need that the machine may lack (libgomp), and packs them into
# build/cuda/gpu-bundle.tar.xz (the statically linked CUDA kernels make each binary ~25 MB, over
# the 64 MiB a run may carry unpacked). Carry that file; scripts/gpu/run-all.sh unpacks it.
set -euo pipefail
build=${1:-build/cuda}
mkdir -p "$build/gpu-lib"
cp -L "$(gcc -print-file-name=libgomp.so.1)" "$build/gpu-lib/"
files=(gpu-lib)
for bin in "$build"/tests/nabla_*_tests "$build"/bench/nabla_bench_* "$build"/examples/spiral "$build"/examples/custom_model; do
  [[ -x $bin && -f $bin ]] || continue
  strip --strip-unneeded "$bin"
  files+=("${bin#"$build"/}")
done
tar -C "$build" -cf - "${files[@]}" | xz -T2 -6 > "$build/gpu-bundle.tar.xz"
ls -la "$build/gpu-bundle.tar.xz"
