#!/usr/bin/env bash
# Prepares build/cuda for the GPU machine: strips the test binaries and copies the one shared
# library they need that the machine may lack (libgomp), so that `run` can carry build/cuda.
set -euo pipefail
build=${1:-build/cuda}
mkdir -p "$build/gpu-lib"
cp -L "$(gcc -print-file-name=libgomp.so.1)" "$build/gpu-lib/"
for bin in "$build"/tests/nabla_*_tests "$build"/examples/*; do
  [[ -x $bin && -f $bin ]] && strip --strip-unneeded "$bin"
done
du -sh "$build"/tests/nabla_*_tests "$build/gpu-lib" | sort -h
