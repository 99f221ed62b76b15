#!/usr/bin/env bash
# ctest: SIGINT during train_mlm's training ends it after the step in progress with exit status
# 130, a checkpoint and a line saying how to continue; --resume then finishes the run, and its
# final checkpoint equals byte for byte that of a run never interrupted.
#   bash train_mlm_interrupt.sh <train_mlm binary> <scratch dir>
set -euo pipefail
train_mlm=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work"

# About 40 KB of varied sentences.
subjects=("the cat" "a dog" "my friend" "the old man" "every child" "our teacher")
verbs=(sees likes finds carries paints remembers)
objects=("the red ball" "a small house" "the river" "an apple" "the long road" "a book")
for ((i = 0; i < 900; ++i)); do
  echo "${subjects[i % 6]} ${verbs[i / 6 % 6]} ${objects[i / 36 % 6]} on day $i."
done >tiny.txt

args=(--data tiny.txt --steps 400 --d-model 16 --heads 2 --d-ff 32 --layers 1 --k 8 --seq-len 32
  --batch 4 --warmup 10 --eval-every 100 --eval-sequences 8 --log-every 1 --threads 1)

"$train_mlm" "${args[@]}" --checkpoint whole.safetensors --log whole.csv >whole.out 2>&1 ||
  { cat whole.out; echo "FAIL: the uninterrupted run failed"; exit 1; }

# Job control on: a background job of a non-interactive shell would start with SIGINT ignored
# (and train_mlm, as is the convention, keeps an ignored SIGINT ignored).
set -m
"$train_mlm" "${args[@]}" --checkpoint parts.safetensors --log parts.csv >parts.out 2>parts.err &
pid=$!
set +m
# Wait until it trains (its log has rows past step 2), then interrupt it.
for ((i = 0; i < 600; ++i)); do
  if [[ -f parts.csv && $(wc -l <parts.csv) -ge 3 ]]; then break; fi
  sleep 0.05
done
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
cat parts.err
if [[ $rc -ne 130 ]]; then
  cat parts.out
  echo "FAIL: expected exit status 130 after SIGINT, got $rc"
  exit 1
fi
grep -q "interrupted by SIGINT after step [0-9]*; the checkpoint parts.safetensors holds it: run the same command with --resume" parts.err ||
  { echo "FAIL: no message saying how to resume"; exit 1; }
step=$(sed -n 's/.*interrupted by SIGINT after step \([0-9]*\);.*/\1/p' parts.err)
if [[ $step -lt 2 || $step -ge 400 ]]; then
  echo "FAIL: interrupted at step $step, expected one in [2, 400)"
  exit 1
fi
# The checkpoint holds that step, and no temporary file is left.
grep -aq "\"step\":\"$step\"" parts.safetensors || { echo "FAIL: the checkpoint is not at step $step"; exit 1; }
if compgen -G "parts.safetensors.tmp.*" >/dev/null; then echo "FAIL: a temporary file is left"; exit 1; fi

"$train_mlm" "${args[@]}" --checkpoint parts.safetensors --log parts.csv --resume >resume.out 2>&1 ||
  { cat resume.out; echo "FAIL: the resumed run failed"; exit 1; }
grep -q "resumed from parts.safetensors at step $step" resume.out ||
  { cat resume.out; echo "FAIL: the resumed run did not start at step $step"; exit 1; }
cmp whole.safetensors parts.safetensors ||
  { echo "FAIL: the final checkpoint differs from the uninterrupted run's"; exit 1; }
# The logs agree on step, epoch, loss, lr, grad_norm, val_loss, val_ppl.
cut -d, -f1-7 whole.csv >whole.cut
cut -d, -f1-7 parts.csv >parts.cut
cmp whole.cut parts.cut || { echo "FAIL: the logs differ"; exit 1; }
echo "interrupted at step $step with status 130; resumed to step 400: the same checkpoint bytes"
