#!/usr/bin/python3
"""PyTorch 1.13 greedy decoding of the SMALL Transformer, in sentences per second.

Run with Debian's python3-torch:
    /usr/bin/python3 bench/torch_decode.py [--batch 1|64|both] [--threads N] [--json]
    /usr/bin/python3 bench/torch_decode.py --precision bf16   # under bf16 autocast
    /usr/bin/python3 bench/torch_decode.py --sweep     # default / PASSIVE x 1 / 2 threads x fp32 / bf16
    /usr/bin/python3 bench/torch_decode.py --report ATTN.json TORCH.json [TORCH.json ...]
        # attn bench decode --json beside the best PyTorch run per batch size

Decoding is done the way a user of nn.Transformer must: the encoder runs once per batch,
then every step re-runs the whole decoder over the prefix generated so far (nn.Transformer
keeps no key/value cache) and appends the arg-max of the last position. Weights are random
(seeded) and generation is forced to --tokens tokens (10) whatever the model emits, so every
run does the same work. Inference mode: model.eval() under torch.no_grad(), which lets
PyTorch 1.13 take its fused "fast path" for the encoder layers where it applies.
--precision bf16 runs the decoding under torch.autocast("cpu", dtype=torch.bfloat16) (oneDNN's
bf16 products), PyTorch's own low-precision setting, the peer of attn bench decode --precision
bf16 and int8.
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
    # PyTorch 1.13's encoder fast path (torch._transformer_encoder_layer_fwd) fails under
    # autocast ("expected scalar type BFloat16 but found Float"); it is skipped when gradients
    # are enabled, so the bf16 encoder runs the layers' ordinary (autocast) path.
    with torch.set_grad_enabled(torch.is_autocast_cpu_enabled()):
        memory, src_padding = model.encode(src)
    memory = memory.detach()
    ys = torch.full((src.shape[0], 1), BOS_ID, dtype=torch.long)
    for _ in range(tokens):
        logits = model.decode(ys, memory, src_padding)
        ys = torch.cat([ys, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    return ys[:, 1:]


def measure(batch, tokens, reps, min_seconds, precision):
    cfg = CONFIGS["small"]
    torch.manual_seed(0)
    model = Seq2SeqTransformer(cfg).eval()
    generator = torch.Generator().manual_seed(1)
    src = torch.randint(FIRST_WORD_ID, cfg["src_vocab"], (batch, cfg["src_len"]), generator=generator)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    with autocast:
        out = greedy_decode(model, src, tokens)  # warm-up
    assert out.shape == (batch, tokens)
    rates = []
    for _ in range(reps):
        calls, start = 0, time.perf_counter()
        while True:
            with autocast:
                greedy_decode(model, src, tokens)
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        rates.append(batch * calls / elapsed)
    return {"bench": "torch_decode", "config": "small", "batch": batch,
            "seqs_per_s": round(statistics.median(rates), 2), "tokens": tokens,
            "src_len": cfg["src_len"], "reps": reps, "precision": precision}


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def report(attn_path, torch_paths):
    """attn's rate (each precision it was run at) beside the best PyTorch rate of each batch
    size, their ratio, and the ratio to attn's own fp32 rate."""
    attn = read_lines(attn_path)
    runs = [row for path in torch_paths for row in read_lines(path)]
    if attn:
        print(f"decode: small Transformer, {attn[0]['tokens']} tokens from {attn[0]['src_len']} "
              f"source tokens; attn {attn[0]['isa']} {attn[0]['threads']} threads; PyTorch best "
              f"of {len(torch_paths)} settings; sentences/s, medians, indicative on a shared "
              f"machine")
    print("%5s %9s %10s %10s %-28s %7s %8s" % ("batch", "precision", "attn", "torch",
                                                "(torch setting)", "ratio", "vs fp32"))
    fp32 = {row["batch"]: row["seqs_per_s"] for row in attn
            if row.get("precision", "fp32") == "fp32"}
    for row in attn:
        matches = [r for r in runs if r["batch"] == row["batch"]]
        if not matches:
            continue
        best = max(matches, key=lambda r: r["seqs_per_s"])
        setting = (f"{best.get('precision', 'fp32')}, {best['omp_wait_policy']}, "
                   f"{best['threads']} thr")
        own = (f"{row['seqs_per_s'] / fp32[row['batch']]:7.2f}x" if row["batch"] in fp32
               else "")
        print("%5d %9s %10.1f %10.1f %-28s %6.1fx %8s" % (
            row["batch"], row.get("precision", "fp32"), row["seqs_per_s"], best["seqs_per_s"],
            f"({setting})", row["seqs_per_s"] / best["seqs_per_s"], own))


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
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="bf16: decode under torch.autocast(\"cpu\", dtype=torch.bfloat16)")
    parser.add_argument("--sweep", action="store_true",
                        help="run default/PASSIVE OMP_WAIT_POLICY x 1/2 threads in subprocesses")
    parser.add_argument("--report", nargs="+", metavar="JSON",
                        help="attn bench decode --json output, then PyTorch --json outputs")
    args = parser.parse_args()
    if args.report:
        if len(args.report) < 2:
            parser.error("--report needs attn's JSON and at least one PyTorch JSON")
        report(args.report[0], args.report[1:])
        return
    if args.tokens < 1 or args.reps < 1 or args.min_seconds <= 0:
        parser.error("--tokens and --reps must be at least 1 and --min-seconds positive")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")

    if args.sweep:
        rows = [row for precision in ("fp32", "bf16")
                for row in sweep(os.path.abspath(__file__),
                                 ["--batch", args.batch, "--tokens", str(args.tokens),
                                  "--reps", str(args.reps), "--min-seconds", str(args.min_seconds),
                                  "--precision", precision])]
        print(f"\n{'batch':>5} {'precision':9} {'OMP_WAIT_POLICY':16} {'threads':>7} "
              f"{'sentences/s':>12}")
        for row in rows:
            print(f"{row['batch']:5} {row['precision']:9} {row['omp_wait_policy']:16} "
                  f"{row['threads']:7} {row['seqs_per_s']:12.1f}")
        return

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    facts = runtime_facts("bf16" if args.precision == "bf16" else "off")
    if not args.json:
        print(describe(facts))
    for batch in ([1, 64] if args.batch == "both" else [int(args.batch)]):
        result = measure(batch, args.tokens, args.reps, args.min_seconds, args.precision)
        if args.json:
            print(json.dumps({**result, **facts}), flush=True)
        else:
            print(f"small, batch {batch}, {args.precision}: {result['seqs_per_s']:.1f} sentences/s "
                  f"({args.tokens} tokens each, median of {args.reps})", flush=True)


if __name__ == "__main__":
    main()
