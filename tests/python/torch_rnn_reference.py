"""PyTorch 1.13 references for attn's RNN encoder-decoders (arch "rnn", attn_models.h),
built from torch's own nn.GRU / nn.LSTM (over packed sentences) and nn.GRUCell / nn.LSTMCell:

  bahdanau       bidirectional encoder, s_0 = tanh(bridge(h<-_1)), additive attention scored
                 from s_{i-1}, s_i = cells([y_{i-1}; c_i], s_{i-1}), logits from
                 [s_i; y_{i-1}; c_i]
  luong-*        global dot / general / concat scores from s_i, input feeding,
                 h~_i = tanh(W_c [c_i; s_i]), logits from h~_i
  none           s_0 = u (the encoder's last state) and the context u at every step

Each takes the same config dict as attn's JSON config and names its parameters as attn does,
so save_model() (shared with torch_transformer_reference.py) writes a safetensors file that
attn_model_load reads. Computation runs in float64 on float32 weights, as the reference for
attn's float32 results. Dropout must be 0 (attn draws its own masks).

Run as a script to write a small Bahdanau model:
    python3 tests/python/torch_rnn_reference.py out.safetensors
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from torch_transformer_reference import IGNORE, _padding, save_model

LUONG = ("luong-dot", "luong-general", "luong-concat")


def default_config(**fields):
    """A small Bahdanau model (bidirectional GRU encoder, GRU decoder); fields override."""
    config = {"version": 1, "arch": "rnn", "dropout": 0.0, "src_vocab": 13, "tgt_vocab": 11,
              "max_len": 32, "label_smoothing": 0.1, "cell": "gru", "layers": 2, "hidden": 8,
              "embedding_dim": 6, "attention_dim": 7, "bidirectional": True,
              "attention": "bahdanau", "local": "none", "window": 10, "input_feeding": False,
              "reverse_source": False}
    config.update(fields)
    return config


class Additive(nn.Module):
    """v . tanh(W_s s + b + W_h h_j), masked softmax, weighted sum of the annotations."""

    def __init__(self, query_dim, key_dim, attn_dim):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attn_dim)
        self.key_proj = nn.Linear(key_dim, attn_dim, bias=False)
        self.v = nn.Parameter(torch.empty(attn_dim).uniform_(-attn_dim ** -0.5, attn_dim ** -0.5))

    def keys(self, annotations):
        return self.key_proj(annotations)

    def scores(self, query, keys, annotations):
        return torch.tanh(self.query_proj(query)[:, None, :] + keys) @ self.v


class Luong(nn.Module):
    """Global dot, general (s . W h_j) or concat (v . tanh(W [s; h_j])) scores."""

    def __init__(self, score, query_dim, key_dim, attn_dim):
        super().__init__()
        self.score = score
        self.query_dim = query_dim
        if score == "luong-general":
            self.weight = nn.Parameter(0.3 * torch.randn(query_dim, key_dim))
        if score == "luong-concat":
            self.weight = nn.Parameter(0.3 * torch.randn(attn_dim, query_dim + key_dim))
            self.v = nn.Parameter(0.3 * torch.randn(attn_dim))

    def keys(self, annotations):
        if self.score == "luong-concat":
            return annotations @ self.weight[:, self.query_dim:].T
        return annotations

    def scores(self, query, keys, annotations):
        if self.score == "luong-dot":
            return (keys @ query[:, :, None])[:, :, 0]
        if self.score == "luong-general":
            return (keys @ (query @ self.weight)[:, :, None])[:, :, 0]
        projected = query @ self.weight[:, :self.query_dim].T
        return torch.tanh(projected[:, None, :] + keys) @ self.v


class Reference(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config["arch"] == "rnn" and config["dropout"] == 0.0
        assert config["local"] == "none", "local attention is checked in the kernel tests"
        self.config = config
        h, e, layers = config["hidden"], config["embedding_dim"], config["layers"]
        self.bidirectional = config["bidirectional"]
        annotations = h * (2 if self.bidirectional else 1)
        self.lstm = config["cell"] == "lstm"
        attention = config["attention"]
        self.src_embed = nn.Embedding(config["src_vocab"], e)
        self.tgt_embed = nn.Embedding(config["tgt_vocab"], e)
        recurrent = nn.LSTM if self.lstm else nn.GRU
        self.encoder = recurrent(e, h, num_layers=layers, bidirectional=self.bidirectional,
                                 batch_first=True)
        if attention != "none":
            self.bridge = nn.ModuleList([nn.Linear(h, h) for _ in range(layers)])
        context = annotations if attention == "bahdanau" else h if attention == "none" else 0
        extra = (h if config["input_feeding"] else 0) if attention in LUONG else context
        cell = nn.LSTMCell if self.lstm else nn.GRUCell
        self.decoder = nn.ModuleList([cell(e + extra if k == 0 else h, h) for k in range(layers)])
        if attention == "bahdanau":
            self.attention = Additive(h, annotations, config["attention_dim"])
        elif attention in LUONG:
            self.attention = Luong(attention, h, annotations, config["attention_dim"])
            self.combine = nn.Linear(annotations + h, h, bias=False)
        out = h if attention in LUONG else h + e + context
        self.generator = nn.Linear(out, config["tgt_vocab"])

    def encode(self, src, lengths):
        """Annotations [B, S, A] (zeros at padding) and the encoder's last state u [B, H]."""
        if self.config["reverse_source"]:
            src = src.clone()
            for b, n in enumerate(lengths.tolist()):
                src[b, :n] = src[b, :n].flip(0)
        packed = pack_padded_sequence(self.src_embed(src), lengths, batch_first=True,
                                      enforce_sorted=False)
        out, _ = self.encoder(packed)
        annotations, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        h = self.config["hidden"]
        if self.bidirectional:
            last = annotations[:, 0, h:]
        else:
            last = annotations[torch.arange(src.shape[0]), lengths - 1, :h]
        return annotations, last

    def _cells(self, x, states):
        new = []
        for k, cell in enumerate(self.decoder):
            state = cell(x if k == 0 else new[-1][0], states[k])
            new.append(state if self.lstm else (state,))
        return [s if self.lstm else s[0] for s in new]

    def forward(self, batch):
        """Logits [B, T - 1, V], as attn_model_forward_logits."""
        src = torch.as_tensor(batch["src"], dtype=torch.long)
        lengths = torch.as_tensor(batch["src_lengths"], dtype=torch.long)
        tgt = torch.as_tensor(batch["tgt"], dtype=torch.long)
        annotations, last = self.encode(src, lengths)
        padding = _padding(lengths, src.shape[1])
        attention = self.config["attention"]
        if attention == "none":
            first = [last for _ in self.decoder]
        else:
            first = [torch.tanh(bridge(last)) for bridge in self.bridge]
        zeros = torch.zeros_like(first[0])
        states = [(s, zeros) if self.lstm else s for s in first]
        keys = self.attention.keys(annotations) if attention != "none" else None
        feed = zeros
        features = []

        def attend(query):
            scores = self.attention.scores(query, keys, annotations)
            weights = torch.softmax(scores.masked_fill(padding, float("-inf")), dim=1)
            return (weights[:, :, None] * annotations).sum(1)

        def top(states):
            return states[-1][0] if self.lstm else states[-1]

        for t in range(tgt.shape[1] - 1):
            y = self.tgt_embed(tgt[:, t])
            if attention == "bahdanau":
                context = attend(top(states))
                states = self._cells(torch.cat([y, context], -1), states)
                features.append(torch.cat([top(states), y, context], -1))
            elif attention == "none":
                states = self._cells(torch.cat([y, last], -1), states)
                features.append(torch.cat([top(states), y, last], -1))
            else:
                x = torch.cat([y, feed], -1) if self.config["input_feeding"] else y
                states = self._cells(x, states)
                context = attend(top(states))
                feed = torch.tanh(self.combine(torch.cat([context, top(states)], -1)))
                features.append(feed)
        return self.generator(torch.stack(features, 1))

    def loss(self, batch):
        """The training loss, as attn_model_forward_loss."""
        logits = self(batch)
        labels = torch.as_tensor(batch["tgt"], dtype=torch.long)[:, 1:].clone()
        labels[_padding(torch.as_tensor(batch["tgt_lengths"]) - 1, labels.shape[1])] = IGNORE
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=IGNORE, label_smoothing=self.config["label_smoothing"])

    def attn_parameters(self):
        """Parameters by attn's names (torch's names are attn's)."""
        return dict(self.named_parameters())


def build(config, seed):
    """A float64 reference whose weights are float32 values: torch's own initialisation plus
    noise, so that no bias is zero."""
    torch.manual_seed(seed)
    model = Reference(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
            parameter.copy_(parameter.float())
    return model.double()


def random_batch(config, rng, size=4, src_len=7, tgt_len=6):
    """Ids in [4, vocab) up to each length (sources of 1..src_len tokens: torch cannot pack
    an empty one), padding (0) after; targets <s> ... </s>."""
    src_lengths = np.array([src_len] + list(rng.integers(1, src_len + 1, size - 1)), np.int32)
    src = rng.integers(4, config["src_vocab"], size=(size, src_len)).astype(np.int32)
    src[np.arange(src_len)[None, :] >= src_lengths[:, None]] = 0
    tgt_lengths = np.array([tgt_len] + list(rng.integers(2, tgt_len + 1, size - 1)), np.int32)
    tgt = rng.integers(4, config["tgt_vocab"], size=(size, tgt_len)).astype(np.int32)
    tgt[:, 0] = 1
    tgt[np.arange(size), tgt_lengths - 1] = 2
    tgt[np.arange(tgt_len)[None, :] >= tgt_lengths[:, None]] = 0
    return {"src": src, "src_lengths": src_lengths, "tgt": tgt, "tgt_lengths": tgt_lengths}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: torch_rnn_reference.py OUT.safetensors")
    save_model(build(default_config(), seed=0), sys.argv[1])
