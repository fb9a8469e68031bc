"""Ensembles and averaging from the command line and Python: `attn translate --model A,B`
(two copies of a model translate as the model; two models as attn.Ensemble does; files of
other tokenizers refused naming both), `attn average` and attn.average (the mean of the
weights, loadable by translate; other configs refused), and `attn viz` refusing ensembles."""
import random
import subprocess

import numpy as np
import pytest

import attn
from attn.tensor_file import TensorFile
from attn_program import ATTN


def run(*args, stdin=None, timeout=300):
    return subprocess.run([ATTN, *map(str, args)], input=stdin, capture_output=True,
                          timeout=timeout)


def words(rng, n, alphabet="abcdefgh"):
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(2, 6))) for _ in range(n)]


def train(folder, name, data, *extra, ffn=64):
    out = folder / f"{name}.safetensors"
    result = run("train", "--train", data, "--out", out, "--layers", "1", "--d-model", "32",
                 "--heads", "2", "--ffn", ffn, "--dropout", "0", "--label-smoothing", "0",
                 "--lr", "3e-3", "--warmup", "20", "--max-steps", "60", "--batch-tokens", "600",
                 "--no-valid", "--threads", "2", *extra, timeout=600)
    assert result.returncode == 0, result.stderr.decode()
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two reverse-the-word models of one config from two seeds, one of another size, and one
    whose data has other letters (other tokenizers)."""
    folder = tmp_path_factory.mktemp("ensembles")
    data = folder / "train.tsv"
    data.write_text("".join(f"{w}\t{w[::-1]}\n" for w in words(random.Random(3), 800)),
                    encoding="utf-8")
    other = folder / "other.tsv"
    other.write_text("".join(f"{w}\t{w[::-1]}\n" for w in words(random.Random(4), 800, "hijk")),
                     encoding="utf-8")
    return {"a": train(folder, "a", data, "--seed", "1"),
            "b": train(folder, "b", data, "--seed", "2"),
            "wide": train(folder, "wide", data, "--seed", "3", ffn=48),
            "other": train(folder, "other", other, "--seed", "4"),
            "folder": folder}


INPUTS = words(random.Random(99), 10)
STDIN = ("\n".join(INPUTS) + "\n").encode()


def translate(model, *args):
    result = run("translate", "--model", model, *args, stdin=STDIN)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def test_two_copies_translate_as_the_model(models, tmp_path):
    a = models["a"]
    for args in [("--beam", "1"), ("--beam", "4", "--nbest", "3")]:
        assert translate(f"{a},{a}", *args) == translate(a, *args)
    translate(a, "--alignment", tmp_path / "one.json")
    translate(f"{a},{a}", "--alignment", tmp_path / "two.json")
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()


def test_ensemble_equals_python(models):
    a, b = models["a"], models["b"]
    cli = translate(f"{a},{b}", "--beam", "4", "--nbest", "2")
    with attn.Ensemble([a, b]) as ensemble:
        got = ensemble.translate(INPUTS, beam=4, nbest=2)
        expected = [tuple(line.split("\t")) for line in cli.splitlines()]
        assert [(str(i + 1), f"{score:.6f}", text) for i, pairs in enumerate(got)
                for text, score in pairs] == expected
        assert ensemble.translate(INPUTS, beam=1) == translate(f"{a},{b}", "--beam", "1").split(
            "\n")[:-1]
        assert len(ensemble.source_tokenizer) == len(attn.Bundle(a).source_tokenizer)
    # An ensemble differs from either member somewhere (the test is not vacuous).
    scores = translate(f"{a},{b}", "--nbest", "1", "--format", "nbest")
    assert scores != translate(a, "--nbest", "1", "--format", "nbest")


def test_other_tokenizers_are_refused(models):
    a, other = models["a"], models["other"]
    result = run("translate", "--model", f"{a},{other}", stdin=STDIN)
    assert result.returncode == 1
    message = result.stderr.decode()
    assert str(a) in message and str(other) in message and "different" in message, message
    with pytest.raises(ValueError, match="different"):
        attn.Ensemble([a, other])
    result = run("translate", "--model", f"{a},", stdin=STDIN)
    assert result.returncode == 1 and "empty" in result.stderr.decode()
    result = run("viz", "--model", f"{a},{a}", "--text", "abc", "--out", "x.svg")
    assert result.returncode == 2 and "ensemble" in result.stderr.decode()


def weights(path):
    with TensorFile(path) as f:
        return {name: f.read(name) for name in f.names()}


def test_average(models, tmp_path):
    a, b = models["a"], models["b"]
    out = tmp_path / "mean.safetensors"
    result = run("average", "--out", out, a, b)
    assert result.returncode == 0, result.stderr.decode()
    wa, wb, mean = weights(a), weights(b), weights(out)
    assert mean.keys() == wa.keys()
    for name in wa:
        expected = ((wa[name].astype(np.float64) + wb[name]) / 2).astype(np.float32)
        assert np.array_equal(mean[name], expected), name
    translate(out)  # loads and translates
    python_out = tmp_path / "python.safetensors"
    attn.average(python_out, [a, b])
    assert python_out.read_bytes() == out.read_bytes()
    # The average of one file holds its weights; checkpoints average too.
    run("average", "--out", out, a)
    assert all(np.array_equal(weights(out)[n], wa[n]) for n in wa)
    last_a = a.with_name("a.last.safetensors")
    last_b = b.with_name("b.last.safetensors")
    assert last_a.exists() and last_b.exists()
    result = run("average", "--out", out, last_a, last_b)
    assert result.returncode == 0, result.stderr.decode()
    translate(out)


def test_average_refuses_what_does_not_average(models, tmp_path):
    a, wide, other = models["a"], models["wide"], models["other"]
    out = tmp_path / "mean.safetensors"
    result = run("average", "--out", out, a, wide)
    assert result.returncode == 1
    message = result.stderr.decode()
    assert str(a) in message and str(wide) in message and '"ffn_dim": 64 vs 48' in message, \
        message
    result = run("average", "--out", out, a, other)
    assert result.returncode == 1 and "different" in result.stderr.decode()
    assert not out.exists()
    with pytest.raises(ValueError, match="ffn_dim"):
        attn.average(out, [a, wide])
    assert run("average", "--out", out).returncode == 2
    assert run("average", a, models["b"]).returncode == 2
    assert run("average", "--help").returncode == 0
