"""attn's Transformer models against PyTorch 1.13 built from nn.Transformer /
nn.TransformerEncoder (torch_transformer_reference.py): the torch model's float32 weights are
saved as safetensors with the config JSON, attn_model_load reads them by name, and for one
batch with padding and label smoothing attn gives the same logits (max abs diff <= 1e-4)
and the same loss and gradient for every parameter as torch computing in float64."""
import json

import numpy as np
import pytest
import torch

from attn.models import Model
from attn.tensor_file import TensorFile, save

import torch_transformer_reference as ref

CONFIGS = {
    "post-norm, separate embeddings, tied output": ref.default_config("transformer"),
    "pre-norm, shared embeddings, untied, gelu, concatenated positions": ref.default_config(
        "transformer", norm_first=True, share_embeddings=True, tgt_vocab=13, tie_output=False,
        activation="gelu", positional_encoding="concatenated"),
    "wider, no final norms, unscaled embeddings": ref.default_config(
        "transformer", d_model=32, num_heads=2, ffn_dim=48, encoder_layers=1,
        decoder_layers=3, encoder_final_norm=False, decoder_final_norm=False,
        scale_embeddings=False, src_vocab=40, tgt_vocab=37, label_smoothing=0.0),
    "language model": ref.default_config("transformer_lm", norm_first=True),
    "classifier": ref.default_config("transformer_classifier"),
}


@pytest.fixture(params=list(CONFIGS), ids=list(CONFIGS))
def case(request, tmp_path):
    config = CONFIGS[request.param]
    torch_model = ref.build(config, seed=7)
    path = tmp_path / "model.safetensors"
    ref.save_model(torch_model, path)
    batch = ref.random_batch(config, np.random.default_rng(3))
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
    assert np.max(np.abs(logits - expected)) <= 1e-4


def test_loss_and_gradients_match(case, assert_close):
    torch_model, model, batch = case
    torch_model.zero_grad()
    expected_loss = torch_model.loss(batch)
    expected_loss.backward()
    loss, grads = model.loss_and_grads(batch)
    assert abs(loss - expected_loss.item()) <= 1e-5 * max(1.0, abs(expected_loss.item()))
    named = torch_model.attn_parameters()
    assert sorted(grads) == sorted(named)
    for name, parameter in named.items():
        # float32 against float64: measured within 1e-6 of each tensor's largest gradient.
        assert_close(grads[name], parameter.grad.numpy(), name, rtol=1e-5)


def test_weights_are_read_by_name_not_order(case):
    _, model, _ = case
    values = model.parameters()
    assert all(v.dtype == np.float32 for v in values.values())
    assert len(values) == len(set(values))


def test_the_stored_positional_layout_is_the_one_used(tmp_path):
    """The same weights with the other sinusoid layout in the config give other logits:
    the layout is part of the model, as the config says."""
    config = ref.default_config("transformer")
    torch_model = ref.build(config, seed=7)
    batch = ref.random_batch(config, np.random.default_rng(3))
    path = tmp_path / "swapped.safetensors"
    swapped = dict(config, positional_encoding="concatenated")
    tensors = {n: p.detach().float().numpy() for n, p in torch_model.attn_parameters().items()}
    save(path, tensors, {"attn_config": json.dumps(swapped)})
    with torch.no_grad():
        expected = torch_model(batch).numpy()
    with Model(path) as model:
        assert np.max(np.abs(model.logits(batch) - expected)) > 1e-2


def test_missing_weight_is_named(tmp_path):
    config = ref.default_config("transformer")
    torch_model = ref.build(config, seed=7)
    tensors = {n: p.detach().float().numpy() for n, p in torch_model.attn_parameters().items()}
    del tensors["decoder.layers.1.norm3.bias"]
    path = tmp_path / "partial.safetensors"
    save(path, tensors, {"attn_config": json.dumps(config)})
    with pytest.raises(RuntimeError, match="decoder.layers.1.norm3.bias"):
        Model(path)
    with TensorFile(path) as f:
        assert "attn_config" in f.metadata
