"""PyTorch 1.13 references for attn's Transformer models, built from torch's own modules:

  transformer             nn.Transformer(batch_first=True) + embeddings scaled by sqrt(d_model)
                          + sinusoidal positions + output projection (optionally tied)
  transformer_lm          nn.TransformerEncoder with a causal mask + output projection
  transformer_classifier  nn.TransformerEncoder + a pooling + linear: config "pooling" "mean"
                          (over non-padding positions), "cls" (<s> read first, its state) or
                          "attention" (Yang et al. 2016: softmax_t(tanh(W h_t + b) . q)
                          weighting the h_t)
  transformer_mlm         nn.TransformerEncoder + the output projection tied to the embedding
                          (BERT's masked language model), cross-entropy at the masked
                          positions only (batch "mlm_targets", -1 elsewhere)

Config "positions": "learned" replaces the sinusoidal table by nn.Embedding tables of
max_len rows (pos_embed, or src_pos_embed and tgt_pos_embed); "output_bias": false drops the
generator's (classifier's) bias: with pre-norm, gelu_tanh and a tied output, GPT-2.

The LLaMA-style block options (positions "rope", norm "rms_norm", ffn "swiglu", bias false),
which torch 1.13's layers do not have, run on the layers written out below from the papers'
formulas (Block, Stack), with the same parameter names: rotary embeddings in Hugging Face's
rotate_half layout on q and k of every self-attention (the cross-attention is not rotated),
RMSNorm x / sqrt(mean(x^2) + eps) * weight, SwiGLU linear2(silu(linear1(x)) * linear3(x)).

Each takes the same config dict as attn's JSON config (attn_models.h) and names its
parameters as attn does (nn.Transformer's state_dict names without the "transformer."
prefix), so save_model() writes a safetensors file attn_model_load reads: float32 weights
and the config under "attn_config". Computation runs in float64 (model.double()) on the same
float32 weights, as the reference for attn's float32 results.

attn applies no dropout to attention weights while torch does, so parity holds for
dropout 0 (the tests' setting). adam_step() makes one torch.optim.Adam / AdamW update of these
modules as attn's trainer makes it (parameter groups: vectors exempt from weight decay), the
reference for attn's parameters after one step.

Run as a script to write a small reference model:
    python3 tests/python/torch_transformer_reference.py out.safetensors
"""
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

IGNORE = -100


def sinusoidal_table(max_len, d_model, layout):
    """attn_positional_encoding: computed in float64, rounded once to float32."""
    pairs = d_model // 2
    position = np.arange(max_len, dtype=np.float64)[:, None]
    frequency = np.exp(-(2.0 * np.arange(pairs + 1)) / d_model * math.log(10000.0))
    angle = position * frequency[None, :]
    table = np.zeros((max_len, d_model), dtype=np.float64)
    if layout == "interleaved":
        table[:, 0:2 * pairs:2] = np.sin(angle[:, :pairs])
        table[:, 1:2 * pairs:2] = np.cos(angle[:, :pairs])
    else:
        table[:, :pairs] = np.sin(angle[:, :pairs])
        table[:, pairs:2 * pairs] = np.cos(angle[:, :pairs])
    if d_model % 2 == 1:
        table[:, d_model - 1] = np.sin(angle[:, pairs])
    return table.astype(np.float32)


def default_config(arch, **fields):
    """A small config of the architecture; fields override."""
    config = {"version": 1, "arch": arch, "d_model": 16, "num_heads": 4, "ffn_dim": 32,
              "dropout": 0.0, "activation": "relu", "norm_first": False, "max_len": 32,
              "positional_encoding": "interleaved", "positions": "sinusoidal",
              "scale_embeddings": True, "output_bias": True, "layer_norm_eps": 1e-5,
              "label_smoothing": 0.1, "rope_base": 10000.0, "norm": "layer_norm", "ffn": "mlp",
              "bias": True}
    if arch in ("transformer", "transformer_classifier", "transformer_mlm"):
        config.update(encoder_layers=2, encoder_final_norm=True, src_vocab=13)
    if arch in ("transformer", "transformer_lm"):
        config.update(decoder_layers=2, decoder_final_norm=True, tgt_vocab=11, tie_output=True)
    if arch == "transformer":
        config.update(share_embeddings=False)
    if arch == "transformer_classifier":
        config.update(num_classes=4, pooling="mean")
    config.update(fields)
    return config


def _padding(lengths, length):
    """Bool [B, length]: True at padding (torch's key_padding_mask)."""
    return torch.arange(length)[None, :] >= torch.as_tensor(lengths)[:, None]


def _causal(length):
    return torch.triu(torch.full((length, length), float("-inf"), dtype=torch.float64), 1)


def _gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def _layer_args(config):
    # torch 1.13's layers name only "relu" and "gelu"; GPT-2's tanh approximation is a callable.
    activation = _gelu_tanh if config["activation"] == "gelu_tanh" else config["activation"]
    return dict(d_model=config["d_model"], nhead=config["num_heads"],
                dim_feedforward=config["ffn_dim"], dropout=config["dropout"],
                activation=activation, layer_norm_eps=config["layer_norm_eps"],
                batch_first=True, norm_first=config["norm_first"])


def _stack(config, layers_key, norm_key):
    layer = nn.TransformerEncoderLayer(**_layer_args(config))
    norm = (nn.LayerNorm(config["d_model"], eps=config["layer_norm_eps"])
            if config[norm_key] else None)
    return nn.TransformerEncoder(layer, config[layers_key], norm=norm,
                                 enable_nested_tensor=False)


def _written_out(config):
    """Whether the config needs the layers below (an option torch 1.13's layers lack)."""
    return (config.get("positions") == "rope" or config.get("norm", "layer_norm") != "layer_norm"
            or config.get("ffn", "mlp") != "mlp" or not config.get("bias", True))


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LayerNormWithoutBias(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, None, self.eps)


def _norm(config):
    d, eps = config["d_model"], config["layer_norm_eps"]
    if config["norm"] == "rms_norm":
        return RMSNorm(d, eps)
    return nn.LayerNorm(d, eps=eps) if config["bias"] else LayerNormWithoutBias(d, eps)


def _rotate(x, base):
    """Rotary embeddings of x [B, H, L, dh] at positions 0 .. L-1, rotate_half layout."""
    dh, length = x.shape[-1], x.shape[-2]
    inverse_frequency = base ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inverse_frequency[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    half = dh // 2
    rotated_half = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * angles.cos().to(x.dtype) + rotated_half * angles.sin().to(x.dtype)


class Attention(nn.Module):
    """nn.MultiheadAttention's parameters (packed in_proj), biases optional, rotary optional."""

    def __init__(self, config, rotary):
        super().__init__()
        d = config["d_model"]
        self.heads = config["num_heads"]
        self.rope_base = config["rope_base"] if rotary else None
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d, d))
        nn.init.xavier_uniform_(self.in_proj_weight)
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * d)) if config["bias"] else None
        self.out_proj = nn.Linear(d, d, bias=config["bias"])

    def forward(self, query, memory, causal, key_padding):
        d = query.shape[-1]
        w, b = self.in_proj_weight, self.in_proj_bias
        q = F.linear(query, w[:d], None if b is None else b[:d])
        k = F.linear(memory, w[d:2 * d], None if b is None else b[d:2 * d])
        v = F.linear(memory, w[2 * d:], None if b is None else b[2 * d:])
        heads = lambda t: t.view(t.shape[0], t.shape[1], self.heads, -1).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        if self.rope_base is not None:
            q, k = _rotate(q, self.rope_base), _rotate(k, self.rope_base)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal is not None:
            scores = scores + causal
        scores = scores.masked_fill(key_padding[:, None, None, :], float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(query.shape)
        return self.out_proj(out)


class Block(nn.Module):
    """nn.TransformerEncoderLayer / DecoderLayer (cross=True) with the block options."""

    def __init__(self, config, cross):
        super().__init__()
        d, f, bias = config["d_model"], config["ffn_dim"], config["bias"]
        rotary = config["positions"] == "rope"
        self.config = config
        self.self_attn = Attention(config, rotary)
        self.multihead_attn = Attention(config, False) if cross else None
        self.linear1 = nn.Linear(d, f, bias=bias)
        self.linear2 = nn.Linear(f, d, bias=bias)
        self.linear3 = nn.Linear(d, f, bias=bias) if config["ffn"] == "swiglu" else None
        self.norm1, self.norm2 = _norm(config), _norm(config)
        self.norm3 = _norm(config) if cross else None

    def _feed_forward(self, x):
        if self.linear3 is not None:
            return self.linear2(F.silu(self.linear1(x)) * self.linear3(x))
        activation = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": _gelu_tanh}
        return self.linear2(activation[self.config["activation"]](self.linear1(x)))

    def forward(self, x, causal, padding, memory=None, memory_padding=None):
        sublayers = [(self.norm1, lambda h: self.self_attn(h, h, causal, padding))]
        if self.multihead_attn is not None:
            sublayers.append((self.norm2, lambda h: self.multihead_attn(h, memory, None,
                                                                        memory_padding)))
        sublayers.append((self.norm3 if self.norm3 is not None else self.norm2,
                          self._feed_forward))
        for norm, sublayer in sublayers:
            x = x + sublayer(norm(x)) if self.config["norm_first"] else norm(x + sublayer(x))
        return x


class Stack(nn.Module):
    def __init__(self, config, layers_key, norm_key, cross=False):
        super().__init__()
        self.layers = nn.ModuleList(Block(config, cross) for _ in range(config[layers_key]))
        self.norm = _norm(config) if config[norm_key] else None

    def forward(self, x, causal, padding, memory=None, memory_padding=None):
        for layer in self.layers:
            x = layer(x, causal, padding, memory, memory_padding)
        return x if self.norm is None else self.norm(x)


class Reference(nn.Module):
    """One of the three architectures, per config["arch"]."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        d = config["d_model"]
        arch = config["arch"]
        self.learned = config.get("positions", "sinusoidal") == "learned"
        self.rotary = config.get("positions") == "rope"  # nothing added to the embeddings
        self.written_out = _written_out(config)
        self.register_buffer("positions", torch.from_numpy(sinusoidal_table(
            config["max_len"], d, config["positional_encoding"])))
        if self.learned and arch == "transformer":
            self.src_pos_embed = nn.Embedding(config["max_len"], d)
            self.tgt_pos_embed = nn.Embedding(config["max_len"], d)
            self.src_positions, self.tgt_positions = self.src_pos_embed, self.tgt_pos_embed
        elif self.learned:
            self.pos_embed = nn.Embedding(config["max_len"], d)
            self.src_positions = self.tgt_positions = self.pos_embed
        bias = config.get("output_bias", True)
        self.scale = math.sqrt(d) if config["scale_embeddings"] else 1.0
        if arch == "transformer":
            if config["share_embeddings"]:
                self.embed = nn.Embedding(config["src_vocab"], d)
                self.src, self.tgt = self.embed, self.embed
            else:
                self.src_embed = nn.Embedding(config["src_vocab"], d)
                self.tgt_embed = nn.Embedding(config["tgt_vocab"], d)
                self.src, self.tgt = self.src_embed, self.tgt_embed
            args = _layer_args(config)
            if self.written_out:
                self.transformer = nn.Module()
                self.transformer.encoder = Stack(config, "encoder_layers", "encoder_final_norm")
                self.transformer.decoder = Stack(config, "decoder_layers", "decoder_final_norm",
                                                 cross=True)
            else:
                self.transformer = nn.Transformer(
                    num_encoder_layers=config["encoder_layers"],
                    num_decoder_layers=config["decoder_layers"], **args)
                if not config["encoder_final_norm"]:
                    self.transformer.encoder.norm = None
                if not config["decoder_final_norm"]:
                    self.transformer.decoder.norm = None
        elif arch == "transformer_mlm":
            self.embed = nn.Embedding(config["src_vocab"], d)
            self.src = self.embed
            self.encoder = (Stack(config, "encoder_layers", "encoder_final_norm")
                            if self.written_out
                            else _stack(config, "encoder_layers", "encoder_final_norm"))
            self.generator = nn.Linear(d, config["src_vocab"], bias=bias)
            self.generator.weight = self.embed.weight
        elif arch == "transformer_lm":
            self.embed = nn.Embedding(config["tgt_vocab"], d)
            self.tgt = self.embed
            self.decoder = (Stack(config, "decoder_layers", "decoder_final_norm")
                            if self.written_out
                            else _stack(config, "decoder_layers", "decoder_final_norm"))
        else:
            self.embed = nn.Embedding(config["src_vocab"], d)
            self.src = self.embed
            self.encoder = (Stack(config, "encoder_layers", "encoder_final_norm")
                            if self.written_out
                            else _stack(config, "encoder_layers", "encoder_final_norm"))
            self.classifier = nn.Linear(d, config["num_classes"], bias=bias)
            if config.get("pooling", "mean") == "attention":
                self.pooling = nn.Module()
                self.pooling.proj = nn.Linear(d, d)
                self.pooling.query = nn.Parameter(
                    torch.empty(1, d).uniform_(-1 / math.sqrt(d), 1 / math.sqrt(d)))
        if arch not in ("transformer_classifier", "transformer_mlm"):
            self.generator = nn.Linear(d, config["tgt_vocab"], bias=bias)
            if config["tie_output"]:
                self.generator.weight = self.tgt.weight

    def _embed(self, table, ids, source):
        if self.rotary:
            return table(ids) * self.scale
        if self.learned:
            positions = self.src_positions if source else self.tgt_positions
            return table(ids) * self.scale + positions.weight[:ids.shape[1]]
        return table(ids) * self.scale + self.positions[:ids.shape[1]]

    def forward(self, batch):
        """Logits, as attn_model_forward_logits."""
        arch = self.config["arch"]
        if arch == "transformer_mlm":
            src = torch.as_tensor(batch["src"], dtype=torch.long)
            padding = _padding(torch.as_tensor(batch["src_lengths"]), src.shape[1])
            embedded = self._embed(self.src, src, True)
            hidden = (self.encoder(embedded, None, padding) if self.written_out
                      else self.encoder(embedded, src_key_padding_mask=padding))
            return self.generator(hidden)
        if arch == "transformer_classifier":
            src = torch.as_tensor(batch["src"], dtype=torch.long)
            lengths = torch.as_tensor(batch["src_lengths"])
            pooling = self.config.get("pooling", "mean")
            if pooling == "cls":  # the classification token <s> (id 1) before each text
                src = torch.cat([torch.ones_like(src[:, :1]), src], dim=1)
                lengths = lengths + 1
            padding = _padding(lengths, src.shape[1])
            embedded = self._embed(self.src, src, True)
            hidden = (self.encoder(embedded, None, padding) if self.written_out
                      else self.encoder(embedded, src_key_padding_mask=padding))
            if pooling == "cls":
                pooled = hidden[:, 0]
            elif pooling == "attention":
                keys = torch.tanh(self.pooling.proj(hidden))
                scores = (keys @ self.pooling.query[0]).masked_fill(padding, float("-inf"))
                pooled = (scores.softmax(-1)[:, :, None] * hidden).sum(1)
            else:
                keep = (~padding).to(hidden.dtype)[:, :, None]
                pooled = (hidden * keep).sum(1) / lengths.to(hidden.dtype)[:, None]
            return self.classifier(pooled)
        tgt = torch.as_tensor(batch["tgt"], dtype=torch.long)[:, :-1]
        tgt_padding = _padding(torch.as_tensor(batch["tgt_lengths"]) - 1, tgt.shape[1])
        causal = _causal(tgt.shape[1])
        if arch == "transformer_lm" and self.written_out:
            hidden = self.decoder(self._embed(self.tgt, tgt, False), causal, tgt_padding)
        elif arch == "transformer_lm":
            hidden = self.decoder(self._embed(self.tgt, tgt, False), mask=causal,
                                  src_key_padding_mask=tgt_padding)
        elif self.written_out:
            src = torch.as_tensor(batch["src"], dtype=torch.long)
            src_padding = _padding(batch["src_lengths"], src.shape[1])
            memory = self.transformer.encoder(self._embed(self.src, src, True), None, src_padding)
            hidden = self.transformer.decoder(self._embed(self.tgt, tgt, False), causal,
                                              tgt_padding, memory, src_padding)
        else:
            src = torch.as_tensor(batch["src"], dtype=torch.long)
            src_padding = _padding(batch["src_lengths"], src.shape[1])
            hidden = self.transformer(
                self._embed(self.src, src, True), self._embed(self.tgt, tgt, False), tgt_mask=causal,
                src_key_padding_mask=src_padding, tgt_key_padding_mask=tgt_padding,
                memory_key_padding_mask=src_padding)
        return self.generator(hidden)

    def loss(self, batch):
        """The training loss, as attn_model_forward_loss."""
        logits = self(batch)
        smoothing = self.config["label_smoothing"]
        if self.config["arch"] == "transformer_classifier":
            labels = torch.as_tensor(batch["labels"], dtype=torch.long)
            return F.cross_entropy(logits, labels, label_smoothing=smoothing)
        if self.config["arch"] == "transformer_mlm":
            labels = torch.as_tensor(batch["mlm_targets"], dtype=torch.long).reshape(-1)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels, ignore_index=-1,
                                   label_smoothing=smoothing)
        labels = torch.as_tensor(batch["tgt"], dtype=torch.long)[:, 1:].clone()
        labels[_padding(torch.as_tensor(batch["tgt_lengths"]) - 1, labels.shape[1])] = IGNORE
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=IGNORE, label_smoothing=smoothing)

    def attn_parameters(self):
        """Parameters by attn's names (a tied projection appears once, as the embedding)."""
        named = {}
        for name, parameter in self.named_parameters():
            named[name.removeprefix("transformer.")] = parameter
        return named


def adam_step(model, batch, lr, betas, eps, weight_decay=0.0, decoupled=False, moments=None,
              step=0):
    """One update of torch.optim.Adam (decoupled=False) or AdamW on the loss of batch, in
    float64, with every 1-dimensional parameter (biases, layer-norm gains) exempt from weight
    decay as in attn's trainer. moments {name: (exp_avg, exp_avg_sq)} with step (the updates
    made before) continue a run; None starts a fresh optimizer. The model is updated in place;
    returns its parameters by attn's names as float64 arrays."""
    named = model.attn_parameters()
    groups = [{"params": [p for p in named.values() if p.ndim > 1]},
              {"params": [p for p in named.values() if p.ndim <= 1], "weight_decay": 0.0}]
    make = torch.optim.AdamW if decoupled else torch.optim.Adam
    optimizer = make(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if moments is not None:
        for name, parameter in named.items():
            exp_avg, exp_avg_sq = moments[name]
            optimizer.state[parameter] = {
                "step": torch.tensor(float(step)),
                "exp_avg": torch.as_tensor(exp_avg, dtype=parameter.dtype).clone(),
                "exp_avg_sq": torch.as_tensor(exp_avg_sq, dtype=parameter.dtype).clone()}
    optimizer.zero_grad()
    model.loss(batch).backward()
    optimizer.step()
    return {name: p.detach().numpy().copy() for name, p in named.items()}


def build(config, seed):
    """A float64 reference whose weights are float32 values: torch's own initialisation plus
    noise, so that biases are nonzero and layer norms are not the identity."""
    torch.manual_seed(seed)
    model = Reference(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
            parameter.copy_(parameter.float())
    return model.double()


def save_model(model, path):
    """attn's model file: float32 weights by attn's names and the config JSON."""
    from attn.tensor_file import save
    tensors = {name: p.detach().float().numpy() for name, p in model.attn_parameters().items()}
    save(path, tensors, {"attn_config": json.dumps(model.config)})


def random_batch(config, rng, size=3, src_len=7, tgt_len=6):
    """Ids in [4, vocab) up to each length, padding (0) after; targets <s> ... </s>."""
    batch = {}
    if config["arch"] in ("transformer", "transformer_classifier", "transformer_mlm"):
        lengths = np.array([src_len] + list(rng.integers(1, src_len + 1, size - 1)), np.int32)
        src = rng.integers(4, config["src_vocab"], size=(size, src_len)).astype(np.int32)
        src[np.arange(src_len)[None, :] >= lengths[:, None]] = 0
        batch.update(src=src, src_lengths=lengths)
    if config["arch"] in ("transformer", "transformer_lm"):
        lengths = np.array([tgt_len] + list(rng.integers(2, tgt_len + 1, size - 1)), np.int32)
        tgt = rng.integers(4, config["tgt_vocab"], size=(size, tgt_len)).astype(np.int32)
        tgt[:, 0] = 1
        tgt[np.arange(size), lengths - 1] = 2
        tgt[np.arange(tgt_len)[None, :] >= lengths[:, None]] = 0
        batch.update(tgt=tgt, tgt_lengths=lengths)
    if config["arch"] == "transformer_classifier":
        batch["labels"] = rng.integers(0, config["num_classes"], size=size).astype(np.int32)
    if config["arch"] == "transformer_mlm":  # about a third of the tokens masked, none of the padding
        chosen = (rng.random(batch["src"].shape) < 0.35) & (batch["src"] != 0)
        chosen[0, 0] = True
        batch["mlm_targets"] = np.where(chosen, batch["src"], -1).astype(np.int32)
    return batch


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: torch_transformer_reference.py OUT.safetensors")
    save_model(build(default_config("transformer"), seed=0), sys.argv[1])
