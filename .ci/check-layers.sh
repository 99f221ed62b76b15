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

if [[ $bad -ne 0 ]]; then exit 1; fi
echo "check-layers: every include follows examples -> nn -> autograd -> core <- backends"
