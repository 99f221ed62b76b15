#!/bin/sh
# The ctest of examples/benchmark_pytorch.py: PyTorch must compute the layers of an export of
# benchmark_libtorch (tinyformer's outputs and gradients), and must disagree once a weight is
# moved (the check can fail). Exits 77 (ctest: skipped) where no Python imports torch.
#
#   check_benchmark_pytorch.sh path/to/benchmark_pytorch.py CASES_DIR...
set -u

script=$1
shift
python=""
for candidate in ${TINYFORMER_TORCH_VENV:+"$TINYFORMER_TORCH_VENV/bin/python"} \
  "$HOME/.cache/tinyformer/venv-torch/bin/python" python3; do
  if "$candidate" -c 'import torch, safetensors' 2>/dev/null; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "check_benchmark_pytorch.sh: skipped: no Python with torch and safetensors (set" \
    "TINYFORMER_TORCH_VENV, or run examples/setup_pytorch_venv.sh)"
  exit 77
fi

status=0
for cases in "$@"; do
  if ! "$python" "$script" --cases "$cases" --check-only --json "$cases/check.json"; then
    echo "check_benchmark_pytorch.sh: FAILED: PyTorch and tinyformer disagree on $cases"
    status=1
  fi
  "$python" "$script" --cases "$cases" --check-only --quiet --perturb \
    --json "$cases/check_perturbed.json"
  perturbed=$?
  if [ "$perturbed" -ne 1 ]; then
    echo "check_benchmark_pytorch.sh: FAILED: with a weight moved the check exited" \
      "$perturbed, not 1"
    status=1
  fi
done
exit $status
