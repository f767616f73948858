#!/usr/bin/env bash
# The distribution packages of nabla's image, for Debian 12 and Ubuntu 24.04 (the base of NVIDIA's
# CUDA images): the toolchain and -dev libraries (the image builds C++ against nabla), Gloo,
# Fashion-MNIST, Jupyter with matplotlib, and OpenSSH. Names differ between the two only where a
# package is renamed; Debian is the one built and tested here (tests/container/run.sh).
set -euo pipefail
. /etc/os-release
packages=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates procps
  libeigen3-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libturbojpeg0-dev libpng-dev zlib1g-dev libgloo-dev
  dataset-fashion-mnist
  python3 python3-numpy python3-matplotlib python3-pil python3-ipykernel jupyter-nbconvert
  jupyter-notebook openssh-server openssl tini
)
case "$ID" in
  debian) packages+=(libjpeg62-turbo-dev) ;;
  ubuntu) packages+=(libjpeg-turbo8-dev) ;;
  *) echo "docker/packages.sh: the image is written for Debian 12 and Ubuntu 24.04, not '$ID'" >&2; exit 1 ;;
esac
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}"
rm -rf /var/lib/apt/lists/*
