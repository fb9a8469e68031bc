#!/usr/bin/python3
"""Classification throughput, lines per second at batch 64: attn, PyTorch and fastText on the
same texts, in one run (issue 32's speed report).

    OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/classify_speed.py \
        --model runs/classify-wordlang/model.safetensors --text data/wordlang/test.tsv \
        [--fasttext runs/classify-fasttext-wordlang/model.bin] [--lines 5000] [--json]

attn: attn.Classifier(MODEL).classify(texts), batches of 64 in file order (the binding's and
attn classify's batch), the model loaded before the clock starts, ATTN_NUM_THREADS threads (2
unless set); its precision is the model file's at the library's default.
PyTorch: a model of the same shape as MODEL's config (width, heads, layers, feed-forward,
characters, classes, its pooling: mean, the classification token or attention pooling; random
weights, which do not change the time) under torch.no_grad() in eval mode, batches of 64 in the
same order, each padded to its longest text, with a key padding mask; in fp32 and with the model
cast to bf16 (autocast breaks nn.TransformerEncoder's inference fast path in torch 1.13), 1 and 2
threads, the best reported (OMP_WAIT_POLICY and OPENBLAS_CORETYPE are read at start-up:
set them in the environment). A text is its characters, as a char model reads it.
fastText: `fasttext predict MODEL.bin FILE` on the same texts, one thread; its model load (a
large file: 0.8 GB with character n-grams) is timed alone on a one-line file and taken out.
Every figure is the median of --repeats runs. There is no target: fastText is a linear model."""
import argparse
import json
import math
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import warnings

BATCH = 64
# torch 1.13's encoder fast path says its nested tensors are a prototype: not this bench's news
warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")


def read_texts(path, limit):
    texts = []
    with open(path, encoding="utf-8") as file:
        for line in file:
            line = line.rstrip("\n")
            texts.append(line.split("\t", 1)[1] if "\t" in line else line)
            if len(texts) == limit:
                break
    return texts


def model_config(path):
    with open(path, "rb") as file:
        size = struct.unpack("<Q", file.read(8))[0]
        header = json.loads(file.read(size))
    return json.loads(header["__metadata__"]["attn_config"])


def median_seconds(run, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_attn(path, texts, repeats):
    from attn import Classifier
    with Classifier(path) as clf:
        clf.classify(texts[:BATCH])  # first touches of the weights and the arena
        return median_seconds(lambda: clf.classify(texts), repeats)


def torch_model(config):
    import torch
    from torch import nn

    d, pooling = config["d_model"], config["pooling"]

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(config["src_vocab"], d, padding_idx=0)
            position = torch.arange(config["max_len"], dtype=torch.float32)[:, None]
            rates = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(1e4) / d))
            table = torch.zeros(config["max_len"], d)
            table[:, 0::2], table[:, 1::2] = torch.sin(position * rates), torch.cos(position * rates)
            self.register_buffer("positions", table)
            layer = nn.TransformerEncoderLayer(d, config["num_heads"], config["ffn_dim"],
                                               dropout=0.0, batch_first=True,
                                               norm_first=config["norm_first"])
            self.encoder = nn.TransformerEncoder(layer, config["encoder_layers"],
                                                 norm=nn.LayerNorm(d))
            self.pool_proj = nn.Linear(d, d)
            self.query = nn.Parameter(torch.randn(d) / math.sqrt(d))
            self.head = nn.Linear(d, config["num_classes"])

        def forward(self, ids):
            if pooling == "cls":
                ids = torch.cat([torch.ones(ids.shape[0], 1, dtype=ids.dtype), ids], dim=1)
            padding = ids == 0
            x = self.embed(ids) * math.sqrt(d) + self.positions[:ids.shape[1]]
            states = self.encoder(x, src_key_padding_mask=padding)
            if pooling == "cls":
                return self.head(states[:, 0])
            if pooling == "mean":
                keep = (~padding).unsqueeze(-1).to(states.dtype)
                return self.head((states * keep).sum(1) / keep.sum(1))
            scores = torch.tanh(self.pool_proj(states)) @ self.query
            weights = torch.softmax(scores.masked_fill(padding, float("-inf")), dim=1)
            return self.head((weights.unsqueeze(-1) * states).sum(1))

    return Classifier().eval()


def torch_batches(texts, vocab):
    import torch
    ids = {}
    batches = []
    for start in range(0, len(texts), BATCH):
        chunk = texts[start:start + BATCH]
        longest = max(len(text) for text in chunk)
        rows = [[ids.setdefault(c, 4 + len(ids) % (vocab - 4)) for c in text] for text in chunk]
        batches.append(torch.tensor([row + [0] * (longest - len(row)) for row in rows]))
    return batches


def time_torch(config, texts, repeats, threads, dtype):
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch_model(config).to(getattr(torch, dtype))
    batches = torch_batches(texts, config["src_vocab"])

    def run():
        with torch.no_grad():
            for batch in batches:
                torch.softmax(model(batch).float(), dim=-1)

    run()
    return median_seconds(run, repeats)


def time_fasttext(model, texts, repeats):
    """Seconds to predict the texts, and to load the model (taken out of the first)."""
    def predict_seconds(lines):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as file:
            file.write("".join(" ".join(text.split()) + "\n" for text in lines))
            file.flush()
            return median_seconds(lambda: subprocess.run(
                ["fasttext", "predict", model, file.name], check=True,
                stdout=subprocess.DEVNULL), repeats)

    load = predict_seconds(texts[:1])
    return predict_seconds(texts) - load, load


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="an attn classifier (safetensors)")
    parser.add_argument("--text", required=True, help="texts, one a line (label<TAB>text too)")
    parser.add_argument("--fasttext", help="a fastText model (.bin) of the same task")
    parser.add_argument("--lines", type=int, default=5000, help="the first N lines [5000]")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON object at the end")
    args = parser.parse_args()
    texts = read_texts(args.text, args.lines)
    config = model_config(args.model)
    rows = []

    def report(name, seconds, **facts):
        row = {"system": name, "lines": len(texts), "seconds": round(seconds, 4),
               "lines_per_s": round(len(texts) / seconds, 1), **facts}
        rows.append(row)
        if not args.json:
            extra = ", ".join(f"{k} {v}" for k, v in facts.items())
            print(f"{name:10s} {row['lines_per_s']:>10.0f} lines/s  ({extra})", flush=True)

    threads = int(os.environ.get("ATTN_NUM_THREADS", "2"))
    os.environ["ATTN_NUM_THREADS"] = str(threads)
    report("attn", time_attn(args.model, texts, args.repeats), threads=threads)
    best = None
    for dtype in ("float32", "bfloat16"):
        for torch_threads in (1, 2):
            seconds = time_torch(config, texts, args.repeats, torch_threads, dtype)
            if best is None or seconds < best[0]:
                best = (seconds, dtype, torch_threads)
            if not args.json:
                print(f"  torch {dtype}, {torch_threads} threads: "
                      f"{len(texts) / seconds:.0f} lines/s", flush=True)
    report("torch best", best[0], dtype=best[1], threads=best[2])
    if args.fasttext:
        seconds, load = time_fasttext(args.fasttext, texts, args.repeats)
        report("fastText", seconds, threads=1, load_seconds=round(load, 2))
    ratio = rows[0]["lines_per_s"] / rows[1]["lines_per_s"]
    if args.json:
        print(json.dumps({"bench": "classify_speed", "batch": BATCH, "model": args.model,
                          "config": {k: config[k] for k in ("d_model", "num_heads",
                                                            "encoder_layers", "ffn_dim",
                                                            "pooling")},
                          "rows": rows, "attn_over_torch": round(ratio, 2)}))
    else:
        print(f"attn / torch best: {ratio:.2f}x (batch {BATCH}, {len(texts)} lines of {args.text})")


if __name__ == "__main__":
    sys.exit(main())
