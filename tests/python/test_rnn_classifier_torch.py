"""attn's RNN classifier (arch "rnn_classifier", Yang et al. 2016's word encoder and word
attention) against PyTorch 1.13: torch.nn.GRU / nn.LSTM (bidirectional, over packed texts),
the same pooling (u_t = tanh(W h_t + b), a_t = softmax(u_t . q) with the padding masked,
pooled = sum a_t h_t; or the mean over the text) and nn.Linear. The torch model's float32
weights are saved as safetensors with the config JSON, attn_model_load reads them by name, and
for one padded batch attn gives the logits, the loss (label smoothing included) and every
parameter's gradient that torch computes in float64."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attn.models import Model

from torch_transformer_reference import save_model


def config_of(**fields):
    config = {"version": 1, "arch": "rnn_classifier", "dropout": 0.0, "src_vocab": 13,
              "num_classes": 4, "pooling": "attention", "max_len": 32, "label_smoothing": 0.1,
              "cell": "gru", "layers": 2, "hidden": 8, "embedding_dim": 6, "bidirectional": True}
    config.update(fields)
    return config


class Reference(nn.Module):
    """Embedding, torch's recurrent layers, the pooling and a linear layer over the classes,
    under attn's parameter names."""

    def __init__(self, config):
        super().__init__()
        assert config["dropout"] == 0.0, "attn draws its own dropout masks"
        self.config = config
        h, e = config["hidden"], config["embedding_dim"]
        width = h * (2 if config["bidirectional"] else 1)
        self.src_embed = nn.Embedding(config["src_vocab"], e)
        recurrent = nn.LSTM if config["cell"] == "lstm" else nn.GRU
        self.encoder = recurrent(e, h, num_layers=config["layers"],
                                 bidirectional=config["bidirectional"], batch_first=True)
        if config["pooling"] == "attention":
            self.pooling = nn.Module()
            self.pooling.proj = nn.Linear(width, width)
            self.pooling.query = nn.Parameter(0.3 * torch.randn(1, width))
        self.classifier = nn.Linear(width, config["num_classes"])

    def pool(self, batch):
        """The pooled vectors [B, A] and attention pooling's weights [B, S] (None for mean)."""
        src = torch.as_tensor(batch["src"], dtype=torch.long)
        lengths = torch.as_tensor(batch["src_lengths"], dtype=torch.long)
        packed = pack_padded_sequence(self.src_embed(src), lengths, batch_first=True,
                                      enforce_sorted=False)
        out, _ = self.encoder(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        padding = torch.arange(src.shape[1])[None, :] >= lengths[:, None]
        if self.config["pooling"] == "mean":
            return states.sum(1) / lengths.to(states.dtype)[:, None], None
        keys = torch.tanh(self.pooling.proj(states))
        scores = (keys @ self.pooling.query[0]).masked_fill(padding, float("-inf"))
        weights = scores.softmax(-1)
        return (weights[:, :, None] * states).sum(1), weights

    def forward(self, batch):
        return self.classifier(self.pool(batch)[0])

    def loss(self, batch):
        return F.cross_entropy(self(batch), torch.as_tensor(batch["labels"], dtype=torch.long),
                               label_smoothing=self.config["label_smoothing"])

    def attn_parameters(self):
        return dict(self.named_parameters())


def build(config, seed):
    """float64 with float32 values, every bias moved off torch's initial values."""
    torch.manual_seed(seed)
    model = Reference(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
            parameter.copy_(parameter.float())
    return model.double()


def random_batch(config, rng, size=5, src_len=7):
    """Texts of 1..src_len ids in [4, vocab), padded with ids a mistake would read."""
    lengths = np.array([src_len] + list(rng.integers(1, src_len + 1, size - 1)), np.int32)
    src = rng.integers(4, config["src_vocab"], size=(size, src_len)).astype(np.int32)
    labels = rng.integers(0, config["num_classes"], size=size).astype(np.int32)
    return {"src": src, "src_lengths": lengths, "labels": labels}


CONFIGS = {
    "bidirectional GRU, 2 layers, attention pooling": config_of(),
    "bidirectional LSTM, 2 layers, attention pooling": config_of(cell="lstm", src_vocab=20),
    "bidirectional LSTM, mean pooling, no smoothing": config_of(
        cell="lstm", layers=1, pooling="mean", label_smoothing=0.0),
    "one-way GRU, attention pooling": config_of(bidirectional=False, layers=1, hidden=5),
}


@pytest.fixture(params=list(CONFIGS), ids=list(CONFIGS))
def case(request, tmp_path):
    config = CONFIGS[request.param]
    torch_model = build(config, seed=7)
    path = tmp_path / "classifier.safetensors"
    save_model(torch_model, path)
    batch = random_batch(config, np.random.default_rng(3))
    with Model(path) as model:
        yield torch_model, model, batch


def test_config_survives_the_file(case):
    torch_model, model, _ = case
    assert model.config == torch_model.config


def test_logits_match(case):
    torch_model, model, batch = case
    with torch.no_grad():
        expected = torch_model(batch).numpy()
    logits = model.logits(batch)
    assert logits.shape == expected.shape
    assert np.max(np.abs(logits - expected)) <= 1e-5 * max(1.0, np.max(np.abs(expected)))


def test_loss_and_gradients_match(case, check_loss_and_gradients):
    check_loss_and_gradients(*case)


def test_mixed_precision_loss_is_close(case):
    """bf16 operands, fp32 sums (attn train --precision bf16): the loss within bf16's rounding."""
    torch_model, model, batch = case
    exact = torch_model.loss(batch).item()
    loss, _ = model.loss_and_grads(batch, precision="bf16")
    assert abs(loss - exact) <= 2e-2 * max(1.0, abs(exact))
