"""Hostile input against the attn program (issue 16): corrupted model files, broken corpora and
bad arguments, of the kinds a user or a script will one day feed it. Every case must end by
itself (no hang), with a message on stderr and an exit status from 1 to 125 (not a signal, not
a sanitizer's report), and must not touch the files it was given.

This file also runs against the ASan+UBSan build (`make sanitize-test`, label `hostile`), where
a memory error or undefined behaviour that a case provokes becomes a failure."""
import json
import random
import re
import struct
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from attn_program import ATTN, TINY_TRANSFORMER_D16

SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehavior")
SMALL = [*TINY_TRANSFORMER_D16, "--threads", "2"]


def run(args, stdin=b"", timeout=120):
    result = subprocess.run([ATTN, *map(str, args)], input=stdin, capture_output=True,
                            timeout=timeout)
    return result.returncode, result.stderr.decode("utf-8", "replace")


def assert_refused(args, stdin=b""):
    status, message = run(args, stdin)
    for mark in SANITIZER_MARKS:
        assert mark not in message, message
    assert 1 <= status <= 125, f"exit {status}: {message}"
    assert message.strip(), f"exit {status} without a message"
    return message


def safetensors_parts(path):
    data = Path(path).read_bytes()
    header_len = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + header_len]), data[8 + header_len:]


def write_safetensors(path, header, body, header_bytes=None):
    raw = header_bytes if header_bytes is not None else json.dumps(header).encode()
    Path(path).write_bytes(struct.pack("<Q", len(raw)) + raw + body)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    rng = random.Random(7)
    words = ["".join(rng.choice("abcdef") for _ in range(rng.randint(2, 6))) for _ in range(300)]
    train = folder / "train.tsv"
    train.write_text("".join(f"{w}\t{w[::-1]}\n" for w in words), encoding="utf-8")
    model = folder / "m.safetensors"
    status, message = run(["train", "--train", train, "--out", model, "--max-steps", "4",
                           "--no-valid", *SMALL])
    assert status == 0, message
    return {"folder": folder, "train": train, "model": model,
            "checkpoint": folder / "m.last.safetensors"}


# ---- corrupted model files ---------------------------------------------------------------------

def model_corruptions(model):
    """(name, bytes) pairs, each a model file damaged in one way."""
    data = Path(model).read_bytes()
    header, body = safetensors_parts(model)
    names = sorted(k for k in header if k != "__metadata__")
    meta = header["__metadata__"]
    cases = [
        ("empty", b""),
        ("seven bytes", data[:7]),
        ("header length 2^63", struct.pack("<Q", 2**63) + data[8:]),
        ("header length past the end", struct.pack("<Q", len(data)) + data[8:]),
        ("truncated in the header", data[:40]),
        ("truncated in the data", data[:len(data) // 2]),
        ("text", b"this is not a model\n" * 20),
        ("random bytes", bytes(random.Random(1).getrandbits(8) for _ in range(4096))),
    ]

    def edited(fn):
        h = json.loads(json.dumps(header))
        fn(h)
        raw = json.dumps(h).encode()
        return struct.pack("<Q", len(raw)) + raw + body

    def set_first(field, value):
        return lambda h: h[names[0]].__setitem__(field, value)

    cases += [
        ("header is not JSON", struct.pack("<Q", 9) + b"{not json" + body),
        ("header is a JSON array", struct.pack("<Q", 2) + b"[]" + body),
        ("unknown dtype", edited(set_first("dtype", "Q7"))),
        ("negative shape", edited(set_first("shape", [-1, 4]))),
        ("shape overflows", edited(set_first("shape", [2**62, 2**62]))),
        ("offsets past the data", edited(set_first("data_offsets", [0, len(body) + 4096]))),
        ("offsets reversed", edited(set_first("data_offsets", [64, 0]))),
        ("a tensor missing", edited(lambda h: h.pop(names[-1]))),
        ("no metadata", edited(lambda h: h.pop("__metadata__"))),
    ]
    # attn_train_summary is a note for people (what trained the model), read by no program.
    for key in sorted(k for k in meta if k != "attn_train_summary"):
        cases.append((f"{key} is garbage", edited(
            lambda h, k=key: h["__metadata__"].__setitem__(k, "{garbage"))))
    config = json.loads(meta["attn_config"])
    for field, value in [("d_model", 0), ("d_model", -16), ("num_heads", 3), ("src_vocab", 1),
                         ("tgt_vocab", 10**12), ("max_len", 0), ("encoder_layers", 10**9),
                         ("arch", "perceptron"), ("dropout", 7.5)]:
        if field not in config:
            continue
        changed = dict(config, **{field: value})
        cases.append((f"config {field}={value}", edited(
            lambda h, c=changed: h["__metadata__"].__setitem__("attn_config", json.dumps(c)))))
    rng = random.Random(11)
    header_end = 8 + struct.unpack("<Q", data[:8])[0]
    for i in range(12):
        flipped = bytearray(data)
        for _ in range(3):
            flipped[rng.randrange(8, header_end)] ^= 1 << rng.randrange(8)
        cases.append((f"bits flipped in the header #{i}", bytes(flipped)))
    return cases


def test_corrupted_models_are_refused_by_every_reader(work):
    folder = work["folder"] / "models"
    folder.mkdir(exist_ok=True)
    failures = []
    for index, (name, content) in enumerate(model_corruptions(work["model"])):
        path = folder / f"case{index}.safetensors"
        path.write_bytes(content)
        for args, stdin in [
            (["translate", "--model", path], b"abc\n"),
            (["viz", "--model", path, "--text", "abc", "--out", folder / f"v{index}.svg"], b""),
            (["train", "--train", work["train"], "--resume", path, "--out",
              folder / f"r{index}.safetensors", "--max-steps", "1", "--no-valid"], b""),
        ]:
            try:
                assert_refused(args, stdin)
            except AssertionError as error:
                # A few header bit flips land in a place that changes nothing that matters
                # (a digit of a float in the config, say): such a file may load. That is fine
                # only when the program then succeeds cleanly.
                status, message = run(args, stdin)
                if status == 0 and name.startswith("bits flipped"):
                    continue
                failures.append(f"{name}: {' '.join(map(str, args[:1]))}: {error}")
        assert path.read_bytes() == content, f"{name}: the file was changed"
    assert not failures, "\n".join(failures)


def test_corrupted_classifiers_are_refused(work):
    """A classifier's file read by attn classify and by --resume of --task classify: the
    same damage as above, and its own metadata (the class names) damaged too."""
    folder = work["folder"] / "classifiers"
    folder.mkdir(exist_ok=True)
    labelled = folder / "labelled.tsv"
    labelled.write_text("".join(f"{'yes' if 'a' in w else 'no'}\t{w}\n"
                                for w in work["train"].read_text().split()[::2]),
                        encoding="utf-8")
    model = folder / "clf.safetensors"
    status, message = run(["train", "--task", "classify", "--train", labelled, "--out", model,
                           "--max-steps", "3", "--no-valid", *SMALL])
    assert status == 0, message
    header, body = safetensors_parts(model)
    labels = json.loads(header["__metadata__"]["attn_labels"])
    extra = []
    for name, value in [("three names for two classes", dict(labels, labels=["no", "yes", "x"])),
                        ("a name twice", dict(labels, labels=["no", "no"])),
                        ("no names", dict(labels, labels=[]))]:
        h = json.loads(json.dumps(header))
        h["__metadata__"]["attn_labels"] = json.dumps(value)
        raw = json.dumps(h).encode()
        extra.append((name, struct.pack("<Q", len(raw)) + raw + body))
    failures = []
    for index, (name, content) in enumerate(model_corruptions(model) + extra):
        path = folder / f"case{index}.safetensors"
        path.write_bytes(content)
        for args, stdin in [
            (["classify", "--model", path], b"abc\n"),
            (["train", "--task", "classify", "--train", labelled, "--resume", path, "--out",
              folder / f"r{index}.safetensors", "--max-steps", "4", "--no-valid"], b""),
        ]:
            try:
                assert_refused(args, stdin)
            except AssertionError as error:
                status, message = run(args, stdin)
                if status == 0 and name.startswith("bits flipped"):
                    continue
                failures.append(f"{name}: {args[0]}: {error}")
        assert path.read_bytes() == content, f"{name}: the file was changed"
    assert not failures, "\n".join(failures)


# ---- broken corpora ----------------------------------------------------------------------------

class Refused(NamedTuple):
    """The run must stop with an error whose message matches this pattern, after filling in
    {path} (the corpus, regex-escaped) and {side} ("training" or "validation")."""
    message: str


class Trained(NamedTuple):
    """The run must train and write a model, saying it skipped this many of the corpus's
    pairs as too long and kept every other one."""
    skipped: int


def broken_corpora(good):
    """(name, bytes, expectation) for corpora damaged in one way; good is a sound corpus's
    bytes, for the cases where one line of an otherwise usable file is bad."""
    rng = random.Random(3)
    lines = good.splitlines(keepends=True)
    return [
        ("empty", b"", Refused("{path}: no sentences")),
        ("only newlines", b"\n\n\n\n",
         Refused("{path}:1: expected source<TAB>target, found 0 TABs")),
        ("no tab", b"abc cba\nde ed\n",
         Refused("{path}:1: expected source<TAB>target, found 0 TABs")),
        ("three columns", b"a\tb\tc\n" * 20,
         Refused("{path}:1: expected source<TAB>target, found 2 TABs")),
        ("NUL bytes", b"ab\x00c\tcba\n" * 20, Refused("{path}:1: NUL byte at byte 3 of the line")),
        ("invalid UTF-8", b"ab\xff\xfe\tcba\n" * 20,
         Refused("{path}:1: invalid UTF-8 at byte 3 of the line")),
        ("a lone surrogate", b"ab\xed\xa0\x80\tx\n" * 20,
         Refused("{path}:1: invalid UTF-8 at byte 3 of the line")),
        ("empty sides", b"\t\n\t\n" * 20, Refused("{path}:1: empty source")),
        ("invalid UTF-8 on line 40 of a good corpus",
         b"".join(lines[:39]) + b"ab\xff\tba\n" + b"".join(lines[39:]),
         Refused("{path}:40: invalid UTF-8 at byte 3 of the line")),
        # Skipping the only pair would leave nothing to train or validate on.
        ("one 2 MB line", b"a" * 2_000_000 + b"\tb\n",
         Refused("every {side} pair is longer than --max-len 256 tokens")),
        ("a good corpus with one 2 MB line",
         b"".join(lines[:50]) + b"a" * 2_000_000 + b"\tb\n" + b"".join(lines[50:]), Trained(1)),
        ("random bytes", bytes(rng.getrandbits(8) for _ in range(20000)),
         Refused("{path}:1: invalid UTF-8")),
        # Its 8-byte header length has zero high bytes (and a low byte that may not be UTF-8):
        # the file is refused at its first line.
        ("a model file", None, Refused("{path}:1: (NUL byte|invalid UTF-8)")),
    ]


def test_broken_corpora_get_their_stated_outcome(work):
    folder = work["folder"] / "corpora"
    folder.mkdir(exist_ok=True)
    good = work["train"].read_bytes()
    good_pairs = len(good.splitlines())
    failures = []
    for index, (name, content, expected) in enumerate(broken_corpora(good)):
        path = folder / f"corpus{index}.tsv"
        path.write_bytes(content if content is not None else work["model"].read_bytes())
        before = path.read_bytes()
        for side, out, args in [
            ("training", folder / f"m{index}.safetensors",
             ["--train", path, "--max-steps", "2", "--no-valid"]),
            ("validation", folder / f"v{index}.safetensors",
             ["--train", work["train"], "--valid", path, "--max-steps", "2"]),
        ]:
            status, message = run(["train", *args, "--out", out, *SMALL])
            case = f"{name} as {side} corpus: exit {status}: {message[:500]}"
            if any(mark in message for mark in SANITIZER_MARKS):
                failures.append(f"sanitizer: {case}")
            elif isinstance(expected, Refused):
                pattern = expected.message.format(path=re.escape(str(path)), side=side)
                if not (1 <= status <= 125 and re.search(pattern, message)):
                    failures.append(f"expected a refusal matching {pattern!r}: {case}")
                if out.exists():
                    failures.append(f"refused but wrote a model: {case}")
            else:
                counts = ((expected.skipped, 0) if side == "training" else (0, expected.skipped))
                said = (f"skipped {counts[0]} training and {counts[1]} validation pairs longer "
                        f"than --max-len 256 tokens")
                if status != 0 or said not in message or not out.exists():
                    failures.append(f"expected a model and {said!r}: {case}")
                # The corpus is the good one with the skipped lines added: the rest is kept.
                kept = (f"{good_pairs} training pairs;" if side == "training" else
                        f"{good_pairs} training pairs, validation {good_pairs};")
                if kept not in message:
                    failures.append(f"expected {kept!r}: {case}")
        assert path.read_bytes() == before, f"{name}: the corpus was changed"
    assert not failures, "\n".join(failures)


def test_translate_input_that_is_not_text(work):
    rng = random.Random(5)
    for stdin in [bytes(rng.getrandbits(8) for _ in range(5000)), b"\xff\xfe\xfd\n" * 10,
                  b"a" * 3_000_000 + b"\n", b"\x00\x00\x00\n"]:
        status, message = run(["translate", "--model", work["model"]], stdin)
        for mark in SANITIZER_MARKS:
            assert mark not in message, message
        assert 0 <= status <= 125, message
        # Lines that cannot be translated are named; none is silently lost.
        assert status == 0 or "line" in message, message


# ---- bad arguments -----------------------------------------------------------------------------

BAD_TRAIN_ARGS = [
    ["--layers", "-1"], ["--layers", "0"], ["--layers", "1e9"], ["--layers", "abc"],
    ["--d-model", "15", "--heads", "2"], ["--d-model", "99999999"], ["--heads", "0"],
    ["--lr", "nan"], ["--lr", "-1"], ["--lr", "inf"], ["--batch-tokens", "0"],
    ["--batch-tokens", "-5"], ["--threads", "100000"], ["--threads", "-1"], ["--max-len", "-1"],
    ["--time-limit", "-5"], ["--time-limit", "nan"], ["--seed", "-1"], ["--dropout", "1.5"],
    ["--warmup", "-3"], ["--epochs", "-1"], ["--accumulate", "0"], ["--arch", "perceptron"],
    ["--out"], ["--train"], ["--bogus-option", "1"], ["--layers", "99999999999999999999"],
    ["--label-smoothing", "2"], ["--clip-norm", "nan"], ["--ema", "1"], ["--ema", "-0.1"],
    ["--ema", "nan"],
]


def without_options(args, names):
    """args (options, each followed by its value unless the next one is an option) without the
    options in names and their values."""
    kept, index = [], 0
    while index < len(args):
        has_value = index + 1 < len(args) and not str(args[index + 1]).startswith("--")
        step = 2 if has_value else 1
        if args[index] not in names:
            kept += args[index:index + step]
        index += step
    return kept


@pytest.mark.parametrize("extra", BAD_TRAIN_ARGS, ids=lambda a: " ".join(a))
def test_bad_train_arguments(work, tmp_path, extra):
    args = ["--train", work["train"], "--out", tmp_path / "m.safetensors", "--max-steps", "1",
            "--no-valid", *SMALL]
    # attn refuses an option given twice: the bad one replaces the run's own, so that it is
    # refused for its value.
    message = assert_refused(["train", *without_options(args, set(extra)), *extra])
    assert "given twice" not in message, message
    assert not (tmp_path / "m.safetensors").exists()


BAD_TRANSLATE_ARGS = [
    ["--beam", "0"], ["--beam", "-1"], ["--beam", "1000000"], ["--nbest", "10", "--beam", "2"],
    ["--format", "bogus"], ["--alignment-format", "bogus"], ["--input", "/nonexistent/in.txt"],
    ["--output", "/nonexistent/dir/out.txt"], ["--batch", "0"], ["--alpha", "nan"],
    ["--max-len", "-4"], ["--max-len-ratio", "-1"], ["--alignment-layer", "99"],
    ["--alignment-head", "99"], ["--model", "/nonexistent.safetensors"], ["--model", "/"],
    ["--model", "/dev/null"],
]


@pytest.mark.parametrize("extra", BAD_TRANSLATE_ARGS, ids=lambda a: " ".join(a))
def test_bad_translate_arguments(work, tmp_path, extra):
    args = ["translate", "--model", work["model"], "--alignment", tmp_path / "a.json"]
    assert_refused(args + extra, b"abc\n")


def test_a_full_disk_is_an_error_not_a_success(work):
    """/dev/full takes nothing: every write fails with ENOSPC."""
    assert_refused(["translate", "--model", work["model"], "--output", "/dev/full"], b"abc\n")
    assert_refused(["translate", "--model", work["model"], "--alignment", "/dev/full"],
                   b"abc\n")


def test_bad_eval_and_viz_arguments(work, tmp_path):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("a b\nc\n", encoding="utf-8")
    ref.write_text("a b\n", encoding="utf-8")
    assert_refused(["eval", "--hyp", hyp, "--ref", ref])
    assert_refused(["eval", "--hyp", tmp_path / "missing.txt", "--ref", ref])
    assert_refused(["eval", "--hyp", hyp, "--ref", ref, "--metric", "bogus"])
    assert_refused(["viz", "--model", work["model"], "--text", "abc", "--kind", "bogus",
                    "--out", tmp_path / "v.svg"])
    assert_refused(["viz", "--model", work["model"], "--text", "abc", "--layer", "99",
                    "--out", tmp_path / "v.svg"])
    assert_refused(["viz", "--log", work["train"], "--out", tmp_path / "l.svg"])
    assert_refused(["bogus-command"])


def test_bad_tokenize_input(tmp_path):
    """attn tokenize on text that is not text, tokenizers that are not tokenizers, and outputs
    that are not files: refused, and a pipe given as --out is still a pipe afterwards (the
    atomic writer's rename would have replaced it, as it would /dev/full as root)."""
    import os
    import stat
    text, bad = tmp_path / "t.txt", tmp_path / "bad.txt"
    text.write_text("one line\n", encoding="utf-8")
    bad.write_bytes(b"fine\n\xc3\x28 broken\n")
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    out = tmp_path / "o.bin"
    for args, stdin in [
        (["--input", tmp_path / "missing.txt"], b""),
        (["--input", bad], b""),
        ([], b""),
        ([], b"\x00\x01\x02"),
        (["--input", text, "--vocab", "bpe:-3"], b""),
        (["--input", text, "--tokenizer", text], b""),
        (["--input", text, "--tokenizer", tmp_path / "missing.json"], b""),
        (["--input", text, "--model", text], b""),
        (["--input", text, "--model", "/dev/null"], b""),
    ]:
        assert_refused(["tokenize", *args, "--out", out], stdin)
        assert not out.exists()
    assert_refused(["tokenize", "--input", text, "--out", pipe])
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)
    assert_refused(["tokenize", "--input", text, "--out", tmp_path])
    assert_refused(["tokenize", "--input", text, "--out", out, "--save-tokenizer", pipe])
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)


def test_bad_classifier_viz_and_pretraining_input(work, tmp_path):
    """The encoder-only commands on input that is not what they read: viz --confusion on files
    that are not label lists, viz of a classifier with no text or too much, --task mlm on
    broken text and --init or --src-spm of files that are not what they claim. Refused with a
    message, no sanitizer report, nothing written."""
    folder = work["folder"]
    texts = folder / "texts.txt"
    texts.write_text("".join(f"{w}\n" for w in work["train"].read_text().split()[::2]),
                     encoding="utf-8")
    labelled = tmp_path / "labelled.tsv"
    labelled.write_text("".join(f"{'yes' if 'a' in w else 'no'}\t{w}\n"
                                for w in texts.read_text().split()), encoding="utf-8")
    clf = tmp_path / "clf.safetensors"
    status, message = run(["train", "--task", "classify", "--train", labelled, "--out", clf,
                           "--max-steps", "2", "--no-valid", *SMALL])
    assert status == 0, message
    gold, binary, short, blank = (tmp_path / n for n in ("g.txt", "b.txt", "s.txt", "e.txt"))
    gold.write_text("yes\nno\nyes\n", encoding="utf-8")
    binary.write_bytes(b"yes\n\xc3\x28\nno\n")
    short.write_text("yes\n", encoding="utf-8")
    blank.write_text("yes\n\nno\n", encoding="utf-8")
    out = tmp_path / "c.svg"
    for hyp in (tmp_path / "missing.txt", binary, short, blank, tmp_path):
        assert_refused(["viz", "--confusion", "--ref", gold, "--hyp", hyp, "--out", out])
        assert not out.exists()
    assert_refused(["viz", "--confusion", "--ref", gold, "--hyp", gold, "--out", "/dev/full"])
    assert_refused(["viz", "--model", clf, "--text", "", "--out", out])
    assert_refused(["viz", "--model", clf, "--text", "a" * 5000, "--out", out])
    assert_refused(["viz", "--model", clf, "--text", "abc", "--kind", "cross", "--out", out])
    assert not out.exists()
    enc = tmp_path / "enc.safetensors"
    broken = tmp_path / "broken.txt"
    broken.write_bytes(b"good line\n\xff\xfe\nmore\n")
    empty_line = tmp_path / "empty-line.txt"
    empty_line.write_text("one\n\ntwo\n", encoding="utf-8")
    for args in [
        ["--train", tmp_path / "missing.txt"],
        ["--train", broken],
        ["--train", empty_line],
        ["--train", texts, "--src-spm", texts],
        ["--train", texts, "--src-spm", "/dev/null"],
        ["--train", texts, "--init", clf],
    ]:
        assert_refused(["train", "--task", "mlm", *args, "--out", enc, "--max-steps", "2",
                        "--no-valid", *SMALL])
        assert not enc.exists()
    for init in (work["model"], texts, tmp_path / "missing.safetensors"):
        assert_refused(["train", "--task", "classify", "--train", labelled, "--init", init,
                        "--out", tmp_path / "c2.safetensors", "--max-steps", "2", "--no-valid",
                        "--threads", "2"])
    assert not (tmp_path / "c2.safetensors").exists()


RNN_CLASSIFIER_REFUSALS = [
    (["--pooling", "cls"], "--pooling cls needs --arch transformer"),
    (["--init", "MODEL"], "--arch rnn trains its recurrent encoder from scratch"),
    (["--heads", "2"], "--heads applies to --arch transformer only"),
    (["--window", "3"], "the rnn classifier is its encoder alone"),
]


@pytest.mark.parametrize("extra, says", RNN_CLASSIFIER_REFUSALS, ids=lambda a: str(a))
def test_rnn_classifier_refuses_what_does_not_apply(work, tmp_path, extra, says):
    """--task classify --arch rnn with a flag of the Transformer or of the rnn's decoder, a
    classification token or a pretrained Transformer encoder: refused, saying why, nothing
    written."""
    labelled = tmp_path / "labelled.tsv"
    labelled.write_text("".join(f"{'yes' if 'a' in w else 'no'}\t{w}\n"
                                for w in work["train"].read_text().split()[::2]),
                        encoding="utf-8")
    extra = [work["model"] if value == "MODEL" else value for value in extra]
    out = tmp_path / "clf.safetensors"
    message = assert_refused(["train", "--task", "classify", "--arch", "rnn", "--train", labelled,
                              "--out", out, "--max-steps", "2", "--no-valid", "--threads", "2",
                              *extra])
    assert says in message, message
    assert not out.exists()
