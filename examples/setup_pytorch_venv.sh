#!/bin/sh
# Installs PyTorch 2.x, safetensors and numpy from PyPI into a virtual environment for
# examples/benchmark_pytorch.py, or reports what is there when torch already imports (running it
# again changes nothing).
#
#   examples/setup_pytorch_venv.sh [VENV]
#
# VENV defaults to $TINYFORMER_TORCH_VENV, else ~/.cache/tinyformer/venv-torch; the benchmark
# driver and the ctest look in the same places. TORCH_SPEC picks the version (default
# "torch>=2,<3").
#
# PyPI's Linux x86_64 torch wheel is built with CUDA: pip pulls its nvidia-*/cuda-* packages too
# (the environment is about 5.5 GB), and `pip install --no-deps torch` does not import
# (libtorch_cuda needs them even on a CPU-only machine). Where download.pytorch.org is
# reachable, TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu installs the CPU-only build
# (about 1 GB) instead. Either build runs its CPU kernels on its own MKL and oneDNN.
set -eu

venv=${1:-${TINYFORMER_TORCH_VENV:-${HOME}/.cache/tinyformer/venv-torch}}
spec=${TORCH_SPEC:-torch>=2,<3}
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ]; then
  echo "setup_pytorch_venv.sh: creating $venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
fi

if "$venv/bin/python" -c 'import torch, safetensors, numpy' 2>/dev/null; then
  echo "setup_pytorch_venv.sh: $venv already has torch, safetensors and numpy"
else
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    echo "setup_pytorch_venv.sh: pip install '$spec' --index-url $TORCH_INDEX_URL"
    "$venv/bin/pip" install "$spec" --index-url "$TORCH_INDEX_URL"
    echo "setup_pytorch_venv.sh: pip install safetensors numpy"
    "$venv/bin/pip" install safetensors numpy
  else
    echo "setup_pytorch_venv.sh: pip install '$spec' safetensors numpy"
    "$venv/bin/pip" install "$spec" safetensors numpy
  fi
fi

"$venv/bin/python" - <<'EOF'
import numpy, safetensors, torch
print(f"torch {torch.__version__}, safetensors {safetensors.__version__}, "
      f"numpy {numpy.__version__}")
print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}, "
      f"oneDNN (mkldnn) {torch.backends.mkldnn.is_available()}, "
      f"MKL {torch.backends.mkl.is_available()}")
for line in torch.__config__.show().splitlines():
    if "Math Kernel" in line or "MKL-DNN" in line or "OpenMP" in line:
        print(line.strip(" -"))
EOF
du -sh "$venv" 2>/dev/null | sed 's/^/setup_pytorch_venv.sh: size /'
echo "setup_pytorch_venv.sh: python is $venv/bin/python"
