"""attn tokenize: text into an llm.c token file holding the tokens attn train --task lm reads
from the text, so that training on the file (with the tokenizer tokenize saved) gives the same
losses and weights to the bit and a model attn generate can use; several inputs and stdin read
as one text; a saved tokenizer or a model's reused; bad input refused with a message and no
file left behind."""
import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from attn_program import ATTN, TINY_TRANSFORMER_D32

TINY = [*TINY_TRANSFORMER_D32, "--threads", "1", "--context", "32"]
MAGIC, VERSION = 20240520, 1


def run(*args, stdin=None, timeout=240):
    return subprocess.run([ATTN, *map(str, args)], input=stdin, capture_output=True,
                          timeout=timeout)


def ok(result):
    assert result.returncode == 0, result.stderr.decode()
    return result.stderr.decode()


TOKENIZER_TAG = 0x6e747461  # "attn": words 3..5 of the header name the tokenizer


def fnv1a(data):
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def tokens_of(path, tokenizer=None):
    """The ids of an llm.c token file; with tokenizer (its JSON file), checks that the header
    names it in the words llm.c leaves zero."""
    data = Path(path).read_bytes()
    header = np.frombuffer(data[:1024], dtype="<u4")
    assert header[0] == MAGIC and header[1] == VERSION and not header[6:].any()
    if tokenizer is not None:
        fingerprint = fnv1a(Path(tokenizer).read_bytes())
        assert header[3] == TOKENIZER_TAG
        assert int(header[4]) | int(header[5]) << 32 == fingerprint
    ids = np.frombuffer(data[1024:], dtype="<u2")
    assert len(ids) == header[2]
    return ids


def metadata(path):
    data = Path(path).read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + size])["__metadata__"]


def tensors(path):
    data = Path(path).read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    return {name: body[t["data_offsets"][0]:t["data_offsets"][1]]
            for name, t in header.items() if name != "__metadata__"}


def losses(log):
    return [json.loads(line)["train_loss"] for line in Path(log).read_text().splitlines()
            if '"event":"step"' in line]


@pytest.fixture
def book(tmp_path):
    words = ["in", "the", "beginning", "was", "the", "word", "and", "light", "é", "naïve"]
    rng = np.random.default_rng(3)
    lines = [" ".join(words[i] for i in rng.integers(0, len(words), 7)) for _ in range(300)]
    lines[17] = ""  # an empty line is </s> alone
    path = tmp_path / "book.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines


@pytest.mark.parametrize("vocab", ["char", "bpe:40"])
def test_training_on_the_token_file_equals_training_on_the_text(tmp_path, book, vocab):
    """Same tokenizer, same stream, so the same batches: losses and weights equal to the bit,
    and the model holds the tokenizer, so attn generate writes text with it."""
    text, lines = book
    tokens, tokenizer = tmp_path / "book.bin", tmp_path / "book.tokenizer.json"
    said = ok(run("tokenize", "--input", text, "--vocab", vocab, "--out", tokens))
    assert tokenizer.exists() and str(tokenizer) in said, said
    ids = tokens_of(tokens, tokenizer)
    # Each line's tokens, then </s> (id 2): as many ends as lines, the last token one of them.
    assert ids[-1] == 2 and (ids == 2).sum() == len(lines)
    flags = ["train", "--task", "lm", *TINY, "--max-steps", 6, "--dropout", 0.1, "--no-valid"]
    ok(run(*flags, "--train", text, "--tgt-tokens", vocab, "--out", tmp_path / "a.safetensors",
           "--log", tmp_path / "a.jsonl"))
    ok(run(*flags, "--train-tokens", tokens, "--tokenizer", tokenizer,
           "--out", tmp_path / "b.safetensors", "--log", tmp_path / "b.jsonl"))
    a, b = losses(tmp_path / "a.jsonl"), losses(tmp_path / "b.jsonl")
    assert len(a) == 6 and a == b, (a, b)
    assert tensors(tmp_path / "a.safetensors") == tensors(tmp_path / "b.safetensors")
    assert (metadata(tmp_path / "a.safetensors")["attn_tgt_tokenizer"]
            == metadata(tmp_path / "b.safetensors")["attn_tgt_tokenizer"]
            == tokenizer.read_text(encoding="utf-8"))
    r = run("generate", "--model", tmp_path / "b.safetensors", "--prompt", "in the",
            "--max-new-tokens", 5, "--seed", 1)
    ok(r)


def test_several_inputs_and_stdin_read_as_one_text(tmp_path, book):
    text, lines = book
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text("\n".join(lines[:100]) + "\n", encoding="utf-8")
    second.write_text("\n".join(lines[100:]), encoding="utf-8")  # no final newline
    whole, split, piped = (tmp_path / f"{n}.bin" for n in ("whole", "split", "piped"))
    ok(run("tokenize", "--input", text, "--out", whole))
    ok(run("tokenize", "--input", first, "--input", second, "--out", split,
           "--save-tokenizer", tmp_path / "split.json"))
    ok(run("tokenize", "--out", piped, stdin=text.read_bytes()))
    assert whole.read_bytes() == split.read_bytes() == piped.read_bytes()
    assert (tmp_path / "split.json").read_bytes() == (tmp_path / "whole.tokenizer.json").read_bytes()
    # '-' is standard input among files.
    dashed = tmp_path / "dashed.bin"
    ok(run("tokenize", "--input", first, "--input", "-", "--out", dashed,
           "--save-tokenizer", tmp_path / "dashed.json", stdin=second.read_bytes()))
    assert dashed.read_bytes() == whole.read_bytes()


def test_validation_text_with_the_saved_tokenizer_or_the_model(tmp_path, book):
    """The held-out text reuses the training text's tokenizer (a character the book lacks is
    spelled in bytes), from the saved file or from the model trained on the tokens."""
    text, _ = book
    held = tmp_path / "held.txt"
    held.write_text("the word was light and the light was the word\nsnow ☃ fell\n" * 4,
                    encoding="utf-8")
    train_bin, tokenizer = tmp_path / "train.bin", tmp_path / "train.tokenizer.json"
    ok(run("tokenize", "--input", text, "--vocab", "bpe:30", "--out", train_bin))
    valid_bin = tmp_path / "valid.bin"
    ok(run("tokenize", "--input", held, "--tokenizer", tokenizer, "--out", valid_bin))
    assert (tokens_of(valid_bin) == 2).sum() == 8
    model = tmp_path / "lm.safetensors"
    said = ok(run("train", "--task", "lm", "--train-tokens", train_bin, "--valid-tokens", valid_bin,
                  "--tokenizer", tokenizer, "--out", model, *TINY, "--max-steps", 2,
                  "--batch-sequences", 2))
    assert "no tokenizer" not in said
    # bpe:N is SentencePiece's, whose JSON holds its model rather than a token list: the
    # vocabulary's size is the one the model was made with.
    header = model.read_bytes()
    metadata = json.loads(header[8:8 + struct.unpack("<Q", header[:8])[0]])["__metadata__"]
    vocabulary = json.loads(metadata["attn_config"])["tgt_vocab"]
    assert tokens_of(valid_bin).max() < vocabulary
    # --tokenizer also reads the validation text itself.
    ok(run("train", "--task", "lm", "--train-tokens", train_bin, "--valid", held,
           "--tokenizer", tokenizer, "--out", tmp_path / "lm2.safetensors", *TINY,
           "--max-steps", 2, "--batch-sequences", 2))
    from_model = tmp_path / "from-model.bin"
    ok(run("tokenize", "--input", held, "--model", model, "--out", from_model))
    assert from_model.read_bytes() == valid_bin.read_bytes()
    assert not (tmp_path / "from-model.tokenizer.json").exists()  # nothing new to save


def test_token_files_of_another_tokenizer_are_refused(tmp_path, book):
    """The classic slip: validation text tokenized with a vocabulary of its own. The header
    names each file's tokenizer, so attn train says so instead of validating on nonsense."""
    text, lines = book
    held = tmp_path / "held.txt"
    held.write_text("\n".join(lines[:80]) + "\n", encoding="utf-8")
    ok(run("tokenize", "--input", text, "--out", tmp_path / "train.bin"))
    ok(run("tokenize", "--input", held, "--out", tmp_path / "own.bin"))  # learns its own
    ok(run("tokenize", "--input", held, "--out", tmp_path / "valid.bin",
           "--tokenizer", tmp_path / "train.tokenizer.json"))
    flags = ["train", "--task", "lm", "--train-tokens", tmp_path / "train.bin",
             "--out", tmp_path / "m.safetensors", *TINY, "--max-steps", 1,
             "--batch-sequences", 2]
    r = run(*flags, "--valid-tokens", tmp_path / "own.bin",
            "--tokenizer", tmp_path / "train.tokenizer.json")
    said = r.stderr.decode()
    assert r.returncode == 1 and "own.bin was made with another tokenizer" in said, said
    assert "attn tokenize --tokenizer" in said
    r = run(*flags, "--valid-tokens", tmp_path / "own.bin")
    assert r.returncode == 1 and b"different tokenizers" in r.stderr, r.stderr
    r = run(*flags, "--valid-tokens", tmp_path / "valid.bin",
            "--tokenizer", tmp_path / "own.tokenizer.json")
    assert r.returncode == 1 and b"train.bin was made with another" in r.stderr, r.stderr
    ok(run(*flags, "--valid-tokens", tmp_path / "valid.bin",
           "--tokenizer", tmp_path / "train.tokenizer.json"))
    # The model holds the tokenizer: fine-tuning it checks the files against it.
    r = run("train", "--task", "lm", "--init", tmp_path / "m.safetensors",
            "--train-tokens", tmp_path / "own.bin", "--out", tmp_path / "n.safetensors",
            "--threads", 1, "--context", 32, "--max-steps", 1, "--batch-sequences", 2,
            "--no-valid")
    assert r.returncode == 1 and b"attn tokenize --model" in r.stderr, r.stderr


def test_token_files_without_a_tokenizer_are_warned_about(tmp_path, book):
    text, _ = book
    ok(run("tokenize", "--input", text, "--out", tmp_path / "t.bin"))
    said = ok(run("train", "--task", "lm", "--train-tokens", tmp_path / "t.bin", "--no-valid",
                  "--out", tmp_path / "m.safetensors", *TINY, "--max-steps", 1))
    assert "no tokenizer" in said and "attn tokenize" in said, said


def write_tokens(path, ids):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [MAGIC, VERSION, len(ids)]
    path.write_bytes(header.tobytes() + np.asarray(ids, dtype="<u2").tobytes())


def test_train_refuses_a_tokenizer_that_does_not_fit(tmp_path, book):
    text, _ = book
    tokenizer = tmp_path / "t.tokenizer.json"
    ok(run("tokenize", "--input", text, "--out", tmp_path / "t.bin"))
    flags = ["train", "--task", "lm", "--no-valid", "--out", tmp_path / "m.safetensors", *TINY,
             "--max-steps", 1]
    write_tokens(tmp_path / "big.bin", list(range(60000)))
    r = run(*flags, "--train-tokens", tmp_path / "big.bin", "--tokenizer", tokenizer)
    assert r.returncode == 1 and b"another tokenizer" in r.stderr, r.stderr
    r = run(*flags, "--train-tokens", tmp_path / "t.bin", "--tokenizer", tokenizer,
            "--tgt-tokens", "char")
    assert r.returncode == 2 and b"give one of them" in r.stderr, r.stderr
    ok(run(*flags, "--train-tokens", tmp_path / "t.bin", "--tokenizer", tokenizer))
    r = run("train", "--task", "lm", "--train-tokens", tmp_path / "t.bin", "--tokenizer",
            tokenizer, "--init", tmp_path / "m.safetensors", "--out", tmp_path / "n.safetensors",
            "--max-steps", 1)
    assert r.returncode == 2 and b"--tokenizer cannot be used with --init" in r.stderr, r.stderr
    r = run(*flags, "--train-tokens", tmp_path / "t.bin", "--tokenizer", text)
    assert r.returncode == 1 and b"not a tokenizer's JSON" in r.stderr, r.stderr


@pytest.mark.parametrize("make, args, status, message", [
    (None, ["--input", "{tmp}/missing.txt"], 1, "missing.txt"),
    (b"", ["--input", "{tmp}/in.txt"], 1, "no sentences"),
    (b"", [], 1, "stdin: no sentences"),
    (b"good\nbad \xff\n", ["--input", "{tmp}/in.txt"], 1, "in.txt:2: invalid UTF-8"),
    (b"nul\x00\n", ["--input", "{tmp}/in.txt", "--tokenizer", "{tmp}/old.tokenizer.json"], 1,
     "in.txt:1: NUL byte"),
    (b"a\n", ["--input", "{tmp}/in.txt", "--vocab", "bpe:x"], 2, "expected char, word, bpe:N"),
    (b"a\n", ["--input", "{tmp}/in.txt", "--vocab", "char", "--tokenizer", "t.json"], 2,
     "give one of"),
    (b"a\n", ["--input", "{tmp}/in.txt", "--tokenizer", "{tmp}/in.txt"], 1,
     "not a tokenizer's JSON"),
    (b"a\n", ["--input", "{tmp}/in.txt", "--tokenizer", "{tmp}/old.bin"], 1, "binary file"),
    (b"a\n", ["--input", "{tmp}/in.txt", "--model", "{tmp}/old.bin"], 1, "old.bin"),
    (b"a\n", ["--input", "{tmp}/in.txt", "--out", "{tmp}/in.txt"], 2, "is an input"),
    (b"a\n", ["--input", "-", "--input", "-"], 2, "can be read once"),
    (b"a\n", ["--input", "{tmp}/in.txt", "--save-tokenizer", "{tmp}/out.bin"], 2, "is --out"),
])
def test_bad_input_is_refused_and_the_old_file_kept(tmp_path, make, args, status, message):
    # old.bin is a token file to misuse as a tokenizer or a model; out.bin one to keep.
    old, out = tmp_path / "old.bin", tmp_path / "out.bin"
    ok(run("tokenize", "--out", old, stdin=b"an old text\n"))
    out.write_bytes(old.read_bytes())
    before = old.read_bytes()
    if make is not None:
        (tmp_path / "in.txt").write_bytes(make)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--out" not in args:
        args += ["--out", str(out)]
    r = run("tokenize", *args, stdin=make if make is not None else b"")
    said = r.stderr.decode("utf-8", "replace")
    assert r.returncode == status, said
    assert message in said and said.startswith("attn tokenize: "), said
    assert len(said.strip().splitlines()) == 1, said
    assert old.read_bytes() == before and out.read_bytes() == before
    assert not (tmp_path / "out.tokenizer.json").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]
    if make is not None and "--out" in args and args[args.index("--out") + 1].endswith("in.txt"):
        assert (tmp_path / "in.txt").read_bytes() == make


def test_a_vocabulary_beyond_uint16_is_refused(tmp_path):
    """70000 different words: a word vocabulary of more ids than a token file can hold."""
    text = tmp_path / "words.txt"
    text.write_text("".join(f"w{i} w{i + 1}\n" for i in range(0, 70000, 2)), encoding="utf-8")
    r = run("tokenize", "--input", text, "--vocab", "word", "--out", tmp_path / "w.bin")
    said = r.stderr.decode()
    assert r.returncode == 1 and "65536" in said and "70004 ids" in said, said
    assert "attn train --task lm --train" in said
    assert not (tmp_path / "w.bin").exists() and not (tmp_path / "w.tokenizer.json").exists()


def test_help_and_the_command_list():
    r = run("tokenize", "--help")
    assert r.returncode == 0
    for word in (b"--input", b"--vocab", b"--tokenizer", b"--model", b"--save-tokenizer",
                 b"20240520", b"65536"):
        assert word in r.stdout, word
    assert b"tokenize" in run("--help").stdout
    r = run("tokenise")
    assert r.returncode == 2 and b"did you mean tokenize" in r.stderr
