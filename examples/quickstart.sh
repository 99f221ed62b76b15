#!/usr/bin/env bash
# From a fresh Debian bookworm machine to a trained model: installs the packages, configures,
# builds the library and examples/hello_autograd, and runs it.
#
#   bash examples/quickstart.sh     (build directory: build/, or $TINYFORMER_BUILD_DIR)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash .ci/install-deps.sh
build=${TINYFORMER_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target hello_autograd
"$build/examples/hello_autograd"
