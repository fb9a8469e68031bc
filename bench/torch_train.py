#!/usr/bin/python3
"""PyTorch 1.13 training throughput of attn bench train's configurations, for comparison.

Run with Debian's python3-torch:
    /usr/bin/python3 bench/torch_train.py [--config small|base|both|gpt2|classify] [--threads N]
        [--json]
    /usr/bin/python3 bench/torch_train.py --config gpt2 --batch 8 --context 256 ...
    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_train.py ...
    /usr/bin/python3 bench/torch_train.py --autocast bf16 ...   # mixed precision (oneDNN)
    /usr/bin/python3 bench/torch_train.py --sweep     # default / PASSIVE x 1 / 2 threads
    /usr/bin/python3 bench/torch_train.py --report ATTN.jsonl TORCH.jsonl [TORCH.jsonl ...]

One training step = forward + backward + Adam update of a batch; the figure is target tokens
per second (batch x target length, the tokens the loss scores) at the median step time after
warm-up steps. The model is what a PyTorch user writes for the base Transformer:
nn.Transformer(batch_first=True), embeddings scaled by sqrt(d_model) plus sinusoidal
positions, an output projection tied to the target embedding, CrossEntropyLoss with label
smoothing 0.1 and ignore_index=<pad>, a causal target mask and key padding masks.
Sentences are random ids of exactly the configured lengths (<s> y1 .. y_{T-1} in, y1 .. y_T
scored), so the padding masks are present but mask nothing.

gpt2 is GPT-2 124M (12 layers, 12 heads, 768 wide, vocabulary 50257) written with torch.nn
as nanoGPT writes it for a PyTorch without F.scaled_dot_product_attention (1.13): token and
learned position embeddings, pre-norm blocks with a fused QKV linear, the causal mask applied
to the scores before the softmax, GELU (tanh), a final layer norm and the output tied to the
token embedding without bias; no dropout, plain cross-entropy over batch x context tokens.

classify is the word-language classifier of issue 32 as attn train --task classify picks it: an
nn.TransformerEncoder (batch_first, post-norm, ReLU, dropout 0.1) over scaled embeddings plus
sinusoidal positions, the mean of its states over each text's tokens, a linear layer to the 20
classes, CrossEntropyLoss with label smoothing 0.1; its figure is text tokens per second (340
texts of 12 tokens a batch; the JSON's tgt_tokens_per_s holds them, context is the text length).

What limits PyTorch here, printed in the header and the JSON:
  - torch.get_num_threads() is 1 by default in this environment although 2 CPUs are usable;
    --threads N calls torch.set_num_threads(N).
  - Debian's torch calls whatever libblas.so.3 the alternatives system selects: the
    reference netlib BLAS (a few GFLOP/s) unless OpenBLAS is installed. OpenBLAS 0.3.21 does
    not recognise every recent Xeon and then runs a generic kernel; OPENBLAS_CORETYPE=SkylakeX
    selects its AVX-512 kernels. The header names the BLAS library the process loaded.
  - OMP_WAIT_POLICY (read by the OpenMP runtime at start-up, so set it in the environment):
    PASSIVE makes idle OpenMP threads sleep instead of spinning against other threads.
  - --autocast bf16 runs the forward and the loss under torch.autocast("cpu",
    dtype=torch.bfloat16): PyTorch's mixed precision, the peer of attn's --precision bf16
    (bf16 products through oneDNN where the CPU has AVX512_BF16, fp32 weights and Adam).
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

PAD_ID, BOS_ID = 0, 1
FIRST_WORD_ID = 4  # ids 0..3 are <pad>, <s>, </s>, <unk>, as in attn's vocabularies

CONFIGS = {
    "small": dict(d_model=256, heads=4, encoder_layers=3, decoder_layers=3, ffn=1024,
                  src_vocab=64, tgt_vocab=64, batch=64, src_len=12, tgt_len=10, dropout=0.1,
                  steps=30, warmup=3),
    "base": dict(d_model=512, heads=8, encoder_layers=6, decoder_layers=6, ffn=2048,
                 src_vocab=8000, tgt_vocab=8000, batch=32, src_len=30, tgt_len=30, dropout=0.1,
                 steps=8, warmup=2),
    "classify": dict(classifier=True, d_model=256, heads=4, encoder_layers=3, ffn=1024,
                     src_vocab=108, classes=20, batch=340, src_len=12, dropout=0.1, steps=20,
                     warmup=3),
    "gpt2": dict(language_model=True, d_model=768, heads=12, layers=12, ffn=3072,
                 tgt_vocab=50257, batch=4, tgt_len=64, max_len=1024, dropout=0.0, steps=3,
                 warmup=1),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        batch, length, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(batch, length, self.heads, d // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(length, length, dtype=torch.bool).triu(1)
        weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(batch, length, d))


class Block(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attention = CausalSelfAttention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, ffn), nn.GELU(approximate="tanh"), nn.Linear(ffn, d))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """GPT-2 as nanoGPT writes it (see the module's docstring)."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg["d_model"]
        self.token_embed = nn.Embedding(cfg["tgt_vocab"], d)
        self.position_embed = nn.Embedding(cfg["max_len"], d)
        self.blocks = nn.ModuleList(Block(d, cfg["heads"], cfg["ffn"]) for _ in range(cfg["layers"]))
        self.final_norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, cfg["tgt_vocab"], bias=False)
        self.head.weight = self.token_embed.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, ids):
        x = self.token_embed(ids) + self.position_embed(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x))


def sinusoidal_positions(length, d_model):
    """The paper's interleaved layout: sin on even features, cos on odd ones."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rates = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(position * rates)
    table[:, 1::2] = torch.cos(position * rates)
    return table


class Seq2SeqTransformer(nn.Module):
    """nn.Transformer with scaled embeddings, sinusoidal positions and a tied output layer."""

    def __init__(self, cfg, max_len=256):
        super().__init__()
        d = cfg["d_model"]
        self.d_model = d
        self.src_embed = nn.Embedding(cfg["src_vocab"], d, padding_idx=PAD_ID)
        self.tgt_embed = nn.Embedding(cfg["tgt_vocab"], d, padding_idx=PAD_ID)
        self.register_buffer("positions", sinusoidal_positions(max_len, d))
        self.dropout = nn.Dropout(cfg["dropout"])
        self.transformer = nn.Transformer(
            d_model=d, nhead=cfg["heads"], num_encoder_layers=cfg["encoder_layers"],
            num_decoder_layers=cfg["decoder_layers"], dim_feedforward=cfg["ffn"],
            dropout=cfg["dropout"], batch_first=True)
        self.project = nn.Linear(d, cfg["tgt_vocab"], bias=False)
        self.project.weight = self.tgt_embed.weight
        # N(0, 1/d) as fairseq and tensor2tensor initialise embeddings that are scaled by
        # sqrt(d) and tied to the output layer (N(0, 1) would start with logits of size ~sqrt(d))
        for table in (self.src_embed, self.tgt_embed):
            nn.init.normal_(table.weight, std=d ** -0.5)
            with torch.no_grad():
                table.weight[PAD_ID].zero_()

    def embed(self, table, ids):
        return self.dropout(table(ids) * math.sqrt(self.d_model) + self.positions[:ids.shape[1]])

    def encode(self, src):
        padding = src == PAD_ID
        return self.transformer.encoder(self.embed(self.src_embed, src),
                                        src_key_padding_mask=padding), padding

    def decode(self, tgt_in, memory, src_padding):
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1])
        hidden = self.transformer.decoder(self.embed(self.tgt_embed, tgt_in), memory,
                                          tgt_mask=causal, tgt_key_padding_mask=tgt_in == PAD_ID,
                                          memory_key_padding_mask=src_padding)
        return self.project(hidden)

    def forward(self, src, tgt_in):
        memory, src_padding = self.encode(src)
        return self.decode(tgt_in, memory, src_padding)


class Classifier(nn.Module):
    """A Transformer encoder, mean-pooled over each text's tokens, and a linear layer."""

    def __init__(self, cfg, max_len=256):
        super().__init__()
        d = cfg["d_model"]
        self.d_model = d
        self.embed = nn.Embedding(cfg["src_vocab"], d, padding_idx=PAD_ID)
        nn.init.normal_(self.embed.weight, std=d ** -0.5)
        self.register_buffer("positions", sinusoidal_positions(max_len, d))
        self.dropout = nn.Dropout(cfg["dropout"])
        layer = nn.TransformerEncoderLayer(d_model=d, nhead=cfg["heads"],
                                           dim_feedforward=cfg["ffn"], dropout=cfg["dropout"],
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=cfg["encoder_layers"],
                                             norm=nn.LayerNorm(d))
        self.head = nn.Linear(d, cfg["classes"])

    def forward(self, src):
        padding = src == PAD_ID
        x = self.dropout(self.embed(src) * math.sqrt(self.d_model) + self.positions[:src.shape[1]])
        states = self.encoder(x, src_key_padding_mask=padding)
        keep = (~padding).unsqueeze(-1).to(states.dtype)
        return self.head((states * keep).sum(1) / keep.sum(1))


def random_batch(cfg, generator):
    """Source ids [B, S] and target ids [B, T + 1] (<s> first), all words, no padding; a
    language model's windows of T + 1 words and no source."""
    batch = cfg["batch"]
    if cfg.get("classifier"):
        src = torch.randint(FIRST_WORD_ID, cfg["src_vocab"], (batch, cfg["src_len"]),
                            generator=generator)
        return src, torch.randint(0, cfg["classes"], (batch,), generator=generator)
        words = torch.randint(FIRST_WORD_ID, cfg["tgt_vocab"], (batch, cfg["tgt_len"] + 1),
                              generator=generator)
        return None, words
    src = torch.randint(FIRST_WORD_ID, cfg["src_vocab"], (batch, cfg["src_len"]), generator=generator)
    words = torch.randint(FIRST_WORD_ID, cfg["tgt_vocab"], (batch, cfg["tgt_len"]), generator=generator)
    tgt = torch.cat([torch.full((batch, 1), BOS_ID), words], dim=1)
    return src, tgt


def blas_library():
    """The BLAS shared library this process has loaded (after a matmul has run)."""
    torch.mm(torch.ones(64, 64), torch.ones(64, 64))
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps
                 if len(line.split()) >= 6 and "blas" in os.path.basename(line.split()[-1])}
    return ", ".join(sorted(paths)) or "none found"


def runtime_facts(autocast):
    """What decides PyTorch's speed here, for the header and every JSON line."""
    return {
        "torch": torch.__version__,
        "autocast": autocast,
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "blas": blas_library(),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "unset"),
        "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
        "cpus_usable": len(os.sched_getaffinity(0)),
        # the machine may be shared: a load above the thread count means waiting for a core
        "load_average_1min": round(os.getloadavg()[0], 2),
    }


def describe(facts):
    return (f"torch {facts['torch']}; autocast {facts['autocast']}; "
            f"torch threads {facts['threads']} "
            f"({facts['cpus_usable']} CPUs usable); OMP_WAIT_POLICY={facts['omp_wait_policy']}; "
            f"BLAS {facts['blas']} (OPENBLAS_CORETYPE={facts['openblas_coretype']}, "
            f"OPENBLAS_NUM_THREADS={facts['openblas_num_threads']}); "
            f"load average {facts['load_average_1min']}")


def peak_rss_mib():
    """Peak resident memory of this process so far (all configurations run before)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def measure(name, cfg, steps, warmup, autocast):
    torch.manual_seed(0)
    language_model = cfg.get("language_model", False)
    classifier = cfg.get("classifier", False)
    model = (GPT(cfg) if language_model else Classifier(cfg) if classifier
             else Seq2SeqTransformer(cfg)).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = (nn.CrossEntropyLoss() if language_model
               else nn.CrossEntropyLoss(label_smoothing=0.1) if classifier
               else nn.CrossEntropyLoss(label_smoothing=0.1, ignore_index=PAD_ID))
    generator = torch.Generator().manual_seed(1)
    times, cpu_times, losses = [], [], []
    for step in range(warmup + steps):
        src, tgt = random_batch(cfg, generator)
        start, cpu_start = time.perf_counter(), time.process_time()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast == "bf16"):
            if classifier:
                loss = loss_fn(model(src), tgt)  # tgt: the texts' classes
            else:
                logits = model(tgt[:, :-1]) if language_model else model(src, tgt[:, :-1])
                loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        if step >= warmup:
            times.append(elapsed)
            cpu_times.append(cpu)
            losses.append(loss.item())
    length = cfg["src_len"] if classifier else cfg["tgt_len"]
    tokens = cfg["batch"] * length
    median = statistics.median(times)
    return {
        "bench": "torch_train", "config": name, "batch": cfg["batch"],
        "context": length,
        "tgt_tokens_per_s": round(tokens / median, 1),
        "tgt_tokens_per_step": tokens, "median_step_s": round(median, 5),
        "min_step_s": round(min(times), 5), "steps": steps, "warmup_steps": warmup,
        # CPU seconds of all threads (spinning included): less sensitive to a shared machine
        "median_cpu_s_per_step": round(statistics.median(cpu_times), 5),
        "params": sum(p.numel() for p in model.parameters()),
        "final_loss": round(losses[-1], 4), "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def sweep(script, args):
    """Re-run script (with args and --json) under default and PASSIVE OMP_WAIT_POLICY with 1
    and 2 threads, without and with bf16 autocast, each in a fresh process (the policy is read
    when OpenMP starts)."""
    rows = []
    for policy, autocast in (("default", "off"), ("PASSIVE", "off"), ("default", "bf16"),
                             ("PASSIVE", "bf16")):
        for threads in (1, 2):
            env = dict(os.environ)
            env.pop("OMP_WAIT_POLICY", None)
            if policy != "default":
                env["OMP_WAIT_POLICY"] = policy
            command = [sys.executable, script, *args, "--json", "--threads", str(threads),
                       "--autocast", autocast]
            run = subprocess.run(command, env=env, capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"{' '.join(command)} (OMP_WAIT_POLICY={policy}) failed:\n{run.stderr}")
            for line in run.stdout.splitlines():
                if line.startswith("{"):
                    row = json.loads(line)
                    print(line, flush=True)
                    rows.append(row)
    return rows


def read_json_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def report(attn_path, torch_paths):
    """attn's rows (attn bench train --json) beside the best PyTorch run of each config."""
    attn_rows = read_json_lines(attn_path)
    torch_rows = [row for path in torch_paths for row in read_json_lines(path)]
    settings = sorted({f"OMP_WAIT_POLICY={r['omp_wait_policy']}, {r['threads']} threads, "
                       f"autocast {r.get('autocast', 'off')}" for r in torch_rows})
    if attn_rows:
        print(f"train: attn {attn_rows[0]['isa']} {attn_rows[0]['threads']} threads; torch "
              f"best of: {'; '.join(settings)}; target tokens/s at the median step, "
              "indicative on a shared machine")
    print("%-6s %-5s %10s %10s %7s %9s %9s %-14s %12s %12s" % (
        "config", "attn", "attn tok/s", "torch tok/s", "ratio", "attn GF/s", "torch GF/s",
        "torch best", "attn params", "torch params"))
    for row in attn_rows:
        matches = [r for r in torch_rows if r["config"] == row["config"]
                   and r.get("batch") == row.get("batch") and r.get("context") == row.get("context")]
        if not matches:
            continue
        best = max(matches, key=lambda r: r["tgt_tokens_per_s"])
        torch_gflops = row["gflop_per_step"] / best["median_step_s"]
        best_setting = f"{best.get('autocast', 'off')}/{best['omp_wait_policy']}/{best['threads']}"
        print("%-6s %-5s %10.0f %10.0f %6.2fx %9.1f %9.1f %-14s %12d %12d" % (
            row["config"], row.get("precision", "fp32"), row["tgt_tokens_per_s"],
            best["tgt_tokens_per_s"], row["tgt_tokens_per_s"] / best["tgt_tokens_per_s"],
            row["gflops"], torch_gflops, best_setting, row["params"], best["params"]))
    print("GF/s: attn's FLOP count per step (matrix products, backward = 2x forward) over each "
          "one's median step; attn's parameters include the output bias "
          "(generator.bias, tgt_vocab floats) that torch's bias-free tied projection lacks; "
          "torch best: autocast/OMP_WAIT_POLICY/threads of the fastest PyTorch run")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=["small", "base", "both", "gpt2", "classify"],
                        default="both")
    parser.add_argument("--batch", type=int, help="sequences per batch (default: the config's)")
    parser.add_argument("--context", type=int, help="gpt2: tokens per sequence [64]")
    parser.add_argument("--steps", type=int, help="timed steps (default: 30 small, 8 base)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (default: 3 small, 2 base)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads(N); default: torch's own")
    parser.add_argument("--json", action="store_true", help="one JSON line per configuration")
    parser.add_argument("--autocast", choices=["off", "bf16"], default="off",
                        help='bf16: forward and loss under torch.autocast("cpu", bfloat16)')
    parser.add_argument("--sweep", action="store_true",
                        help="run default/PASSIVE OMP_WAIT_POLICY x 1/2 threads in subprocesses")
    parser.add_argument("--report", nargs="+", metavar="JSONL",
                        help="attn bench train --json output, then one or more --json outputs "
                             "of this script: print them side by side")
    args = parser.parse_args()
    if args.report:
        if len(args.report) < 2:
            parser.error("--report needs attn's JSON lines and at least one PyTorch file")
        report(args.report[0], args.report[1:])
        return
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.warmup is not None and args.warmup < 0:
        parser.error("--warmup must be at least 0")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")

    names = ["small", "base"] if args.config == "both" else [args.config]
    if args.context is not None and args.config != "gpt2":
        parser.error("--context is gpt2's (the language model's window)")
    for name in names:
        if args.batch is not None:
            CONFIGS[name]["batch"] = args.batch
        if args.context is not None:
            CONFIGS[name]["tgt_len"] = args.context
    if args.sweep:
        passed = ["--config", args.config]
        if args.batch is not None:
            passed += ["--batch", str(args.batch)]
        if args.context is not None:
            passed += ["--context", str(args.context)]
        if args.steps is not None:
            passed += ["--steps", str(args.steps)]
        if args.warmup is not None:
            passed += ["--warmup", str(args.warmup)]
        rows = sweep(os.path.abspath(__file__), passed)
        print(f"\n{'config':7} {'OMP_WAIT_POLICY':16} {'autocast':8} {'threads':>7} "
              f"{'tgt tokens/s':>13} {'CPU s/step':>11}")
        for row in rows:
            print(f"{row['config']:7} {row['omp_wait_policy']:16} {row['autocast']:8} "
                  f"{row['threads']:7} {row['tgt_tokens_per_s']:13.0f} "
                  f"{row['median_cpu_s_per_step']:11.3f}")
        return

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    facts = runtime_facts(args.autocast)
    if not args.json:
        print(describe(facts))
    for name in names:
        cfg = CONFIGS[name]
        steps = args.steps if args.steps is not None else cfg["steps"]
        warmup = args.warmup if args.warmup is not None else cfg["warmup"]
        result = measure(name, cfg, steps, warmup, args.autocast)
        if args.json:
            print(json.dumps({**result, **facts}), flush=True)
        else:
            print(f"{name}: {result['tgt_tokens_per_s']:.0f} target tokens/s "
                  f"(median step {result['median_step_s'] * 1e3:.1f} ms over {steps} steps "
                  f"after {warmup}; {result['tgt_tokens_per_step']} tokens/step; "
                  f"{result['params'] / 1e6:.2f} M parameters; peak RSS "
                  f"{result['peak_rss_mib']:.0f} MiB)", flush=True)


if __name__ == "__main__":
    main()
