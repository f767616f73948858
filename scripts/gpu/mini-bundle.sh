#!/usr/bin/env bash
# A smaller bundle than bundle.sh, of the binaries named (paths under BUILD), for a run that needs
# only those: build/gpu-extra/bundle.tar.xz, laid out like BUILD, with gpu-lib/libgomp and libgloo.
# Usage: scripts/gpu/mini-bundle.sh BUILD apps/nabla-bench tests/nabla_nccl_tests ...
# On the GPU machine: mkdir -p build/gpu-x && tar -xJf build/gpu-extra/bundle.tar.xz -C build/gpu-x
set -euo pipefail
build=$1
shift
stage=build/gpu-extra/stage
rm -rf build/gpu-extra
mkdir -p "$stage/gpu-lib"
cp -L "$(gcc -print-file-name=libgomp.so.1)" "$stage/gpu-lib/"
# Gloo is a Debian package the GPU machine lacks (nabla_distributed_tests links it).
gloo=$(ldconfig -p | awk '/libgloo\.so\.0 /{print $NF; exit}')
if [[ -n $gloo ]]; then
  cp -L "$gloo" "$stage/gpu-lib/"
  # and what it links that a bare machine may lack (hiredis, ibverbs, libnl)
  ldd "$gloo" | awk '/=> \//{print $3}' | grep -E 'hiredis|ibverbs|libnl' | xargs -r -I{} cp -L {} "$stage/gpu-lib/"
fi
for rel in "$@"; do
  mkdir -p "$stage/$(dirname "$rel")"
  cp "$build/$rel" "$stage/$rel"
  strip --strip-unneeded "$stage/$rel"
done
tar -C "$stage" -cf - . | xz -T2 --lzma2=preset=6,dict=256MiB > build/gpu-extra/bundle.tar.xz
rm -rf "$stage"
ls -la build/gpu-extra/bundle.tar.xz
