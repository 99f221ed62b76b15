#!/usr/bin/env bash
# Runs a test program under `mpirun -np <ranks>`, or skips (exit 77, ctest's SKIP_RETURN_CODE)
# with a message when mpirun is absent. Usage: run_mpi.sh <mpirun> <ranks> <program> [args...]
set -euo pipefail
mpirun=$1 ranks=$2
shift 2
if [[ -z $mpirun || ! -x $(command -v "$mpirun" 2>/dev/null || true) ]]; then
  echo "SKIP: mpirun not found (apt-get install openmpi-bin); the multi-process tests did not run"
  exit 77
fi
# CI runs as root, which Open MPI refuses unless told; --oversubscribe lets 2 ranks share fewer
# cores. Shared-memory transfers without ptrace rights (containers) use copies instead.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# Under AddressSanitizer (the sanitizer build), Open MPI's own start-up allocations, many of them
# in plugins it has unloaded by exit, would read as leaks: the ranks check memory errors and
# undefined behaviour, and leaks are left to the single-process suites, which cover the same
# library code. The last setting in ASAN_OPTIONS wins; without ASan nothing reads it.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
exec "$mpirun" --oversubscribe -np "$ranks" "$@"
