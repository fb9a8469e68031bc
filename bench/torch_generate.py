#!/usr/bin/python3
"""PyTorch greedy generation with GPT-2 124M and a key/value cache, in new tokens per second:
the peer of `attn bench generate`.

Run with Debian's python3-torch:
    /usr/bin/python3 bench/torch_generate.py [--batch 1|32|both] [--precision fp32|bf16|int8]
    /usr/bin/python3 bench/torch_generate.py --sweep     # fp32 / bf16 autocast / int8 x 1 / 2 threads
    /usr/bin/python3 bench/torch_generate.py --report ATTN.json TORCH.json [TORCH.json ...]
        # attn bench generate --json rows beside the best PyTorch run of each batch size

The model is GPT-2 as nanoGPT writes it (bench/torch_train.py's blocks: pre-norm, fused qkv,
tanh GELU, tied output), random weights (seeded). The loop is the fastest one we know how to
write in plain PyTorch 1.13: one forward over the whole prompt fills a preallocated cache (no
torch.cat per step), then each step runs the model on the one new token per row, writes its
keys and values into the cache and attends over the filled part; inference_mode throughout.
Generation is forced to --new-tokens tokens (the arg-max, no early stop), as attn's is. The
figure is new tokens per second of the generation phase; the prompt's time is reported apart.
--precision bf16 runs under torch.autocast("cpu", dtype=torch.bfloat16); int8 is PyTorch's
dynamic quantization (torch.ao.quantization.quantize_dynamic of every nn.Linear, the tied
output layer included), its int8 CPU path.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train import CONFIGS, describe, runtime_facts  # noqa: E402

GPT2 = CONFIGS["gpt2"]


class CachedSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x, cache, start):
        """x [batch, length, d] are positions start .. start + length - 1; cache is this layer's
        (keys, values), each [batch, heads, max_len, d_head]."""
        batch, length, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(batch, length, self.heads, d // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        keys, values = cache
        end = start + length
        keys[:, :, start:end] = k
        values[:, :, start:end] = v
        k, v = keys[:, :, :end], values[:, :, :end]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        if length > 1:
            mask = torch.ones(length, end, dtype=torch.bool).triu(start + 1)
            scores = scores.masked_fill(mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(batch, length, d))


class Block(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attention = CachedSelfAttention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, ffn), nn.GELU(approximate="tanh"), nn.Linear(ffn, d))

    def forward(self, x, cache, start):
        x = x + self.attention(self.norm1(x), cache, start)
        return x + self.mlp(self.norm2(x))


class CachedGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["d_model"]
        self.cfg = cfg
        self.token_embed = nn.Embedding(cfg["tgt_vocab"], d)
        self.position_embed = nn.Embedding(cfg["max_len"], d)
        self.blocks = nn.ModuleList(Block(d, cfg["heads"], cfg["ffn"]) for _ in range(cfg["layers"]))
        self.final_norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, cfg["tgt_vocab"], bias=False)
        self.head.weight = self.token_embed.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)

    def new_cache(self, batch, length, dtype):
        shape = (batch, self.cfg["heads"], length, self.cfg["d_model"] // self.cfg["heads"])
        return [(torch.empty(shape, dtype=dtype), torch.empty(shape, dtype=dtype))
                for _ in self.blocks]

    def forward(self, ids, cache, start):
        """Logits of the last position only: generation needs no others."""
        positions = torch.arange(start, start + ids.shape[1])
        x = self.token_embed(ids) + self.position_embed(positions)
        for block, layer_cache in zip(self.blocks, cache):
            x = block(x, layer_cache, start)
        return self.head(self.final_norm(x[:, -1]))


def generate_once(model, prompts, new_tokens, autocast):
    batch, prompt = prompts.shape
    dtype = torch.bfloat16 if autocast else torch.float32
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        start = time.perf_counter()
        cache = model.new_cache(batch, prompt + new_tokens, dtype)
        logits = model(prompts, cache, 0)
        prefilled = time.perf_counter()
        for t in range(new_tokens):
            ids = logits.argmax(dim=-1, keepdim=True)
            if t + 1 < new_tokens:
                logits = model(ids, cache, prompt + t)
        end = time.perf_counter()
    return prefilled - start, end - prefilled


def measure(batch, precision, prompt, new_tokens, reps):
    torch.manual_seed(0)
    model = CachedGPT(GPT2).eval()
    if precision == "int8":
        model = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    generator = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, GPT2["tgt_vocab"], (batch, prompt), generator=generator)
    autocast = precision == "bf16"
    generate_once(model, prompts, new_tokens, autocast)  # warm-up
    rates, prefills = [], []
    for _ in range(reps):
        prefill_s, generate_s = generate_once(model, prompts, new_tokens, autocast)
        rates.append(batch * new_tokens / generate_s)
        prefills.append(prefill_s)
    return {"bench": "torch_generate", "config": "gpt2", "batch": batch,
            "precision": precision,
            "new_tokens_per_s": round(statistics.median(rates), 2),
            "prefill_s": round(statistics.median(prefills), 4), "prompt": prompt,
            "new_tokens": new_tokens, "reps": reps}


def sweep(script, args):
    """Every precision at 1 and 2 threads, each in a fresh process under
    OMP_WAIT_POLICY=PASSIVE (the best setting for PyTorch on a shared 2-core machine)."""
    rows = []
    for precision in ("fp32", "bf16", "int8"):
        for threads in (1, 2):
            env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
            command = [sys.executable, script, *args, "--json", "--threads", str(threads),
                       "--precision", precision]
            run = subprocess.run(command, env=env, capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"{' '.join(command)} failed:\n{run.stderr}")
            for line in run.stdout.splitlines():
                if line.startswith("{"):
                    print(line, flush=True)
                    rows.append(json.loads(line))
    return rows


def read_json_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def report(attn_path, torch_paths):
    """Each attn row beside PyTorch's best run (any precision, any thread count) of its batch
    size, and beside PyTorch's best of the same precision."""
    attn_rows = read_json_lines(attn_path)
    torch_rows = [row for path in torch_paths for row in read_json_lines(path)]
    for row in attn_rows:
        same_batch = [t for t in torch_rows if t["batch"] == row["batch"]]
        if not same_batch:
            print(f"batch {row['batch']}: no PyTorch run")
            continue
        best = max(same_batch, key=lambda t: t["new_tokens_per_s"])
        line = (f"batch {row['batch']}, attn {row['precision']}: {row['new_tokens_per_s']:.1f} "
                f"new tokens/s; PyTorch's best {best['new_tokens_per_s']:.1f} "
                f"({best['precision']}, {best.get('threads', '?')} threads): "
                f"{row['new_tokens_per_s'] / best['new_tokens_per_s']:.2f}x")
        same = [t for t in same_batch if t["precision"] == row["precision"]]
        if same:
            peer = max(same, key=lambda t: t["new_tokens_per_s"])
            line += (f"; PyTorch {row['precision']} {peer['new_tokens_per_s']:.1f}: "
                     f"{row['new_tokens_per_s'] / peer['new_tokens_per_s']:.2f}x")
        if "bandwidth_share" in row:
            line += (f"; weights {row['weight_gb_s']:.2f} GB/s of {row['read_bandwidth_gb_s']:.2f}"
                     f" GB/s measured ({100 * row['bandwidth_share']:.0f}%)")
        print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", choices=("1", "32", "both"), default="both")
    parser.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="fp32")
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--report", nargs="+", metavar="JSON")
    args = parser.parse_args()
    if args.report:
        if len(args.report) < 2:
            parser.error("--report takes attn's JSON, then one or more PyTorch JSON files")
        report(args.report[0], args.report[1:])
        return
    passed = ["--batch", args.batch, "--prompt", str(args.prompt), "--new-tokens",
              str(args.new_tokens), "--reps", str(args.reps)]
    if args.sweep:
        sweep(os.path.abspath(__file__), passed)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    facts = runtime_facts(args.precision if args.precision == "bf16" else "off")
    if not args.json:
        print(f"torch_generate: GPT-2 124M, {args.prompt}-token prompt, {args.new_tokens} new "
              f"tokens, {args.precision}; {describe(facts)}", flush=True)
    for batch in ((1, 32) if args.batch == "both" else (int(args.batch),)):
        row = measure(batch, args.precision, args.prompt, args.new_tokens, args.reps)
        row.update(threads=facts["threads"], omp_wait_policy=facts["omp_wait_policy"],
                   blas=facts["blas"], torch=facts["torch"])
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"batch {batch}: {row['new_tokens_per_s']:.1f} new tokens/s "
                  f"(prompt read in {row['prefill_s']:.3f} s)", flush=True)


if __name__ == "__main__":
    main()
