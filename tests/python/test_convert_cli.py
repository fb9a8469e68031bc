"""attn convert between llm.c's GPT-2 checkpoints and attn model files: a random checkpoint
(make_llmc_checkpoint.py) converts to a model whose logits are a plain NumPy GPT-2 forward of
the checkpoint (float64; tied wte, wpe, pre-LN, gelu tanh, final LN) within 1e-4, converts back
byte for byte (padded vocabulary rows included), and broken or unrepresentable inputs are
refused with a message naming the file and the problem."""
import json
import subprocess

import numpy as np
import pytest

import make_llmc_checkpoint as llmc
from attn.models import Model
from attn.tensor_file import TensorFile, save
from attn_program import ATTN

SIZES = dict(layers=2, heads=4, channels=32, vocab=100, padded_vocab=128, max_t=24)


def run(*args):
    return subprocess.run([ATTN, *map(str, args)], capture_output=True, text=True, timeout=300)


def varied_parameters(seed=0):
    """GPT-2's initialisation plus noise, so that biases, gains and padded rows all matter."""
    params = llmc.random_parameters(seed=seed, **SIZES)
    rng = np.random.default_rng(seed + 10)
    for name, value in params.items():
        value += (0.1 * rng.standard_normal(value.shape)).astype(np.float32)
    return params


@pytest.fixture
def checkpoint(tmp_path):
    params = varied_parameters()
    path = tmp_path / "gpt2.bin"
    llmc.write_checkpoint(path, params, **SIZES)
    return path, params


def gpt2_logits(p, tokens, layers, heads, channels, vocab, **_):
    """llm.c's forward (train_gpt2.c) in float64 for one sequence: [T, vocab]."""
    p = {name: value.astype(np.float64) for name, value in p.items()}
    T, C, hs = len(tokens), channels, channels // heads

    def layer_norm(x, w, b):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-5) * w + b

    x = p["wte"][tokens] + p["wpe"][:T]
    causal = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(layers):
        h = layer_norm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        heads_out = []
        for head in range(heads):
            q, k, v = (qkv[:, part * C + head * hs:part * C + (head + 1) * hs] for part in range(3))
            scores = q @ k.T / np.sqrt(hs) + causal
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            heads_out.append(weights / weights.sum(-1, keepdims=True) @ v)
        x = x + np.concatenate(heads_out, -1) @ p["attprojw"][l].T + p["attprojb"][l]
        h = layer_norm(x, p["ln2w"][l], p["ln2b"][l])
        f = h @ p["fcw"][l].T + p["fcb"][l]
        f = 0.5 * f * (1 + np.tanh(np.sqrt(2 / np.pi) * (f + 0.044715 * f ** 3)))
        x = x + f @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layer_norm(x, p["lnfw"], p["lnfb"])
    return x @ p["wte"][:vocab].T


def test_logits_equal_a_gpt2_forward_of_the_checkpoint(checkpoint, tmp_path):
    path, params = checkpoint
    model_path = tmp_path / "gpt2.safetensors"
    result = run("convert", "--from", "llmc", path, "--out", model_path)
    assert result.returncode == 0, result.stderr
    assert "2 layers" in result.stderr
    tokens = np.random.default_rng(1).integers(0, SIZES["vocab"], SIZES["max_t"])
    with Model(model_path) as model:
        config = model.config
        assert config["arch"] == "transformer_lm" and config["positions"] == "learned"
        assert config["output_bias"] is False and config["tie_output"] is True
        assert config["activation"] == "gelu_tanh" and config["scale_embeddings"] is False
        assert (config["d_model"], config["num_heads"], config["ffn_dim"]) == (32, 4, 128)
        # The decoder reads tgt[:, :-1]: one more token than the positions predicted.
        tgt = np.concatenate([tokens, [0]]).astype(np.int32)[None, :]
        logits = model.logits({"tgt": tgt, "tgt_lengths": np.array([tgt.shape[1]], np.int32)})
    expected = gpt2_logits(params, tokens, **SIZES)
    assert logits.shape == (1, SIZES["max_t"], SIZES["vocab"])
    assert np.max(np.abs(logits[0] - expected)) <= 1e-4


def test_round_trip_is_byte_identical(checkpoint, tmp_path):
    path, _ = checkpoint
    model_path, back = tmp_path / "gpt2.safetensors", tmp_path / "back.bin"
    assert run("convert", "--from", "llmc", path, "--out", model_path).returncode == 0
    result = run("convert", "--to", "llmc", model_path, "--out", back)
    assert result.returncode == 0, result.stderr
    assert back.read_bytes() == path.read_bytes()


def test_a_model_without_padded_rows_gets_zeros(tmp_path):
    """A model file that never was a checkpoint (no padded rows or Vp recorded): the
    vocabulary is padded to a multiple of 128 with zero rows, as llm.c's exporter does."""
    params = varied_parameters(seed=3)
    path = tmp_path / "gpt2.bin"
    llmc.write_checkpoint(path, params, **SIZES)
    model_path = tmp_path / "gpt2.safetensors"
    assert run("convert", "--from", "llmc", path, "--out", model_path).returncode == 0
    with TensorFile(model_path) as f:
        tensors = {name: f.read(name) for name in f.names() if not name.startswith("llmc.")}
        config = f.metadata["attn_config"]
    save(tmp_path / "plain.safetensors", tensors, {"attn_config": config})
    back = tmp_path / "back.bin"
    result = run("convert", "--to", "llmc", tmp_path / "plain.safetensors", "--out", back)
    assert result.returncode == 0, result.stderr
    params["wte"][SIZES["vocab"]:] = 0.0
    expected = tmp_path / "expected.bin"
    llmc.write_checkpoint(expected, params, **SIZES)
    assert back.read_bytes() == expected.read_bytes()


def corrupt(tmp_path, checkpoint, edit):
    data = bytearray(checkpoint.read_bytes())
    data = edit(data)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(bytes(data))
    return bad


def set_int(data, index, value):
    data[4 * index:4 * index + 4] = int(value).to_bytes(4, "little", signed=True)
    return data


BROKEN = {
    "bad magic": (lambda d: set_int(d, 0, 20240520), "magic"),
    "bad version": (lambda d: set_int(d, 1, 5), "version 5"),
    "truncated": (lambda d: d[:-7], "truncated"),
    "header only": (lambda d: d[:1024], "truncated"),
    "shorter than the header": (lambda d: d[:100], "shorter than"),
    "bytes after the parameters": (lambda d: d + b"\0" * 8, "after"),
    "sizes that overflow": (lambda d: set_int(set_int(d, 6, 2**31 - 1), 5, 1), "overflow"),
    "negative size": (lambda d: set_int(d, 4, -2), "L = -2"),
    "Vp below V": (lambda d: set_int(d, 7, 10), "Vp"),
    "heads not dividing channels": (lambda d: set_int(d, 5, 5), "NH"),
    "NaN weight": (lambda d: d[:2000] + np.float32(np.nan).tobytes() + d[2004:], "NaN"),
}


@pytest.mark.parametrize("case", list(BROKEN), ids=list(BROKEN))
def test_broken_checkpoints_are_refused(checkpoint, tmp_path, case):
    edit, mentions = BROKEN[case]
    bad = corrupt(tmp_path, checkpoint[0], edit)
    out = tmp_path / "out.safetensors"
    result = run("convert", "--from", "llmc", bad, "--out", out)
    assert result.returncode == 1, result.stderr
    assert str(bad) in result.stderr and mentions in result.stderr, result.stderr
    assert not out.exists()


def test_models_llmc_cannot_hold_are_refused(checkpoint, tmp_path):
    """A post-norm, sinusoidal, biased model: every difference is named, nothing written."""
    path, _ = checkpoint
    model_path = tmp_path / "gpt2.safetensors"
    assert run("convert", "--from", "llmc", path, "--out", model_path).returncode == 0
    with TensorFile(model_path) as f:
        tensors = {name: f.read(name) for name in f.names()}
        config = json.loads(f.metadata["attn_config"])
    config.update(norm_first=False, output_bias=True, positions="sinusoidal")
    tensors["generator.bias"] = np.zeros(config["tgt_vocab"], np.float32)
    del tensors["pos_embed.weight"]
    other = tmp_path / "other.safetensors"
    save(other, tensors, {"attn_config": json.dumps(config)})
    out = tmp_path / "out.bin"
    result = run("convert", "--to", "llmc", other, "--out", out)
    assert result.returncode == 1
    for field in ("norm_first", "output_bias", "positions"):
        assert field in result.stderr, result.stderr
    assert str(other) in result.stderr
    assert not out.exists()


def test_usage_errors(checkpoint, tmp_path):
    path, _ = checkpoint
    for args in (["--from", "llmc", path],
                 ["--from", "llmc", "--to", "llmc", path, "--out", tmp_path / "x"],
                 ["--out", tmp_path / "x", path],
                 ["--from", "gguf", path, "--out", tmp_path / "x"]):
        result = run("convert", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert "attn convert" in result.stderr
    assert run("convert", "--help").returncode == 0
