"""attn train --task lm: a language model learns plain text (its loss falls well below the
unigram entropy), resumes bit for bit, reads llm.c token files in file order, and refuses what
it cannot do with a message naming the fix."""
import json
import math
import struct
import subprocess
from collections import Counter

import numpy as np
import pytest

from attn_program import ATTN, TINY_TRANSFORMER_D32

TINY = [*TINY_TRANSFORMER_D32, "--threads", "1", "--context", "32"]


def run(*args, timeout=240):
    return subprocess.run([ATTN, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def losses(log):
    return [json.loads(line)["train_loss"] for line in log.read_text().splitlines()
            if '"event":"step"' in line]


@pytest.fixture
def text(tmp_path):
    # A repetitive text a tiny model can learn: counting words in a fixed order.
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight"]
    lines = [" ".join(words[(i + j) % 8] for j in range(6)) for i in range(400)]
    path = tmp_path / "book.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines


def write_tokens(path, ids):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(ids)]
    path.write_bytes(header.tobytes() + np.asarray(ids, dtype="<u2").tobytes())


def test_learns_text_below_its_unigram_entropy(tmp_path, text):
    book, lines = text
    log = tmp_path / "log.jsonl"
    r = run("train", "--task", "lm", "--train", book, "--out", tmp_path / "lm.safetensors",
            *TINY, "--max-steps", 300, "--lr", 3e-3, "--log", log, "--dropout", 0)
    assert r.returncode == 0, r.stderr
    assert "training tokens" in r.stderr and "windows of 32 tokens" in r.stderr
    # Progress in a language model's terms: a character tokenizer has one character a token,
    # so bits per character is the loss in bits.
    line = next(l for l in r.stderr.splitlines() if l.startswith("step 300/300"))
    loss, ppl, bpc = (float(line.split(word)[1].split()[0]) for word in (" loss ", " ppl ", " bpc "))
    assert abs(ppl - math.exp(loss)) < 0.01 * ppl and abs(bpc - loss / math.log(2)) < 2e-3
    chars = Counter("".join(line + "\n" for line in lines))
    total = sum(chars.values())
    unigram = -sum(c / total * math.log(c / total) for c in chars.values())
    curve = losses(log)
    assert len(curve) == 300
    # A model that learnt only character frequencies would sit at the unigram entropy.
    assert np.mean(curve[-10:]) < 0.1 * unigram, (curve[-10:], unigram)
    header = json.loads((tmp_path / "lm.safetensors").read_bytes()[8:][:struct.unpack(
        "<Q", (tmp_path / "lm.safetensors").read_bytes()[:8])[0]])
    metadata = header["__metadata__"]
    assert json.loads(metadata["attn_config"])["arch"] == "transformer_lm"
    assert "attn_tgt_tokenizer" in metadata and "attn_src_tokenizer" not in metadata


def test_llama_style_flags_build_and_train_that_model(tmp_path, text):
    """--norm rms --ffn-kind swiglu --positions rope --no-bias: the config says so, the file
    has no bias and a linear3, the loss falls and the model continues a prompt."""
    book, _ = text
    out, log = tmp_path / "lm.safetensors", tmp_path / "log.jsonl"
    r = run("train", "--task", "lm", "--train", book, "--out", out, *TINY, "--max-steps", 60,
            "--lr", 3e-3, "--log", log, "--dropout", 0, "--norm", "rms", "--ffn-kind", "swiglu",
            "--positions", "rope", "--no-bias")
    assert r.returncode == 0, r.stderr
    curve = losses(log)
    assert curve[-1] < 0.5 * curve[0], curve
    data = out.read_bytes()
    header = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
    config = json.loads(header["__metadata__"]["attn_config"])
    assert (config["norm"], config["ffn"], config["positions"], config["bias"],
            config["output_bias"]) == ("rms_norm", "swiglu", "rope", False, False)
    assert "decoder.layers.0.linear3.weight" in header
    assert not any(name.endswith(".bias") for name in header), sorted(header)
    r = run("generate", "--model", out, "--prompt", "one two", "--max-new-tokens", 8)
    assert r.returncode == 0, r.stderr


def test_resume_reproduces_the_uninterrupted_curve(tmp_path, text):
    book, _ = text
    common = ["--task", "lm", "--train", book, *TINY, "--schedule", "constant", "--warmup", 0]
    full, half = tmp_path / "full.jsonl", tmp_path / "half.jsonl"
    r = run("train", *common, "--out", tmp_path / "a.safetensors", "--max-steps", 12,
            "--log", full)
    assert r.returncode == 0, r.stderr
    r = run("train", *common, "--out", tmp_path / "b.safetensors", "--max-steps", 6,
            "--log", half)
    assert r.returncode == 0, r.stderr
    r = run("train", "--task", "lm", "--train", book, "--out", tmp_path / "b.safetensors",
            "--resume", tmp_path / "b.last.safetensors", "--max-steps", 12, "--log", half,
            "--threads", 1)
    assert r.returncode == 0, r.stderr
    assert losses(full) == losses(half)
    other = tmp_path / "other.txt"
    other.write_text(book.read_text() + "nine ten\n", encoding="utf-8")
    r = run("train", "--task", "lm", "--train", other, "--out", tmp_path / "b.safetensors",
            "--resume", tmp_path / "b.last.safetensors", "--max-steps", 14, "--threads", 1)
    assert r.returncode != 0 and "training data differ" in r.stderr


def test_token_files_in_file_order_give_llmc_batches(tmp_path):
    # 2 windows x 8 tokens + 1: with --shuffle none every update sees the same batch, so the
    # loss falls step after step as the model memorises it.
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, size=2 * 8 + 1)
    write_tokens(tmp_path / "train.bin", ids)
    log = tmp_path / "log.jsonl"
    r = run("train", "--task", "lm", "--train-tokens", tmp_path / "train.bin",
            "--out", tmp_path / "lm.safetensors", *TINY_TRANSFORMER_D32, "--threads", 1,
            "--context", 8, "--batch-sequences", 2, "--shuffle", "none", "--dropout", 0,
            "--schedule", "constant", "--warmup", 0, "--lr", 3e-3, "--max-steps", 40,
            "--log", log)
    assert r.returncode == 0, r.stderr
    curve = losses(log)
    assert curve[-1] < 0.2 * curve[0], curve
    assert "vocabulary %d" % (ids.max() + 1) in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--train-src", "x"], "for sentence pairs"),
    (["--arch", "rnn"], "for sentence pairs"),
    (["--train-tokens", "T"], "one of them"),
    (["--context", "100000"], "too few for one batch"),
    (["--norm", "group"], "layer"),
    (["--init", "M", "--no-bias"], "--no-bias cannot be used with --init"),
])
def test_refusals_name_the_fix(tmp_path, text, args, message):
    book, _ = text
    tokens = tmp_path / "t.bin"
    write_tokens(tokens, [1, 2, 3])
    args = [str(tokens) if a == "T" else str(tmp_path / "m0.safetensors") if a == "M" else a
            for a in args]
    r = run("train", "--task", "lm", "--train", book, "--out", tmp_path / "m.safetensors",
            *args, "--max-steps", 1)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr


def test_a_token_id_beyond_the_vocabulary_is_refused(tmp_path, text):
    book, _ = text
    r = run("train", "--task", "lm", "--train", book, "--out", tmp_path / "m.safetensors",
            *TINY, "--max-steps", 2)
    assert r.returncode == 0, r.stderr
    write_tokens(tmp_path / "t.bin", list(range(1000)))
    r = run("train", "--task", "lm", "--train-tokens", tmp_path / "t.bin",
            "--init", tmp_path / "m.safetensors", "--out", tmp_path / "n.safetensors",
            "--threads", 1, "--context", 32, "--max-steps", 1)
    assert r.returncode == 1
    assert "another tokenizer" in r.stderr, r.stderr


def test_text_the_book_lacks_is_spelled_in_bytes(tmp_path, text):
    book, _ = text
    model = tmp_path / "lm.safetensors"
    r = run("train", "--task", "lm", "--train", book, "--out", model, *TINY, "--max-steps", 2)
    assert r.returncode == 0, r.stderr
    held = tmp_path / "held.txt"
    held.write_text("one two žluťoučký ✓\n", encoding="utf-8")
    r = run("eval", "--metric", "perplexity", "--model", model, "--ref", held)
    assert r.returncode == 0, r.stderr
    assert "outside the model's vocabulary" not in r.stderr, r.stderr
    r = run("generate", "--model", model, "--prompt", "žluťoučký",
            "--max-new-tokens", 3, "--seed", 1)
    assert r.returncode == 0 and "outside the model's vocabulary" not in r.stderr, r.stderr


def test_viz_draws_the_causal_self_attention(tmp_path, text):
    book, _ = text
    model = tmp_path / "lm.safetensors"
    r = run("train", "--task", "lm", "--train", book, "--out", model, *TINY, "--max-steps", 2)
    assert r.returncode == 0, r.stderr
    r = run("viz", "--model", model, "--text", "one two", "--style", "ascii")
    assert r.returncode == 0, r.stderr
    rows = r.stdout.splitlines()
    assert rows[0] == "one two" and "self-attention layer 0" in rows[1]
    assert rows[2].split()[0] == "</s>"  # the prompt starts a line, as training lines do
    picture = tmp_path / "self.svg"
    r = run("viz", "--model", model, "--text", "one", "--kind", "self", "--out", picture)
    assert r.returncode == 0 and "<svg" in picture.read_text(), r.stderr
    r = run("viz", "--model", model, "--text", "one", "--kind", "cross")
    assert r.returncode == 2 and "use --kind self" in r.stderr
