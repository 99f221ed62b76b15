#!/usr/bin/env bash
# ctest: `--distributed` jobs that must stop at once. Processes started with different flags or
# data (mpirun's `-np 1 A : -np 1 B`) are refused at start, every one of them, with the first
# difference named (the flag, rank 0's value and rank 1's), instead of training apart or hanging;
# and a process that stalls mid-run ends the job after --collective-timeout seconds with the
# watchdog's message. Skips (77) where mpirun is absent.
#   train_distributed_stops.sh <run_mpi.sh> <mpirun> <train_mlm> <train_listops> <work dir>
set -euo pipefail
run_mpi=$1 mpirun=$2 train_mlm=$3 train_listops=$4 work=$5
rm -rf "$work"
mkdir -p "$work/a" "$work/b"
cd "$work"

# Two texts of 600 sentences; b/tiny.txt is tiny.txt with other letters but the same size.
subjects=("the cat" "a dog" "my friend" "the old man" "every child" "our teacher")
verbs=(sees likes finds carries paints remembers)
objects=("the red ball" "a small house" "the river" "an apple" "the long road" "a book")
for ((i = 0; i < 600; ++i)); do
  echo "${subjects[i % 6]} ${verbs[i / 6 % 6]} ${objects[i / 36 % 6]} on day $i."
done >tiny.txt
tr 'a-y' 'b-z' <tiny.txt >other.txt
cp tiny.txt a/tiny.txt
cp other.txt b/tiny.txt

# What both processes share; each case adds --data, --steps, --seed and --k (a flag given twice
# is an error). The data is a path from each process's working directory.
model=(--seq-len 32 --layers 1 --d-model 32 --heads 2 --d-ff 64 --eval-every 3 --warmup 1
  --eval-sequences 16 --threads 1 --batch 8 --dropout 0 --checkpoint none --distributed)
usual=(--data tiny.txt --steps 6 --seed 1 --k 8)

fail() {
  echo "train_distributed_stops: $*"
  exit 1
}

set +e
"$run_mpi" "$mpirun" 2 true >/dev/null
status=$?
set -e
if [[ $status -eq 77 ]]; then "$run_mpi" "$mpirun" 2 true; exit 77; fi

# refused <name> <expected difference> <rank 0's extra arguments> -- <rank 1's>: the job fails
# within 60 s (a hang, or processes that train apart, fail the test) with the message.
refused() {
  local name=$1 expected=$2
  shift 2
  local first=() second=()
  while [[ $1 != -- ]]; do first+=("$1"); shift; done
  shift
  second=("$@")
  local started=$SECONDS
  set +e
  timeout 60 "$run_mpi" "$mpirun" 1 "${first[@]}" : -np 1 "${second[@]}" >"$name.out" 2>&1
  local status=$?
  set -e
  [[ $status -ne 124 ]] || fail "$name: the job was still running after 60 s:\n$(cat "$name.out")"
  [[ $status -ne 0 ]] || fail "$name: the job was accepted:\n$(cat "$name.out")"
  local message="the processes of this job were started differently: $expected"
  grep -qF -- "$message" "$name.out" || fail "$name: expected '$message' in:\n$(cat "$name.out")"
  grep -qF -- "; start every process with the same flags and data" "$name.out" ||
    fail "$name: no advice in:\n$(cat "$name.out")"
  ! grep -q "final validation\|final test" "$name.out" || fail "$name: trained:\n$(cat "$name.out")"
  echo "train_distributed_stops: $name refused in $((SECONDS - started)) s"
}

refused steps "--steps is 6 on rank 0 but 5 on rank 1" \
  "$train_mlm" "${model[@]}" "${usual[@]}" -- \
  "$train_mlm" "${model[@]}" --data tiny.txt --steps 5 --seed 1 --k 8
refused seed "--seed is 1 on rank 0 but 2 on rank 1" \
  "$train_mlm" "${model[@]}" "${usual[@]}" -- \
  "$train_mlm" "${model[@]}" --data tiny.txt --steps 6 --seed 2 --k 8
refused data "--data is tiny.txt on rank 0 but other.txt on rank 1" \
  "$train_mlm" "${model[@]}" "${usual[@]}" -- \
  "$train_mlm" "${model[@]}" --data other.txt --steps 6 --seed 1 --k 8
# --k of a projection without parameters (train_mlm's mean pooling): the models' shapes agree.
refused k "--k is 8 on rank 0 but 4 on rank 1" \
  "$train_mlm" "${model[@]}" "${usual[@]}" -- \
  "$train_mlm" "${model[@]}" --data tiny.txt --steps 6 --seed 1 --k 4
# The same path to other contents (machines without a shared disk): the data's hash differs.
refused content "data.fingerprint is 9705ea6a on rank 0 but c60009b6 on rank 1" \
  -wdir a "$train_mlm" "${model[@]}" "${usual[@]}" -- \
  -wdir b "$train_mlm" "${model[@]}" "${usual[@]}"
# train_listops starts its runs the same way.
refused listops "--lr is 0.001 on rank 0 but 0.002 on rank 1" \
  "$train_listops" --data-dir listops --train-examples 32 --val-examples 16 --test-examples 16 \
  --steps 2 --batch 8 --layers 1 --d-model 32 --heads 2 --d-ff 64 --k 8 --threads 1 \
  --checkpoint none --preset short --warmup 1 --distributed -- \
  "$train_listops" --data-dir listops --train-examples 32 --val-examples 16 --test-examples 16 \
  --steps 2 --batch 8 --layers 1 --d-model 32 --heads 2 --d-ff 64 --k 8 --threads 1 \
  --checkpoint none --preset short --warmup 1 --distributed --lr 0.002

# A process stopped (SIGSTOP) in the middle of a long run: the other one waits in a collective,
# and after --collective-timeout 3 its watchdog ends the whole job, the stopped process included.
"$run_mpi" "$mpirun" 2 "$train_mlm" "${model[@]}" --data tiny.txt --steps 100000 --seed 1 --k 8 \
  --collective-timeout 3 >stall.out 2>&1 &
job=$!
sleep 2
stalled=$(pgrep -P "$job" | head -1)
[[ -n $stalled ]] || fail "stall: no process of the job to stop:\n$(cat stall.out)"
kill -STOP "$stalled"
started=$SECONDS
while kill -0 "$job" 2>/dev/null && ((SECONDS - started < 60)); do sleep 1; done
if kill -0 "$job" 2>/dev/null; then
  kill -KILL "$stalled" "$job"
  fail "stall: the job was still running 60 s after a process stopped:\n$(cat stall.out)"
fi
set +e
wait "$job"
status=$?
set -e
[[ $status -ne 0 ]] || fail "stall: the job succeeded:\n$(cat stall.out)"
watchdog="rank [01]: [a-z_]+ has waited 3\.[0-9] s for the other processes of the job "
watchdog+="\(the collective timeout is 3 s"
grep -qE "$watchdog" stall.out || fail "stall: no watchdog message in:\n$(cat stall.out)"
echo "train_distributed_stops: a stalled process ended the job in $((SECONDS - started)) s"
echo "train_distributed_stops: ok"
