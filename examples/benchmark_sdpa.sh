#!/usr/bin/env bash
# Builds and runs examples/benchmark_sdpa.cpp: tinyformer's fused_attention against PyTorch 2.x's
# scaled_dot_product_attention in one process, on the libtorch that a PyTorch wheel carries.
#
#   examples/benchmark_sdpa.sh BUILD [benchmark_sdpa's flags]
#
# BUILD: a tinyformer Release build folder (libtinyformer.so and its include/). The wheel comes
# from $TINYFORMER_TORCH_VENV, else ~/.cache/tinyformer/venv-torch (examples/setup_pytorch_venv.sh
# makes it). The program and its JSON go into BUILD/examples/.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:?usage: benchmark_sdpa.sh BUILD [flags]}" && pwd)
shift
venv=${TINYFORMER_TORCH_VENV:-${HOME}/.cache/tinyformer/venv-torch}
torch_dir=$("$venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
mkdir -p "$build/examples"
exe=$build/examples/benchmark_sdpa
if [[ ! -x "$exe" || "$here/benchmark_sdpa.cpp" -nt "$exe" || "$build/libtinyformer.so" -nt "$exe" ]]; then
  echo "benchmark_sdpa.sh: building $exe against $torch_dir"
  g++ -O2 -std=c++20 -pthread -fopenmp -D_GLIBCXX_USE_CXX11_ABI=1 \
    -I "$build/include" -I "$here/.." -I "$here" \
    -isystem "$torch_dir/include" -isystem "$torch_dir/include/torch/csrc/api/include" \
    "$here/benchmark_sdpa.cpp" "$here/bench_timing.cpp" -o "$exe" \
    -L "$build" -ltinyformer -L "$torch_dir/lib" -ltorch -ltorch_cpu -lc10 \
    -Wl,-rpath,"$build" -Wl,-rpath,"$torch_dir/lib"
fi
cd "$build/examples"
exec "$exe" "$@"
