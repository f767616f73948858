#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then configures and builds examples/custom_op
# (a user project with its own .cu kernel) against it, as docs/user-guide.md describes. The
# program is not run: CI machines may have no GPU (it prints "no CUDA device" there anyway).
# With NABLA_CUSTOM_OP_OUT=path the binary is kept there (libstdc++ linked statically), so
# scripts/gpu/bundle.sh can send it to the GPU machine and run it.
set -euo pipefail
build_dir=$1
source_root=$(cd "$(dirname "$0")/../.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" > "$scratch/install.log"
# The same CUDA compiler and architectures as nabla itself.
cuda_args=()
cuda_compiler=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
cuda_archs=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
[[ -n $cuda_compiler ]] && cuda_args+=(-DCMAKE_CUDA_COMPILER="$cuda_compiler")
[[ -n $cuda_archs ]] && cuda_args+=(-DCMAKE_CUDA_ARCHITECTURES="$cuda_archs")
command -v ccache > /dev/null && cuda_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
[[ -n ${NABLA_CUSTOM_OP_OUT:-} ]] && cuda_args+=(-DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc")
cmake -S "$source_root/examples/custom_op" -B "$scratch/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" "${cuda_args[@]}" > "$scratch/configure.log" \
  || { cat "$scratch/configure.log"; exit 1; }
cmake --build "$scratch/build" > "$scratch/build.log" || { cat "$scratch/build.log"; exit 1; }
test -x "$scratch/build/custom_op"
[[ -n ${NABLA_CUSTOM_OP_OUT:-} ]] && cp "$scratch/build/custom_op" "$NABLA_CUSTOM_OP_OUT"
echo "examples/custom_op built against the installed package"
