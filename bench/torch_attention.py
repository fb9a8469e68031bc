#!/usr/bin/python3
"""PyTorch's unfused attention on the shapes of `attn bench attention`, and the comparison.

    torch_attention.py [--quick] [--reps N] [--threads N] [--autocast bf16]
                                                   time PyTorch, print JSON
    torch_attention.py --report ATTN.json [ATTN.json ...] TORCH.json [TORCH.json ...]
                                                   print each attn run (fp32, bf16) beside the
                                                   best PyTorch run of every row

The timed path is the textbook one: bmm(q, k^T) * scale -> (causal: masked_fill -inf) ->
softmax -> bmm(p, v), forward under no_grad, and forward plus backward with autograd.
FLOPs are counted exactly as attn counts them: 4*B*H*n*n*d for the forward, 3x that for
forward+backward, causal runs not halved. --autocast bf16 runs the same code under
torch.autocast("cpu", dtype=torch.bfloat16) (bmm in bf16 through oneDNN, softmax in float32),
PyTorch's own mixed precision, the peer of `attn bench attention --precision bf16`; PyTorch
1.13 has no fused torch.nn.functional.scaled_dot_product_attention (it arrived in 2.0), so when
a newer torch has it, it is timed as one more setting (--fused). Times are medians of --reps
runs after a warm-up, except that a run longer than LONG_RUN_S is taken as the measurement on
its own (with Debian's reference BLAS behind torch.bmm, n=4096 takes minutes per run); each row
records how many runs it used. Run it with /usr/bin/python3 (Debian's python3-torch).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

BATCH, HEADS, DIM = 2, 8, 64
LENGTHS = [128, 512, 1024, 2048, 4096]


def attention(q, k, v, scale, causal_mask):
    scores = torch.bmm(q, k.transpose(1, 2)).mul_(scale)
    if causal_mask is not None:
        scores = scores.masked_fill(causal_mask, float("-inf"))
    return torch.bmm(torch.softmax(scores, dim=-1), v)


LONG_RUN_S = 2.0


def median_seconds(fn, reps):
    """Median time of fn over reps runs after a warm-up, and how many runs were timed."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    if first > LONG_RUN_S:
        return first, 1
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), reps


def fused_attention(q, k, v, scale, causal_mask):
    """torch.nn.functional.scaled_dot_product_attention (torch >= 2.0); scale is 1/sqrt(d)."""
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=causal_mask is not None)


def has_fused():
    return hasattr(torch.nn.functional, "scaled_dot_product_attention")


def measure(n, causal, reps, autocast, fused):
    torch.manual_seed(0)
    shape = (BATCH * HEADS, n, DIM)
    q, k, v = (torch.rand(shape) * 2 - 1 for _ in range(3))
    grad_out = torch.rand(shape) * 2 - 1
    scale = 1.0 / math.sqrt(DIM)
    mask = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None
    run = fused_attention if fused else attention
    dtype = torch.bfloat16 if autocast else torch.float32
    # The gradient arrives in the output's dtype, as it would from the layers above.
    grad_out = grad_out.to(dtype)

    def context():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast)

    def forward():
        with torch.no_grad(), context():
            run(q, k, v, scale, mask)

    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

    def forward_backward():
        with context():
            out = run(qg, kg, vg, scale, mask)
        out.backward(grad_out.to(out.dtype))
        for t in (qg, kg, vg):
            t.grad = None

    flops = 4.0 * BATCH * HEADS * n * n * DIM
    forward_s, forward_runs = median_seconds(forward, reps)
    both_s, both_runs = median_seconds(forward_backward, reps)
    return {
        "n": n,
        "causal": bool(causal),
        "runs": min(forward_runs, both_runs),
        "forward_ms": forward_s * 1e3,
        "forward_gflops": flops / forward_s * 1e-9,
        "forward_backward_ms": both_s * 1e3,
        "forward_backward_gflops": 3 * flops / both_s * 1e-9,
    }


def loaded_blas():
    """The BLAS library torch.bmm actually runs on (Debian switches it by alternatives)."""
    torch.bmm(torch.ones(1, 2, 2), torch.ones(1, 2, 2))
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f}
    except OSError:
        return "unknown"
    paths = {p for p in paths if "blas" in os.path.basename(p)}
    return ", ".join(sorted(os.path.realpath(p) for p in paths)) or "none found"


def run(args):
    if args.threads:
        torch.set_num_threads(args.threads)
    lengths = LENGTHS[:3] if args.quick else LENGTHS
    reps = args.reps or (3 if args.quick else 5)
    autocast = args.autocast == "bf16"
    if args.fused and not has_fused():
        sys.exit(f"torch {torch.__version__} has no scaled_dot_product_attention (--fused)")
    results = [measure(n, causal, reps, autocast, args.fused)
               for n in lengths for causal in (0, 1)]
    print(json.dumps({
        "benchmark": "attention", "implementation": "torch " + torch.__version__,
        "batch": BATCH, "heads": HEADS, "dim": DIM, "reps": reps,
        "threads": torch.get_num_threads(),
        "setting": "%s%s, OMP_WAIT_POLICY=%s, %d threads" % (
            "fused sdpa" if args.fused else "bmm-softmax-bmm",
            ", bf16 autocast" if autocast else ", fp32",
            os.environ.get("OMP_WAIT_POLICY", "default"), torch.get_num_threads()),
        "autocast": args.autocast,
        "blas": loaded_blas(),
        "causal_flops_halved": False, "results": results,
    }))


def report(paths):
    """attn's JSON files (told apart from PyTorch's by their "isa") and PyTorch's, any order."""
    attn_runs, runs = [], []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        (attn_runs if "isa" in data else runs).append(data)
    if not attn_runs or not runs:
        sys.exit("--report needs at least one attn JSON and one PyTorch JSON")
    for attn in attn_runs:
        report_one(attn, runs)
    by_precision = {a.get("precision", "fp32"): a for a in attn_runs}
    if "fp32" in by_precision and "bf16" in by_precision:
        fp32 = {(r["n"], r["causal"]): r for r in by_precision["fp32"]["results"]}
        print("attn bf16 / attn fp32 (time ratio inverted: > 1 means bf16 is faster)")
        print("%6s %6s %8s %8s" % ("n", "causal", "fwd", "f+b"))
        for row in by_precision["bf16"]["results"]:
            base = fp32.get((row["n"], row["causal"]))
            if base:
                print("%6d %6s %7.2fx %7.2fx" % (
                    row["n"], "yes" if row["causal"] else "no",
                    base["forward_ms"] / row["forward_ms"],
                    base["forward_backward_ms"] / row["forward_backward_ms"]))


def report_one(attn, runs):
    precision = attn.get("precision", "fp32")
    native = "" if precision == "fp32" else (
        " (native)" if attn.get("native") else " (EMULATED: no AVX512_BF16)")
    print(f"attention: B={attn['batch']} H={attn['heads']} d={attn['dim']}, attn {attn['isa']} "
          f"{precision}{native} {attn['threads']} threads; {runs[0]['implementation']} "
          f"(BLAS {runs[0]['blas']}), best per row of: {'; '.join(r['setting'] for r in runs)}")
    print("GFLOP/s count 4*B*H*n*n*d forward, 3x forward+backward; causal NOT halved; "
          "medians, indicative on a shared machine")
    header = ("n", "causal", "attn fwd", "torch fwd", "ratio", "attn f+b", "torch f+b", "ratio")
    print("%6s %6s %10s %10s %7s %10s %10s %7s" % header)
    for row in attn["results"]:
        matches = [r for run in runs for r in run["results"]
                   if r["n"] == row["n"] and r["causal"] == row["causal"]]
        if not matches:
            continue
        fwd = max(m["forward_gflops"] for m in matches)
        both = max(m["forward_backward_gflops"] for m in matches)
        print("%6d %6s %10.1f %10.1f %6.1fx %10.1f %10.1f %6.1fx" % (
            row["n"], "yes" if row["causal"] else "no", row["forward_gflops"], fwd,
            row["forward_gflops"] / fwd, row["forward_backward_gflops"], both,
            row["forward_backward_gflops"] / both))
    by_key = {(r["n"], r["causal"]): r for r in attn["results"]}
    for n in sorted({r["n"] for r in attn["results"]}):
        if (n, True) in by_key and (n, False) in by_key:
            causal, full = by_key[(n, True)], by_key[(n, False)]
            print(f"attn causal/non-causal time at n={n}: forward "
                  f"{causal['forward_ms'] / full['forward_ms']:.2f}, forward+backward "
                  f"{causal['forward_backward_ms'] / full['forward_backward_ms']:.2f}")
    memory = attn.get("memory")
    if memory:
        print(f"memory: B={memory['batch']} H={memory['heads']} d={memory['dim']} n={memory['n']} "
              f"forward+backward ({memory['forward_backward_s']:.1f} s): tensors "
              f"{memory['tensors_mib']:.0f} MiB; extra: library scratch "
              f"{memory['scratch_kib']:.0f} KiB, peak RSS growth "
              f"{memory['peak_rss_growth_mib']:.1f} MiB "
              f"(PyTorch not run: its {memory['n']}x{memory['n']} score matrices alone need "
              f"{memory['heads'] * memory['n'] ** 2 * 4 / 2 ** 30:.0f} GiB per copy)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="n <= 1024, 3 runs")
    parser.add_argument("--reps", type=int, default=0, help="runs per measurement")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads (default: PyTorch's own choice)")
    parser.add_argument("--autocast", choices=["off", "bf16"], default="off",
                        help='run under torch.autocast("cpu", dtype=torch.bfloat16)')
    parser.add_argument("--fused", action="store_true",
                        help="time torch.nn.functional.scaled_dot_product_attention "
                             "(torch >= 2.0) instead of bmm-softmax-bmm")
    parser.add_argument("--report", nargs="+", metavar="JSON",
                        help="attn's JSON files and PyTorch's JSON files, in any order")
    args = parser.parse_args()
    if args.report:
        if len(args.report) < 2:
            parser.error("--report needs attn's JSON and at least one PyTorch JSON")
        report(args.report)
        return 0
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
