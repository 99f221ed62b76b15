#!/bin/sh
# tinyformer against PyTorch 2.x on the same encoder layers, side by side: exports the cases
# once (benchmark_libtorch --export), checks that PyTorch computes tinyformer's layer, then runs
# the two programs in turns for R rounds (tinyformer, PyTorch, tinyformer, ...) so that both see
# the same load, and prints per case the median over the rounds.
#
#   examples/benchmark_pytorch.sh [--quick] [--rounds 5] [--n 256,512,...] [--k 64,128,256]
#       [--threads 2] [--reps 5] [--warmup 2] [--batch 4] [--out DIR]
#       [--binary path/to/benchmark_libtorch] [--venv path/to/venv] [--tinyformer-bf16]
#
# --tinyformer-bf16: each round also times tinyformer in mixed precision (bfloat16 products)
# (benchmark_libtorch --ours-only --bf16), the counterpart of PyTorch's bfloat16 autocast where
# the CPU has bfloat16 instructions; its outputs are checked by benchmark_libtorch --bf16, not here.
# --quick: n 256 and 512, k 64 and 128, 2 rounds of 3 reps (a minute or two).
# tinyformer runs under examples/benchmark_libtorch.sh's environment (OpenBLAS core type,
# libtinyformer's OpenMP waiting, tcmalloc). PyTorch runs with the same OpenMP waiting
# (GOMP_SPINCOUNT=1000, the spin libtinyformer sets, unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is
# given) and nothing preloaded: its wheel brings its own MKL, oneDNN and OpenMP runtime. The PyTorch environment
# comes from --venv, else $TINYFORMER_TORCH_VENV, else ~/.cache/tinyformer/venv-torch (where
# examples/setup_pytorch_venv.sh installs it), else python3 if torch imports there.
# Everything lands in --out (default: benchmark_pytorch_results/ in the folder of the
# benchmark_libtorch binary, the build folder): the exported cases, each round's JSON from both
# programs, and summary.json with the table's numbers (examples/summarize_results.py cpu_speed
# turns it into results/cpu_speed/'s CSV and summary).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
rounds=5 ns=256,512,1024,2048,4096 ks=64,128,256 threads=2 reps=5 warmup=2 batch=4
out="" binary="" venv="" tf_bf16=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) ns=256,512 ks=64,128 rounds=2 reps=3 warmup=1 ;;
    --rounds) rounds=$2; shift ;;
    --n) ns=$2; shift ;;
    --k) ks=$2; shift ;;
    --threads) threads=$2; shift ;;
    --reps) reps=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --batch) batch=$2; shift ;;
    --out) out=$2; shift ;;
    --binary) binary=$2; shift ;;
    --venv) venv=$2; shift ;;
    --tinyformer-bf16) tf_bf16=1 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "benchmark_pytorch.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ -z "$binary" ]; then
  for candidate in ./benchmark_libtorch ./examples/benchmark_libtorch \
    build/examples/benchmark_libtorch; do
    if [ -x "$candidate" ]; then
      binary=$candidate
      break
    fi
  done
fi
if [ -z "$binary" ] || [ ! -x "$binary" ]; then
  echo "benchmark_pytorch.sh: no benchmark_libtorch binary found; pass --binary" \
    "(it is built where Debian's libtorch-dev is installed)" >&2
  exit 2
fi
if [ -z "$out" ]; then
  out=$(dirname "$binary")/benchmark_pytorch_results
fi

python=""
for candidate in ${venv:+"$venv/bin/python"} \
  ${TINYFORMER_TORCH_VENV:+"$TINYFORMER_TORCH_VENV/bin/python"} \
  "$HOME/.cache/tinyformer/venv-torch/bin/python" python3; do
  if "$candidate" -c 'import torch, safetensors' 2>/dev/null; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "benchmark_pytorch.sh: no Python with torch and safetensors found; run" \
    "examples/setup_pytorch_venv.sh first" >&2
  exit 2
fi

if [ -z "${OMP_WAIT_POLICY:-}" ] && [ -z "${GOMP_SPINCOUNT:-}" ]; then
  export GOMP_SPINCOUNT=1000
fi
mkdir -p "$out"
sizes="--n $ns --k $ks --batch $batch"
echo "benchmark_pytorch.sh: exporting the cases to $out/cases"
# shellcheck disable=SC2086
"$binary" --export "$out/cases" $sizes --threads "$threads" > "$out/export.log"
echo "benchmark_pytorch.sh: PyTorch from $python; the agreement check:"
"$python" "$here/benchmark_pytorch.py" --cases "$out/cases" --check-only --threads "$threads" \
  --json "$out/check.json"

round=1
while [ "$round" -le "$rounds" ]; do
  echo "benchmark_pytorch.sh: round $round of $rounds: tinyformer"
  # shellcheck disable=SC2086
  sh "$here/benchmark_libtorch.sh" "$binary" --ours-only $sizes --threads "$threads" \
    --reps "$reps" --warmup "$warmup" --json "$out/tinyformer_$round.json" \
    > "$out/tinyformer_$round.log"
  if [ "$tf_bf16" = 1 ]; then
    echo "benchmark_pytorch.sh: round $round of $rounds: tinyformer, bfloat16 products"
    # shellcheck disable=SC2086
    sh "$here/benchmark_libtorch.sh" "$binary" --ours-only --bf16 $sizes --threads "$threads" \
      --reps "$reps" --warmup "$warmup" --json "$out/tinyformer_bf16_$round.json" \
      > "$out/tinyformer_bf16_$round.log"
  fi
  echo "benchmark_pytorch.sh: round $round of $rounds: PyTorch"
  "$python" "$here/benchmark_pytorch.py" --cases "$out/cases" --threads "$threads" \
    --reps "$reps" --warmup "$warmup" --json "$out/pytorch_$round.json" \
    > "$out/pytorch_$round.log"
  round=$((round + 1))
done

"$python" - "$out" "$rounds" "$tf_bf16" <<'EOF'
import json, statistics, sys

out, rounds, tf_bf16 = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
ours = [json.load(open(f"{out}/tinyformer_{r}.json")) for r in range(1, rounds + 1)]
theirs = [json.load(open(f"{out}/pytorch_{r}.json")) for r in range(1, rounds + 1)]
ours_bf16 = [json.load(open(f"{out}/tinyformer_bf16_{r}.json")) for r in range(1, rounds + 1)] \
    if tf_bf16 else []
config = theirs[0]["config"]
env = theirs[0]["environment"]

def by_name(runs):
    return [{row["name"]: row for row in run["results"]} for run in runs]

ours, theirs, ours_bf16 = by_name(ours), by_name(theirs), by_name(ours_bf16)
names = list(ours[0])
columns = [("tinyformer", "train_ms"), ("tinyformer", "forward_ms"),
           ("float32", "train_ms"), ("float32", "forward_ms"),
           ("bf16_autocast", "train_ms"), ("bf16_autocast", "forward_ms")]
summary = []
print(f"\nmedian over {rounds} rounds (each the median of {config['reps']} reps) of ms per layer "
      f"call; d_model {config['d_model']}, {config['heads']} heads, ff {config['d_ff']}, "
      f"batch {config['batch']}, {config['threads']} threads; PyTorch "
      f"{env['torch_version']} ({env['cpu_capability']})")
print("ratio = PyTorch / tinyformer float32, the median of the rounds' ratios; above 1: "
      "tinyformer is faster")
head = (f"{'case':<12} | {'tinyformer f32':>15} | {'PyTorch f32':>15} | {'PyTorch bf16':>15} | "
        f"{'ratio f32':>13} | {'ratio bf16':>13}")
print(head)
print("             | {0:>15} | {0:>15} | {0:>15} | {1:>13} | {1:>13}".format(
    "f+b (fwd)", "f+b (fwd)"))
print("-" * len(head))
for name in names:
    def times(side, variant, key):
        rows = ours if side == "tinyformer" else theirs
        return [r[name][variant][key] for r in rows]

    def pick(variant, key):
        return times("tinyformer", "tinyformer", key) if variant == "tinyformer" else \
            times("pytorch", variant, key)

    row = {"name": name, "n": ours[0][name]["n"], "k": ours[0][name]["k"]}
    cells = {}
    for variant, key in columns:
        cells[(variant, key)] = statistics.median(pick(variant, key))
        row[f"{variant}_{key}"] = cells[(variant, key)]
    ratios = {}
    for variant in ("float32", "bf16_autocast"):
        for key in ("train_ms", "forward_ms"):
            per_round = [t / o for t, o in zip(pick(variant, key), pick("tinyformer", key))]
            ratios[(variant, key)] = statistics.median(per_round)
            row[f"ratio_{variant}_{key}"] = ratios[(variant, key)]
    if tf_bf16:
        for key in ("train_ms", "forward_ms"):
            mine = [r[name]["tinyformer"][key] for r in ours_bf16]
            row[f"tinyformer_bf16_{key}"] = statistics.median(mine)
            row[f"ratio_bf16_vs_bf16_{key}"] = statistics.median(
                [t / o for t, o in zip(pick("bf16_autocast", key), mine)])
    summary.append(row)

    shown = [cells[("tinyformer", "train_ms")], cells[("tinyformer", "forward_ms")],
             cells[("float32", "train_ms")], cells[("float32", "forward_ms")],
             cells[("bf16_autocast", "train_ms")], cells[("bf16_autocast", "forward_ms")],
             ratios[("float32", "train_ms")], ratios[("float32", "forward_ms")],
             ratios[("bf16_autocast", "train_ms")], ratios[("bf16_autocast", "forward_ms")]]
    pairs = [f"{shown[i]:.2f} ({shown[i + 1]:.2f})" for i in range(0, len(shown), 2)]
    print(f"{name:<12} | {pairs[0]:>15} | {pairs[1]:>15} | {pairs[2]:>15} | {pairs[3]:>13} | "
          f"{pairs[4]:>13}")
if tf_bf16:
    print("\ntinyformer in mixed precision (bfloat16 products) against PyTorch's bfloat16 "
          "autocast; ratio = PyTorch / tinyformer")
    print(f"{'case':<12} | {'tinyformer bf16':>15} | {'PyTorch bf16':>15} | {'ratio':>13}")
    for row in summary:
        cells = [f"{row[a]:.2f} ({row[b]:.2f})" for a, b in (
            ("tinyformer_bf16_train_ms", "tinyformer_bf16_forward_ms"),
            ("bf16_autocast_train_ms", "bf16_autocast_forward_ms"),
            ("ratio_bf16_vs_bf16_train_ms", "ratio_bf16_vs_bf16_forward_ms"))]
        print(f"{row['name']:<12} | {cells[0]:>15} | {cells[1]:>15} | {cells[2]:>13}")
with open(f"{out}/summary.json", "w") as f:
    json.dump({"config": config, "rounds": rounds, "torch_version": env["torch_version"],
               "results": summary}, f, indent=2)
    f.write("\n")
print(f"\nsummary written to {out}/summary.json")
EOF
