#!/usr/bin/python3
"""PyTorch 1.13 twin of `attn train --task lm`: the same language model, trained on the same
text for the same wall-clock time, scored with the same held-out bits per character.

    /usr/bin/python3 bench/torch_lm.py --train TRAIN.txt --valid VALID.txt --test TEST.txt \
        --out DIR [--like ATTN_MODEL.safetensors] [--time-limit S] [--threads N] \
        [--autocast auto|off|bf16] [--prompts PROMPTS.txt]

recipes/bible-lm.sh runs it after attn with --like attn's model file; without --like the
shape flags (--layers, --d-model, --heads, --ffn, --context, --dropout, --tokens) say the model
(defaults: the recipe's). TIME_LIMIT and OUT in the environment work too, as for the recipes.

What is the same as attn's run (attn train --task lm, its defaults where the recipe gives none):
  - tokens: attn's own tokenizer through ctypes (libattn; ATTN_LIBRARY or build/libattn.so):
    with --like, the very tokenizer stored in attn's model file; without, learned from the
    training lines as attn train learns it (char or bpe:N, byte fallback on). The text is one
    stream: each line's tokens, then </s> (attn_token_stream_from_text).
  - model: GPT's shape as attn makes it: token embeddings N(0, 1/d_model) times sqrt(d_model)
    plus interleaved sinusoidal positions, dropout; pre-norm blocks (LayerNorm eps 1e-5, causal
    multi-head self-attention with one fused in-projection, residual dropout; a GELU (exact)
    MLP with dropout after the activation and on the residual; no dropout on the attention
    weights); a final LayerNorm; the output tied to the token embedding, with a bias;
    xavier_uniform matrices (the fused in-projection as one [3d, d] matrix), zero biases;
  - windows: the training stream cut into windows of context + 1 tokens that overlap by one
    token ((tokens - 1) / context of them), shuffled each epoch, 4096 / context windows a batch;
    the loss is the mean cross-entropy over every predicted token (no label smoothing);
  - training: Adam (0.9, 0.98, eps 1e-9, no weight decay), the global gradient norm clipped to
    1, attn's cosine annealed over the time limit: lr * warm * (1 + cos(pi * min(1, s / limit)))
    / 2 after s seconds, warm = min(1, max(update / 1000, s / (5% of the limit)));
    validation (mean cross-entropy per token over the validation windows) every --eval-every
    updates and after the last, keeping the best weights; the clock covers training and the
    validations before the limit, as attn train's --time-limit;
  - scoring: attn eval --metric perplexity's windows (context + 1 tokens from every context-th
    token of the held-out stream, each window read from its own start) and its count of
    characters (UTF-8 characters of each line, and one for each line's end), in fp32.

PyTorch's best setting on this 2-core machine (bench/torch_train.py): torch.set_num_threads
(--threads, default every usable core), OMP_WAIT_POLICY=PASSIVE and, where the CPU has AVX-512,
OPENBLAS_CORETYPE=SkylakeX (both set here unless the environment sets them, before torch
loads); --autocast auto (the default) times a few steps in fp32 and under bf16 autocast
(where /proc/cpuinfo lists avx512_bf16) before the clock starts, on a throwaway copy of the
model, and trains with the faster.

Writes to --out: model.pt (the best weights), train.jsonl (attn's field names: step, epoch,
train_loss, valid_loss, lr, elapsed), samples.txt (one continuation per line of --prompts, as
attn generate --input writes them) and scores.json (test bits per character and the run's
figures).
"""
import argparse
import copy
import ctypes
import json
import math
import os
import random
import sys
import time
from pathlib import Path


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


CPU_FLAGS = _cpu_flags()
# Read by the OpenMP runtime and OpenBLAS when torch loads them: set before the import.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if "avx512f" in CPU_FLAGS:
    os.environ.setdefault("OPENBLAS_CORETYPE", "SkylakeX")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EOS = 2  # attn's vocabularies: <pad> <s> </s> <unk> first
DEFAULTS = dict(tokens="char", layers=4, d_model=384, heads=6, ffn=1536, context=256,
                dropout=0.1, lr=1e-3, eval_every=500, time_limit=3600.0)
WARMUP_CAP, WARMUP_SHARE = 1000, 0.05  # attn train's cosine warm-up under the clock


def fail(message):
    sys.exit(f"torch_lm: {message}")


# ---- attn's tokenizer through ctypes ----------------------------------------------------------

class _TokenizerConfig(ctypes.Structure):
    """attn_tokenizer_config, field for field (attn_data.h)."""
    _fields_ = [("kind", ctypes.c_int), ("bpe_merges", ctypes.c_int64),
                ("min_count", ctypes.c_int64), ("max_vocab", ctypes.c_int64),
                ("byte_fallback", ctypes.c_int), ("spm_vocab_size", ctypes.c_int64),
                ("spm_bpe", ctypes.c_int)]


def load_libattn():
    path = os.environ.get("ATTN_LIBRARY") or str(ROOT / "build" / "libattn.so")
    try:
        lib = ctypes.CDLL(path)
    except OSError as err:
        fail(f"cannot load libattn for its tokenizer ({err}); run make first or set ATTN_LIBRARY")
    p = ctypes.c_void_p
    lib.attn_last_error.restype = ctypes.c_char_p
    lib.attn_tokenizer_config_parse.argtypes = [ctypes.c_char_p, ctypes.POINTER(_TokenizerConfig)]
    lib.attn_tokenizer_train.argtypes = [ctypes.POINTER(_TokenizerConfig),
                                         ctypes.POINTER(ctypes.c_char_p), ctypes.c_int64,
                                         ctypes.POINTER(p)]
    lib.attn_tokenizer_from_json.argtypes = [ctypes.c_char_p, ctypes.POINTER(p)]
    lib.attn_tokenizer_vocab.argtypes = [p]
    lib.attn_tokenizer_vocab.restype = p
    lib.attn_vocab_size.argtypes = [p]
    lib.attn_vocab_size.restype = ctypes.c_int64
    lib.attn_tokenizer_encode.argtypes = [p, ctypes.c_char_p,
                                          ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)),
                                          ctypes.POINTER(ctypes.c_int64)]
    lib.attn_tokenizer_decode.argtypes = [p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int64,
                                          ctypes.POINTER(p)]
    lib.free.argtypes = [p]
    return lib


class Tokenizer:
    """An attn_tokenizer: learned from lines (spec), or read from a model file's JSON."""

    def __init__(self, lib, spec=None, lines=None, json_text=None):
        self.lib = lib
        self.handle = ctypes.c_void_p()
        if json_text is not None:
            self._check(lib.attn_tokenizer_from_json(json_text.encode(), ctypes.byref(self.handle)),
                        "from the model file")
        else:
            config = _TokenizerConfig()
            self._check(lib.attn_tokenizer_config_parse(spec.encode(), ctypes.byref(config)), spec)
            config.byte_fallback = 1  # attn train --task lm: char and bpe fall back to bytes
            encoded = (ctypes.c_char_p * len(lines))(*(line.encode("utf-8") for line in lines))
            self._check(lib.attn_tokenizer_train(ctypes.byref(config), encoded, len(lines),
                                                 ctypes.byref(self.handle)), "train")
        self.size = lib.attn_vocab_size(lib.attn_tokenizer_vocab(self.handle))

    def _check(self, status, what):
        if status != 0:
            fail(f"tokenizer {what}: {self.lib.attn_last_error().decode()}")

    def encode(self, text):
        ids, count = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_int64()
        self._check(self.lib.attn_tokenizer_encode(self.handle, text.encode("utf-8"),
                                                   ctypes.byref(ids), ctypes.byref(count)),
                    "encode")
        result = ids[:count.value]
        self.lib.free(ids)
        return result

    def decode(self, ids):
        array = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        text = ctypes.c_void_p()
        self._check(self.lib.attn_tokenizer_decode(self.handle, array, len(ids),
                                                   ctypes.byref(text)), "decode")
        result = ctypes.string_at(text).decode("utf-8", errors="replace")
        self.lib.free(text)
        return result


# ---- text -------------------------------------------------------------------------------------

def read_lines(path):
    """Lines as attn_lines_read cuts them: at each newline, a final line without one kept, one
    carriage return before the newline dropped."""
    text = Path(path).read_bytes().decode("utf-8")
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def token_stream(tokenizer, lines):
    ids = []
    for line in lines:
        ids.extend(tokenizer.encode(line))
        ids.append(EOS)
    return torch.tensor(ids, dtype=torch.long)


def characters(lines):
    """attn eval's count: UTF-8 characters of each line and its end."""
    return sum(len(line) + 1 for line in lines)


def windows(stream, context):
    """[count, context + 1] training windows, window w from token w * context."""
    count = (len(stream) - 1) // context
    index = torch.arange(count)[:, None] * context + torch.arange(context + 1)[None, :]
    return stream[index]


# ---- the model --------------------------------------------------------------------------------

def sinusoidal_positions(length, d_model):
    """attn's interleaved layout: sin on even features, cos on odd ones."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rates = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32)
                      * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(position * rates)
    table[:, 1::2] = torch.cos(position * rates)
    return table


class SelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.in_proj = nn.Linear(d, 3 * d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x, mask):
        batch, length, d = x.shape
        q, k, v = self.in_proj(x).split(d, dim=2)
        q, k, v = (t.view(batch, length, self.heads, d // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        weights = torch.softmax(scores.masked_fill(mask[:length, :length], float("-inf")), dim=-1)
        return self.out_proj((weights.to(v.dtype) @ v).transpose(1, 2).reshape(batch, length, d))


class Block(nn.Module):
    def __init__(self, d, heads, ffn, dropout):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d, eps=1e-5), nn.LayerNorm(d, eps=1e-5)
        self.self_attn = SelfAttention(d, heads)
        self.linear1, self.linear2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask):
        x = x + self.dropout(self.self_attn(self.norm1(x), mask))
        hidden = self.dropout(F.gelu(self.linear1(self.norm2(x))))
        return x + self.dropout(self.linear2(hidden))


class LanguageModel(nn.Module):
    def __init__(self, vocab, cfg):
        super().__init__()
        d = cfg["d_model"]
        self.scale = math.sqrt(d)
        self.embed = nn.Embedding(vocab, d)
        self.register_buffer("positions", sinusoidal_positions(cfg["context"], d))
        self.register_buffer("mask", torch.ones(cfg["context"], cfg["context"],
                                                dtype=torch.bool).triu(1))
        self.dropout = nn.Dropout(cfg["dropout"])
        self.blocks = nn.ModuleList(Block(d, cfg["heads"], cfg["ffn"], cfg["dropout"])
                                    for _ in range(cfg["layers"]))
        self.norm = nn.LayerNorm(d, eps=1e-5)
        self.output_bias = nn.Parameter(torch.zeros(vocab))
        with torch.no_grad():
            for name, parameter in self.named_parameters():
                if name.endswith("bias"):
                    parameter.zero_()
                elif parameter.dim() == 2 and name != "embed.weight":
                    nn.init.xavier_uniform_(parameter)
            nn.init.normal_(self.embed.weight, std=d ** -0.5)

    def forward(self, ids):
        length = ids.shape[1]
        x = self.dropout(self.embed(ids) * self.scale + self.positions[:length])
        for block in self.blocks:
            x = block(x, self.mask)
        return F.linear(self.norm(x), self.embed.weight, self.output_bias)


def window_nats(model, batch, autocast="off"):
    """Summed -log p of each window's tokens after its first (the log-softmax in fp32)."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast == "bf16"):
        logits = model(batch[:, :-1]).float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1),
                           reduction="sum")


@torch.no_grad()
def score(model, stream, context, rows=16, autocast="off"):
    """attn eval --metric perplexity's windows: context + 1 tokens from every context-th token,
    the last one shorter; returns the summed nats and the tokens predicted. The held-out score
    is in fp32, as attn eval's; validation during training runs as the training does."""
    model.eval()
    starts = list(range(0, len(stream) - 1, context))
    nats = 0.0
    for first in range(0, len(starts), rows):
        full = [s for s in starts[first:first + rows] if s + context + 1 <= len(stream)]
        if full:
            batch = torch.stack([stream[s:s + context + 1] for s in full])
            nats += float(window_nats(model, batch, autocast))
        for s in starts[first:first + rows]:
            if s + context + 1 > len(stream):  # the last, shorter window
                nats += float(window_nats(model, stream[s:][None, :], autocast))
    model.train()
    return nats, len(stream) - 1


@torch.no_grad()
def sample(model, tokenizer, prompt, max_new_tokens, temperature, seed, context):
    """attn generate's reading of a prompt (the end of a line, then the prompt's tokens),
    sampled at the temperature until the end of a line, max_new_tokens or a full context."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    ids = [EOS] + tokenizer.encode(prompt)
    new = []
    while len(new) < max_new_tokens and len(ids) < context:
        logits = model(torch.tensor([ids]))[0, -1].float() / temperature
        token = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
        if token == EOS:
            break
        ids.append(token)
        new.append(token)
    model.train()
    return tokenizer.decode(new)


# ---- the run ----------------------------------------------------------------------------------

def load_attn_weights(model, path):
    """An attn model file's weights (fp32 safetensors, attn's names) into a LanguageModel of
    the same shape: attn's trained model scored by this script's code, a check that both count
    the same."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
        data = f.read()
    state = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            fail(f"{path}: {name} is {info['dtype']}, not F32")
        begin, end = info["data_offsets"]
        tensor = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32)
        name = name.replace("decoder.layers.", "blocks.").replace("decoder.norm.", "norm.")
        name = name.replace("self_attn.in_proj_weight", "self_attn.in_proj.weight")
        name = name.replace("self_attn.in_proj_bias", "self_attn.in_proj.bias")
        name = name.replace("generator.bias", "output_bias")
        state[name] = tensor.reshape(info["shape"])
    missing = set(model.state_dict()) - set(state) - {"positions", "mask"}
    if missing or set(state) - set(model.state_dict()):
        fail(f"{path}: its tensors do not match the model's (missing {sorted(missing)})")
    model.load_state_dict(state, strict=False)


def read_like(path):
    """attn's model file: its config and tokenizer JSON (the safetensors header's metadata)."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        metadata = json.loads(f.read(size)).get("__metadata__", {})
    if "attn_config" not in metadata or "attn_tgt_tokenizer" not in metadata:
        fail(f"--like {path}: not an attn model file with a tokenizer")
    config = json.loads(metadata["attn_config"])
    if config.get("arch") != "transformer_lm":
        fail(f"--like {path}: arch {config.get('arch')}, not transformer_lm")
    expected = dict(norm_first=True, activation="gelu", decoder_final_norm=True, tie_output=True,
                    output_bias=True, scale_embeddings=True, positions="sinusoidal",
                    norm="layer_norm", ffn="mlp", bias=True)
    different = [k for k, v in expected.items() if config.get(k) != v]
    if different:
        fail(f"--like {path}: this twin builds attn's default language model; the file differs "
             f"in {', '.join(different)}")
    return config, metadata["attn_tgt_tokenizer"]


def choose_autocast(requested, model_cfg, vocab, batch, lr):
    """The faster of fp32 and bf16 autocast on a throwaway model (auto), or the one asked."""
    if requested != "auto":
        return requested, {}
    if "avx512_bf16" not in CPU_FLAGS:
        return "off", {"reason": "no avx512_bf16 in /proc/cpuinfo"}
    timings = {}
    for mode in ("off", "bf16"):
        trial = LanguageModel(vocab, model_cfg)
        optimizer = torch.optim.Adam(trial.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            train_step(trial, optimizer, batch, mode)
            times.append(time.perf_counter() - start)
        timings[mode] = round(sorted(times[2:])[1], 4)  # the median of the last 3
    best = min(timings, key=timings.get)
    return best, {"median_step_s": timings}


def train_step(model, optimizer, batch, autocast):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast == "bf16"):
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                               batch[:, 1:].reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    return loss


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=Path, required=True)
    parser.add_argument("--valid", type=Path, required=True)
    parser.add_argument("--test", type=Path, required=True)
    parser.add_argument("--out", type=Path, help="run folder [$OUT or runs/torch-lm]")
    parser.add_argument("--like", type=Path,
                        help="attn's model file: take its shape, dropout, context and tokenizer")
    parser.add_argument("--time-limit", type=float,
                        help="seconds of training and validation [$TIME_LIMIT or 3600]")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="torch.set_num_threads [every usable core]")
    parser.add_argument("--autocast", choices=("auto", "off", "bf16"), default="auto")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tokens", help=f"char or bpe:N [{DEFAULTS['tokens']}]")
    for name in ("layers", "d_model", "heads", "ffn", "context", "eval_every"):
        parser.add_argument("--" + name.replace("_", "-"), type=int,
                            help=f"[{DEFAULTS[name]}]")
    for name in ("dropout", "lr"):
        parser.add_argument("--" + name, type=float, help=f"[{DEFAULTS[name]}]")
    parser.add_argument("--prompts", type=Path, help="one prompt a line, continued after training")
    parser.add_argument("--max-new-tokens", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--sample-seed", type=int, default=1,
                        help="prompt i is sampled from seed sample-seed + i")
    args = parser.parse_args(argv)

    cfg = dict(DEFAULTS)
    if os.environ.get("TIME_LIMIT"):
        cfg["time_limit"] = float(os.environ["TIME_LIMIT"])
    lib = load_libattn()
    train_lines = read_lines(args.train)
    tokenizer_json = None
    if args.like:
        config, tokenizer_json = read_like(args.like)
        cfg.update(layers=config["decoder_layers"], d_model=config["d_model"],
                   heads=config["num_heads"], ffn=config["ffn_dim"], context=config["max_len"],
                   dropout=config["dropout"], tokens=json.loads(tokenizer_json)["kind"])
    for key in cfg:
        value = getattr(args, key, None)
        if value is not None:
            if args.like and key in ("layers", "d_model", "heads", "ffn", "context", "dropout",
                                     "tokens"):
                parser.error(f"--{key.replace('_', '-')} comes from --like {args.like}")
            cfg[key] = value
    if cfg["time_limit"] <= 0:
        parser.error("the time limit must be positive")
    out = args.out or Path(os.environ.get("OUT") or ROOT / "runs" / "torch-lm")
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    prepare_start = time.monotonic()
    tokenizer = (Tokenizer(lib, json_text=tokenizer_json) if tokenizer_json
                 else Tokenizer(lib, spec=cfg["tokens"], lines=train_lines))
    train = windows(token_stream(tokenizer, train_lines), cfg["context"])
    valid_stream = token_stream(tokenizer, read_lines(args.valid))
    test_lines = read_lines(args.test)
    test_stream = token_stream(tokenizer, test_lines)
    sequences = max(1, min(4096 // cfg["context"], len(train)))
    if len(train) < sequences or len(train) == 0:
        fail(f"{args.train}: too little text for one batch of windows of {cfg['context']} tokens")
    model_cfg = {k: cfg[k] for k in ("layers", "d_model", "heads", "ffn", "context", "dropout")}
    autocast, probe = choose_autocast(args.autocast, model_cfg, tokenizer.size,
                                      train[:sequences], cfg["lr"])
    torch.manual_seed(args.seed)
    model = LanguageModel(tokenizer.size, model_cfg).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.98), eps=1e-9)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"torch_lm: {len(train)} windows of {cfg['context']} tokens ({len(train) * cfg['context']}"
          f" training tokens), validation {len(valid_stream)}, vocabulary {tokenizer.size}; "
          f"{parameters} parameters; {args.threads} threads, autocast {autocast} "
          f"{json.dumps(probe)}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}; "
          f"{cfg['time_limit']:g} s; prepared in {time.monotonic() - prepare_start:.1f} s",
          file=sys.stderr, flush=True)

    limit = cfg["time_limit"]

    def rate(update, seconds):
        warm = min(1.0, max(update / WARMUP_CAP, seconds / (WARMUP_SHARE * limit)))
        return cfg["lr"] * warm * (1 + math.cos(math.pi * min(1.0, seconds / limit))) / 2

    log = (out / "train.jsonl").open("w", encoding="utf-8")
    start = time.monotonic()
    step, epoch, best, best_step, best_state, last_eval = 0, 0, math.inf, 0, None, -1
    tokens_seen = 0

    def evaluate():
        nonlocal best, best_step, best_state, last_eval
        nats, count = score(model, valid_stream, cfg["context"], autocast=autocast)
        valid = nats / count
        improved = valid < best
        if improved:
            best, best_step = valid, step
            best_state = copy.deepcopy(model.state_dict())
        last_eval = step
        log.write(json.dumps({"event": "eval", "step": step, "epoch": epoch, "valid_loss": valid,
                              "improved": improved, "elapsed": time.monotonic() - start}) + "\n")
        log.flush()
        print(f"step {step} epoch {epoch}: valid loss {valid:.4f} (perplexity "
              f"{math.exp(valid):.2f}), {time.monotonic() - start:.0f} s", file=sys.stderr,
              flush=True)

    out_of_time = False
    while not out_of_time:
        order = list(range(len(train)))
        rng.shuffle(order)
        for first in range(0, len(order), sequences):
            batch = train[order[first:first + sequences]]
            loss = train_step(model, optimizer, batch, autocast)
            lr = rate(step + 1, time.monotonic() - start)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.step()
            step += 1
            tokens_seen += batch.shape[0] * cfg["context"]
            elapsed = time.monotonic() - start
            log.write(json.dumps({"event": "step", "step": step, "epoch": epoch,
                                  "train_loss": float(loss), "lr": lr,
                                  "tokens_per_second": tokens_seen / elapsed,
                                  "elapsed": elapsed}) + "\n")
            if step % cfg["eval_every"] == 0:
                evaluate()
            if time.monotonic() - start >= limit:
                out_of_time = True
                break
        else:
            epoch += 1
    training_seconds = time.monotonic() - start
    if last_eval != step:
        evaluate()
    log.close()
    model.load_state_dict(best_state)
    torch.save(best_state, out / "model.pt")

    score_start = time.monotonic()
    nats, tokens = score(model, test_stream, cfg["context"])
    chars = characters(test_lines)
    summary = {"test": str(args.test), "bits_per_char": nats / math.log(2) / chars,
               "bits_per_token": nats / math.log(2) / tokens,
               "cross_entropy": nats / tokens, "perplexity": math.exp(nats / tokens),
               "tokens": tokens, "characters": chars,
               "score_seconds": round(time.monotonic() - score_start, 1)}
    print(f"torch_lm: test bits/char = {summary['bits_per_char']:.4f} ({chars} characters), "
          f"bits/token = {summary['bits_per_token']:.4f}", file=sys.stderr, flush=True)

    if args.prompts:
        sample_start = time.monotonic()
        prompts = read_lines(args.prompts)
        texts = [sample(model, tokenizer, prompt, args.max_new_tokens, args.temperature,
                        args.sample_seed + i, cfg["context"]) for i, prompt in enumerate(prompts)]
        (out / "samples.txt").write_text("".join(f"{t}\n" for t in texts), encoding="utf-8")
        summary["sample_seconds"] = round(time.monotonic() - sample_start, 1)

    summary.update({
        "training_seconds": round(training_seconds, 1), "time_limit": limit, "steps": step,
        "epochs": epoch, "training_tokens_seen": tokens_seen,
        "tokens_per_second": round(tokens_seen / training_seconds, 1),
        "best_valid_loss": best, "best_step": best_step, "parameters": parameters,
        "vocabulary": tokenizer.size, "autocast": autocast, "autocast_probe": probe,
        "threads": args.threads, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "unset"),
        "torch": torch.__version__, "like": str(args.like) if args.like else None,
        "config": cfg, "batch_sequences": sequences})
    (out / "scores.json").write_text(json.dumps(summary) + "\n", encoding="utf-8")
    print(f"torch_lm: wrote {out}/model.pt, train.jsonl, scores.json"
          + (", samples.txt" if args.prompts else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
