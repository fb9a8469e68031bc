"""attn.Bundle: a model file written by attn train, loaded once through the C library,
translates strings as `attn translate` does (greedy, beam, n-best with scores), and exposes
its tokenizers and config; bad files and texts raise with the library's message."""
import random
import subprocess

import pytest

import attn

from attn_program import ATTN, TINY_TRANSFORMER_D32


def run(*args, stdin=None):
    result = subprocess.run([ATTN, *map(str, args)], input=stdin, capture_output=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def words(rng, n):
    return ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 6))) for _ in range(n)]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A reverse-the-word Transformer trained for a few seconds: enough for real choices."""
    folder = tmp_path_factory.mktemp("bundle")
    train = folder / "train.tsv"
    train.write_text("".join(f"{w}\t{w[::-1]}\n" for w in words(random.Random(7), 1000)),
                     encoding="utf-8")
    path = folder / "model.safetensors"
    subprocess.run([ATTN, "train", "--train", train, "--out", path, *TINY_TRANSFORMER_D32,
                    "--dropout", "0", "--label-smoothing", "0", "--lr", "3e-3", "--warmup", "20",
                    "--max-steps", "80", "--batch-tokens", "600", "--threads", "2"], check=True,
                   capture_output=True, timeout=600)
    return path


# Held-out words, an empty line, and a letter the vocabulary lacks (read as <unk>).
INPUTS = words(random.Random(99), 12) + ["", "abzab"]


def test_precision_is_the_clis(model):
    """Bundle(path, precision) runs the model as attn translate --precision does; the default,
    auto, is tested above against the CLI's own default."""
    stdin = ("\n".join(INPUTS) + "\n").encode()
    with attn.Bundle(model, precision="fp32") as bundle:
        cli = run("translate", "--model", model, "--precision", "fp32", stdin=stdin)
        assert bundle.translate(INPUTS) == cli.split("\n")[:-1]
    for bad in ("fp16", None):
        with pytest.raises(ValueError, match="precision"):
            attn.Bundle(model, precision=bad)


def test_translate_equals_the_cli(model):
    stdin = ("\n".join(INPUTS) + "\n").encode()
    with attn.Bundle(model) as bundle:
        for beam in [1, 5]:
            cli = run("translate", "--model", model, "--beam", beam, stdin=stdin).split("\n")
            assert bundle.translate(INPUTS, beam=beam) == cli[:-1]
        cli = run("translate", "--model", model, "--beam", 4, "--nbest", 3, stdin=stdin)
        expected = {}
        for line in cli.splitlines():
            number, score, text = line.split("\t")
            expected.setdefault(int(number) - 1, []).append((score, text))
        got = bundle.translate(INPUTS, beam=4, nbest=3)
        assert len(got) == len(INPUTS)
        for i, pairs in enumerate(got):
            if INPUTS[i] == "":
                assert pairs == []
                continue
            assert [(f"{score:.6f}", text) for text, score in pairs] == expected[i]


def test_many_texts_go_in_batches(model):
    texts = words(random.Random(3), 70)
    with attn.Bundle(model) as bundle:
        assert bundle.translate(texts) == bundle.translate(texts[:35]) + bundle.translate(
            texts[35:])


def test_tokenizers_and_config(model):
    bundle = attn.Bundle(model)
    source, target = bundle.source_tokenizer, bundle.target_tokenizer
    ids = source.encode("abcz")
    assert len(ids) == 4 and ids[3] == 3  # z is outside the vocabulary: <unk>
    assert source.decode(ids) == "abc"
    assert target.decode(target.encode("hgf")) == "hgf"
    assert len(target) == bundle.config["tgt_vocab"]
    assert len(source) == bundle.config["src_vocab"]
    assert target.token(1) == "<s>" and target.token(10 ** 6) is None
    assert bundle.config["arch"] == "transformer" and bundle.config["d_model"] == 32
    bundle.close()
    with pytest.raises(ValueError, match="closed"):
        source.encode("abc")
    with pytest.raises(ValueError, match="closed"):
        bundle.translate(["abc"])


def test_errors_name_the_file_or_the_text(model, tmp_path):
    with pytest.raises(RuntimeError, match="missing.safetensors"):
        attn.Bundle(tmp_path / "missing.safetensors")
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(model.read_bytes()[:600])
    with pytest.raises(RuntimeError, match="broken.safetensors"):
        attn.Bundle(broken)
    with attn.Bundle(model) as bundle:
        too_long = "a" * (bundle.config["max_len"] + 1)
        with pytest.raises(ValueError, match=r"texts\[1\].*above the \d+ the model reads"):
            bundle.translate(["abc", too_long])
        with pytest.raises(ValueError, match="one string"):
            bundle.translate("abc")
        with pytest.raises(ValueError, match="beam_size"):
            bundle.translate(["abc"], beam=0)
