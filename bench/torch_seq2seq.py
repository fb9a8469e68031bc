#!/usr/bin/python3
"""PyTorch 1.13 baseline for the recipes: the same Transformer configuration, the same data,
the same tokens, the same wall-clock budget, and the same output files, so `attn eval` scores
both the same way.

    /usr/bin/python3 bench/torch_seq2seq.py g2p   [--data DIR] [--time-limit S] [--out DIR]
    /usr/bin/python3 bench/torch_seq2seq.py bible [--data DIR] [--time-limit S] [--out DIR]
    (TIME_LIMIT and OUT in the environment work too, as for the recipes)
    --decode-only decodes again with the model.pt of an earlier run in --out.

  g2p    recipes/g2p-cmudict.sh's data and Transformer: DIR (default ../shared/data/g2p-std)
         holds train_full.tsv (else train.tsv), dev.tsv, test.tsv; letters in, phonemes out;
         test.hyp: one "word<TAB>pronunciation" line per distinct test word.
  bible  recipes/bible-es-en.sh's: DIR (default ../shared/data/bible) holds
         {train,dev,test}.{es,en}; BPE with 8000 merges per side; test.hyp: one line per
         test verse, in order.

What is the same as attn's recipe:
  - tokens: attn's own tokenizers (char, word, BPE), learned by libattn through ctypes from the
    same training lines, so both models see exactly the same ids; decoding undoes them the
    same way (attn_tokenizer_decode);
  - model: nn.Transformer(batch_first=True), post-norm, ReLU, final norms, embeddings scaled by
    sqrt(d_model) plus interleaved sinusoidal positions, output projection tied to the target
    embedding, dropout and label smoothing as the recipe; initialised as attn initialises
    (xavier_uniform weights as nn.Transformer, zero biases, embeddings N(0, 1/d_model)), from
    other random numbers;
  - training: Adam (0.9, 0.98, eps 1e-9), the peak rate and the recipe's schedule: the inverse
    square root lr * min(t / warmup, sqrt(warmup / t)), or (--schedule cosine) attn's cosine
    annealed over the time limit, lr * min(1, t / warmup) * (1 + cos(pi * min(1, s / limit))) / 2
    after s seconds of training (attn_lr_at_time), global gradient norm clipped to 1, length-bucketed
    batches of at most --batch-tokens padded source + target tokens (<s> and </s> counted),
    shuffled each epoch; validation (plain cross-entropy per target token) every --eval-every
    updates and at the end, keeping the best weights; the clock covers training and
    validation, as attn train's --time-limit;
  - decoding: greedy, in batches, up to 2 x source + 10 tokens, re-running the decoder over the
    prefix at each step (nn.Transformer has no incremental decoding).

PyTorch's threads: --threads N (default: every usable core, as attn) through
torch.set_num_threads; run it with OMP_WAIT_POLICY=PASSIVE, which is PyTorch's better setting
on this machine (bench/torch_train.py). Writes to --out: model.pt, train.jsonl (attn's field
names: step, epoch, train_loss, valid_loss, elapsed), test.hyp and scores.json (settings and
training figures; score test.hyp with attn eval as the recipes do).
"""
import argparse
import ctypes
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
PAD, BOS, EOS = 0, 1, 2  # attn's vocabularies: <pad> <s> </s> <unk> first

TASKS = {
    "g2p": dict(data=ROOT.parent / "shared" / "data" / "g2p-std", out="runs/torch-g2p-cmudict",
                src_tokens="char", tgt_tokens="word", layers=3, d_model=256, heads=4,
                ffn=1024, dropout=0.1, label_smoothing=0.1, lr=1e-3, warmup=1000,
                schedule="cosine", batch_tokens=3000, eval_every=500, time_limit=3600),
    "bible": dict(data=ROOT.parent / "shared" / "data" / "bible", out="runs/torch-bible-es-en",
                  src_tokens="bpe:8000", tgt_tokens="bpe:8000", layers=3, d_model=256, heads=4,
                  ffn=1024, dropout=0.1, label_smoothing=0.1, lr=1e-3, warmup=1000,
                  schedule="inverse-sqrt", batch_tokens=6000, eval_every=500, time_limit=3600),
}


# ---- attn's tokenizers through ctypes -----------------------------------------------------

class _TokenizerConfig(ctypes.Structure):
    """attn_tokenizer_config, field for field (attn_data.h)."""
    _fields_ = [("kind", ctypes.c_int), ("bpe_merges", ctypes.c_int64),
                ("min_count", ctypes.c_int64), ("max_vocab", ctypes.c_int64),
                ("byte_fallback", ctypes.c_int), ("spm_vocab_size", ctypes.c_int64),
                ("spm_bpe", ctypes.c_int)]


def _load_libattn():
    path = os.environ.get("ATTN_LIBRARY") or str(ROOT / "build" / "libattn.so")
    try:
        lib = ctypes.CDLL(path)
    except OSError as err:
        sys.exit(f"torch_seq2seq: cannot load libattn for its tokenizers ({err}); run make first "
                 "or set ATTN_LIBRARY")
    lib.attn_last_error.restype = ctypes.c_char_p
    lib.attn_tokenizer_config_parse.argtypes = [ctypes.c_char_p, ctypes.POINTER(_TokenizerConfig)]
    lib.attn_tokenizer_train.argtypes = [ctypes.POINTER(_TokenizerConfig),
                                         ctypes.POINTER(ctypes.c_char_p), ctypes.c_int64,
                                         ctypes.POINTER(ctypes.c_void_p)]
    lib.attn_tokenizer_destroy.argtypes = [ctypes.c_void_p]
    lib.attn_tokenizer_vocab.argtypes = [ctypes.c_void_p]
    lib.attn_tokenizer_vocab.restype = ctypes.c_void_p
    lib.attn_vocab_size.argtypes = [ctypes.c_void_p]
    lib.attn_vocab_size.restype = ctypes.c_int64
    lib.attn_tokenizer_encode.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                          ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)),
                                          ctypes.POINTER(ctypes.c_int64)]
    lib.attn_tokenizer_decode.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32),
                                          ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)]
    lib.free.argtypes = [ctypes.c_void_p]
    return lib


class Tokenizer:
    """attn_tokenizer_* learned from lines: encode to id lists, decode back to text."""

    def __init__(self, lib, spec, lines):
        self.lib = lib
        config = _TokenizerConfig()
        self._check(lib.attn_tokenizer_config_parse(spec.encode(), ctypes.byref(config)), spec)
        encoded = (ctypes.c_char_p * len(lines))(*(line.encode("utf-8") for line in lines))
        self.handle = ctypes.c_void_p()
        self._check(lib.attn_tokenizer_train(ctypes.byref(config), encoded, len(lines),
                                             ctypes.byref(self.handle)), "train")
        self.size = lib.attn_vocab_size(lib.attn_tokenizer_vocab(self.handle))

    def _check(self, status, what):
        if status != 0:
            sys.exit(f"torch_seq2seq: tokenizer {what}: {self.lib.attn_last_error().decode()}")

    def encode(self, text):
        ids, count = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_int64()
        self._check(self.lib.attn_tokenizer_encode(self.handle, text.encode("utf-8"),
                                                   ctypes.byref(ids), ctypes.byref(count)),
                    "encode")
        result = ids[:count.value]
        self.lib.free(ids)
        return result

    def decode(self, ids):
        array = (ctypes.c_int32 * len(ids))(*ids)
        text = ctypes.c_void_p()
        self._check(self.lib.attn_tokenizer_decode(self.handle, array, len(ids),
                                                   ctypes.byref(text)), "decode")
        result = ctypes.string_at(text).decode("utf-8")
        self.lib.free(text)
        return result


# ---- data ---------------------------------------------------------------------------------

def read_tsv(path):
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        source, target = line.split("\t")
        pairs.append((source, target))
    return pairs


def read_parallel(source_path, target_path):
    sources = source_path.read_text(encoding="utf-8").splitlines()
    targets = target_path.read_text(encoding="utf-8").splitlines()
    if len(sources) != len(targets):
        sys.exit(f"torch_seq2seq: {source_path} and {target_path} differ in length")
    return list(zip(sources, targets))


def load_task(task, data):
    """(train pairs, dev pairs, test sources, write_hyp(outputs, path))."""
    if task == "g2p":
        train_file = data / "train_full.tsv"
        train = read_tsv(train_file if train_file.exists() else data / "train.tsv")
        dev = read_tsv(data / "dev.tsv")
        words = list(dict.fromkeys(word for word, _ in read_tsv(data / "test.tsv")))

        def write_hyp(outputs, path):
            path.write_text("".join(f"{w}\t{o}\n" for w, o in zip(words, outputs)), "utf-8")
        return train, dev, words, write_hyp
    train = read_parallel(data / "train.es", data / "train.en")
    dev = read_parallel(data / "dev.es", data / "dev.en")
    test = (data / "test.es").read_text(encoding="utf-8").splitlines()

    def write_hyp(outputs, path):
        path.write_text("".join(f"{o}\n" for o in outputs), "utf-8")
    return train, dev, test, write_hyp


def encode_pairs(pairs, source_tokenizer, target_tokenizer):
    return [(source_tokenizer.encode(s), [BOS] + target_tokenizer.encode(t) + [EOS])
            for s, t in pairs]


def make_batches(pairs, batch_tokens, rng=None):
    """Length-bucketed batches: pairs sorted by (source, target) length (ties at random when
    shuffling), cut when size x (longest source + longest target) would pass batch_tokens."""
    order = list(range(len(pairs)))
    keys = [rng.random() if rng else 0.0 for _ in order]
    order.sort(key=lambda i: (len(pairs[i][0]), len(pairs[i][1]), keys[i]))
    batches, current, longest_src, longest_tgt = [], [], 0, 0
    for i in order:
        src, tgt = pairs[i]
        new_src, new_tgt = max(longest_src, len(src)), max(longest_tgt, len(tgt))
        if current and (len(current) + 1) * (new_src + new_tgt) > batch_tokens:
            batches.append(current)
            current, new_src, new_tgt = [], len(src), len(tgt)
        current.append(i)
        longest_src, longest_tgt = new_src, new_tgt
    if current:
        batches.append(current)
    if rng:
        rng.shuffle(batches)
    return batches


def pad(sequences):
    longest = max(len(s) for s in sequences)
    return torch.tensor([s + [PAD] * (longest - len(s)) for s in sequences], dtype=torch.long)


# ---- model --------------------------------------------------------------------------------

def sinusoidal_positions(length, d_model):
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rates = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32)
                      * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(position * rates)
    table[:, 1::2] = torch.cos(position * rates)
    return table


class Seq2Seq(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, cfg, max_len=1024):
        super().__init__()
        d = cfg["d_model"]
        self.scale = math.sqrt(d)
        self.src_embed = nn.Embedding(src_vocab, d)
        self.tgt_embed = nn.Embedding(tgt_vocab, d)
        self.register_buffer("positions", sinusoidal_positions(max_len, d))
        self.embed_dropout = nn.Dropout(cfg["dropout"])
        self.transformer = nn.Transformer(
            d_model=d, nhead=cfg["heads"], num_encoder_layers=cfg["layers"],
            num_decoder_layers=cfg["layers"], dim_feedforward=cfg["ffn"],
            dropout=cfg["dropout"], batch_first=True)
        self.generator = nn.Linear(d, tgt_vocab)
        self.generator.weight = self.tgt_embed.weight
        # attn's initialisation: nn.Transformer's xavier_uniform weights (its constructor
        # already did that), zero biases, embeddings N(0, 1/d_model) so that the sqrt(d_model)
        # scale gives them unit variance.
        with torch.no_grad():
            for name, parameter in self.named_parameters():
                if name.endswith("bias"):
                    parameter.zero_()
            nn.init.normal_(self.src_embed.weight, std=d ** -0.5)
            nn.init.normal_(self.tgt_embed.weight, std=d ** -0.5)

    def embed(self, table, ids):
        return self.embed_dropout(table(ids) * self.scale + self.positions[:ids.shape[1]])

    def encode(self, src):
        padding = src == PAD
        return self.transformer.encoder(self.embed(self.src_embed, src),
                                        src_key_padding_mask=padding), padding

    def decode(self, tgt_in, memory, src_padding, last_only=False):
        length = tgt_in.shape[1]
        causal = torch.triu(torch.full((length, length), float("-inf")), 1)
        hidden = self.transformer.decoder(
            self.embed(self.tgt_embed, tgt_in), memory, tgt_mask=causal,
            tgt_key_padding_mask=tgt_in == PAD, memory_key_padding_mask=src_padding)
        return self.generator(hidden[:, -1] if last_only else hidden)

    def forward(self, src, tgt_in):
        memory, padding = self.encode(src)
        return self.decode(tgt_in, memory, padding)


def batch_loss(model, pairs, batch, smoothing):
    src = pad([pairs[i][0] for i in batch])
    tgt = pad([pairs[i][1] for i in batch])
    logits = model(src, tgt[:, :-1])
    labels = tgt[:, 1:]
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=PAD, label_smoothing=smoothing)
    return loss, int((labels != PAD).sum())


@torch.no_grad()
def validate(model, pairs, batches):
    model.eval()
    total, tokens = 0.0, 0
    for batch in batches:
        loss, count = batch_loss(model, pairs, batch, 0.0)
        total += float(loss) * count
        tokens += count
    model.train()
    return total / max(tokens, 1)


@torch.no_grad()
def greedy_decode(model, sources, batch_size=128):
    model.eval()
    outputs = [None] * len(sources)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        src = pad([sources[i] for i in rows])
        memory, padding = model.encode(src)
        limit = 2 * max(len(sources[i]) for i in rows) + 10
        prefix = torch.full((len(rows), 1), BOS, dtype=torch.long)
        done = torch.zeros(len(rows), dtype=torch.bool)
        for _ in range(limit):
            # Only the last position's logits: the vocabulary projection of the whole prefix
            # at every step would cost more than the decoder itself.
            next_ids = model.decode(prefix, memory, padding, last_only=True).argmax(-1)
            next_ids = torch.where(done, torch.full_like(next_ids, PAD), next_ids)
            prefix = torch.cat([prefix, next_ids[:, None]], 1)
            done |= next_ids == EOS
            if bool(done.all()):
                break
        for row, i in enumerate(rows):
            ids = []
            for token in prefix[row, 1:].tolist():
                if token in (EOS, PAD):
                    break
                ids.append(token)
            outputs[i] = ids
    return outputs


# ---- the run ------------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--data", type=Path, help="data folder [the recipe's default]")
    parser.add_argument("--out", type=Path, help="run folder [$OUT or runs/torch-<recipe>]")
    parser.add_argument("--time-limit", type=float,
                        help="seconds of training and validation [$TIME_LIMIT or 3600]")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="torch.set_num_threads [every usable core]")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--decode-only", action="store_true",
                        help="skip training: decode the test set with --out's model.pt (the "
                             "tokenizers are learned again, the same from the same data)")
    for name in ("layers", "d_model", "heads", "ffn", "batch_tokens", "warmup", "eval_every"):
        parser.add_argument("--" + name.replace("_", "-"), type=int)
    for name in ("dropout", "label_smoothing", "lr"):
        parser.add_argument("--" + name.replace("_", "-"), type=float)
    parser.add_argument("--schedule", choices=("inverse-sqrt", "cosine"),
                        help="learning-rate schedule [the recipe's]; cosine anneals over the "
                             "time limit, as attn train --schedule cosine --epochs 0 does")
    args = parser.parse_args(argv)

    cfg = dict(TASKS[args.task])
    for key in cfg:
        value = getattr(args, key, None)
        if value is not None:
            cfg[key] = value
    if os.environ.get("TIME_LIMIT"):
        cfg["time_limit"] = float(os.environ["TIME_LIMIT"])
    if args.time_limit is not None:
        cfg["time_limit"] = args.time_limit
    out = args.out or Path(os.environ.get("OUT") or ROOT / cfg["out"])
    if cfg["time_limit"] <= 0:
        parser.error("the time limit must be positive")
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    data = Path(cfg["data"])
    train_text, dev_text, test_sources_text, write_hyp = load_task(args.task, data)
    lib = _load_libattn()
    source_tokenizer = Tokenizer(lib, cfg["src_tokens"], [s for s, _ in train_text])
    target_tokenizer = Tokenizer(lib, cfg["tgt_tokens"], [t for _, t in train_text])
    train = encode_pairs(train_text, source_tokenizer, target_tokenizer)
    dev = encode_pairs(dev_text, source_tokenizer, target_tokenizer)
    dev_batches = make_batches(dev, cfg["batch_tokens"])

    model = Seq2Seq(source_tokenizer.size, target_tokenizer.size, cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.98), eps=1e-9)
    warmup = cfg["warmup"]

    def rate(update, seconds):
        """The rate of update number `update` (from 1) after `seconds` of training."""
        if cfg["schedule"] == "cosine":
            progress = min(1.0, seconds / cfg["time_limit"])
            return cfg["lr"] * min(1.0, update / warmup) * (1 + math.cos(math.pi * progress)) / 2
        return cfg["lr"] * min(update / warmup, math.sqrt(warmup / update))

    if args.decode_only:
        decode_and_summarise(args, cfg, data, out, model, source_tokenizer, target_tokenizer,
                             test_sources_text, write_hyp, training_from_log(out))
        return

    log = (out / "train.jsonl").open("w", encoding="utf-8")
    start = time.monotonic()
    step, epoch, best, best_step = 0, 0, math.inf, 0
    print(f"torch_seq2seq {args.task}: {len(train)} pairs, vocab {source_tokenizer.size}/"
          f"{target_tokenizer.size}, {sum(p.numel() for p in model.parameters())} parameters, "
          f"{args.threads} threads, {cfg['time_limit']:g} s", file=sys.stderr)

    def evaluate():
        nonlocal best, best_step
        valid = validate(model, dev, dev_batches)
        improved = valid < best
        if improved:
            best, best_step = valid, step
            torch.save(model.state_dict(), out / "model.pt")
        log.write(json.dumps({"event": "eval", "step": step, "epoch": epoch, "valid_loss": valid,
                              "improved": improved, "elapsed": time.monotonic() - start}) + "\n")
        log.flush()
        print(f"step {step} epoch {epoch}: valid loss {valid:.4f}", file=sys.stderr)

    model.train()
    out_of_time = False
    while not out_of_time:
        for batch in make_batches(train, cfg["batch_tokens"], rng):
            loss, tokens = batch_loss(model, train, batch, cfg["label_smoothing"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            for group in optimizer.param_groups:
                group["lr"] = rate(step + 1, time.monotonic() - start)
            optimizer.step()
            step += 1
            log.write(json.dumps({"event": "step", "step": step, "epoch": epoch,
                                  "train_loss": float(loss), "tokens": tokens,
                                  "lr": optimizer.param_groups[0]["lr"],
                                  "elapsed": time.monotonic() - start}) + "\n")
            if step % cfg["eval_every"] == 0:
                evaluate()
            if time.monotonic() - start >= cfg["time_limit"]:
                out_of_time = True
                break
        else:
            epoch += 1
    if best_step != step:
        evaluate()
    training_seconds = time.monotonic() - start
    log.close()

    decode_and_summarise(args, cfg, data, out, model, source_tokenizer, target_tokenizer,
                         test_sources_text, write_hyp,
                         {"training_seconds": round(training_seconds, 1), "steps": step,
                          "epochs": epoch, "best_valid_loss": best, "best_step": best_step})


def training_from_log(out):
    """The training figures of an earlier run, from its train.jsonl."""
    figures = {}
    with (out / "train.jsonl").open(encoding="utf-8") as log:
        for line in log:
            event = json.loads(line)
            if event["event"] == "step":
                figures.update(steps=event["step"], epochs=event["epoch"],
                               training_seconds=round(event["elapsed"], 1))
            elif event["event"] == "eval" and event["improved"]:
                figures.update(best_valid_loss=event["valid_loss"], best_step=event["step"])
    return figures


def decode_and_summarise(args, cfg, data, out, model, source_tokenizer, target_tokenizer,
                         test_sources_text, write_hyp, training):
    model.load_state_dict(torch.load(out / "model.pt"))
    decode_start = time.monotonic()
    sources = [source_tokenizer.encode(text) for text in test_sources_text]
    outputs = [target_tokenizer.decode(ids) for ids in greedy_decode(model, sources)]
    write_hyp(outputs, out / "test.hyp")
    summary = {"task": args.task, "data": str(data), "time_limit": cfg["time_limit"],
               **training, "decoding": "greedy",
               "decode_seconds": round(time.monotonic() - decode_start, 1),
               "threads": args.threads, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY",
                                                                           "default"),
               "torch": torch.__version__,
               "config": {k: str(v) if isinstance(v, Path) else v for k, v in cfg.items()}}
    (out / "scores.json").write_text(json.dumps(summary) + "\n", encoding="utf-8")
    print(f"torch_seq2seq: wrote {out}/model.pt, train.jsonl, test.hyp, scores.json; score with "
          f"attn eval", file=sys.stderr)


if __name__ == "__main__":
    main()
