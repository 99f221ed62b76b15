#!/usr/bin/env bash
# ctest: train_mlm and train_listops under `mpirun -np 2 ... --distributed`. Two processes with
# the global batch split between them log the losses of one process with the whole batch (to
# float32 rounding); only rank 0 prints and writes; a run stopped under one world size resumes
# under the other; a batch that does not split is refused. Skips (77) where mpirun is absent.
#   train_distributed.sh <run_mpi.sh> <mpirun> <train_mlm> <train_listops> <work dir>
set -euo pipefail
run_mpi=$1 mpirun=$2 train_mlm=$3 train_listops=$4 work=$5
rm -rf "$work"
mkdir -p "$work"
cd "$work"

# A small English-like text: 900 varied sentences.
subjects=("the cat" "a dog" "my friend" "the old man" "every child" "our teacher")
verbs=(sees likes finds carries paints remembers)
objects=("the red ball" "a small house" "the river" "an apple" "the long road" "a book")
for ((i = 0; i < 900; ++i)); do
  echo "${subjects[i % 6]} ${verbs[i / 6 % 6]} ${objects[i / 36 % 6]} on day $i."
done >tiny.txt

model=(--data tiny.txt --seq-len 32 --layers 1 --d-model 32 --heads 2 --d-ff 64 --k 8
  --eval-every 3 --eval-sequences 16 --threads 1 --steps 6 --dropout 0)
small=("${model[@]}" --batch 8)

fail() {
  echo "train_distributed: $*"
  exit 1
}
# The loss, grad_norm and val_loss columns of two logs agree to a relative 1e-4 (the processes
# sum their gradients in another order than one process does).
same_losses() {
  paste -d, "$1" "$2" | awk -F, -v n="$(head -1 "$1" | tr ',' '\n' | wc -l)" '
    NR == 1 { next }
    { for (c in cols) { a = $cols[c]; b = $(cols[c] + n); d = a - b; if (d < 0) d = -d;
        s = a < 0 ? -a : a; if (d > 1e-4 * (s + 1e-3)) { bad = 1; print "row " NR " column " cols[c] ": " a " vs " b } } }
    BEGIN { cols[1] = 3; cols[2] = 5; cols[3] = 6 }
    END { exit bad }'
}

# Skip when mpirun is absent (run_mpi.sh says so).
set +e
"$run_mpi" "$mpirun" 2 true >/dev/null
status=$?
set -e
if [[ $status -eq 77 ]]; then "$run_mpi" "$mpirun" 2 true; exit 77; fi

# One process, the whole batch.
"$train_mlm" "${small[@]}" --log single.csv --checkpoint none >single.out

# Two processes, half the batch each: the same losses; rank 0 alone prints, logs and saves.
"$run_mpi" "$mpirun" 2 "$train_mlm" "${small[@]}" --distributed --log dist.csv \
  --checkpoint dist.safetensors >dist.out 2>dist.err || fail "the 2-process run failed: $(cat dist.err)"
[[ $(grep -c "distributed: 2 processes, batch 8 = 2 x 4" dist.out) -eq 1 ]] ||
  fail "expected one 'distributed: 2 processes' line:\n$(cat dist.out)"
[[ $(grep -c "final validation perplexity" dist.out) -eq 1 ]] ||
  fail "expected rank 0 alone to print the summary:\n$(cat dist.out)"
[[ -f dist.safetensors ]] || fail "no checkpoint written"
[[ $(ls | grep -c "dist.safetensors") -eq 1 ]] || fail "stray checkpoint files: $(ls)"
[[ $(wc -l <dist.csv) -eq 3 ]] || fail "expected a header and 2 rows in dist.csv:\n$(cat dist.csv)"
same_losses single.csv dist.csv || fail "2 processes and 1 process logged different losses"

# Stopped at step 3 by two processes, resumed by one (and the reverse): the same losses.
"$run_mpi" "$mpirun" 2 "$train_mlm" "${small[@]}" --distributed --log a.csv \
  --checkpoint a.safetensors --stop-at 3 >/dev/null 2>a.err || fail "$(cat a.err)"
"$train_mlm" "${small[@]}" --log a.csv --checkpoint a.safetensors --resume >/dev/null
same_losses single.csv a.csv || fail "2 processes, then 1: other losses"
"$train_mlm" "${small[@]}" --log b.csv --checkpoint b.safetensors --stop-at 3 >/dev/null
"$run_mpi" "$mpirun" 2 "$train_mlm" "${small[@]}" --distributed --log b.csv \
  --checkpoint b.safetensors --resume >/dev/null 2>b.err || fail "$(cat b.err)"
same_losses single.csv b.csv || fail "1 process, then 2: other losses"

# A global batch that does not split over the processes: refused, with the reason.
set +e
"$run_mpi" "$mpirun" 2 "$train_mlm" "${model[@]}" --batch 7 --distributed --checkpoint none \
  >odd.out 2>&1
status=$?
set -e
[[ $status -ne 0 ]] || fail "--batch 7 over 2 processes was accepted"
grep -q -- "--batch 7 does not split evenly over 2 processes; use a multiple of 2" odd.out ||
  fail "--batch 7: unexpected message:\n$(cat odd.out)"

# train_listops runs the same way (rank 0 generates the data files, the others read them).
"$run_mpi" "$mpirun" 2 "$train_listops" --data-dir listops --train-examples 64 --val-examples 16 \
  --test-examples 16 --steps 4 --batch 8 --layers 1 --d-model 32 --heads 2 --d-ff 64 --k 8 \
  --eval-every 2 --threads 1 --checkpoint none --preset short --distributed \
  >listops.out 2>listops.err || fail "train_listops --distributed failed: $(cat listops.err)"
grep -q "final test accuracy" listops.out || fail "train_listops printed no summary"
echo "train_distributed: ok"
