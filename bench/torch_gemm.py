#!/usr/bin/python3
"""torch.mm GFLOP/s on the shapes of `attn bench gemm`, for comparison.

Run with Debian's python3-torch:
    /usr/bin/python3 bench/torch_gemm.py [--json] [--reps N] [--autocast bf16]
Side by side with attn (what scripts/bench.sh does):
    /usr/bin/python3 bench/torch_gemm.py --report ATTN.json [ATTN_BF16.json] TORCH.json ...
with the JSON lines of `attn bench gemm --json [--precision bf16]` and of this script's
--json runs; each attn row is set against the fastest PyTorch setting of its shape.
--autocast bf16 multiplies under torch.autocast("cpu", dtype=torch.bfloat16): torch.mm then
takes bf16 operands (oneDNN, AVX512_BF16 where the CPU has it), the peer of attn's bf16 GEMM.
Measures torch's default threading and torch.set_num_threads(2), and prints what the
process may run on (os.sched_getaffinity) and what torch reports, since torch's default
thread count is not always the number of usable cores.

Debian's torch calls whatever libblas.so.3 the alternatives system points at (the
header names the one loaded): the reference netlib BLAS unless OpenBLAS is installed.
OpenBLAS 0.3.21 does not recognise every recent Xeon and then falls back to a generic
kernel; OPENBLAS_CORETYPE=SkylakeX selects its AVX-512 kernels.
"""
import argparse
import json
import os
import statistics
import time

import torch

# (name, op, m, n, k) as in src/cli/bench_gemm.c; op "NT" multiplies by B transposed.
SHAPES = [
    ("square", "NN", 2048, 2048, 2048),
    ("square", "NN", 1024, 1024, 1024),
    ("scores QK^T", "NT", 512, 512, 64),
    ("scores QK^T", "NT", 1024, 1024, 64),
    ("scores QK^T", "NT", 2048, 2048, 64),
    ("k=64", "NN", 2048, 2048, 64),
    ("weights PV", "NN", 1024, 64, 1024),
    ("long k", "NN", 512, 512, 2048),
    ("tall-skinny", "NN", 2048, 256, 256),
    ("small", "NN", 64, 1024, 256),
]


def blas_library():
    """The BLAS shared library this process has loaded (torch resolves it at load)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "blas" in line.split()[-1]}
    return ", ".join(sorted(paths)) or "none found"


def measure(op, m, n, k, reps, autocast):
    """Median GFLOP/s over reps repetitions of at least 20 ms each."""
    gen = torch.Generator().manual_seed(1)
    a = torch.rand(m, k, generator=gen) * 2 - 1
    b = torch.rand(n, k, generator=gen) * 2 - 1 if op == "NT" else torch.rand(k, n, generator=gen) * 2 - 1

    def call():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast == "bf16"):
            return torch.mm(a, b.t() if op == "NT" else b)

    call()
    start = time.perf_counter()
    call()
    once = time.perf_counter() - start
    calls = max(1, int(0.02 / max(once, 1e-7)) + 1) if once < 0.02 else 1
    rates = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        rates.append(2.0 * m * n * k * calls / (time.perf_counter() - start) * 1e-9)
    return statistics.median(rates)


def read_json_lines(path):
    with open(path) as lines:
        return [json.loads(line) for line in lines if line.strip()]


def report(paths):
    """attn's best ISA (each precision it was run in) beside torch's best setting (threading,
    autocast), shape by shape; attn's rows are those of `attn bench gemm`, the others torch's."""
    rows = [row for path in paths for row in read_json_lines(path)]
    torch_best = {}
    for row in rows:
        if row["bench"] != "torch.mm":
            continue
        key = (row["op"], row["m"], row["n"], row["k"])
        for r in row["results"]:
            setting = f"{row.get('autocast', 'off')}/{r['threads']}"
            if r["gflops"] > torch_best.get(key, (0.0, ""))[0]:
                torch_best[key] = (r["gflops"], setting)
    print(f"{'shape':12} {'op':2} {'m':>5} {'n':>5} {'k':>5} {'attn':>5} {'attn':>8} "
          f"{'x fp32':>7} {'torch':>8} {'torch best':>22} {'ratio':>7}")
    for row in rows:
        if row["bench"] != "gemm":
            continue
        key = (row["op"], row["m"], row["n"], row["k"])
        ours = max(r["gflops"] for r in row["results"])
        theirs, setting = torch_best.get(key, (None, "-"))
        ratio = f"{ours / theirs:6.1f}x" if theirs else "      -"
        theirs_text = f"{theirs:8.1f}" if theirs else "       -"
        over_fp32 = f"{row['ratio_to_fp32']:6.2f}x" if "ratio_to_fp32" in row else "      -"
        print(f"{row['shape']:12} {row['op']:2} {row['m']:5} {row['n']:5} {row['k']:5} "
              f"{row.get('precision', 'fp32'):>5} {ours:8.1f} {over_fp32:>7} {theirs_text} "
              f"{setting:>22} {ratio}")
    print("x fp32: attn bf16 over attn fp32 on the same instruction set, measured in one run; "
          "torch best: autocast/threads of the fastest torch.mm setting")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per shape")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--autocast", choices=["off", "bf16"], default="off",
                        help='bf16: torch.mm under torch.autocast("cpu", bfloat16)')
    parser.add_argument("--report", nargs="+", metavar="JSON",
                        help="attn's and torch's JSON lines (any number of files) side by side")
    args = parser.parse_args()
    if args.report:
        report(args.report)
        return

    default_threads = torch.get_num_threads()
    settings = [("default", default_threads), ("set_num_threads(2)", 2)]
    if not args.json:
        print(f"torch {torch.__version__}; sched_getaffinity: {len(os.sched_getaffinity(0))} cpus "
              f"{sorted(os.sched_getaffinity(0))}; os.cpu_count: {os.cpu_count()}; "
              f"torch.get_num_threads() by default: {default_threads}; "
              f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}")
        print(f"BLAS: {blas_library()}; "
              f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
        print(f"GFLOP/s, median of {args.reps}; autocast {args.autocast}")
        print(f"{'shape':12} {'op':2} {'m':>5} {'n':>5} {'k':>5}" +
              "".join(f"  {label:>22}" for label, _ in settings))
    for name, op, m, n, k in SHAPES:
        results = []
        for label, threads in settings:
            torch.set_num_threads(threads)
            results.append((label, torch.get_num_threads(),
                            measure(op, m, n, k, args.reps, args.autocast)))
        torch.set_num_threads(default_threads)
        if args.json:
            print(json.dumps({"bench": "torch.mm", "autocast": args.autocast, "shape": name,
                              "op": op, "m": m, "n": n, "k": k,
                              "results": [{"threads": label, "num_threads": t, "gflops": round(g, 2)}
                                          for label, t, g in results]}))
        else:
            print(f"{name:12} {op:2} {m:5} {n:5} {k:5}" +
                  "".join(f"  {g:13.1f} ({t} thr)".rjust(24) for _, t, g in results))


if __name__ == "__main__":
    main()
