#!/usr/bin/env python3
"""The step-time model of data-parallel training (docs/distributed.md), projected to N machines.

    step(N) = compute / N + exposed(N) + optimizer
    exposed(N) = max(allreduce(N, gradient) - backward_share * compute / N,
                     allreduce(N, last_bucket))
    allreduce(N, B) = 2 (N - 1) / N * B / bandwidth + 2 (N - 1) * latency * buckets(B)

compute: one update of the global batch on one machine (forward + backward), split N ways;
the all-reduce overlaps the backward (backward_share of the compute) except for the bucket the
backward finishes last (the embeddings), which can only start when it ends; the optimizer step
runs in full on every machine. The all-reduce is the ring's: 2 (N - 1) / N of the buffer through
each machine's link. Measured inputs come from `attn bench train` (docs/distributed.md says
which); the defaults are the figures recorded there.

usage: scripts/distributed-projection.py [--compute S] [--optimizer S] [--params N]
                                         [--last-bucket-params N] [--config small|base]
"""
import argparse

# From attn bench train on the 2-core machine (docs/distributed.md): one update of the
# bench's batch at 2 threads (compute without the optimizer), the optimizer step, the parameter
# counts (the last bucket: the target embedding tied to the output projection, which the
# backward finishes last, with the source embedding in the same bucket).
CONFIGS = {
    "small": dict(compute=0.160, optimizer=0.006, params=5_560_000, last_bucket=2_100_000),
    "base": dict(compute=1.60, optimizer=0.060, params=60_500_000, last_bucket=8_200_000),
}
BUCKET_FLOATS = 2 << 20
BACKWARD_SHARE = 2.0 / 3.0  # the backward of a product is two products
LATENCY = 50e-6  # seconds per message step over TCP on a switched 10/25 GbE network


def allreduce(n, floats, gbit):
    if n == 1:
        return 0.0
    data = 4.0 * floats
    buckets = max(1, -(-floats // BUCKET_FLOATS))
    return 2.0 * (n - 1) / n * data / (gbit * 1e9 / 8) + 2 * (n - 1) * LATENCY * buckets


def step(n, c, gbit):
    exposed = max(allreduce(n, c["params"], gbit) - BACKWARD_SHARE * c["compute"] / n,
                  allreduce(n, c["last_bucket"], gbit))
    return c["compute"] / n + exposed + c["optimizer"], exposed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", choices=CONFIGS, default=None)
    parser.add_argument("--compute", type=float)
    parser.add_argument("--optimizer", type=float)
    parser.add_argument("--params", type=int)
    parser.add_argument("--last-bucket-params", type=int)
    args = parser.parse_args()
    names = [args.config] if args.config else list(CONFIGS)
    for name in names:
        c = dict(CONFIGS[name])
        for key, value in (("compute", args.compute), ("optimizer", args.optimizer),
                           ("params", args.params), ("last_bucket", args.last_bucket_params)):
            if value is not None:
                c[key] = value
        one = c["compute"] + c["optimizer"]
        print(f"{name.upper()}: {c['params'] / 1e6:.1f} M parameters ({4 * c['params'] / 1e6:.0f}"
              f" MB of gradients), one machine {one * 1e3:.0f} ms per update")
        print("| machines | " + " | ".join(f"{g} Gb/s: step ms (exposed), speed-up"
                                         for g in (10, 25)) + " |")
        print("|---|---|---|")
        for n in (1, 2, 4, 8, 16, 32, 64):
            cells = []
            for gbit in (10, 25):
                t, exposed = step(n, c, gbit)
                cells.append(f"{t * 1e3:.0f} ({exposed * 1e3:.0f}), {one / t:.1f}x")
            print(f"| {n} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()
