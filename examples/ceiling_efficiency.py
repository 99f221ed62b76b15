#!/usr/bin/env python3
"""tinyformer's layer time against the ceiling, measured within each round, from the JSON of a
benchmark_libtorch run (--json): for every case, the time its matrix products alone would take at
the reference product's rate in that round, over tinyformer's forward+backward time in the same
round. It is the table's ratio / ceiling without libtorch in it: ratio / ceiling is
(torch / tinyformer) / (torch / product) x scale, two medians whose libtorch times do not cancel
round by round, so a case where libtorch's times spread (its threads moved between cores) moves
it while tinyformer's times stay put; here the one quantity is taken per round and its median
reported, with the half-width of the median's 95% confidence interval as the benchmark reports it.

The rounds counted are those in which both jobs (tinyformer's forward+backward and the reference
product) had quiet probes around them, as the program counts them; with fewer than 3 such rounds,
every round, and the line says so.

    examples/ceiling_efficiency.py run.json [more.json ...]

Python 3's standard library only.
"""
import json
import math
import sys


def median(values):
    s = sorted(values)
    m = len(s)
    return s[m // 2] if m % 2 else 0.5 * (s[m // 2 - 1] + s[m // 2])


def median_ci_halfwidth(values):
    """The half-width of the distribution-free 95% confidence interval of the median, over the
    median (examples/bench_timing.h's median_ci_halfwidth)."""
    s = sorted(values)
    m = len(s)
    if m < 2:
        return float("nan")
    lo = max(1, math.floor(m / 2 - 0.98 * math.sqrt(m)))
    hi = min(m, math.ceil(1 + m / 2 + 0.98 * math.sqrt(m)))
    return (s[hi - 1] - s[lo - 1]) / 2 / median(s)


def efficiencies(data):
    if data.get("program") != "benchmark_libtorch":
        raise ValueError("expected the JSON of benchmark_libtorch")
    peak_gflop = 2.0 * data["config"]["peak_size"] ** 3 / 1e9
    results = data["results"]
    rows = []
    for s in data["sets"]:
        jobs = {j["name"]: j for j in s["jobs"]}
        train = next((name for name in jobs if name.endswith(": tinyformer forward+backward")),
                     None)
        product = next((name for name in jobs if name.endswith("] product")), None)
        if train is None or product is None:
            continue  # a --forward-only run has no forward+backward job
        case = train.split(":")[0]
        result = next(r for r in results if case == f"n={r['n']} {r['layer']}")
        t, p = jobs[train], jobs[product]
        rounds = range(min(len(t["ms"]), len(p["ms"])))
        quiet = [i for i in rounds if t["quiet"][i] and p["quiet"][i]]
        counted = quiet if len(quiet) >= 3 else list(rounds)
        # The products' time at the round's reference rate: product_ms x flops / reference flops.
        values = [p["ms"][i] * result["product_gflop"] / peak_gflop / t["ms"][i] for i in counted]
        rows.append((case, median(values), median_ci_halfwidth(values), len(counted),
                     len(quiet) < 3))
    return rows


def main(paths):
    if not paths:
        print("usage: examples/ceiling_efficiency.py run.json [more.json ...]", file=sys.stderr)
        return 2
    for path in paths:
        try:
            with open(path) as f:
                rows = efficiencies(json.load(f))
        except (OSError, ValueError, KeyError, StopIteration) as e:
            print(f"ceiling_efficiency: cannot read {path}: {e}", file=sys.stderr)
            return 2
        print(f"{path}: ceiling time / tinyformer time, forward+backward, per round")
        print(f"{'case':26s} {'median':>8s} {'+-':>7s}  rounds")
        for case, med, ci, count, all_rounds in rows:
            note = " (every round: fewer than 3 quiet)" if all_rounds else ""
            print(f"{case:26s} {med:8.3f} {100 * ci:6.1f}%  {count}{note}")
        print(f"lowest: {min(r[1] for r in rows):.3f}" if rows else "no forward+backward case")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
