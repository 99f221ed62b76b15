#!/usr/bin/env bash
# Installs the Debian (bookworm) packages tinyformer needs to build and test, skipping apt
# entirely when they are all present. Used by .ci/run and examples/quickstart.sh.
set -euo pipefail

packages=(
  build-essential cmake ninja-build
  libdnnl-dev ocl-icd-opencl-dev    # oneDNN; its CMake package asks for OpenCL
  libopenblas-openmp-dev            # OpenBLAS built with OpenMP: one thread pool with oneDNN
  doctest-dev nlohmann-json3-dev    # tests, and the PyTorch reference fixtures they read
  libcli11-dev gnuplot-nox
  libopenmpi-dev openmpi-bin        # distributed training (nn/distributed/) and its 2-rank tests
  clang libclang-rt-dev libomp-dev  # the sanitizer build: clang, its libFuzzer runtime, its OpenMP
)

missing=()
for p in "${packages[@]}"; do
  if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" != installed ]]; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
