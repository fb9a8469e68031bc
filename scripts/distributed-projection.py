#!/usr/bin/env python3
"""The step-time model of data-parallel training (docs/distributed.md), projected to N machines.

    step(N) = compute / N + exposed(N) + optimizer
    exposed(N) = max(allreduce(N, gradient) - backward_share * compute / N,
                     allreduce(N, last_bucket))

compute: one update of the global batch on one machine (forward + backward), split N ways;
the all-reduce overlaps the backward (backward_share of the compute) except for the bucket the
backward finishes last (the source embedding), which can only start when it ends; the optimizer
step runs in full on every machine. allreduce(N, B) is the time of what Open MPI's non-blocking
all-reduce does with attn's buckets: below four ranks its binomial tree (reduce to rank 0, then
broadcast: 2 ceil(log2 N) B through a link), from four on reduce-scatter + all-gather (the
ring's bandwidth term, 2 (N - 1) / N B); plus a latency per message step and bucket.
--ring uses the ring's bound for every N. Measured inputs come from `attn bench train`
(docs/distributed.md says which); the defaults are the figures recorded there.

usage: scripts/distributed-projection.py [--config small|base] [--compute S] [--optimizer S]
                                         [--params N] [--last-bucket-params N]
                                         [--update-tokens T] [--ring]
"""
import argparse

# From attn bench train on the 2-core machine (docs/distributed.md): one update of the bench's
# batch at 2 threads on a quiet machine (docs/benchmarks.md: SMALL 0.16 s, BASE 1.6 s a step),
# split into the forward and backward and an estimate of the Adam step (memory-bound: 7 x 4
# bytes per parameter at about 10 GB/s); the parameter counts; the bucket the backward ends
# last (SMALL: the embeddings and the encoder layers that share the first bucket; BASE: the
# source embedding, 8000 x 512, a bucket alone).
CONFIGS = {
    "small": dict(compute=0.150, optimizer=0.015, params=5_560_000, last_bucket=2_100_000,
                  tokens=640),
    "base": dict(compute=1.45, optimizer=0.15, params=52_340_000, last_bucket=4_096_000,
                 tokens=960),
}
BUCKET_FLOATS = 2 << 20
BACKWARD_SHARE = 2.0 / 3.0  # the backward of a product is two products
LATENCY = 50e-6  # seconds per message step over TCP on a switched 10/25 GbE network


def allreduce(n, floats, gbit, ring=False):
    if n == 1:
        return 0.0
    data = 4.0 * floats
    buckets = max(1, -(-floats // BUCKET_FLOATS))
    link = gbit * 1e9 / 8
    levels = (n - 1).bit_length()  # ceil(log2 n)
    if ring:
        return 2.0 * (n - 1) / n * data / link + 2 * (n - 1) * LATENCY * buckets
    if n < 4:
        return 2.0 * levels * data / link + 2 * levels * LATENCY * buckets
    return 2.0 * (n - 1) / n * data / link + 2 * levels * LATENCY * buckets


def step(n, c, gbit, ring):
    exposed = max(allreduce(n, c["params"], gbit, ring) - BACKWARD_SHARE * c["compute"] / n,
                  allreduce(n, c["last_bucket"], gbit, ring))
    return c["compute"] / n + exposed + c["optimizer"], exposed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", choices=CONFIGS, default=None)
    parser.add_argument("--compute", type=float)
    parser.add_argument("--optimizer", type=float)
    parser.add_argument("--params", type=int)
    parser.add_argument("--last-bucket-params", type=int)
    parser.add_argument("--update-tokens", type=int,
                        help="target tokens of an update (compute scales with them; default: "
                        "the bench's batch, SMALL 640, BASE 960)")
    parser.add_argument("--ring", action="store_true",
                        help="the ring's 2 (N - 1) / N bound for every N")
    args = parser.parse_args()
    names = [args.config] if args.config else list(CONFIGS)
    for name in names:
        c = dict(CONFIGS[name])
        for key, value in (("compute", args.compute), ("optimizer", args.optimizer),
                           ("params", args.params), ("last_bucket", args.last_bucket_params)):
            if value is not None:
                c[key] = value
        if args.update_tokens:
            c["compute"] *= args.update_tokens / c["tokens"]
            c["tokens"] = args.update_tokens
        one = c["compute"] + c["optimizer"]
        print(f"{name.upper()}: {c['params'] / 1e6:.1f} M parameters ({4 * c['params'] / 1e6:.0f}"
              f" MB of gradients), updates of {c['tokens']} target tokens, one machine "
              f"{one * 1e3:.0f} ms per update")
        print("| machines | " + " | ".join(f"{g} Gb/s: step ms (exposed), speed-up"
                                         for g in (10, 25)) + " |")
        print("|---|---|---|")
        for n in (1, 2, 4, 8, 16, 32, 64):
            cells = []
            for gbit in (10, 25):
                t, exposed = step(n, c, gbit, args.ring)
                cells.append(f"{t * 1e3:.0f} ({exposed * 1e3:.0f}), {one / t:.1f}x")
            print(f"| {n} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()
