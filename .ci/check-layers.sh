#!/usr/bin/env bash
# The layering rule, checked on every include: examples -> nn -> autograd -> core <- backends.
# Each folder may include only the folders listed for it; examples only the umbrella header.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

declare -A allowed=(
  [core]="core"
  [autograd]="core autograd"
  [nn]="core autograd nn"
  [backends/reference]="core backends/reference"
  [backends/cpu]="core backends/cpu"
  [backends/cuda]="core backends/cuda"
)

bad=0
for folder in "${!allowed[@]}"; do
  [[ -d $folder ]] || continue
  while IFS=: read -r file line text; do
    target=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$text")
    ok=false
    for prefix in ${allowed[$folder]}; do
      [[ $target == "$prefix"/* ]] && ok=true
    done
    if [[ $ok == false ]]; then
      echo "check-layers: $file:$line includes \"$target\"; $folder/ may include only: ${allowed[$folder]}"
      bad=1
    fi
  done < <(grep -rnE '^\s*#\s*include\s+"' "$folder" --include='*.h' --include='*.cpp' \
             --include='*.def' --include='*.cu' --include='*.cuh' || true)
done

# The communication libraries stay behind their layers: MPI's header only in the distributed
# layer's transport (nn/distributed/mpi/), NCCL's only in the CUDA backend, which the
# distributed layer reaches through core/collectives.h and the backend registry.
while IFS=: read -r file line text; do
  case $file in
    nn/distributed/mpi/*) [[ $text == *"<mpi.h>"* ]] && continue ;;
    backends/cuda/*) [[ $text == *"<nccl.h>"* ]] && continue ;;
  esac
  echo "check-layers: $file:$line includes a communication library outside its place" \
    "(mpi.h: nn/distributed/mpi/ only; nccl.h: backends/cuda/ only): $text"
  bad=1
done < <(grep -rnE '^\s*#\s*include\s+[<"](mpi|nccl)\.h[>"]' core autograd nn backends examples tests \
           --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' || true)

# Examples are what users copy: of tinyformer's headers, the public umbrella header only (their
# own helpers next to them are fine). The exceptions, each with its reason in the file's opening
# comment:
declare -A example_exceptions=(
  [examples/benchmark_ops.cpp]="times the backend's kernels directly against raw oneDNN/OpenBLAS"
)
while IFS=: read -r file line text; do
  [[ -n "${example_exceptions[$file]:-}" ]] && continue
  echo "check-layers: $file:$line: examples include only <tinyformer/tinyformer.h>, got: $text"
  bad=1
done < <(grep -rnE '^\s*#\s*include\s+["<](core|autograd|nn|backends|tinyformer/(core|autograd|nn))/' \
           examples --include='*.cpp' --include='*.h' || true)

# core/ knows no concrete backend: backends register themselves (core/backend.h) and core/
# dispatches through the registry. So no file under core/, comments included, names a backend,
# its class or its accessor, the libraries a backend is built on, or the backends' folders; core/
# says "a backend" or "the device's backend". Device types (Device::cuda(), "the GPU") are
# devices, not backends, and stay allowed.
backend_words='cpu_backend|cuda_backend|CpuBackend|CudaBackend|cudnn|cublas|dnnl|onednn|mkldnn'
backend_words+='|openblas|cblas|nccl|backends/|cpu::|cuda::'
while IFS=: read -r file line text; do
  echo "check-layers: $file:$line names a concrete backend (core/ knows none): ${text#"${text%%[![:space:]]*}"}"
  bad=1
done < <(grep -rniE "$backend_words" core || true)

if [[ $bad -ne 0 ]]; then exit 1; fi
echo "check-layers: every include follows examples -> nn -> autograd -> core <- backends;" \
  "core/ names no concrete backend"
