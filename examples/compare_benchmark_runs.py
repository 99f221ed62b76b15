#!/usr/bin/env python3
"""Compares the ratios of two runs of the same benchmark program (benchmark_libtorch or
benchmark_attention): per cell, both ratios, their relative difference and, for scale, each run's
spread (the half-width of the 95% confidence interval of its median); then the largest
difference. Exits 1 when any difference exceeds --threshold (default 5%), 2 on bad input.

    examples/compare_benchmark_runs.py first.json second.json [--threshold 0.05]

Both programs write the cells under "ratios": [{"name", "median", "spread"}, ...]; from an older
file without that list the ratios are derived from its "results". Python 3's standard library
only.
"""
import argparse
import json
import math
import sys


def fail(message):
    print(f"compare_benchmark_runs: {message}", file=sys.stderr)
    sys.exit(2)


def derive_ratios(data):
    """The same cells from a file written before the programs listed their ratios (no spreads)."""
    ratios = []
    results = data["results"]
    if results and "torch_impl" in results[0]:
        for r in results:
            cell = f"n={r['n']} {r['layer']} {r['torch_impl']}"
            for key, what in (("ratio_train", "forward+backward"), ("ratio_forward", "forward")):
                if r.get(key) is not None:
                    ratios.append({"name": f"{cell} {what}", "median": r[key]})
        return {"program": "benchmark_libtorch", "ratios": ratios}
    full = {r["n"]: r for r in results if r.get("k") is None}
    for r in results:
        f = full.get(r["n"])
        if r.get("k") is None or f is None:
            continue
        cell = f"n={r['n']} k={r['k']}"
        for key, what in (("forward_ms", "inference"), ("train_ms", "training")):
            if r.get(key) and f.get(key):
                ratios.append({"name": f"{cell} {what} speed-up", "median": f[key] / r[key]})
    return {"program": "benchmark_attention", "ratios": ratios}


def load_ratios(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"cannot read {path}: {e}")
    if isinstance(data, dict) and "ratios" not in data and isinstance(data.get("results"), list):
        data = derive_ratios(data)
    if not isinstance(data, dict) or not isinstance(data.get("ratios"), list):
        fail(f"{path} has no \"ratios\" list (is it the JSON output "
             "of benchmark_libtorch or benchmark_attention?)")
    cells = {}
    for entry in data["ratios"]:
        name, median = entry.get("name"), entry.get("median")
        if not isinstance(name, str):
            fail(f"{path}: a ratio without a name: {entry}")
        cells[name] = (median, entry.get("spread"))
    return data.get("program", "?"), cells


def percent(value):
    return "n/a" if value is None or not math.isfinite(value) else f"{100 * value:.1f}%"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--threshold", type=float, default=0.05,
                        help="largest relative difference allowed (default 0.05)")
    args = parser.parse_args()

    program_a, a = load_ratios(args.first)
    program_b, b = load_ratios(args.second)
    if program_a != program_b:
        fail(f"the files come from different programs ({program_a}, {program_b})")
    common = [name for name in a if name in b]
    if not common:
        fail("the two files share no cell")

    width = max(len(name) for name in common)
    print(f"{'cell':<{width}}  {'first':>8} {'+-':>6}  {'second':>8} {'+-':>6}  {'difference':>10}")
    largest, largest_name, exceeded = 0.0, None, 0
    for name in common:
        (ra, sa), (rb, sb) = a[name], b[name]
        if not isinstance(ra, (int, float)) or not isinstance(rb, (int, float)) or ra == 0:
            print(f"{name:<{width}}  {'-':>8} {'':>6}  {'-':>8} {'':>6}  {'n/a':>10}")
            continue
        diff = rb / ra - 1
        flag = ""
        if abs(diff) > args.threshold:
            exceeded += 1
            flag = "  EXCEEDS"
        if abs(diff) >= largest:
            largest, largest_name = abs(diff), name
        print(f"{name:<{width}}  {ra:8.3f} {percent(sa):>6}  {rb:8.3f} {percent(sb):>6}  "
              f"{100 * diff:+9.1f}%{flag}")
    for name in sorted(set(a) ^ set(b)):
        print(f"{name}: only in {'the first' if name in a else 'the second'} file")
    print(f"largest difference: {100 * largest:.1f}% ({largest_name}); threshold "
          f"{100 * args.threshold:.1f}%: {exceeded} of {len(common)} cells exceed it")
    return 1 if exceeded else 0


if __name__ == "__main__":
    sys.exit(main())
