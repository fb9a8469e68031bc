"""attn's RNN encoder-decoders against PyTorch 1.13 built from nn.GRU / nn.LSTM and
nn.GRUCell / nn.LSTMCell (torch_rnn_reference.py): the torch model's float32 weights are
saved as safetensors with the config JSON, attn_model_load reads them by name, and for one
batch with padding and label smoothing attn gives the same logits and the same loss and
gradient for every parameter as torch computing in float64."""
import json

import numpy as np
import pytest
import torch

from attn.models import Model
from attn.tensor_file import save

import torch_rnn_reference as ref
from torch_transformer_reference import save_model

CONFIGS = {
    "Bahdanau: bidirectional GRU encoder, GRU decoder, 2 layers": ref.default_config(),
    "Bahdanau: one-way LSTM, reversed source, no smoothing": ref.default_config(
        cell="lstm", layers=1, bidirectional=False, reverse_source=True, label_smoothing=0.0,
        hidden=5, embedding_dim=3, attention_dim=4),
    "Luong general, input feeding, bidirectional GRU": ref.default_config(
        attention="luong-general", input_feeding=True, layers=1),
    "Luong concat, LSTM, 2 layers": ref.default_config(
        attention="luong-concat", input_feeding=True, cell="lstm", src_vocab=20),
    "Luong dot, no input feeding": ref.default_config(
        attention="luong-dot", bidirectional=False, layers=1),
    "no attention, LSTM, reversed source": ref.default_config(
        attention="none", cell="lstm", bidirectional=False, reverse_source=True),
}


@pytest.fixture(params=list(CONFIGS), ids=list(CONFIGS))
def case(request, tmp_path):
    config = CONFIGS[request.param]
    torch_model = ref.build(config, seed=7)
    path = tmp_path / "model.safetensors"
    save_model(torch_model, path)
    batch = ref.random_batch(config, np.random.default_rng(3))
    with Model(path) as model:
        yield torch_model, model, batch


def test_config_survives_the_file(case):
    torch_model, model, _ = case
    assert model.config == torch_model.config


def test_logits_match(case):
    """On every row that predicts a target token; the rows past a target's end read padding
    (attn feeds token 0 there, torch the </s>) and predict nothing."""
    torch_model, model, batch = case
    with torch.no_grad():
        expected = torch_model(batch).numpy()
    logits = model.logits(batch)
    assert logits.shape == expected.shape
    real = np.arange(logits.shape[1])[None, :] < batch["tgt_lengths"][:, None] - 1
    scale = max(1.0, np.max(np.abs(expected)))
    assert np.max(np.abs(logits[real] - expected[real])) <= 1e-5 * scale


def test_loss_and_gradients_match(case, check_loss_and_gradients):
    check_loss_and_gradients(*case)


def test_a_missing_direction_is_named(tmp_path):
    """A one-way encoder's weights under a bidirectional config are refused, naming the
    first missing tensor."""
    config = ref.default_config()
    torch_model = ref.build(dict(config, bidirectional=False), seed=7)
    tensors = {n: p.detach().float().numpy() for n, p in torch_model.attn_parameters().items()}
    path = tmp_path / "mismatch.safetensors"
    save(path, tensors, {"attn_config": json.dumps(config)})
    with pytest.raises(RuntimeError, match="encoder.weight_ih_l0_reverse"):
        Model(path)
