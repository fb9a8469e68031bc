#!/usr/bin/python3
"""PyTorch 1.13 greedy decoding of the SMALL Transformer, in sentences per second.

Run with Debian's python3-torch:
    /usr/bin/python3 bench/torch_decode.py [--batch 1|64|both] [--threads N] [--json]
    /usr/bin/python3 bench/torch_decode.py --sweep     # default / PASSIVE x 1 / 2 threads

Decoding is done the way a user of nn.Transformer must: the encoder runs once per batch,
then every step re-runs the whole decoder over the prefix generated so far (nn.Transformer
keeps no key/value cache) and appends the arg-max of the last position. Weights are random
(seeded) and generation is forced to --tokens tokens (10) whatever the model emits, so every
run does the same work. Inference mode: model.eval() under torch.no_grad(), which lets
PyTorch 1.13 take its fused "fast path" for the encoder layers where it applies.
The model, the runtime facts (threads, BLAS, OMP_WAIT_POLICY) and --sweep are those of
bench/torch_train.py.
"""
import argparse
import json
import os
import statistics
import time
import warnings

import torch

from torch_train import (BOS_ID, CONFIGS, FIRST_WORD_ID, Seq2SeqTransformer, describe,
                         runtime_facts, sweep)


@torch.no_grad()
def greedy_decode(model, src, tokens):
    memory, src_padding = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS_ID, dtype=torch.long)
    for _ in range(tokens):
        logits = model.decode(ys, memory, src_padding)
        ys = torch.cat([ys, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    return ys[:, 1:]


def measure(batch, tokens, reps, min_seconds):
    cfg = CONFIGS["small"]
    torch.manual_seed(0)
    model = Seq2SeqTransformer(cfg).eval()
    generator = torch.Generator().manual_seed(1)
    src = torch.randint(FIRST_WORD_ID, cfg["src_vocab"], (batch, cfg["src_len"]), generator=generator)
    out = greedy_decode(model, src, tokens)  # warm-up
    assert out.shape == (batch, tokens)
    rates = []
    for _ in range(reps):
        calls, start = 0, time.perf_counter()
        while True:
            greedy_decode(model, src, tokens)
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        rates.append(batch * calls / elapsed)
    return {"bench": "torch_decode", "config": "small", "batch": batch,
            "seqs_per_s": round(statistics.median(rates), 2), "tokens": tokens,
            "src_len": cfg["src_len"], "reps": reps}


def main():
    # nn.TransformerEncoder's inference fast path packs padded batches as nested tensors and
    # warns that their API is a prototype, once per process; it is not ours to act on.
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", choices=["1", "64", "both"], default="both")
    parser.add_argument("--tokens", type=int, default=10, help="tokens generated per sentence")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (the median is reported)")
    parser.add_argument("--min-seconds", type=float, default=0.5,
                        help="each repetition decodes batches for at least this long")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads(N); default: torch's own")
    parser.add_argument("--json", action="store_true", help="one JSON line per batch size")
    parser.add_argument("--sweep", action="store_true",
                        help="run default/PASSIVE OMP_WAIT_POLICY x 1/2 threads in subprocesses")
    args = parser.parse_args()

    if args.sweep:
        rows = sweep(os.path.abspath(__file__),
                     ["--batch", args.batch, "--tokens", str(args.tokens), "--reps", str(args.reps),
                      "--min-seconds", str(args.min_seconds)])
        print(f"\n{'batch':>5} {'OMP_WAIT_POLICY':16} {'threads':>7} {'sentences/s':>12}")
        for row in rows:
            print(f"{row['batch']:5} {row['omp_wait_policy']:16} {row['threads']:7} "
                  f"{row['seqs_per_s']:12.1f}")
        return

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    facts = runtime_facts()
    if not args.json:
        print(describe(facts))
    for batch in ([1, 64] if args.batch == "both" else [int(args.batch)]):
        result = measure(batch, args.tokens, args.reps, args.min_seconds)
        if args.json:
            print(json.dumps({**result, **facts}), flush=True)
        else:
            print(f"small, batch {batch}: {result['seqs_per_s']:.1f} sentences/s "
                  f"({args.tokens} tokens each, median of {args.reps})", flush=True)


if __name__ == "__main__":
    main()
