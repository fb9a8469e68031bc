"""Token-level distillation on the command line: attn train --teacher (learns from the
teachers, says what they cost, keeps the weight in the checkpoint and needs the teachers again
to resume exactly) and its refusals (teachers of other tokens, a weight alone or out of range,
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


def state_of(path):
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    return json.loads(json.loads(data[8:8 + size])["__metadata__"]["attn_train_state"])


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


def test_refusals(tmp_path, reverse_data, teacher):
    out = tmp_path / "m.safetensors"
    base = ["train", "--train", reverse_data, "--no-valid", *TINY, "--out", out,
            "--max-steps", 1]
    other_tokens = run(*base, "--tgt-tokens", "word", "--teacher", teacher)
    assert other_tokens.returncode == 1
    message = other_tokens.stderr.decode()
    assert "--teacher" in message and "target vocabularies" in message, message
    assert "--tgt-tokens" in message, message
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
