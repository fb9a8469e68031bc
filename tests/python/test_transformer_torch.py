"""attn's Transformer models against PyTorch 1.13 built from nn.Transformer /
nn.TransformerEncoder (torch_transformer_reference.py): the torch model's float32 weights are
saved as safetensors with the config JSON, attn_model_load reads them by name, and for one
batch with padding and label smoothing attn gives the same logits (max abs diff <= 1e-4),
the same loss and gradient for every parameter as torch computing in float64, and the same
parameters after one Adam or AdamW update with the trainer's settings."""
import json

import numpy as np
import pytest
import torch

from attn import optim
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
    # GELU: see the note on bf16 and ReLU's kinks below.
    "masked language model": ref.default_config("transformer_mlm", activation="gelu"),
    "masked language model, pre-norm, learned positions, no output bias":
        ref.default_config("transformer_mlm", norm_first=True, positions="learned",
                           output_bias=False, activation="gelu"),
    "masked language model: rope, rms_norm, swiglu, no bias": ref.default_config(
        "transformer_mlm", positions="rope", norm="rms_norm", ffn="swiglu", bias=False,
        output_bias=False),
    "classifier, cls pooling": ref.default_config("transformer_classifier", pooling="cls"),
    "classifier, attention pooling, pre-norm, learned positions": ref.default_config(
        "transformer_classifier", pooling="attention", norm_first=True, positions="learned",
        activation="gelu"),
    "GPT-2 style language model": ref.default_config(
        "transformer_lm", norm_first=True, activation="gelu_tanh", positions="learned",
        output_bias=False, tie_output=True, decoder_final_norm=True, scale_embeddings=False,
        dropout=0.0),
    "encoder-decoder and classifier with learned positions, no output bias": ref.default_config(
        "transformer", positions="learned", output_bias=False, tie_output=False),
    "LLaMA-style language model: pre-norm, rope, rms_norm, swiglu, no bias, untied":
        ref.default_config("transformer_lm", norm_first=True, positions="rope", norm="rms_norm",
                           ffn="swiglu", bias=False, output_bias=False, tie_output=False,
                           scale_embeddings=False),
    "LLaMA-style language model, tied, rope_base 500": ref.default_config(
        "transformer_lm", norm_first=True, positions="rope", rope_base=500.0, norm="rms_norm",
        ffn="swiglu", bias=False, output_bias=False, tie_output=True, scale_embeddings=False),
    # GELU rather than ReLU below: bf16 rounding moves ReLU's kinks, which made the bf16
    # gradients of these small models differ by up to 35% of a tensor's largest (GELU: 5%).
    "encoder-decoder with rope and rms_norm (post-norm, the cross-attention unrotated)":
        ref.default_config("transformer", positions="rope", norm="rms_norm", activation="gelu"),
    "pre-norm encoder-decoder: swiglu, LayerNorms without bias": ref.default_config(
        "transformer", norm_first=True, ffn="swiglu", bias=False, activation="gelu"),
    "classifier, attention pooling": ref.default_config("transformer_classifier",
                                                        pooling="attention", activation="gelu"),
    "classifier: rope, rms_norm, no bias": ref.default_config(
        "transformer_classifier", positions="rope", norm="rms_norm", bias=False,
        activation="gelu"),
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


def test_loss_and_gradients_match(case, check_loss_and_gradients):
    check_loss_and_gradients(*case)


def test_bf16_products_stay_close_to_fp32(case):
    _, model, batch = case
    loss32, grads32 = model.loss_and_grads(batch)
    loss16, grads16 = model.loss_and_grads(batch, precision="bf16")
    # The operands did change (bf16 keeps 8 significant bits), and only by that much.
    assert loss16 != loss32
    assert abs(loss16 - loss32) <= 1e-2 * abs(loss32)
    for name, g32 in grads32.items():
        assert np.max(np.abs(grads16[name] - g32)) <= 0.05 * np.max(np.abs(g32)) + 1e-6, name
    with pytest.raises(ValueError, match="precision"):
        model.loss_and_grads(batch, precision="int8")


# The trainer's optimizer ("Attention Is All You Need"): betas (0.9, 0.98), eps 1e-9, at a
# peak rate; Adam without weight decay, or AdamW with decay on the matrices only.
LR, BETAS, EPS = 1e-3, (0.9, 0.98), 1e-9
UPDATES = {
    "Adam, first step": dict(decoupled=False, weight_decay=0.0, resumed=False),
    "AdamW, resumed at step 5": dict(decoupled=True, weight_decay=0.01, resumed=True),
}


def attn_adam_step(model, batch, decoupled, weight_decay, moments, step):
    """attn's loss and gradients, then attn_adam_step over all parameters as one flat buffer
    (as the trainer's store holds them), vectors exempt from decay. Returns the parameters by
    name."""
    values = model.parameters()
    _, grads = model.loss_and_grads(batch)
    names = list(values)
    sizes = [values[name].size for name in names]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    flat = np.concatenate([values[name].ravel() for name in names])
    flat_grads = np.concatenate([grads[name].ravel() for name in names])
    m = np.concatenate([np.asarray(moments[name][0], np.float32).ravel() for name in names])
    v = np.concatenate([np.asarray(moments[name][1], np.float32).ravel() for name in names])
    exempt = [(int(offsets[i]), sizes[i]) for i, name in enumerate(names)
              if values[name].ndim <= 1]
    assert optim.adam_step(flat, flat_grads, m, v, step, lr=LR, betas=BETAS, eps=EPS,
                           weight_decay=weight_decay, decoupled=decoupled,
                           no_decay=exempt) == step + 1
    return {name: flat[offsets[i]:offsets[i + 1]].reshape(values[name].shape)
            for i, name in enumerate(names)}


@pytest.mark.parametrize("update", list(UPDATES), ids=list(UPDATES))
def test_parameters_after_one_adam_step_match(case, update):
    """Every parameter within 1e-6 (the float32 rounding of weights up to ~2), with one
    exception. The first step from zero moments moves each weight by about lr * g / (|g| + eps),
    lr times the gradient's sign, which is undetermined where the gradient cancels to rounding
    noise (the key projection's bias, say, whose gradient is zero in exact arithmetic since
    softmax ignores a shift): entries whose reference gradient is below 1e-4 of the tensor's
    largest may differ by up to 2 lr. Resumed at step 5 with the moments of a run in progress,
    the update is smooth in the gradient and every entry is held to 1e-6. (Measured: at most
    7.3e-8 and 2.5e-7.)"""
    torch_model, model, batch = case
    settings = UPDATES[update]
    torch_model.zero_grad()
    torch_model.loss(batch).backward()
    reference_grads = {n: p.grad.numpy().copy() for n, p in torch_model.attn_parameters().items()}
    rng = np.random.default_rng(5)
    moments, step = {}, 0
    for name, grad in reference_grads.items():
        if settings["resumed"]:
            scale = max(float(np.max(np.abs(grad))), 1e-3)
            moments[name] = ((0.5 * scale * rng.standard_normal(grad.shape)).astype(np.float32),
                             (scale * rng.uniform(0.5, 1.5, grad.shape)).astype(np.float32) ** 2)
            step = 5
        else:
            moments[name] = (np.zeros(grad.shape, np.float32), np.zeros(grad.shape, np.float32))
    before = {n: p.detach().numpy().copy() for n, p in torch_model.attn_parameters().items()}
    ours = attn_adam_step(model, batch, settings["decoupled"], settings["weight_decay"],
                          moments, step)
    expected = ref.adam_step(torch_model, batch, LR, BETAS, EPS, settings["weight_decay"],
                             settings["decoupled"], moments if settings["resumed"] else None,
                             step)
    assert sorted(ours) == sorted(expected)
    for name, value in expected.items():
        # Each tensor moves by far more than the tolerance.
        assert np.max(np.abs(value - before[name])) > 0.1 * LR, f"{name} did not move"
        difference = np.abs(ours[name] - value)
        grad = np.abs(reference_grads[name])
        held = np.ones(grad.shape, bool) if settings["resumed"] else grad >= 1e-4 * np.max(grad)
        assert np.max(difference[held], initial=0.0) <= 1e-6, (name, np.max(difference[held]))
        assert np.max(difference, initial=0.0) <= 2 * LR + 1e-6, name


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


def test_rotary_positions_are_applied(tmp_path):
    """A LLaMA-style model's logits move with rope_base: the rotation is there (the parity
    cases above would also hold if neither side turned anything)."""
    config = CONFIGS["LLaMA-style language model: pre-norm, rope, rms_norm, swiglu, no bias, untied"]
    torch_model = ref.build(config, seed=7)
    batch = ref.random_batch(config, np.random.default_rng(3))
    tensors = {n: p.detach().float().numpy() for n, p in torch_model.attn_parameters().items()}
    path = tmp_path / "other_base.safetensors"
    save(path, tensors, {"attn_config": json.dumps(dict(config, rope_base=10.0))})
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
