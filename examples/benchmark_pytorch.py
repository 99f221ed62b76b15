#!/usr/bin/env python3
"""PyTorch 2.x on the encoder layers benchmark_libtorch exports: the same check, then times.

Reads the cases `benchmark_libtorch --export DIR` wrote (DIR/cases.json and one safetensors
file per case), rebuilds each layer in plain torch ops with torch's scaled_dot_product_attention
for the attention (the post-norm layer of HandLayer in benchmark_libtorch.cpp:
h = LN(x + Attn(x)), y = LN(h + FF(h)), ReLU, dropout 0; Linformer with one E [k, n] shared by
keys, values and heads), loads tinyformer's weights and checks that it
computes tinyformer's output and gradients. Then, unless --check-only, it times forward
(inference_mode) and forward+backward (the input requires grad, loss sum(y * r)) in float32 and
under bfloat16 autocast, taking turns, and writes JSON (--json; by default
DIR/benchmark_pytorch.json, beside the cases).

    python benchmark_pytorch.py --cases DIR [--threads 2] [--reps 5] [--json out.json]
    python benchmark_pytorch.py --cases DIR --check-only     # exits 1 on disagreement

Float32 exports: the output must agree to --rtol (1e-4, relative to the largest value, as in
benchmark_libtorch); gradients are held to --grad-rtol, looser, because ReLU's derivative jumps
at 0 and a pre-activation within rounding of zero lands on different sides in the two
frameworks. Float64 exports (--export-float64): everything to --rtol64.
"""
import argparse
import json
import os
import sys
import time

try:
    import torch
    from safetensors.torch import load_file
except ImportError as error:  # the exit code tells ctest to skip
    print(f"benchmark_pytorch.py: PyTorch is not available here ({error}); "
          "examples/setup_pytorch_venv.sh installs it in a virtual environment",
          file=sys.stderr)
    sys.exit(77)


class HandLayer(torch.nn.Module):
    """The post-norm encoder layer of benchmark_libtorch's HandLayer, parameter by parameter."""

    # The parts of the layer under the names of benchmark_libtorch's ties.
    ROLES = ["q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias", "v_proj.weight",
             "v_proj.bias", "out_proj.weight", "out_proj.bias", "fc1.weight", "fc1.bias",
             "fc2.weight", "fc2.bias", "norm1.weight", "norm1.bias", "norm2.weight",
             "norm2.bias"]

    def __init__(self, heads, eps, tensors):
        super().__init__()
        self.heads, self.eps = heads, eps
        self.p = torch.nn.ParameterDict(
            {role.replace(".", "_"): torch.nn.Parameter(t.clone()) for role, t in tensors.items()})

    def param(self, role):
        return self.p[role.replace(".", "_")]

    def forward(self, x):  # x: [B, n, d] -> [B, n, d]
        p = self.param
        b, n, d = x.shape
        dh = d // self.heads
        query = torch.nn.functional.linear(x, p("q_proj.weight"), p("q_proj.bias"))
        key = torch.nn.functional.linear(x, p("k_proj.weight"), p("k_proj.bias"))
        value = torch.nn.functional.linear(x, p("v_proj.weight"), p("v_proj.bias"))
        rows = n
        if "projection_E" in self.p:
            # E is shared by the heads: applied once, before they are split (E (X W_K)).
            e = p("projection.E")
            key = torch.matmul(e, key)  # [B, k, d]
            value = torch.matmul(e, value)
            rows = e.shape[0]

        def split(t, r):
            return t.view(b, r, self.heads, dh).transpose(1, 2)  # [B, H, r, dh]

        # PyTorch's fused attention (its flash or memory-efficient kernel where the case allows),
        # the same math as softmax(q k^T / sqrt(dh)) v.
        context = torch.nn.functional.scaled_dot_product_attention(
            split(query, n), split(key, rows), split(value, rows))  # [B, H, n, dh]
        attended = torch.nn.functional.linear(context.transpose(1, 2).reshape(b, n, d),
                                              p("out_proj.weight"), p("out_proj.bias"))
        h = torch.nn.functional.layer_norm(x + attended, (d,), p("norm1.weight"),
                                           p("norm1.bias"), self.eps)
        ff = torch.nn.functional.linear(
            torch.relu(torch.nn.functional.linear(h, p("fc1.weight"), p("fc1.bias"))),
            p("fc2.weight"), p("fc2.bias"))
        return torch.nn.functional.layer_norm(h + ff, (d,), p("norm2.weight"), p("norm2.bias"),
                                              self.eps)


def relative_difference(ours, theirs, floor=0.0):
    """The largest absolute difference over the largest magnitude of either side (or floor)."""
    ours, theirs = ours.detach().double(), theirs.detach().double()
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    diff = (ours - theirs).abs().max().item()
    scale = max(floor, ours.abs().max().item(), theirs.abs().max().item())
    return diff / scale if scale > 0 else diff


class Case:
    """One exported case: the layer rebuilt from its file, its input and tinyformer's results."""

    def __init__(self, directory, config, entry):
        self.name, self.n, self.k = entry["name"], entry["n"], entry["k"]
        self.label = "full" if self.k is None else f"Linformer k={self.k}"
        self.file = load_file(os.path.join(directory, entry["file"]))
        # The exported parameter names and the parts of the layer they are.
        self.roles = entry["parameters"]
        tensors = {role: self.file[name] for name, role in self.roles.items()}
        if "projection.E" in tensors:
            k, n = entry["projection"]["shape"]
            tensors["projection.E"] = tensors["projection.E"].reshape(k, n)
        missing = set(HandLayer.ROLES) - set(tensors)
        if missing:
            raise SystemExit(f"benchmark_pytorch.py: {self.name}: no tensor for {sorted(missing)}")
        self.layer = HandLayer(config["heads"], config["layer_norm_eps"], tensors)
        self.x = self.file["x"].clone().requires_grad_()
        self.r = self.file["r"]

    def zero(self):
        self.layer.zero_grad(set_to_none=True)
        self.x.grad = None

    def train(self, autocast=False):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            y = self.layer(self.x)
        (y.float() * self.r).sum().backward()
        return y

    def forward(self, autocast=False):
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16,
                                                    enabled=autocast):
            return self.layer(self.x)

    def check(self, args, perturb=False):
        """Runs forward+backward once and compares with tinyformer's; returns the differences."""
        if perturb:  # proves the check can fail: one weight moved by 1e-2
            with torch.no_grad():
                self.layer.param("fc2.weight")[0, 0] += 1e-2
        self.zero()
        y = self.train()
        out = {"output": relative_difference(self.file["y"], y),
               "input_grad": relative_difference(self.file["grad.x"], self.x.grad)}
        # The key bias's gradient is zero in exact arithmetic, so both sides hold rounding noise:
        # each parameter gradient is compared relative to at least 1% of the largest one.
        grads = {name: self.file["grad." + name] for name in self.roles}
        largest = max(g.abs().max().item() for g in grads.values())
        worst, worst_name = 0.0, ""
        for name, role in self.roles.items():
            theirs = self.layer.param(role).grad.reshape(grads[name].shape)
            d = relative_difference(grads[name], theirs, 0.01 * largest)
            if d >= worst:
                worst, worst_name = d, name
        out["param_grad"], out["worst_param"] = worst, worst_name
        f64 = self.file["y"].dtype == torch.float64
        rtol = args.rtol64 if f64 else args.rtol
        grad_rtol = args.rtol64 if f64 else args.grad_rtol
        ok = out["output"] <= rtol and max(out["input_grad"], worst) <= grad_rtol
        out["agree"] = ok
        print(f"check {self.name:<12} {'float64' if f64 else 'float32'} tinyformer vs PyTorch "
              f"{torch.__version__}: output {out['output']:.1e} (held to {rtol:.0e}), input grad "
              f"{out['input_grad']:.1e}, parameter grads {worst:.1e} ({worst_name}) (held to "
              f"{grad_rtol:.0e}): {'agree' if ok else 'DISAGREE'}", flush=True)
        if not f64 and not args.check_only:
            # bfloat16 autocast against tinyformer's float32 output: reported, not held.
            self.zero()
            out["output_bf16_autocast"] = relative_difference(self.file["y"],
                                                              self.train(autocast=True))
            print(f"      {self.name:<12} bf16 autocast output differs by "
                  f"{out['output_bf16_autocast']:.1e}", flush=True)
        self.zero()
        return out


def time_interleaved(jobs, warmup, reps):
    """Runs every (setup, run) job `warmup` times, then `reps` rounds of one timed run of each;
    returns (median, min) in ms per job."""
    for _ in range(warmup):
        for setup, run in jobs:
            setup()
            run()
    times = [[] for _ in jobs]
    for _ in range(reps):
        for i, (setup, run) in enumerate(jobs):
            setup()
            start = time.perf_counter()
            run()
            times[i].append((time.perf_counter() - start) * 1e3)
    out = []
    for t in times:
        t.sort()
        out.append({"median": t[len(t) // 2], "min": t[0]})
    return out


def environment():
    env = {name: os.environ.get(name) for name in
           ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "LD_PRELOAD",
            "OMP_PROC_BIND", "KMP_AFFINITY", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")}
    return {"variables": env,
            "torch_version": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkldnn": torch.backends.mkldnn.is_available(),
            "mkl": torch.backends.mkl.is_available(),
            "num_threads": torch.get_num_threads(),
            "parallel_info": torch.__config__.parallel_info(),
            "config": torch.__config__.show()}


def profile(case, warmup, reps):
    """Prints the ops of `reps` float32 forward+backward calls by their own CPU time."""
    for _ in range(warmup):
        case.zero()
        case.train()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            case.zero()
            case.train()
    case.zero()
    print(f"profile {case.name}: {reps} float32 forward+backward calls, ops by their own CPU "
          "time (torch.profiler)")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", required=True, help="the directory benchmark_libtorch "
                        "--export wrote")
    parser.add_argument("--only", nargs="*", help="case names to run (all by default)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5, help="timed runs of each, median "
                        "reported")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rtol", type=float, default=1e-4,
                        help="float32 output agreement, relative to the largest value")
    parser.add_argument("--grad-rtol", type=float, default=5e-2,
                        help="float32 gradient agreement (see the top of this file)")
    parser.add_argument("--rtol64", type=float, default=1e-10,
                        help="float64 agreement of outputs and gradients")
    parser.add_argument("--check-only", action="store_true",
                        help="the agreement checks only; exit 1 on disagreement")
    parser.add_argument("--perturb", action="store_true",
                        help="move one weight by 1e-2 before the check, which must then fail "
                        "(the test that proves the check can fail)")
    parser.add_argument("--no-bf16", action="store_true", help="time float32 only")
    parser.add_argument("--profile", action="store_true",
                        help="after each case's check, --reps float32 forward+backward calls "
                        "under torch.profiler: the ops that take the time (to set against "
                        "benchmark_libtorch --profile of the same case)")
    parser.add_argument("--quiet", action="store_true", help="no environment printout")
    parser.add_argument("--json", help="where to write the results (default: "
                        "benchmark_pytorch.json in the --cases directory, which "
                        "benchmark_libtorch --export wrote)")
    args = parser.parse_args()
    if args.json is None:
        args.json = os.path.join(args.cases, "benchmark_pytorch.json")

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)  # one layer uses no inter-op parallelism
    except RuntimeError:
        pass
    with open(os.path.join(args.cases, "cases.json")) as f:
        index = json.load(f)
    config = index["config"]
    env = environment()
    if not args.quiet:
        print(f"PyTorch {env['torch_version']}, CPU capability {env['cpu_capability']}, "
              f"oneDNN {env['mkldnn']}, MKL {env['mkl']}, {env['num_threads']} threads")
        for name, value in env["variables"].items():
            print(f"  {name:<24} {value if value is not None else '[not set]'}")
    print(f"post-norm encoder layer: d_model {config['d_model']}, {config['heads']} heads, "
          f"ff {config['d_ff']}, {config['activation']}, batch {config['batch']}, "
          f"{config['dtype']} export", flush=True)

    results, failed = [], []
    for entry in index["cases"]:
        if args.only and entry["name"] not in args.only:
            continue
        case = Case(args.cases, config, entry)
        agreement = case.check(args, perturb=args.perturb)
        if not agreement["agree"]:
            failed.append(case.name)
        row = {"name": case.name, "n": case.n, "k": case.k, "layer": case.label,
               "agreement": agreement}
        if args.profile:
            profile(case, args.warmup, args.reps)
        if not args.check_only and case.file["y"].dtype == torch.float32:
            variants = [("float32", False)] + ([] if args.no_bf16 else [("bf16_autocast", True)])
            train = time_interleaved(
                [(case.zero, lambda a=a: case.train(autocast=a)) for _, a in variants],
                args.warmup, args.reps)
            case.zero()
            forward = time_interleaved(
                [(lambda: None, lambda a=a: case.forward(autocast=a)) for _, a in variants],
                args.warmup, args.reps)
            line = []
            for (name, _), t, f in zip(variants, train, forward):
                row[name] = {"train_ms": t["median"], "train_min_ms": t["min"],
                             "forward_ms": f["median"], "forward_min_ms": f["min"]}
                line.append(f"{name} {t['median']:.2f} ({f['median']:.2f})")
            print(f"time  {case.name:<12} ms fwd+bwd (fwd): " + ", ".join(line), flush=True)
        results.append(row)
        del case

    with open(args.json, "w") as f:
        json.dump({"config": {**config, "threads": args.threads, "reps": args.reps,
                              "warmup": args.warmup, "forward": "inference_mode",
                              "bf16": "torch.autocast('cpu', dtype=torch.bfloat16)"},
                   "environment": env, "results": results}, f, indent=2)
        f.write("\n")
    if failed:
        print(f"benchmark_pytorch.py: tinyformer and PyTorch disagree on {', '.join(failed)}",
              file=sys.stderr)
        return 1
    print(f"all {len(results)} cases agree; results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
