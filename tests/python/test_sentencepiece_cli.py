"""SentencePiece tokenizers (issue 34): the ids attn gives a committed English-German text equal
spm_encode's and its text equals spm_decode's, for models attn learns (--src-tokens spm:N,
spm-bpe:N) and for a user's .model file used unchanged (--src-spm); the .model travels inside
the model file, so translate and Python's Bundle read it from there; attn tokenize and --task
lm read the same ids; a corrupt or foreign .model is refused with a message, never a crash."""
import base64
import json
import random
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

import attn

from attn_program import ATTN, TINY_TRANSFORMER_D16

DATA = Path(__file__).resolve().parent / "data"
EN, DE = DATA / "spm_en.txt", DATA / "spm_de.txt"
SPM_TOOLS = all(shutil.which(tool) for tool in ("spm_train", "spm_encode", "spm_decode"))


def run(*args, stdin=None, timeout=240):
    return subprocess.run([ATTN, *map(str, args)], input=stdin, capture_output=True,
                          timeout=timeout)


def ok(result):
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def built_with_sentencepiece():
    return "SentencePiece: built in" in ok(run("info"))


pytestmark = [
    pytest.mark.skipif(not built_with_sentencepiece(),
                       reason="attn was built without SentencePiece (libsentencepiece-dev)"),
    pytest.mark.skipif(not SPM_TOOLS,
                       reason="the spm_train/spm_encode/spm_decode tools (Debian's "
                              "sentencepiece) are not installed"),
]


def spm(tool, *args, stdin):
    result = subprocess.run([tool, *map(str, args)], input=stdin.encode("utf-8"),
                            capture_output=True, timeout=120, check=True)
    return result.stdout.decode("utf-8")


def spm_ids(model, text):
    return [[int(i) for i in line.split()]
            for line in spm("spm_encode", f"--model={model}", "--output_format=id",
                            stdin=text).splitlines()]


def spm_text(model, ids):
    return spm("spm_decode", f"--model={model}", "--input_format=id",
               stdin="".join(" ".join(map(str, row)) + "\n" for row in ids)).splitlines()


def tokenizer_json(path, side):
    data = Path(path).read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    return json.loads(json.loads(data[8:8 + size])["__metadata__"][side])


def stored_model(path, side, out):
    """The .model bytes a model file carries for a side, written to out."""
    out.write_bytes(base64.b64decode(tokenizer_json(path, side)["spm_model"]))
    return out


def train(tmp_path, *flags, name="model"):
    out = tmp_path / f"{name}.safetensors"
    ok(run("train", "--train-src", EN, "--train-tgt", DE, *TINY_TRANSFORMER_D16,
           "--max-steps", "2", "--threads", "1", "--no-valid", "--out", out, *flags))
    return out


def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("src_tokens, tgt_tokens", [("spm:200", "spm-bpe:200"),
                                                    ("spm-bpe:1100", "spm:1100")])
def test_learned_models_give_spm_encode_ids_and_spm_decode_text(tmp_path, src_tokens,
                                                                tgt_tokens):
    path = train(tmp_path, "--src-tokens", src_tokens, "--tgt-tokens", tgt_tokens)
    for side, text in (("attn_src_tokenizer", EN), ("attn_tgt_tokenizer", DE)):
        described = tokenizer_json(path, side)
        assert described["kind"] == "spm" and "vocab" not in described
    bundle = attn.Bundle(str(path))
    for side, tokenizer, text in (("attn_src_tokenizer", bundle.source_tokenizer, EN),
                                  ("attn_tgt_tokenizer", bundle.target_tokenizer, DE)):
        model = stored_model(path, side, tmp_path / f"{side}.model")
        # A learned model puts its specials at attn's ids, so the ids are spm_encode's.
        expected = spm_ids(model, text.read_text(encoding="utf-8"))
        got = [tokenizer.encode(line) for line in lines(text)]
        assert got == expected
        assert [tokenizer.decode(ids) for ids in got] == spm_text(model, expected)
    # Characters the training text lacks: bytes when the vocabulary had room (1100), else <unk>.
    unseen = "Ærø жёлтый"
    ids = bundle.source_tokenizer.encode(unseen)
    model = tmp_path / "attn_src_tokenizer.model"
    assert ids == spm_ids(model, unseen + "\n")[0]
    if src_tokens.endswith(":1100"):
        assert bundle.source_tokenizer.decode(ids) == unseen
    else:
        assert 3 in ids


def test_learning_is_deterministic(tmp_path):
    first = train(tmp_path, "--src-tokens", "spm:150", name="first")
    second = train(tmp_path, "--src-tokens", "spm:150", name="second")
    assert (tokenizer_json(first, "attn_src_tokenizer")
            == tokenizer_json(second, "attn_src_tokenizer"))


def user_model(tmp_path, name, *layout):
    spm("spm_train", f"--input={EN}", f"--model_prefix={tmp_path / name}", "--vocab_size=150",
        "--minloglevel=2", *layout, stdin="")
    return tmp_path / f"{name}.model"


@pytest.mark.parametrize("layout, offset, unk", [
    ((), 4, 0),  # spm_train's default: <unk> 0, <s> 1, </s> 2, no <pad>
    (("--pad_id=0", "--bos_id=1", "--eos_id=2", "--unk_id=3"), 0, 3),  # attn's own layout
])
def test_a_users_model_is_used_unchanged(tmp_path, layout, offset, unk):
    model = user_model(tmp_path, "user", *layout)
    path = train(tmp_path, "--src-spm", model, "--tgt-tokens", "char")
    # The file's very bytes travel inside the model file.
    stored = stored_model(path, "attn_src_tokenizer", tmp_path / "stored.model")
    assert stored.read_bytes() == model.read_bytes()
    tokenizer = attn.Bundle(str(path)).source_tokenizer
    expected = spm_ids(model, EN.read_text(encoding="utf-8"))
    got = [tokenizer.encode(line) for line in lines(EN)]
    # The model's <unk> (its coverage of 0.9995 left out a rare character) reads as attn's.
    assert got == [[3 if i == unk else i + offset for i in row] for row in expected]
    assert unk in sum(expected, [])
    # attn's decoding leaves <unk> out, where spm_decode writes " ⁇ ".
    known = [[i for i in row if i != unk] for row in expected]
    assert [tokenizer.decode(ids) for ids in got] == spm_text(model, known)
    assert len(tokenizer) == offset + 150


def unfinished_tail(tokens):
    """How many of the last tokens are byte pieces starting a UTF-8 character whose other
    bytes have not come."""
    tail = []
    for token in reversed(tokens[-3:]):
        if not re.fullmatch(r"<0x[0-9A-F]{2}>", token):
            break
        tail.insert(0, int(token[3:5], 16))
    for t in range(1, len(tail) + 1):
        lead, rest = tail[-t], tail[len(tail) - t + 1:]
        needed = 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else \
            4 if 0xF0 <= lead <= 0xF4 else 0
        low = 0xA0 if lead == 0xE0 else 0x90 if lead == 0xF0 else 0x80
        high = 0x9F if lead == 0xED else 0x8F if lead == 0xF4 else 0xBF
        if (t < needed and (not rest or low <= rest[0] <= high)
                and all(b & 0xC0 == 0x80 for b in rest[1:])):
            return t
    return 0


def test_decoding_any_pieces_equals_spm_decode(tmp_path):
    path = train(tmp_path, "--src-tokens", "spm:200", "--tgt-tokens", "spm-bpe:1100")
    model = stored_model(path, "attn_tgt_tokenizer", tmp_path / "tgt.model")
    tokenizer = attn.Bundle(str(path)).target_tokenizer
    rng = random.Random(3)
    # Text pieces and byte pieces alike, in any order (a sampling model's output).
    rows = [[rng.randrange(4, len(tokenizer)) for _ in range(rng.randint(1, 12))]
            for _ in range(50)]
    line_break = next(i for i in range(len(tokenizer)) if tokenizer.token(i) == "<0x0A>")
    one_line = [ids for ids in rows if line_break not in ids]
    assert len(one_line) < len(rows)
    # Except that a character still missing its last bytes at the end is left out, where
    # spm_decode writes U+FFFD: the text of a growing sequence of ids only grows at its end.
    finished = [ids[:len(ids) - unfinished_tail([tokenizer.token(i) for i in ids])]
                for ids in one_line]
    assert finished != one_line
    assert [tokenizer.decode(ids) for ids in one_line] == spm_text(model, finished)
    # A line break spelled in bytes would split a line of output: it reads as U+FFFD.
    assert tokenizer.decode([*tokenizer.encode("Der Fluss"), line_break]) == "Der Fluss\ufffd"
    # attn's specials are left out, as for every tokenizer.
    assert tokenizer.decode([1, *rows[0], 2, 0]) == tokenizer.decode(rows[0])


def test_a_model_translates_with_the_tokenizers_it_carries(tmp_path):
    path = train(tmp_path, "--src-tokens", "spm:200", "--tgt-tokens", "spm:200")
    sources = lines(EN)[:5]
    translated = ok(run("translate", "--model", path, "--beam", "2",
                        stdin="\n".join(sources).encode("utf-8") + b"\n")).splitlines()
    assert len(translated) == len(sources)
    assert translated == attn.Bundle(str(path)).translate(sources, beam=2)


def test_tokenize_and_language_models_read_the_same_ids(tmp_path):
    model = user_model(tmp_path, "user", "--pad_id=0", "--bos_id=1", "--eos_id=2",
                       "--unk_id=3")
    tokens = tmp_path / "en.bin"
    ok(run("tokenize", "--input", EN, "--spm", model, "--out", tokens))
    data = tokens.read_bytes()
    ids = np.frombuffer(data[1024:], dtype="<u2").tolist()
    # Each line's ids, then </s> (2).
    assert ids == [i for row in spm_ids(model, EN.read_text(encoding="utf-8")) for i in [*row, 2]]
    lm = tmp_path / "lm.safetensors"
    ok(run("train", "--task", "lm", "--train", EN, "--tgt-spm", model, *TINY_TRANSFORMER_D16,
           "--context", "16", "--max-steps", "2", "--threads", "1", "--no-valid", "--out", lm))
    stored = stored_model(lm, "attn_tgt_tokenizer", tmp_path / "stored.model")
    assert stored.read_bytes() == model.read_bytes()
    ok(run("generate", "--model", lm, "--prompt", "The river", "--max-new-tokens", "5",
           "--seed", "1"))


def corrupt_models(tmp_path):
    good = user_model(tmp_path, "good").read_bytes()
    rng = random.Random(5)
    attn_model = train(tmp_path, name="attn_model")
    return {
        "empty": b"",
        "random": bytes(rng.randrange(256) for _ in range(2000)),
        "truncated": good[:len(good) // 2],
        "attn model file": attn_model.read_bytes(),
        "json": b'{"format": "attn-tokenizer"}',
    }


def test_corrupt_or_foreign_model_files_are_refused(tmp_path):
    for name, data in corrupt_models(tmp_path).items():
        path = tmp_path / "bad.model"
        path.write_bytes(data)
        for args in (["train", "--train-src", EN, "--train-tgt", DE, "--src-spm", path,
                      "--max-steps", "1", "--out", tmp_path / "m.safetensors"],
                     ["tokenize", "--input", EN, "--spm", path, "--out", tmp_path / "t.bin"]):
            result = run(*args)
            message = result.stderr.decode()
            assert result.returncode == 1, (name, message)
            assert "is not a SentencePiece model" in message, (name, message)
            assert str(path) in message, (name, message)
    missing = run("tokenize", "--input", EN, "--spm", tmp_path / "none.model",
                  "--out", tmp_path / "t.bin")
    assert missing.returncode == 1 and "none.model" in missing.stderr.decode()


def test_option_mistakes_are_usage_errors(tmp_path):
    model = user_model(tmp_path, "user")
    for args, message in (
            (["--src-tokens", "spm:4"], "N >= 8 pieces"),
            (["--tgt-tokens", "spm-bpe:x"], "spm:N or spm-bpe:N"),
            (["--src-tokens", "spm:100", "--src-spm", model], "give one of them"),
    ):
        result = run("train", "--train-src", EN, "--train-tgt", DE, "--out",
                     tmp_path / "m.safetensors", *args)
        assert result.returncode == 2 and message in result.stderr.decode(), result.stderr


# ---- subword regularisation (--spm-alpha) ----------------------------------------------------

def step_log(path):
    return [event for event in map(json.loads, path.read_text().splitlines())
            if event["event"] == "step"]


def sampled_run(tmp_path, name, *flags, threads=1, steps=24):
    """24 updates of batches of 256 tokens: more than one epoch of the 44 pairs, so
    segmentations are drawn for several epochs."""
    log = tmp_path / f"{name}.jsonl"
    ok(run("train", "--train-src", EN, "--train-tgt", DE, *TINY_TRANSFORMER_D16,
           "--src-tokens", "spm:200", "--tgt-tokens", "spm-bpe:200", "--batch-tokens", "256",
           # A schedule of the update count alone, so that a run stopped early and resumed
           # follows the same rates as the whole run.
           "--schedule", "inverse-sqrt", "--warmup", "5",
           "--max-steps", str(steps), "--threads", str(threads), "--no-valid", "--seed", "3",
           "--out", tmp_path / f"{name}.safetensors", "--log", log, *flags))
    return step_log(log)


def test_spm_alpha_samples_anew_each_epoch_reproducibly(tmp_path):
    best = sampled_run(tmp_path, "best")
    one = sampled_run(tmp_path, "one", "--spm-alpha", "0.1")
    two = sampled_run(tmp_path, "two", "--spm-alpha", "0.1", threads=2)
    # The target tokens of each update count the sampled segmentations: they differ from the
    # best segmentation's, and the thread count changes none of them.
    assert [e["tokens"] for e in one] != [e["tokens"] for e in best]
    assert [e["tokens"] for e in one] == [e["tokens"] for e in two]
    assert {e["epoch"] for e in one} != {0}, "the run must cross an epoch"
    # The model file carries the tokenizers it learned, unchanged by sampling: translating
    # reads the best segmentation, as spm_encode gives it.
    for side in ("attn_src_tokenizer", "attn_tgt_tokenizer"):
        assert (tokenizer_json(tmp_path / "one.safetensors", side)
                == tokenizer_json(tmp_path / "best.safetensors", side))
    bundle = attn.Bundle(str(tmp_path / "one.safetensors"))
    model = stored_model(tmp_path / "one.safetensors", "attn_src_tokenizer", tmp_path / "s.model")
    assert ([bundle.source_tokenizer.encode(line) for line in lines(EN)]
            == spm_ids(model, EN.read_text(encoding="utf-8")))
    sources = "\n".join(lines(EN)[:3]).encode("utf-8") + b"\n"
    translate = ("translate", "--model", tmp_path / "one.safetensors", "--beam", "2")
    assert ok(run(*translate, stdin=sources)) == ok(run(*translate, stdin=sources))


@pytest.mark.parametrize("accumulate, stop, steps", [(1, 20, 24), (2, 10, 14)])
def test_spm_alpha_resumes_bit_for_bit(tmp_path, accumulate, stop, steps):
    """With --accumulate 2 the trainer looks ahead over each update's batches, across an
    epoch's end and back."""
    flags = ("--spm-alpha", "0.2", "--spm-nbest", "16", "--accumulate", str(accumulate))
    whole = sampled_run(tmp_path, "whole", *flags, steps=steps)
    first = sampled_run(tmp_path, "part", *flags, steps=stop)
    log = tmp_path / "part.jsonl"
    ok(run("train", "--resume", tmp_path / "part.last.safetensors", "--train-src", EN,
           "--train-tgt", DE, "--max-steps", str(steps), "--threads", "1", "--no-valid",
           "--out", tmp_path / "part.safetensors", "--log", log))
    resumed = step_log(log)
    # Stopped in the second epoch, so the resumed run samples that epoch again from its seed.
    assert first[-1]["epoch"] == 1 and first[0]["epoch"] == 0
    assert len(first) == stop and len(resumed) == steps
    assert ([(e["step"], e["tokens"], e["train_loss"]) for e in resumed]
            == [(e["step"], e["tokens"], e["train_loss"]) for e in whole])
    # Another alpha is another run.
    result = run("train", "--resume", tmp_path / "part.last.safetensors", "--train-src", EN,
                 "--train-tgt", DE, "--max-steps", str(steps + 2), "--threads", "1", "--no-valid",
                 "--out", tmp_path / "part.safetensors", "--spm-alpha", "0.3")
    assert result.returncode != 0 and "spm_alpha" in result.stderr.decode(), result.stderr


def test_spm_alpha_samples_a_classifiers_text(tmp_path):
    labelled = tmp_path / "labelled.tsv"
    labelled.write_text("".join(f"{'ab'[i % 2]}\t{line}\n" for i, line in enumerate(lines(EN))),
                        encoding="utf-8")
    result = run("train", "--task", "classify", "--train", labelled, "--src-tokens", "spm:150",
                 *TINY_TRANSFORMER_D16, "--max-steps", "3", "--threads", "1", "--no-valid",
                 "--out", tmp_path / "c.safetensors", "--spm-alpha", "0.1")
    assert result.returncode == 0, result.stderr.decode()
    assert "samples the source segmentations" in result.stderr.decode()


def test_spm_alpha_mistakes_are_refused(tmp_path):
    common = ["train", "--train-src", EN, "--train-tgt", DE, "--out", tmp_path / "m.safetensors",
              "--max-steps", "1"]
    for args, message in (
            (["--spm-alpha", "0", "--src-tokens", "spm:100"], "must be in (0, 1]"),
            (["--spm-alpha", "-1", "--src-tokens", "spm:100"], "must be in (0, 1]"),
            (["--spm-alpha", "2", "--src-tokens", "spm:100"], "must be in (0, 1]"),
            (["--spm-alpha", "nan", "--src-tokens", "spm:100"], "--spm-alpha"),
            (["--spm-alpha", "abc", "--src-tokens", "spm:100"], "--spm-alpha"),
            (["--spm-alpha", "0.1", "--spm-nbest", "1", "--src-tokens", "spm:100"],
             "--spm-nbest 1 must be -1"),
            (["--spm-alpha", "0.1", "--spm-nbest", "513", "--src-tokens", "spm:100"],
             "--spm-nbest 513"),
            (["--spm-nbest", "8", "--src-tokens", "spm:100"], "give --spm-alpha too"),
            (["--spm-alpha", "0.1"], "source tokens are char and the target tokens char"),
            (["--spm-alpha", "0.1", "--src-tokens", "char", "--tgt-tokens", "word"],
             "source tokens are char and the target tokens word"),
    ):
        result = run(*common, *args)
        assert result.returncode == 2, (args, result.stderr.decode())
        assert message in result.stderr.decode(), (args, result.stderr.decode())
    lm = run("train", "--task", "lm", "--train", EN, "--tgt-tokens", "spm:100", "--spm-alpha",
             "0.1", "--out", tmp_path / "lm.safetensors", "--max-steps", "1")
    assert lm.returncode == 2 and "not there yet for --task lm" in lm.stderr.decode()
    # A SentencePiece word model has no segmentations to sample.
    words = tmp_path / "words"
    spm("spm_train", f"--input={EN}", f"--model_prefix={words}", "--vocab_size=100",
        "--model_type=word", stdin="")
    result = run(*common, "--spm-alpha", "0.1", "--src-spm", f"{words}.model")
    assert result.returncode == 2, result.stderr.decode()
    assert "SentencePiece unigram or BPE model" in result.stderr.decode()
