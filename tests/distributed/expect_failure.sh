#!/usr/bin/env bash
# Runs a job that must fail: passes when it ends with a non-zero status and its output holds the
# expected message. A hang is caught by the test's TIMEOUT. Usage:
#   expect_failure.sh <expected message> <run_mpi.sh> <mpirun> <ranks> <program> [args...]
set -uo pipefail
expected=$1
shift
output=$("$@" 2>&1)
status=$?
echo "$output"
if [[ $status -eq 77 ]]; then exit 77; fi
if [[ $status -eq 0 ]]; then
  echo "expect_failure: the job succeeded; expected it to fail with: $expected"
  exit 1
fi
if ! grep -qF -- "$expected" <<<"$output"; then
  echo "expect_failure: the job failed (status $status) without the message: $expected"
  exit 1
fi
echo "expect_failure: the job failed as expected (status $status)"
