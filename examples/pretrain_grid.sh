#!/usr/bin/env bash
# The Linformer paper's pretraining finding in miniature: with everything else fixed, masked-LM
# pretraining on the fortunes corpus at n = 128 (batch 32, 3000 steps) with full attention and
# with Linformer attention for k = 32, 64, 128 with the paper's learned linear projections
# (headwise sharing, the library's recipe for E: docs/linformer.md, "Learning E"), no sharing at
# k = 32 and 64 (each head's E starting at its own shifted windows), layerwise sharing at k = 32,
# linear at k = 32 with the paper code's random start and the full learning rate (the recipe's
# counterpart), and k = 16, 32, 64 with mean pooling. Every cell runs with several seeds; the
# table gives the mean, the standard deviation and the range of the final validation perplexity,
# and the PNG the seed-averaged loss curves:
#
#   bash examples/pretrain_grid.sh              # build/pretrain_grid.md, .png, runs in
#                                               # build/pretrain_grid/ (75 minutes, 2 cores)
#   STEPS=300 SEEDS="1 2" bash examples/pretrain_grid.sh   # a quick look
#   CELLS="full mean-k32" bash examples/pretrain_grid.sh   # some cells only
#
# A run that finished is not run again; one that was interrupted resumes from its checkpoint.
# Environment: TINYFORMER_BUILD_DIR (default build), RESULTS (where the table, the plot and the
# runs go; default: the build folder), STEPS, SEQ_LEN, SEEDS (default "1 2 3"), JOBS (runs at a
# time, default 2), THREADS (per run; default: the cores divided among the jobs), CELLS, and
# EXTRA (more flags for every run, e.g. "--device cuda"). results/pretrain_grid/ keeps the
# curated table and figure: examples/summarize_results.py pretrain_grid RESULTS/pretrain_grid
# --name grid --out results/pretrain_grid, and the PNG copied there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build=${TINYFORMER_BUILD_DIR:-build}
train_mlm=$build/examples/train_mlm
results=${RESULTS:-$build}
runs=$results/pretrain_grid
steps=${STEPS:-3000}
seq_len=${SEQ_LEN:-128}
batch=${BATCH:-32}
seeds=(${SEEDS:-1 2 3})
jobs=${JOBS:-2}
threads=${THREADS:-$(($(nproc) / jobs > 0 ? $(nproc) / jobs : 1))}
if [[ ! -x $train_mlm ]]; then
  echo "pretrain_grid.sh: $train_mlm not found; build it first:" \
    "cmake --build $build --target train_mlm (or set TINYFORMER_BUILD_DIR)" >&2
  exit 1
fi

warmup=$((steps >= 1000 ? 100 : steps / 10))
# Everything but the attention is the same in every cell.
common=(--seq-len "$seq_len" --steps "$steps" --batch "$batch" --layers 2 --d-model 64 --heads 4
  --d-ff 256 --lr 3e-3 --warmup "$warmup" --dropout 0 --eval-every $((steps / 4))
  --log-every 20 --threads "$threads")
# shellcheck disable=SC2206
extra=(${EXTRA:-})

# name | flags
cells=(
  "full|--attention full"
  "linear-k32|--attention linformer --projection linear --k 32 --sharing headwise"
  "linear-k64|--attention linformer --projection linear --k 64 --sharing headwise"
  "linear-k128|--attention linformer --projection linear --k 128 --sharing headwise"
  "linear-k32-none|--attention linformer --projection linear --k 32 --sharing none"
  "linear-k64-none|--attention linformer --projection linear --k 64 --sharing none"
  "linear-k32-layerwise|--attention linformer --projection linear --k 32 --sharing layerwise"
  "linear-k32-random|--attention linformer --projection linear --k 32 --sharing headwise --projection-init normal --projection-lr-scale 1"
  "mean-k16|--attention linformer --projection mean --k 16"
  "mean-k32|--attention linformer --projection mean --k 32"
  "mean-k64|--attention linformer --projection mean --k 64"
)
selected=${CELLS:-}

selected_cells=()
for cell in "${cells[@]}"; do
  name=${cell%%|*}
  if [[ -n $selected && " $selected " != *" $name "* ]]; then continue; fi
  selected_cells+=("$cell")
done

# One run: cell name, seed, flags. Writes $runs/<name>-s<seed>.{txt,csv,safetensors}.
run() {
  local name=$1 seed=$2 flags=$3
  local base=$runs/$name-s$seed
  if [[ -f $base.txt ]] && grep -q '^final validation perplexity' "$base.txt"; then
    echo "$name seed $seed: done already ($(grep '^final validation perplexity' "$base.txt"))"
    return
  fi
  local resume=()
  if [[ -f $base.safetensors ]]; then resume=(--resume); fi
  echo "$name seed $seed: train_mlm $flags"
  local start=$SECONDS
  # shellcheck disable=SC2086
  "$train_mlm" "${common[@]}" --seed "$seed" $flags "${extra[@]}" "${resume[@]}" \
    --checkpoint "$base.safetensors" --log "$base.csv" > "$base.txt.partial"
  echo "seconds $((SECONDS - start))" >> "$base.txt.partial"
  mv "$base.txt.partial" "$base.txt"
  echo "$name seed $seed: $(grep '^final validation perplexity' "$base.txt")"
}

mkdir -p "$runs"
start_all=$SECONDS
# Seed-major order, so that every cell has its first seed before any has its third.
for seed in "${seeds[@]}"; do
  for cell in "${selected_cells[@]}"; do
    while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
    run "${cell%%|*}" "$seed" "${cell#*|}" &
  done
done
wait

# mean, standard deviation (n - 1), min and max of the numbers on stdin.
stats() {
  awk '{ x[NR] = $1; s += $1 } END {
    if (NR == 0) exit; m = s / NR; v = 0
    for (i = 1; i <= NR; i++) v += (x[i] - m) ^ 2
    sd = NR > 1 ? sqrt(v / (NR - 1)) : 0; lo = x[1]; hi = x[1]
    for (i = 1; i <= NR; i++) { if (x[i] < lo) lo = x[i]; if (x[i] > hi) hi = x[i] }
    printf "%.3f %.3f %.3f %.3f %d\n", m, sd, lo, hi, NR }'
}
ppl_of() { sed -nE 's/^final validation perplexity ([0-9.]+).*/\1/p' "$1"; }

# The table: one row per cell with finished runs, in the order above.
table=$results/pretrain_grid.md
full_mean=$(for s in "${seeds[@]}"; do
  [[ -f $runs/full-s$s.txt ]] && ppl_of "$runs/full-s$s.txt"
done | stats | cut -d' ' -f1)
{
  echo "# Masked-LM pretraining: full attention vs Linformer (n = $seq_len, $steps steps)"
  echo
  echo "Corpus: fortunes (Debian package \`fortunes\`); 2 layers, d_model 64, 4 heads, d_ff 256,"
  echo "batch $batch x $seq_len bytes, AdamW lr 3e-3, warm-up $warmup steps, cosine decay; seeds"
  echo "${seeds[*]} (initialisation, data order and masks). Perplexity: exp of the mean loss over"
  echo "the masked bytes of a fixed validation set, at the end of each run. Linear projections use"
  echo "the library's recipe (E starts as mean pooling, each head's windows shifted with sharing"
  echo "none, and learns at a tenth of the rate, undecayed) except linear-k32-random (N(0, 1/k)"
  echo "start, full rate: the paper code's initialisation)."
  echo "Written by examples/pretrain_grid.sh; ratio: mean perplexity over full attention's."
  echo
  echo "| run | attention | k | projection | sharing | parameters | seeds | perplexity mean ± sd | min - max | ratio | per seed | tokens/s | seconds |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for cell in "${cells[@]}"; do
    name=${cell%%|*}
    outs=()
    for s in "${seeds[@]}"; do
      [[ -f $runs/$name-s$s.txt ]] && outs+=("$runs/$name-s$s.txt")
    done
    ((${#outs[@]} > 0)) || continue
    model=$(grep '^model:' "${outs[0]}")
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
    read -r mean sd lo hi count < <(for o in "${outs[@]}"; do ppl_of "$o"; done | stats)
    per_seed=$(for o in "${outs[@]}"; do ppl_of "$o"; done | paste -sd' ' | sed 's/ /, /g')
    rate=$(for o in "${outs[@]}"; do sed -nE 's/^throughput: ([0-9]+) tokens.*/\1/p' "$o"; done |
      stats | awk '{ printf "%.0f", $1 }')
    seconds=$(for o in "${outs[@]}"; do sed -nE 's/^seconds ([0-9]+)/\1/p' "$o"; done |
      stats | awk '{ printf "%.0f", $1 }')
    ratio=-
    if [[ -n $full_mean ]]; then ratio=$(awk -v m="$mean" -v f="$full_mean" 'BEGIN { printf "%.2f", m / f }'); fi
    echo "| $name | $attention | $k | $projection | $sharing | $params | $count | $mean ± $sd | $lo - $hi | $ratio | $per_seed | $rate | $seconds |"
  done
  baseline=$(grep -h -m1 '^unigram baseline' "$runs"/*.txt 2>/dev/null | head -1 |
    sed -nE 's/.*= perplexity ([0-9.]+) on the validation text.*/\1/p')
  if [[ -n $baseline ]]; then
    echo
    echo "Unigram baseline (byte frequencies, no context): validation perplexity $baseline."
  fi
  echo
  echo "Runs went $jobs at a time on the same cores, next to other work, and a resumed run counts"
  echo "only its last part: tokens/s and seconds compare cells only roughly."
} > "$table"
echo "wrote $table"

# The seed-averaged curves: one CSV per cell (step, loss, val_ppl: means over the seeds that
# have the row), plotted together.
logs=()
for cell in "${cells[@]}"; do
  name=${cell%%|*}
  csvs=()
  for s in "${seeds[@]}"; do
    [[ -f $runs/$name-s$s.txt ]] && csvs+=("$runs/$name-s$s.csv")
  done
  ((${#csvs[@]} > 0)) || continue
  awk -F, '
    FNR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { step = $col["step"]; if (!(step in n)) order[++steps] = step
      n[step]++; loss[step] += $col["loss"]
      if ($col["val_ppl"] != "") { vn[step]++; ppl[step] += $col["val_ppl"] } }
    END { print "step,loss,val_ppl"
      for (i = 1; i <= steps; i++) { s = order[i]
        printf "%s,%.6f,%s\n", s, loss[s] / n[s], vn[s] ? sprintf("%.4f", ppl[s] / vn[s]) : "" } }
  ' "${csvs[@]}" > "$runs/$name.mean.csv"
  logs+=("$runs/$name.mean.csv")
done
if ((${#logs[@]} > 0)); then
  "$train_mlm" --plot "$results/pretrain_grid.png" --compare "${logs[@]}"
fi
echo "grid time: $((SECONDS - start_all)) s"
