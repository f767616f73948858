#!/usr/bin/env bash
# Installs the Debian packages nabla builds against, and only those that are missing.
# Safe to run again: it does nothing when everything is present. README's two commands
# and .ci/run both call it, so a fresh machine and CI start from the same list.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libeigen3-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-format clang-tidy
  clang libclang-rt-14-dev libomp-dev
  python3-torch python3-torchvision python3-numpy
  dataset-fashion-mnist mate-backgrounds libgloo-dev fortunes
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  # Package lists on a fresh machine may be stale, so update before the first install.
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi

# CUDA is optional: the CUDA backend builds whenever the toolkit is at /usr/local/cuda.
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "install-deps: CUDA toolkit found: $(/usr/local/cuda/bin/nvcc --version | tail -n 2 | head -n 1)"
else
  echo "install-deps: no CUDA toolkit at /usr/local/cuda; configure with -DNABLA_CUDA=OFF"
fi
