#!/usr/bin/env python3
"""Turns a benchmark's or a training run's raw output into the curated summary under results/:
one small CSV per table (plain columns, what tests and docs read) and the topic's summary.md,
regenerated from every CSV in the folder and from its runs.csv (one line per CSV: the device,
the commit, the command).

    examples/summarize_results.py cpu_speed RUN.json [--rerun RERUN.json] --name zen5 \\
        --device "AMD EPYC Zen 5 (family 26 model 2), 2 cores" --out results/cpu_speed
    examples/summarize_results.py table3 RUN.json [--rerun RERUN.json] --name zen5 ...
    examples/summarize_results.py training RUN.txt [RUN.txt ...] --labels a b --name ...
    examples/summarize_results.py pretrain_grid RUNS_DIR --name grid --out results/pretrain_grid
    examples/summarize_results.py render --out results/cpu_speed    # summary.md only

cpu_speed reads the JSON of benchmark_libtorch (float32, or --bf16: the file says which) and
the summary.json of examples/benchmark_pytorch.sh, and writes NAME_float32.csv, NAME_bf16.csv
or NAME_pytorch.csv; with --rerun, the rerun's ratios go in the same rows. table3 reads the JSON
of benchmark_attention (NAME.csv; with "scaling" in it, NAME_scaling.csv and, where gnuplot is
installed, NAME_scaling.png); with --rerun, both runs' speed-ups and their difference (what
examples/compare_benchmark_runs.py prints). training reads the printed output of train_mlm or
train_causal_lm; pretrain_grid the run folder of examples/pretrain_grid.sh.

--commit defaults to this checkout's `git rev-parse --short HEAD` and --device to this machine's
CPU (/proc/cpuinfo); name them when the run was made elsewhere. Python 3's standard library only.
"""
import argparse
import csv
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in examples/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ceiling_efficiency  # noqa: E402  (examples/ceiling_efficiency.py: ratio / ceiling per round)

RUNS_FIELDS = ["file", "table", "device", "commit", "command", "note", "figure"]
TITLES = {
    "cpu_speed": ("The encoder layer against libtorch 1.13 and PyTorch 2.x, per CPU",
                  "One post-norm encoder layer (d_model 256, 4 heads, ff 1024, ReLU, batch 4), "
                  "forward+backward (forward) in ms per layer call, median over interleaved "
                  "rounds; ratio = the other framework's time / tinyformer's (above 1: "
                  "tinyformer is faster), +- the half-width of its 95% confidence interval. "
                  "ratio / ceiling: the ratio over what a layer whose products ran at the "
                  "[2048]^2 reference product's rate (timed in the same rounds) would reach; "
                  "per round: the same quantity without libtorch in it "
                  "(examples/ceiling_efficiency.py). Full attention has two libtorch rows "
                  "(torch::nn, by hand), given as `torch::nn, by hand`."),
    "table3": ("The Linformer paper's Table 3: Linformer against the Transformer",
               "Speed-up of Linformer over the Transformer, the median of the per-round ratios "
               "+- the half-width of its 95% confidence interval, (memory saved: peak bytes "
               "above the weights, full over Linformer) [the paper's figure, a V100]. "
               "RoBERTa-base's layer shape (d_model 768, 12 heads, ff 3072), batch 1, "
               "Linformer with layerwise sharing; every model and pass is one interleaved set "
               "(benchmark_attention)."),
    "mixed_precision": ("Mixed-precision training: float32 against bfloat16 products",
                        "`train_mlm` with its defaults (a masked-LM encoder with Linformer "
                        "attention, k = 32 mean pooling, 129,476 parameters; batch 32 x 128 bytes, "
                        "4000 steps) on the fortunes corpus, in float32 and with `--precision "
                        "bf16` (bfloat16 products on float32 master weights: "
                        "docs/mixed_precision.md), same seed, one run each; the final validation "
                        "perplexity over the masked bytes, and the throughput."),
    "distributed": ("Data-parallel training: one process against two",
                    "`train_mlm` with a global batch of 16 for 4000 steps, one thread per "
                    "process: one process, and two (`mpirun -np 2 ... --distributed`, 8 sequences "
                    "each). The first 100 steps' losses agree to 8 digits (3.34568243 at step 100 "
                    "in both logs); after that float32's different summation order lets the runs "
                    "drift apart. loss_curves.png plots the two logs, one_process.csv and "
                    "two_processes.csv (`train_mlm --plot loss_curves.png --compare ...`)."),
    "train_causal_lm": ("A causal language model on the fortunes corpus",
                        "`train_causal_lm` with its defaults (2 layers, d_model 96, 4 heads, "
                        "128-byte context, 261,120 parameters; batch 16, 3000 AdamW steps) on one "
                        "thread; the unigram baseline's perplexity is 28.28. "
                        "train_causal_lm.csv is its log (`--log`), train_causal_lm.png its curve "
                        "(`--plot`), output.txt what it printed, its sample included."),
    "pretrain_grid": ("Masked-LM pretraining: full attention against Linformer",
                      "examples/pretrain_grid.sh: the fortunes corpus at n = 128; 2 layers, "
                      "d_model 64, 4 heads, d_ff 256, AdamW lr 3e-3 with warm-up and cosine "
                      "decay; seeds 1 2 3 (initialisation, data order and masks). Perplexity: exp "
                      "of the mean loss over the masked bytes of a fixed validation set at the "
                      "end of each run (the unigram baseline: 28.28). Linear projections use the "
                      "library's recipe (E starts as mean pooling and learns at a tenth of the "
                      "rate, undecayed) except linear-k32-random (N(0, 1/k) start, full rate: the "
                      "paper code's initialisation). pretrain_grid.png: the seed-averaged curves "
                      "of the grid at batch 32 (grid_curves.csv)."),
}


# --- small helpers ------------------------------------------------------------------------------

def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_csv(path, fields, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: cell(row.get(k)) for k in fields})
    print(f"wrote {path}")


def cell(value):
    """A CSV cell: empty for missing; floats to 6 significant digits, or 4 decimals below 10."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) >= 10 else f"{value:.4f}"
    return str(value)


def num(text):
    """A float from a CSV cell, None when empty."""
    return float(text) if text not in (None, "") else None


def ms(value):
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def span(values, digits=2):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def this_commit():
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def this_cpu():
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return "unknown CPU"
    return (f"{fields.get('model name', 'unknown CPU')} (family {fields.get('cpu family', '?')} "
            f"model {fields.get('model', '?')}), {os.cpu_count()} logical CPUs")


def update_runs(out, file, table, args, note="", figure=None):
    """Puts (or replaces) the line of `file` in out/runs.csv, keeping the order of the others."""
    path = os.path.join(out, "runs.csv")
    rows = read_csv(path) if os.path.exists(path) else []
    entry = {"file": file, "table": table, "device": args.device or this_cpu(),
             "commit": args.commit or this_commit(), "command": args.command or "",
             "note": "; ".join(x for x in (note, args.note or "") if x),
             "figure": figure or args.figure or ""}
    for i, row in enumerate(rows):
        if row["file"] == file:
            rows[i] = entry
            break
    else:
        rows.append(entry)
    write_csv(path, RUNS_FIELDS, rows)


# --- cpu_speed: benchmark_libtorch and benchmark_pytorch.sh -----------------------------------

LIBTORCH_FIELDS = [
    "n", "k", "layer", "torch_impl", "libtorch_ms", "libtorch_forward_ms", "tinyformer_ms",
    "tinyformer_forward_ms", "ratio", "ratio_spread", "ratio_forward", "ratio_forward_spread",
    "ceiling", "ratio_over_ceiling", "per_round", "per_round_spread", "per_round_rounds",
    "fewer_than_3_quiet", "rerun_ratio", "rerun_ratio_over_ceiling", "rerun_per_round",
    "rerun_difference"]
PYTORCH_FIELDS = [
    "case", "n", "k", "tinyformer_ms", "tinyformer_forward_ms", "pytorch_ms",
    "pytorch_forward_ms", "ratio", "ratio_forward", "tinyformer_bf16_ms",
    "tinyformer_bf16_forward_ms", "pytorch_bf16_ms", "pytorch_bf16_forward_ms", "ratio_bf16",
    "ratio_bf16_forward", "pytorch_bf16_over_tinyformer_f32"]


def flagged_cases(data):
    """The cases of a probed run where some job or ratio had fewer than 3 quiet times, so that
    its statistics are over every round (the output's `FEWER than 3 quiet times`)."""
    flagged = set()
    for s in data.get("sets", []):
        if "probes" not in s:
            continue
        for entry in s.get("jobs", []) + s.get("ratios", []):
            quiet = entry.get("quiet")
            if isinstance(quiet, list) and sum(quiet) < 3:
                flagged.add(f"n={s['n']} {s['layer']}")
    return flagged


def libtorch_rows(data):
    # A run from before the core probe has no "quiet" lists: every round counted.
    for s in data.get("sets", []):
        for job in s.get("jobs", []):
            job.setdefault("quiet", [True] * len(job["ms"]))
    per_round = {case: (med, ci, count)
                 for case, med, ci, count, _ in ceiling_efficiency.efficiencies(data)}
    flagged = flagged_cases(data)
    rows = []
    for r in data["results"]:
        case = f"n={r['n']} {r['layer']}"
        pr = per_round.get(case, (None, None, None))
        rows.append({
            "n": r["n"], "k": r["k"] if r["k"] is not None else "",
            "layer": "full" if r["k"] is None else "linformer", "torch_impl": r["torch_impl"],
            "libtorch_ms": r["torch"]["train_ms"], "libtorch_forward_ms": r["torch"]["forward_ms"],
            "tinyformer_ms": r["tinyformer"]["train_ms"],
            "tinyformer_forward_ms": r["tinyformer"]["forward_ms"],
            "ratio": r["ratio_train"], "ratio_spread": r["ratio_train_spread"],
            "ratio_forward": r["ratio_forward"],
            "ratio_forward_spread": r["ratio_forward_spread"], "ceiling": r["ceiling"],
            "ratio_over_ceiling": r["ratio_train"] / r["ceiling"],
            "per_round": pr[0], "per_round_spread": pr[1], "per_round_rounds": pr[2],
            "fewer_than_3_quiet": "yes" if case in flagged else "no"})
    return rows


def pytorch_rows(data):
    rows = []
    for r in data["results"]:
        rows.append({
            "case": r["name"], "n": r["n"], "k": r["k"] if r["k"] is not None else "",
            "tinyformer_ms": r["tinyformer_train_ms"],
            "tinyformer_forward_ms": r["tinyformer_forward_ms"],
            "pytorch_ms": r["float32_train_ms"], "pytorch_forward_ms": r["float32_forward_ms"],
            "ratio": r["ratio_float32_train_ms"], "ratio_forward": r["ratio_float32_forward_ms"],
            "tinyformer_bf16_ms": r.get("tinyformer_bf16_train_ms"),
            "tinyformer_bf16_forward_ms": r.get("tinyformer_bf16_forward_ms"),
            "pytorch_bf16_ms": r["bf16_autocast_train_ms"],
            "pytorch_bf16_forward_ms": r["bf16_autocast_forward_ms"],
            "ratio_bf16": r.get("ratio_bf16_vs_bf16_train_ms"),
            "ratio_bf16_forward": r.get("ratio_bf16_vs_bf16_forward_ms"),
            "pytorch_bf16_over_tinyformer_f32": r["ratio_bf16_autocast_train_ms"]})
    return rows


def cpu_speed(args):
    data = load_json(args.input[0])
    if "torch_version" in data:  # examples/benchmark_pytorch.sh's summary.json
        table, fields, rows = "pytorch", PYTORCH_FIELDS, pytorch_rows(data)
        note = f"PyTorch {data['torch_version']}, {data['rounds']} rounds"
    elif data.get("program") == "benchmark_libtorch":
        table = "bf16" if data["config"].get("tinyformer_bf16_products") else "float32"
        fields, rows = LIBTORCH_FIELDS, libtorch_rows(data)
        note = f"libtorch {data.get('environment', {}).get('libtorch_version', '1.13')}"
        if args.rerun:
            rerun = {(r["n"], r["k"], r["torch_impl"]): r for r in libtorch_rows(
                load_json(args.rerun))}
            for row in rows:
                other = rerun.get((row["n"], row["k"], row["torch_impl"]))
                if other:
                    row["rerun_ratio"] = other["ratio"]
                    row["rerun_ratio_over_ceiling"] = other["ratio_over_ceiling"]
                    row["rerun_per_round"] = other["per_round"]
                    row["rerun_difference"] = other["ratio"] / row["ratio"] - 1
            note += "; rerun: the same command right after"
    else:
        sys.exit(f"summarize_results: {args.input[0]} is neither benchmark_libtorch's JSON nor "
                 "benchmark_pytorch.sh's summary.json")
    file = f"{args.name}_{table}.csv"
    write_csv(os.path.join(args.out, file), fields, rows)
    update_runs(args.out, file, table, args, note)


def group_layers(rows):
    """Rows of one (n, layer) case: full attention's two libtorch rows become one."""
    cases = {}
    for row in rows:
        cases.setdefault((int(row["n"]), row["k"]), []).append(row)
    return sorted(cases.items(), key=lambda kv: (kv[0][0], kv[0][1] != "", int(kv[0][1] or 0)))


def joined(rows, key, digits=2, percent_key=None):
    parts = []
    for row in rows:
        value = num(row.get(key))
        if value is None:
            continue
        text = f"{value:.{digits}f}"
        if percent_key and num(row.get(percent_key)) is not None:
            text += f" +-{100 * num(row[percent_key]):.0f}%"
        parts.append(text)
    return ", ".join(parts) or "-"


def render_libtorch(rows, bf16):
    def layer(n_k):
        return "full" if n_k[1] == "" else f"Linformer k={n_k[1]}"

    has_rerun = any(row.get("rerun_ratio") for row in rows)
    lines = []
    if bf16:
        head = ("| n | layer | libtorch float32 ms | tinyformer mixed bf16 ms | ratio | forward "
                "ratio | ceiling |" + (" rerun: ratio |" if has_rerun else ""))
        lines += [head, "|" + "---|" * (head.count("|") - 1)]
    else:
        head = ("| n | layer | libtorch ms | tinyformer ms | ratio | ratio / ceiling | per round |"
                + (" rerun: ratio | ratio / ceiling | per round |" if has_rerun else ""))
        lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for n_k, group in group_layers(rows):
        first = group[0]
        times = (f"{ms(num(first['libtorch_ms']))} ({ms(num(first['libtorch_forward_ms']))})",
                 f"{ms(num(first['tinyformer_ms']))} ({ms(num(first['tinyformer_forward_ms']))})")
        flag = " (flagged)" if any(r["fewer_than_3_quiet"] == "yes" for r in group) else ""
        if bf16:
            lines.append(f"| {n_k[0]} | {layer(n_k)} | {times[0]} | {times[1]} | "
                         f"{joined(group, 'ratio', 2, 'ratio_spread')}{flag} | "
                         f"{joined(group, 'ratio_forward')} | {joined(group, 'ceiling')} |" +
                         (f" {joined(group, 'rerun_ratio')} |" if has_rerun else ""))
        else:
            line = (f"| {n_k[0]} | {layer(n_k)} | {times[0]} | {times[1]} | "
                    f"{joined(group, 'ratio', 2, 'ratio_spread')}{flag} | "
                    f"{joined(group, 'ratio_over_ceiling', 3)} | "
                    f"{joined(group[:1], 'per_round', 3)} |")
            if has_rerun:
                line += (f" {joined(group, 'rerun_ratio')} | "
                         f"{joined(group, 'rerun_ratio_over_ceiling', 3)} | "
                         f"{joined(group[:1], 'rerun_per_round', 3)} |")
            lines.append(line)
    ratios = [num(r["ratio"]) for r in rows]
    text = (f"\nForward+backward: {span(ratios)}x libtorch's "
            f"{'float32 ' if bf16 else ''}time")
    if not bf16:
        text += (f"; ratio / ceiling {span([num(r['ratio_over_ceiling']) for r in rows], 3)}, "
                 f"per round {span([num(r['per_round']) for r in rows], 3)}")
    if has_rerun:
        diffs = [abs(num(r["rerun_difference"])) for r in rows if r.get("rerun_difference")]
        within = sum(d <= 0.05 for d in diffs)
        text += f". Rerun: {span([num(r['rerun_ratio']) for r in rows])}x"
        if not bf16:
            text += f", per round {span([num(r['rerun_per_round']) for r in rows], 3)}"
        text += f"; {within} of {len(diffs)} forward+backward ratios within 5% of the first run's"
    text += "."
    if any(r["fewer_than_3_quiet"] == "yes" for r in rows):
        text += (" (flagged): the run's output says `FEWER than 3 quiet times` for that case: "
                 "its statistics count rounds with the threads on distant cores.")
    return lines + [text]


def render_pytorch(rows):
    has_bf16 = any(row.get("tinyformer_bf16_ms") for row in rows)
    def pair(row, a, b):
        return f"{ms(num(row[a]))} ({ms(num(row[b]))})"

    def ratio(row, a, b):
        return f"{num(row[a]):.2f} ({num(row[b]):.2f})"

    if has_bf16:
        lines = ["| case | tinyformer f32 | PyTorch f32 | ratio | tinyformer mixed bf16 | "
                 "PyTorch bf16 autocast | ratio |", "|---|---|---|---|---|---|---|"]
    else:
        lines = ["| case | tinyformer f32 | PyTorch f32 | ratio | PyTorch bf16 autocast | "
                 "PyTorch bf16 / tinyformer f32 |", "|---|---|---|---|---|---|"]
    for row in rows:
        name = f"n {row['n']}, " + (f"k {row['k']}" if row["k"] else "full")
        line = (f"| {name} | {pair(row, 'tinyformer_ms', 'tinyformer_forward_ms')} | "
                f"{pair(row, 'pytorch_ms', 'pytorch_forward_ms')} | "
                f"{ratio(row, 'ratio', 'ratio_forward')} | ")
        if has_bf16:
            line += (f"{pair(row, 'tinyformer_bf16_ms', 'tinyformer_bf16_forward_ms')} | "
                     f"{pair(row, 'pytorch_bf16_ms', 'pytorch_bf16_forward_ms')} | "
                     f"{ratio(row, 'ratio_bf16', 'ratio_bf16_forward')} |")
        else:
            line += (f"{pair(row, 'pytorch_bf16_ms', 'pytorch_bf16_forward_ms')} | "
                     f"{num(row['pytorch_bf16_over_tinyformer_f32']):.2f} |")
        lines.append(line)
    text = ("\nForward+backward: PyTorch float32 / tinyformer "
            f"{span([num(r['ratio']) for r in rows])}")
    if has_bf16:
        text += (f"; PyTorch's bfloat16 autocast / tinyformer's mixed bfloat16 "
                 f"{span([num(r['ratio_bf16']) for r in rows])}")
    return lines + [text + "."]


# --- table3: benchmark_attention -------------------------------------------------------------

# The paper's Table 3 (a V100): speed-up and memory saved, by n then k.
PAPER = {
    512: {128: (1.5, 1.7), 256: (1.3, 1.5)},
    1024: {128: (1.7, 3.0), 256: (1.6, 2.9), 512: (1.3, 1.8)},
    2048: {128: (2.6, 6.1), 256: (2.4, 5.6), 512: (2.1, 3.6), 1024: (1.3, 2.0)},
    4096: {128: (3.4, 14), 256: (3.2, 13), 512: (2.8, 8.3), 1024: (2.2, 4.3), 2048: (1.3, 2.3)},
    8192: {128: (5.5, 28), 256: (5.0, 26), 512: (4.4, 17), 1024: (3.5, 8.5), 2048: (2.1, 4.5)},
    16384: {128: (8.6, 56), 256: (7.8, 48), 512: (7.0, 32), 1024: (5.6, 16), 2048: (3.3, 8)},
    32768: {128: (13, 56), 256: (12, 48), 512: (11, 36), 1024: (8.8, 18), 2048: (5.0, 16)},
    65536: {128: (20, 60), 256: (18, 52), 512: (16, 40), 1024: (14, 20), 2048: (7.9, 18)},
}
TABLE3_FIELDS = [
    "n", "k", "inference_speedup", "inference_spread", "memory_saved", "training_speedup",
    "training_spread", "training_memory_saved", "full_forward_ms", "linformer_forward_ms",
    "full_forward_mb", "linformer_forward_mb", "full_train_ms", "linformer_train_ms",
    "paper_speedup", "paper_memory_saved", "rerun_inference_speedup", "rerun_training_speedup",
    "rerun_inference_difference", "rerun_training_difference", "note"]
SCALING_FIELDS = ["n", "full_ms", "linformer_ms", "full_mb", "linformer_mb"]


def ratio_of(a, b):
    return a / b if a and b else None


def table3_rows(data):
    full = {r["n"]: r for r in data["results"] if r["k"] is None}
    rows = []
    for r in data["results"]:
        if r["k"] is None:
            continue
        f = full.get(r["n"], {})
        paper = PAPER.get(r["n"], {}).get(r["k"], (None, None))
        note = ""
        if r.get("out_of_memory"):
            note = "out of memory"
        elif f.get("out_of_memory"):
            note = "full: out of memory"
        rows.append({
            "n": r["n"], "k": r["k"], "inference_speedup": r.get("inference_speedup"),
            "inference_spread": r.get("inference_speedup_spread"),
            "memory_saved": ratio_of(f.get("forward_peak_mb"), r.get("forward_peak_mb")),
            "training_speedup": r.get("training_speedup"),
            "training_spread": r.get("training_speedup_spread"),
            "training_memory_saved": ratio_of(f.get("train_peak_mb"), r.get("train_peak_mb"))
            if r.get("training_speedup") else None,
            "full_forward_ms": f.get("forward_ms"), "linformer_forward_ms": r.get("forward_ms"),
            "full_forward_mb": f.get("forward_peak_mb"),
            "linformer_forward_mb": r.get("forward_peak_mb"),
            "full_train_ms": f.get("train_ms"), "linformer_train_ms": r.get("train_ms"),
            "paper_speedup": paper[0], "paper_memory_saved": paper[1], "note": note})
    return rows


def table3(args):
    data = load_json(args.input[0])
    if data.get("program") != "benchmark_attention":
        sys.exit(f"summarize_results: {args.input[0]} is not benchmark_attention's JSON")
    timing = data.get("timing", {})
    note = (f"{data['layers']} layer{'s' if data['layers'] > 1 else ''}, d_model "
            f"{data['d_model']}, batch {data['batch']}; {timing.get('rounds', '?')} rounds in "
            f"{timing.get('seconds', 0):.0f} s")
    scaling = data.get("scaling") or {}
    if scaling and "n" in scaling:
        file = f"{args.name}_scaling.csv"
        write_csv(os.path.join(args.out, file), SCALING_FIELDS,
                  [{"n": int(n), "full_ms": a, "linformer_ms": b, "full_mb": c, "linformer_mb": d}
                   for n, a, b, c, d in zip(scaling["n"], scaling["full_ms"],
                                            scaling["linformer_ms"], scaling["full_mb"],
                                            scaling["linformer_mb"])])
        e = scaling["exponents"]
        update_runs(args.out, file, "scaling", args,
                    f"forward at k = {scaling['k']}; fitted exponent over the upper half of n: "
                    f"time full {e['time_full']:.2f}, Linformer {e['time_linformer']:.2f}; "
                    f"memory full {e['memory_full']:.2f}, Linformer {e['memory_linformer']:.2f}",
                    figure=plot_scaling(os.path.join(args.out, file), scaling["k"]))
    if args.scaling_only:
        return
    rows = table3_rows(data)
    if args.rerun:
        rerun = {(r["n"], r["k"]): r for r in table3_rows(load_json(args.rerun))}
        for row in rows:
            other = rerun.get((row["n"], row["k"]), {})
            for what in ("inference", "training"):
                a, b = row.get(f"{what}_speedup"), other.get(f"{what}_speedup")
                row[f"rerun_{what}_speedup"] = b
                row[f"rerun_{what}_difference"] = b / a - 1 if a and b else None
        note += "; rerun: the same command right after"
    file = f"{args.name}.csv"
    write_csv(os.path.join(args.out, file), TABLE3_FIELDS, rows)
    update_runs(args.out, file, "table3", args, note)


def plot_scaling(csv_path, k):
    """The scaling view as benchmark_attention draws it, where gnuplot is installed."""
    if shutil.which("gnuplot") is None:
        print("gnuplot not found: no scaling plot")
        return None
    png = csv_path[:-4] + ".png"
    script = (f"set terminal pngcairo size 800,340; set output '{png}'; set datafile separator ',';"
              "set multiplot layout 1,2; set logscale xy; set key left top; set xlabel 'n';"
              f"set ylabel 'forward ms'; plot '{csv_path}' every ::1 u 1:2 w lp t 'full', "
              f"'' every ::1 u 1:3 w lp t 'Linformer k={k}';"
              f"set ylabel 'peak MB'; plot '{csv_path}' every ::1 u 1:4 w lp t 'full', "
              "'' every ::1 u 1:5 w lp t 'Linformer'; unset multiplot")
    subprocess.run(["gnuplot", "-e", script], check=False)
    if not os.path.exists(png):
        return None
    print(f"wrote {png}")
    return os.path.basename(png)


def speedup_text(value):
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def saved_text(value):
    return f"{value:.1f}x" if value < 10 else f"{value:.0f}x"


def render_table3(rows, what):
    key, spread = f"{what}_speedup", f"{what}_spread"
    memory = "memory_saved" if what == "inference" else "training_memory_saved"
    ns = sorted({int(r["n"]) for r in rows})
    ks = sorted({int(r["k"]) for r in rows})
    at = {(int(r["n"]), int(r["k"])): r for r in rows}
    lines = ["| n \\ k | " + " | ".join(str(k) for k in ks) + " |",
             "|---|" + "---|" * len(ks)]
    for n in ns:
        cells = []
        for k in ks:
            r = at.get((n, k))
            if r is None:
                cells.append("-")
            elif num(r[key]) is None:
                if what == "inference":
                    cells.append(r["note"] or "-")
                elif num(r["linformer_train_ms"]) is not None and num(r["full_train_ms"]) is None:
                    cells.append("full: out of memory")
                else:
                    cells.append("-")
            else:
                text = speedup_text(num(r[key]))
                if num(r[spread]) is not None:
                    text += f" +-{100 * num(r[spread]):.0f}%"
                if num(r[memory]) is not None:
                    text += f" ({saved_text(num(r[memory]))})"
                if what == "inference" and num(r["paper_speedup"]) is not None:
                    text += f" [{num(r['paper_speedup']):.1f}x ({num(r['paper_memory_saved']):g}x)]"
                cells.append(text)
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def render_reproducibility(rows):
    diffs = [(abs(num(r[f"rerun_{what}_difference"])), f"n = {r['n']}, k = {r['k']} {what}")
             for r in rows for what in ("inference", "training")
             if num(r.get(f"rerun_{what}_difference")) is not None]
    if not diffs:
        return []
    largest = max(diffs)
    if largest[0] <= 0.05:
        return [f"Rerun: all {len(diffs)} speed-ups within {100 * largest[0]:.1f}% of the first "
                f"run's (largest: {largest[1]})."]
    return [f"Rerun: {sum(d <= 0.05 for d, _ in diffs)} of {len(diffs)} speed-ups within 5% of "
            f"the first run's (largest difference {100 * largest[0]:.1f}%: {largest[1]})."]


# --- training: train_mlm / train_causal_lm output ------------------------------------------------

TRAINING_FIELDS = ["run", "model", "precision", "processes", "steps", "batch",
                   "final_perplexity", "unigram_perplexity", "tokens_per_s", "seconds"]


def training_row(label, path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()

    def find(pattern):
        return (re.search(pattern, text, re.M) or [None, None])[1]

    model = find(r"^model: (.*)$") or ""
    row = {"run": label, "model": model.split(",")[0],
           "precision": "bf16" if "mixed precision" in model else "float32",
           "processes": find(r"^distributed: (\d+) processes") or 1,
           "final_perplexity": find(r"^final validation perplexity ([0-9.]+)"),
           "unigram_perplexity": find(r"unigram baseline perplexity ([0-9.]+)")}
    m = re.search(r"^throughput: (\d+) tokens/s .*\((\d+) steps of (\d+)x\d+ tokens in "
                  r"([0-9.]+) s", text, re.M)
    if m:  # train_mlm
        row.update(tokens_per_s=int(m[1]), steps=int(m[2]), batch=int(m[3]), seconds=float(m[4]))
    m = re.search(r"^training: (\d+) steps in ([0-9.]+) s \((\d+) tokens/s\)", text, re.M)
    if m:  # train_causal_lm
        row.update(steps=int(m[1]), seconds=float(m[2]), tokens_per_s=int(m[3]))
    return row


def training(args):
    labels = args.labels or [os.path.splitext(os.path.basename(p))[0] for p in args.input]
    if len(labels) != len(args.input):
        sys.exit("summarize_results: give one --labels entry per output file")
    file = f"{args.name}.csv"
    write_csv(os.path.join(args.out, file), TRAINING_FIELDS,
              [training_row(label, path) for label, path in zip(labels, args.input)])
    update_runs(args.out, file, "training", args)


def render_training(rows):
    lines = ["| run | precision | processes | steps x batch | final validation perplexity | "
             "tokens/s | seconds |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        batch = f"{r['steps']} x {r['batch']}" if r["batch"] else r["steps"]
        lines.append(f"| {r['run']} | {r['precision']} | {r['processes']} | {batch} | "
                     f"{r['final_perplexity']} | {r['tokens_per_s']} | {r['seconds']} |")
    return lines


# --- pretrain_grid: examples/pretrain_grid.sh's runs ---------------------------------------------

GRID_ORDER = ["full", "linear-k16", "linear-k32", "linear-k64", "linear-k128", "linear-k32-none",
              "linear-k64-none", "linear-k32-layerwise", "linear-k32-random", "mean-k16",
              "mean-k32", "mean-k64"]
GRID_FIELDS = ["cell", "attention", "k", "projection", "sharing", "parameters", "seeds",
               "perplexity_mean", "perplexity_sd", "perplexity_min", "perplexity_max", "ratio",
               "perplexity_per_seed", "tokens_per_s", "seconds"]


def pretrain_grid(args):
    runs = args.input[0]
    outputs = {}
    for name in sorted(os.listdir(runs)):
        m = re.fullmatch(r"(.+)-s(\d+)\.txt", name)
        if m:
            outputs.setdefault(m[1], []).append(os.path.join(runs, name))
    order = sorted(outputs, key=lambda c: (GRID_ORDER.index(c) if c in GRID_ORDER else 99, c))
    rows, curves = [], []
    for name in order:
        ppl, rate, seconds, model = [], [], [], ""
        for path in outputs[name]:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            final = re.search(r"^final validation perplexity ([0-9.]+)", text, re.M)
            if not final:
                continue  # a run that has not finished
            ppl.append(float(final[1]))
            model = re.search(r"^model: (.*)$", text, re.M)[1]
            m = re.search(r"^throughput: (\d+) tokens", text, re.M)
            rate += [int(m[1])] if m else []
            m = re.search(r"^seconds (\d+)", text, re.M)
            seconds += [int(m[1])] if m else []
        if not ppl:
            continue
        linformer = re.search(r"Linformer k=([0-9,]+) \(([a-z_-]+) projection(?:, ([a-z_-]+) "
                              r"sharing)?", model)
        rows.append({
            "cell": name, "attention": "Linformer" if linformer else "full",
            "k": linformer[1] if linformer else "", "projection": linformer[2] if linformer else "",
            "sharing": (linformer[3] or "") if linformer else "",
            "parameters": re.search(r"(\d+) parameters", model)[1], "seeds": len(ppl),
            "perplexity_mean": statistics.mean(ppl),
            "perplexity_sd": statistics.stdev(ppl) if len(ppl) > 1 else 0.0,
            "perplexity_min": min(ppl), "perplexity_max": max(ppl),
            "perplexity_per_seed": " ".join(f"{p:.3f}" for p in ppl),
            "tokens_per_s": round(statistics.mean(rate)) if rate else None,
            "seconds": round(statistics.mean(seconds)) if seconds else None})
        mean_csv = os.path.join(runs, f"{name}.mean.csv")
        if os.path.exists(mean_csv):
            curves += [{"cell": name, **r} for r in read_csv(mean_csv)]
    full = next((r["perplexity_mean"] for r in rows if r["cell"] == "full"), None)
    for r in rows:
        r["ratio"] = r["perplexity_mean"] / full if full else None
    file = f"{args.name}.csv"
    write_csv(os.path.join(args.out, file), GRID_FIELDS, rows)
    if curves and not args.no_curves:
        write_csv(os.path.join(args.out, f"{args.name}_curves.csv"),
                  ["cell", "step", "loss", "val_ppl"], curves)
    update_runs(args.out, file, "pretrain_grid", args)


def render_grid(rows):
    lines = ["| cell | k | projection | sharing | parameters | seeds | perplexity mean ± sd | "
             "per seed | over full attention's |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{num(r['ratio']):.2f}" if r["ratio"] else "-"
        lines.append(f"| {r['cell']} | {r['k'] or '-'} | {r['projection'] or '-'} | "
                     f"{r['sharing'] or '-'} | {r['parameters']} | {r['seeds']} | "
                     f"{num(r['perplexity_mean']):.2f} ± {num(r['perplexity_sd']):.2f} | "
                     f"{r['perplexity_per_seed'].replace(' ', ', ')} | {ratio} |")
    return lines


# --- summary.md ---------------------------------------------------------------------------------

TABLE_HEADINGS = {
    "float32": "float32 against libtorch 1.13",
    "bf16": "mixed bfloat16 (`--bf16`) against libtorch 1.13's float32",
    "pytorch": "against PyTorch 2.x (float32, and bfloat16 autocast)",
    "table3": "inference and training speed-ups",
    "scaling": "forward time and peak memory against n",
    "training": "training runs",
    "pretrain_grid": "final validation perplexity per cell",
}


def render(out):
    """summary.md of the folder, from runs.csv and the CSVs it lists."""
    runs = read_csv(os.path.join(out, "runs.csv"))
    topic = os.path.basename(os.path.normpath(out))
    title, intro = TITLES.get(topic, (topic.replace("_", " ").capitalize(), ""))
    lines = [f"# {title}", ""]
    if intro:
        lines += [intro, ""]
    lines += ["Written by examples/summarize_results.py from the runs' raw output (not kept: git "
              "history has it); each table's numbers are in the CSV named with it.", ""]
    devices = []
    for run in runs:
        if run["device"] not in devices:
            devices.append(run["device"])
    for device in devices:
        lines += [f"## {device}", ""]
        for run in (r for r in runs if r["device"] == device):
            rows = read_csv(os.path.join(out, run["file"]))
            heading = TABLE_HEADINGS.get(run["table"], run["table"])
            lines += [f"### {heading} ({run['file']})", "",
                      f"Commit {run['commit']}; `{run['command']}`" +
                      (f"; {run['note']}" if run["note"] else "") + ".", ""]
            if run["table"] in ("float32", "bf16"):
                lines += render_libtorch(rows, run["table"] == "bf16")
            elif run["table"] == "pytorch":
                lines += render_pytorch(rows)
            elif run["table"] == "table3":
                lines += ["Inference:", ""] + render_table3(rows, "inference")
                if any(num(r["training_speedup"]) is not None for r in rows):
                    lines += ["", "Training (forward+backward; the paper gives none):", ""]
                    lines += render_table3(rows, "training")
                repro = render_reproducibility(rows)
                lines += [""] + repro if repro else []
            elif run["table"] == "scaling":
                lines += ["| n | full ms | Linformer ms | full MB | Linformer MB |",
                          "|---|---|---|---|---|"]
                lines += [f"| {r['n']} | {ms(num(r['full_ms']))} | {ms(num(r['linformer_ms']))} | "
                          f"{num(r['full_mb']):.1f} | {num(r['linformer_mb']):.1f} |" for r in rows]
            elif run["table"] == "training":
                lines += render_training(rows)
            elif run["table"] == "pretrain_grid":
                lines += render_grid(rows)
            if run.get("figure") and os.path.exists(os.path.join(out, run["figure"])):
                lines += ["", f"![{run['file'][:-4]}]({run['figure']})"]
            lines.append("")
    path = os.path.join(out, "summary.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines).rstrip() + "\n")
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("topic", choices=["cpu_speed", "table3", "training", "pretrain_grid",
                                          "render"])
    parser.add_argument("input", nargs="*", help="the run's raw output (JSON, text, or the "
                        "pretrain_grid run folder)")
    parser.add_argument("--out", required=True, help="the topic's folder, e.g. results/table3")
    parser.add_argument("--name", help="the device's or run's short name: the CSV's name")
    parser.add_argument("--rerun", help="a second run with the same command (cpu_speed, table3)")
    parser.add_argument("--device", help="the CPU or GPU, with family and model (default: this "
                        "machine's CPU)")
    parser.add_argument("--commit", help="the commit measured (default: this checkout's HEAD)")
    parser.add_argument("--command", help="the command that produced the run")
    parser.add_argument("--note", help="a sentence for the table's line in summary.md")
    parser.add_argument("--figure", help="a PNG in the topic's folder to show under the table")
    parser.add_argument("--labels", nargs="*", help="training: one label per output file")
    parser.add_argument("--no-curves", action="store_true",
                        help="pretrain_grid: leave out the seed-averaged curves (NAME_curves.csv)")
    parser.add_argument("--scaling-only", action="store_true",
                        help="table3: only the scaling view of a run that has one")
    args = parser.parse_args()
    if args.topic != "render":
        if not args.input or not args.name:
            parser.error(f"{args.topic} needs the run's output and --name")
        os.makedirs(args.out, exist_ok=True)
        {"cpu_speed": cpu_speed, "table3": table3, "training": training,
         "pretrain_grid": pretrain_grid}[args.topic](args)
    render(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
