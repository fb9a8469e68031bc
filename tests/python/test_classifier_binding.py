"""attn.Classifier: a classifier file from Python gives `attn classify --format json`'s
probabilities for the same lines, names its classes, and refuses what it cannot classify."""
import json
import re
import subprocess

import pytest

import attn
from attn_program import ATTN, TINY_TRANSFORMER_D16


def run(*args, stdin=None):
    result = subprocess.run([ATTN, *map(str, args)], input=stdin, capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("classifier")
    train = folder / "train.tsv"
    words = ["apple", "avocado", "banana", "blueberry", "cherry", "coconut"] * 20
    train.write_text("".join(f"{w[0]}\t{w}\n" for w in words), encoding="utf-8")
    out = folder / "clf.safetensors"
    run("train", "--task", "classify", "--train", train, "--out", out, *TINY_TRANSFORMER_D16,
        "--pooling", "attention", "--max-steps", 30, "--no-valid", "--threads", 1)
    return out


def test_probabilities_are_attn_classify_s(model):
    texts = ["apple", "cherry pie", "b\tbanana", "zzz"] * 20  # more than one batch of 64
    expected = [json.loads(line) for line in
                run("classify", "--model", model, "--format", "json", "--threads", 1,
                    stdin="".join(t + "\n" for t in texts)).splitlines()]
    with attn.Classifier(model) as clf:
        assert clf.labels == ["a", "b", "c"]
        got = clf.classify(texts)
    assert len(got) == len(expected)
    for row, line in zip(got, expected):
        assert list(row) == clf.labels
        for label in clf.labels:
            assert abs(row[label] - line["probabilities"][label]) < 1e-6
        assert abs(sum(row.values()) - 1.0) < 1e-5


def test_truncate_keeps_the_head(model):
    with attn.Classifier(model) as clf:
        with pytest.raises(ValueError, match="attn_bundle_encode_truncated"):
            clf.classify(["a" * 10000])
        limit = int(re.search(r"above the (\d+) the model reads",
                              str(_refusal(clf, "a" * 10000))).group(1))
        head = "c" * (limit - 1) + "a"
        cut = clf.classify([head + "b" * 5000], truncate=True)[0]
        assert cut == clf.classify([head])[0]
        # The tail decides nothing, but the head does: a text cut one token later differs.
        assert cut != clf.classify([head[1:] + "b" * 5000], truncate=True)[0]
        assert [t for t, _ in clf.pooling(head + "b" * 5000, truncate=True)] == list(head)


def _refusal(clf, text):
    try:
        clf.classify([text])
    except ValueError as error:
        return error
    raise AssertionError("a text longer than the model reads was classified")


def test_refusals(model, tmp_path):
    with attn.Classifier(model) as clf:
        with pytest.raises(ValueError, match="one string"):
            clf.classify("apple")
        with pytest.raises(ValueError, match=r"texts\[1\]: no text"):
            clf.classify(["apple", ""])
        with pytest.raises(ValueError, match=r"texts\[0\]"):
            clf.classify(["a" * 10000])
    with pytest.raises(ValueError, match="closed"):
        clf.classify(["apple"])
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{w}\t{w[::-1]}\n" for w in ["abc", "bcd", "cde"] * 5))
    translator = tmp_path / "t.safetensors"
    run("train", "--train", pairs, "--out", translator, *TINY_TRANSFORMER_D16, "--max-steps", 2,
        "--no-valid")
    with pytest.raises(ValueError, match="not a text classifier"):
        attn.Classifier(translator)
