"""Token-level distillation on the command line: attn train --teacher (learns from the
teachers, says what they cost, keeps the weight in the checkpoint and needs the teachers again
to resume exactly; reads and writes with the teachers' tokenizers, so it may learn from more
data than they saw) and its refusals (tokens of another kind, a weight alone or out of range,
a resume with or without teachers that the run did not have)."""
import json
import random
import struct
import subprocess

import pytest

from attn_program import ATTN, TINY_TRANSFORMER_D32

TINY = [*TINY_TRANSFORMER_D32, "--threads", "1"]


def run(*args, timeout=120):
    return subprocess.run([ATTN, *map(str, args)], capture_output=True, timeout=timeout)


def metadata_of(path):
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + size])["__metadata__"]


def state_of(path):
    return json.loads(metadata_of(path)["attn_train_state"])


@pytest.fixture
def reverse_data(tmp_path):
    rng = random.Random(5)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 8)))
             for _ in range(400)]
    train = tmp_path / "train.tsv"
    train.write_text("".join(f"{w}\t{w[::-1]}\n" for w in words), encoding="utf-8")
    return train


@pytest.fixture
def teacher(tmp_path, reverse_data):
    out = tmp_path / "teacher.safetensors"
    result = run("train", "--train", reverse_data, "--no-valid", *TINY, "--out", out,
                 "--max-steps", 30, "--seed", 7)
    assert result.returncode == 0, result.stderr.decode()
    return out


def test_student_learns_from_teachers_and_resumes_exactly(tmp_path, reverse_data, teacher):
    teachers = f"{teacher},{teacher}"
    common = ["train", "--train", reverse_data, "--no-valid", *TINY, "--schedule",
              "inverse-sqrt", "--warmup", "5", "--teacher", teachers, "--teacher-weight", "0.8"]
    whole = run(*common, "--out", tmp_path / "whole.safetensors", "--max-steps", 8)
    assert whole.returncode == 0, whole.stderr.decode()
    assert b"2 teachers read the 400 training pairs" in whole.stderr
    assert b"weight 0.8 in the loss" in whole.stderr
    assert state_of(tmp_path / "whole.last.safetensors")["options"]["teacher_weight"] == 0.8

    first = run(*common, "--out", tmp_path / "parts.safetensors", "--max-steps", 4)
    assert first.returncode == 0, first.stderr.decode()
    checkpoint = tmp_path / "parts.last.safetensors"
    resume = ["train", "--train", reverse_data, "--no-valid", "--threads", "1", "--resume",
              checkpoint, "--out", tmp_path / "parts.safetensors", "--max-steps", 8]
    without = run(*resume)
    assert without.returncode == 1
    assert b"learned from teachers" in without.stderr and b"--teacher" in without.stderr
    weight_alone = run(*resume, "--teacher-weight", "0.8")
    assert weight_alone.returncode == 2 and b"give them too" in weight_alone.stderr
    second = run(*resume, "--teacher", teachers)
    assert second.returncode == 0, second.stderr.decode()
    assert (tmp_path / "parts.safetensors").read_bytes() == \
        (tmp_path / "whole.safetensors").read_bytes()

    # The teachers change the run: without them the same seed gives other weights.
    plain = run("train", "--train", reverse_data, "--no-valid", *TINY, "--schedule",
                "inverse-sqrt", "--warmup", "5", "--out", tmp_path / "plain.safetensors",
                "--max-steps", 8)
    assert plain.returncode == 0, plain.stderr.decode()
    assert (tmp_path / "plain.safetensors").read_bytes() != \
        (tmp_path / "whole.safetensors").read_bytes()
    plain_resume = run("train", "--train", reverse_data, "--no-valid", "--threads", "1",
                       "--resume", tmp_path / "plain.last.safetensors", "--out",
                       tmp_path / "plain.safetensors", "--max-steps", 9, "--teacher", teacher)
    assert plain_resume.returncode == 1
    assert b"learned from no teachers" in plain_resume.stderr


def test_student_takes_its_teachers_tokenizers_and_learns_from_more_data(
        tmp_path, reverse_data, teacher):
    """Words the teachers never saw, with letters in another order of frequency (a student
    learning its own tokenizers from them would number the letters differently) and one letter
    the teachers lack: the student keeps the teachers' numbering and says what reads <unk>."""
    more = tmp_path / "more.tsv"
    extra = ["jjjj", "jjij", "ijjz", "hjjh"] * 50
    more.write_text(reverse_data.read_text() + "".join(f"{w}\t{w[::-1]}\n" for w in extra))
    out = tmp_path / "student.safetensors"
    taught = run("train", "--train", more, "--no-valid", *TINY, "--out", out, "--max-steps", 2,
                 "--src-tokens", "char", "--teacher", f"{teacher},{teacher}")
    assert taught.returncode == 0, taught.stderr.decode()
    assert b"2 teachers read the 600 training pairs" in taught.stderr
    assert b"50 source and 50 target tokens of the training data are not in the teachers'" \
        in taught.stderr, taught.stderr.decode()
    for key in ("attn_src_tokenizer", "attn_tgt_tokenizer"):
        assert metadata_of(out)[key] == metadata_of(teacher)[key]
    # Without teachers the same data numbers its letters otherwise: the test means something.
    alone = run("train", "--train", more, "--no-valid", *TINY, "--out",
                tmp_path / "alone.safetensors", "--max-steps", 1)
    assert alone.returncode == 0, alone.stderr.decode()
    assert metadata_of(tmp_path / "alone.safetensors")["attn_src_tokenizer"] != \
        metadata_of(teacher)["attn_src_tokenizer"]


def test_refusals(tmp_path, reverse_data, teacher):
    out = tmp_path / "m.safetensors"
    base = ["train", "--train", reverse_data, "--no-valid", *TINY, "--out", out,
            "--max-steps", 1]
    other_tokens = run(*base, "--tgt-tokens", "word", "--teacher", teacher)
    assert other_tokens.returncode == 2
    message = other_tokens.stderr.decode()
    assert "--tgt-tokens word" in message and "teachers' tokenizers" in message, message
    assert "theirs is char" in message, message
    # A malformed spec is named even where no tokenizer is learned from it.
    for flag in ("--src-tokens", "--tgt-tokens"):
        for teachers in ([], ["--teacher", teacher]):
            malformed = run(*base, flag, "bpe:0", *teachers)
            assert malformed.returncode == 2, malformed.stderr.decode()
            assert f"{flag} bpe:0: expected char, word, bpe:N".encode() in malformed.stderr
    # Teachers of different vocabularies cannot be averaged.
    shifted = tmp_path / "shifted.tsv"
    shifted.write_text(reverse_data.read_text() + "jjjj\tjjjj\n" * 300)
    other = tmp_path / "other.safetensors"
    assert run("train", "--train", shifted, "--no-valid", *TINY, "--out", other,
               "--max-steps", 1).returncode == 0
    mixed = run(*base, "--teacher", f"{teacher},{other}")
    assert mixed.returncode == 1 and b"vocabular" in mixed.stderr, mixed.stderr.decode()
    alone = run(*base, "--teacher-weight", "0.3")
    assert alone.returncode == 2 and b"give them too" in alone.stderr, alone.stderr.decode()
    for bad in ("0", "1.5", "-1"):
        refused = run(*base, "--teacher", teacher, "--teacher-weight", bad)
        assert refused.returncode == 2 and b"(0, 1]" in refused.stderr, refused.stderr.decode()
    missing = run(*base, "--teacher", f"{teacher},{tmp_path / 'none.safetensors'}")
    assert missing.returncode == 1 and b"none.safetensors" in missing.stderr
    empty = run(*base, "--teacher", f"{teacher},")
    assert empty.returncode == 1 and b"model 2 of the list" in empty.stderr
    assert not out.exists()
