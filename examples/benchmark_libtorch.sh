#!/bin/sh
# Runs benchmark_libtorch in the environment libtorch runs best in on this kind of machine. The
# variables must be set before the libraries load, so they cannot be set by the program itself.
#
#   examples/benchmark_libtorch.sh [path/to/benchmark_libtorch] [its flags...]
#
# The program writes its JSON next to itself (the build folder) unless --json names a file;
# examples/summarize_results.py cpu_speed turns it into results/cpu_speed/'s CSV and summary.
#
# - OPENBLAS_CORETYPE: the OpenBLAS kernels. SkylakeX is the best on a CPU with AVX-512; on an
#   AVX2-only CPU (AMD EPYC/Zen, Intel before Skylake-SP) it dies of an illegal instruction, so
#   the default here is SkylakeX only where /proc/cpuinfo lists avx512f, else Haswell. Set it
#   yourself to override; a value other than that default is kept, with a warning.
# - OpenMP waiting: left to libtinyformer's default (idle threads spin briefly, then sleep;
#   docs/threading.md), which applies to libtorch too: one process, one OpenMP runtime.
#   OMP_WAIT_POLICY or GOMP_SPINCOUNT, when set, override it for both.
#   OPENBLAS_THREAD_TIMEOUT=4: OpenBLAS's own idle threads sleep soon as well.
# - tcmalloc (apt-get install libtcmalloc-minimal4) preloaded as the allocator: libtorch
#   allocates every intermediate with malloc. Both frameworks run in one process, so they share
#   this environment.
set -eu

binary=""
if [ $# -gt 0 ] && [ -x "$1" ] && [ ! -d "$1" ]; then
  binary=$1
  shift
else
  for candidate in ./benchmark_libtorch ./examples/benchmark_libtorch \
    build/examples/benchmark_libtorch; do
    if [ -x "$candidate" ]; then
      binary=$candidate
      break
    fi
  done
fi
if [ -z "$binary" ]; then
  echo "benchmark_libtorch.sh: no benchmark_libtorch binary found; pass its path first" \
    "(it is built where Debian's libtorch-dev is installed)" >&2
  exit 2
fi

best_coretype=Haswell
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  best_coretype=SkylakeX
fi
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  OPENBLAS_CORETYPE=$best_coretype
elif [ "$OPENBLAS_CORETYPE" != "$best_coretype" ]; then
  # An environment may set it machine-wide; libtorch's products then run on other kernels than
  # the ones chosen above (Haswell's on an AVX-512 CPU: libtorch's layer about 1.7x slower on a
  # Zen 5), and every ratio against it changes.
  echo "benchmark_libtorch.sh: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE from the environment;" \
    "this CPU's best is $best_coretype (unset it, or set it to $best_coretype, for libtorch's" \
    "best)" >&2
fi
export OPENBLAS_CORETYPE
export OPENBLAS_THREAD_TIMEOUT="${OPENBLAS_THREAD_TIMEOUT:-4}"

tcmalloc=""
for candidate in /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \
  /usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 /usr/lib64/libtcmalloc_minimal.so.4 \
  /usr/lib/libtcmalloc_minimal.so.4; do
  if [ -e "$candidate" ]; then
    tcmalloc=$candidate
    break
  fi
done
if [ -n "$tcmalloc" ]; then
  export LD_PRELOAD="$tcmalloc${LD_PRELOAD:+:$LD_PRELOAD}"
else
  echo "benchmark_libtorch.sh: tcmalloc not found (apt-get install libtcmalloc-minimal4):" \
    "running with glibc's malloc" >&2
fi

exec "$binary" "$@"
