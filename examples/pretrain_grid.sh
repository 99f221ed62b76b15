#!/usr/bin/env bash
# The Linformer paper's pretraining finding in miniature: with everything else fixed, masked-LM
# pretraining on the fortunes corpus at n = 128 with full attention and with Linformer attention
# for k = 16, 32, 64, 128 with the paper's learned linear projections (headwise sharing), no and
# layerwise sharing at k = 32, and k = 16, 32, 64 with mean pooling (at k = n = 128 mean pooling
# is exactly full attention). Writes the final validation perplexity of every run into a Markdown
# table and the loss curves of all runs into one PNG:
#
#   bash examples/pretrain_grid.sh              # results/pretrain_grid.md, .png, runs in
#                                               # results/pretrain_grid/ (under an hour, 2 cores)
#   STEPS=200 bash examples/pretrain_grid.sh    # a quick look
#   CELLS="full mean-k32" bash examples/pretrain_grid.sh   # some cells only
#
# A cell that finished is not run again; one that was interrupted resumes from its checkpoint.
# Environment: TINYFORMER_BUILD_DIR (default build), RESULTS (default results), STEPS,
# SEQ_LEN, THREADS, CELLS, and EXTRA (more flags for every run, e.g. "--device cuda").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build=${TINYFORMER_BUILD_DIR:-build}
train_mlm=$build/examples/train_mlm
results=${RESULTS:-results}
runs=$results/pretrain_grid
steps=${STEPS:-3000}
seq_len=${SEQ_LEN:-128}
threads=${THREADS:-0}
if [[ ! -x $train_mlm ]]; then
  echo "pretrain_grid.sh: $train_mlm not found; build it first:" \
    "cmake --build $build --target train_mlm (or set TINYFORMER_BUILD_DIR)" >&2
  exit 1
fi

warmup=$((steps >= 1000 ? 100 : steps / 10))
# Everything but the attention is the same in every cell.
common=(--seq-len "$seq_len" --steps "$steps" --batch 16 --layers 2 --d-model 64 --heads 4
  --d-ff 256 --lr 3e-3 --warmup "$warmup" --dropout 0 --eval-every $((steps / 4))
  --log-every 20 --seed 1 --threads "$threads")
# shellcheck disable=SC2206
extra=(${EXTRA:-})

# name | flags
cells=(
  "full|--attention full"
  "linear-k16|--attention linformer --projection linear --k 16 --sharing headwise"
  "linear-k32|--attention linformer --projection linear --k 32 --sharing headwise"
  "linear-k64|--attention linformer --projection linear --k 64 --sharing headwise"
  "linear-k128|--attention linformer --projection linear --k 128 --sharing headwise"
  "linear-k32-none|--attention linformer --projection linear --k 32 --sharing none"
  "linear-k32-layerwise|--attention linformer --projection linear --k 32 --sharing layerwise"
  "mean-k16|--attention linformer --projection mean --k 16"
  "mean-k32|--attention linformer --projection mean --k 32"
  "mean-k64|--attention linformer --projection mean --k 64"
)
selected=${CELLS:-}

mkdir -p "$runs"
start_all=$SECONDS
for cell in "${cells[@]}"; do
  name=${cell%%|*}
  flags=${cell#*|}
  if [[ -n $selected && " $selected " != *" $name "* ]]; then continue; fi
  out=$runs/$name.txt
  if [[ -f $out ]] && grep -q '^final validation perplexity' "$out"; then
    echo "$name: done already ($(grep '^final validation perplexity' "$out"))"
    continue
  fi
  resume=()
  if [[ -f $runs/$name.safetensors ]]; then resume=(--resume); fi
  echo "$name: train_mlm $flags"
  start=$SECONDS
  # shellcheck disable=SC2086
  "$train_mlm" "${common[@]}" $flags "${extra[@]}" "${resume[@]}" \
    --checkpoint "$runs/$name.safetensors" --log "$runs/$name.csv" > "$out.partial"
  echo "seconds $((SECONDS - start))" >> "$out.partial"
  mv "$out.partial" "$out"
  grep '^final validation perplexity' "$out"
done

# The table: one row per finished cell, in the order above.
table=$results/pretrain_grid.md
{
  echo "# Masked-LM pretraining: full attention vs Linformer (n = $seq_len, $steps steps)"
  echo
  echo "Corpus: fortunes (Debian package \`fortunes\`); 2 layers, d_model 64, 4 heads, d_ff 256,"
  echo "batch 16 x $seq_len bytes, AdamW lr 3e-3, warm-up $warmup steps, cosine decay, seed 1."
  echo "Perplexity: exp of the mean loss over the masked bytes of a fixed validation set."
  echo
  echo "| run | attention | k | projection | sharing | parameters | validation perplexity | tokens/s | seconds |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for cell in "${cells[@]}"; do
    name=${cell%%|*}
    out=$runs/$name.txt
    [[ -f $out ]] || continue
    model=$(grep '^model:' "$out")
    attention=full; k=-; projection=-; sharing=-
    if [[ $model == *Linformer* ]]; then
      attention=Linformer
      k=$(sed -E 's/.*Linformer k=([0-9,]+).*/\1/' <<< "$model")
      projection=$(sed -E 's/.*\(([a-z_-]+) projection.*/\1/' <<< "$model")
      if [[ $model == *sharing* ]]; then
        sharing=$(sed -E 's/.*, ([a-z_-]+) sharing.*/\1/' <<< "$model")
      fi
    fi
    params=$(sed -E 's/.* ([0-9]+) parameters.*/\1/' <<< "$model")
    ppl=$(sed -nE 's/^final validation perplexity ([0-9.]+).*/\1/p' "$out")
    rate=$(sed -nE 's/^throughput: ([0-9]+) tokens.*/\1/p' "$out")
    seconds=$(sed -nE 's/^seconds ([0-9]+)/\1/p' "$out")
    echo "| $name | $attention | $k | $projection | $sharing | $params | $ppl | $rate | $seconds |"
  done
  baseline=$(grep -m1 '^unigram baseline' "$runs"/*.txt 2>/dev/null | head -1 |
    sed -nE 's/.*= perplexity ([0-9.]+) on the validation text.*/\1/p')
  if [[ -n $baseline ]]; then
    echo
    echo "Unigram baseline (byte frequencies, no context): validation perplexity $baseline."
  fi
} > "$table"
echo "wrote $table"

logs=()
for cell in "${cells[@]}"; do
  name=${cell%%|*}
  [[ -f $runs/$name.txt ]] && logs+=("$runs/$name.csv")
done
if ((${#logs[@]} > 0)); then
  "$train_mlm" --plot "$results/pretrain_grid.png" --compare "${logs[@]}"
fi
echo "grid time: $((SECONDS - start_all)) s"
