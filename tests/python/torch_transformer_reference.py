"""PyTorch 1.13 references for attn's Transformer models, built from torch's own modules:

  transformer             nn.Transformer(batch_first=True) + embeddings scaled by sqrt(d_model)
                          + sinusoidal positions + output projection (optionally tied)
  transformer_lm          nn.TransformerEncoder with a causal mask + output projection
  transformer_classifier  nn.TransformerEncoder + mean over non-padding positions + linear

Config "positions": "learned" replaces the sinusoidal table by nn.Embedding tables of
max_len rows (pos_embed, or src_pos_embed and tgt_pos_embed); "output_bias": false drops the
generator's (classifier's) bias: with pre-norm, gelu_tanh and a tied output, GPT-2.

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
              "label_smoothing": 0.1}
    if arch in ("transformer", "transformer_classifier"):
        config.update(encoder_layers=2, encoder_final_norm=True, src_vocab=13)
    if arch in ("transformer", "transformer_lm"):
        config.update(decoder_layers=2, decoder_final_norm=True, tgt_vocab=11, tie_output=True)
    if arch == "transformer":
        config.update(share_embeddings=False)
    if arch == "transformer_classifier":
        config.update(num_classes=4)
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


class Reference(nn.Module):
    """One of the three architectures, per config["arch"]."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        d = config["d_model"]
        arch = config["arch"]
        self.learned = config.get("positions", "sinusoidal") == "learned"
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
            self.transformer = nn.Transformer(
                num_encoder_layers=config["encoder_layers"],
                num_decoder_layers=config["decoder_layers"], **args)
            if not config["encoder_final_norm"]:
                self.transformer.encoder.norm = None
            if not config["decoder_final_norm"]:
                self.transformer.decoder.norm = None
        elif arch == "transformer_lm":
            self.embed = nn.Embedding(config["tgt_vocab"], d)
            self.tgt = self.embed
            self.decoder = _stack(config, "decoder_layers", "decoder_final_norm")
        else:
            self.embed = nn.Embedding(config["src_vocab"], d)
            self.src = self.embed
            self.encoder = _stack(config, "encoder_layers", "encoder_final_norm")
            self.classifier = nn.Linear(d, config["num_classes"], bias=bias)
        if arch != "transformer_classifier":
            self.generator = nn.Linear(d, config["tgt_vocab"], bias=bias)
            if config["tie_output"]:
                self.generator.weight = self.tgt.weight

    def _embed(self, table, ids, source):
        if self.learned:
            positions = self.src_positions if source else self.tgt_positions
            return table(ids) * self.scale + positions.weight[:ids.shape[1]]
        return table(ids) * self.scale + self.positions[:ids.shape[1]]

    def forward(self, batch):
        """Logits, as attn_model_forward_logits."""
        arch = self.config["arch"]
        if arch == "transformer_classifier":
            src = torch.as_tensor(batch["src"], dtype=torch.long)
            lengths = torch.as_tensor(batch["src_lengths"])
            padding = _padding(lengths, src.shape[1])
            hidden = self.encoder(self._embed(self.src, src, True), src_key_padding_mask=padding)
            keep = (~padding).to(hidden.dtype)[:, :, None]
            pooled = (hidden * keep).sum(1) / lengths.to(hidden.dtype)[:, None]
            return self.classifier(pooled)
        tgt = torch.as_tensor(batch["tgt"], dtype=torch.long)[:, :-1]
        tgt_padding = _padding(torch.as_tensor(batch["tgt_lengths"]) - 1, tgt.shape[1])
        causal = _causal(tgt.shape[1])
        if arch == "transformer_lm":
            hidden = self.decoder(self._embed(self.tgt, tgt, False), mask=causal,
                                  src_key_padding_mask=tgt_padding)
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
    if config["arch"] in ("transformer", "transformer_classifier"):
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
    return batch


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: torch_transformer_reference.py OUT.safetensors")
    save_model(build(default_config("transformer"), seed=0), sys.argv[1])
