"""Exponential smoothing of the weights: attn train --ema (trains, writes a model that
translates, says so in its plan, resumes exactly, gives two MPI ranks one process's average,
refuses what it cannot do) and the binding's attn.optim.ema_update against NumPy in float64."""
import json
import random
import shutil
import struct
import subprocess

import numpy as np
import pytest

import attn.optim as optim
from attn_program import ATTN, TINY_TRANSFORMER_D32

TINY = [*TINY_TRANSFORMER_D32, "--threads", "1"]


def run(*args, stdin=None, timeout=120):
    return subprocess.run([ATTN, *map(str, args)], input=stdin, capture_output=True,
                          timeout=timeout)


@pytest.fixture
def reverse_data(tmp_path):
    rng = random.Random(3)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 8)))
             for _ in range(600)]
    train = tmp_path / "train.tsv"
    train.write_text("".join(f"{w}\t{w[::-1]}\n" for w in words), encoding="utf-8")
    return train


def tensors(path):
    """name -> float32 array of a safetensors file, and its metadata."""
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    metadata = header.pop("__metadata__", {})
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        out[name] = np.frombuffer(data[8 + size + begin:8 + size + end], dtype=np.float32)
    return out, metadata


def test_ema_trains_saves_the_average_and_translates(tmp_path, reverse_data):
    out = tmp_path / "m.safetensors"
    result = run("train", "--train", reverse_data, "--no-valid", *TINY, "--out", out,
                 "--max-steps", 12, "--ema", "1e-3")
    assert result.returncode == 0, result.stderr.decode()
    assert b"moving average (ema 0.001)" in result.stderr
    model, _ = tensors(out)
    checkpoint, metadata = tensors(tmp_path / "m.last.safetensors")
    state = json.loads(metadata["attn_train_state"])
    assert state["options"]["ema"] == 1e-3
    # The model file is the average the checkpoint keeps, not the training weights.
    weights = [name for name in model]
    assert all(np.array_equal(model[name], checkpoint["ema." + name]) for name in weights)
    assert any(not np.array_equal(model[name], checkpoint[name]) for name in weights)
    translated = run("translate", "--model", out, "--threads", "1", stdin=b"abc\nhgfed\n")
    assert translated.returncode == 0, translated.stderr.decode()
    assert len(translated.stdout.decode().splitlines()) == 2


def test_ema_run_resumes_exactly(tmp_path, reverse_data):
    # inverse-sqrt: the default cosine would be planned over the first part's updates.
    common = ["train", "--train", reverse_data, "--no-valid", *TINY, "--schedule", "inverse-sqrt",
              "--warmup", "5", "--ema", "0.25"]
    whole = run(*common, "--out", tmp_path / "whole.safetensors", "--max-steps", 10)
    assert whole.returncode == 0, whole.stderr.decode()
    first = run(*common, "--out", tmp_path / "parts.safetensors", "--max-steps", 5)
    assert first.returncode == 0, first.stderr.decode()
    # The rate comes from the checkpoint.
    second = run("train", "--train", reverse_data, "--no-valid", "--threads", "1",
                 "--resume", tmp_path / "parts.last.safetensors",
                 "--out", tmp_path / "parts.safetensors", "--max-steps", 10)
    assert second.returncode == 0, second.stderr.decode()
    assert b"resuming at step 5" in second.stderr
    assert (tmp_path / "parts.safetensors").read_bytes() == \
        (tmp_path / "whole.safetensors").read_bytes()
    whole_checkpoint, _ = tensors(tmp_path / "whole.last.safetensors")
    parts_checkpoint, _ = tensors(tmp_path / "parts.last.safetensors")
    assert whole_checkpoint.keys() == parts_checkpoint.keys()
    assert all(np.array_equal(whole_checkpoint[k], parts_checkpoint[k]) for k in whole_checkpoint)


MPIRUN = shutil.which("mpirun")
needs_mpi = pytest.mark.skipif(
    MPIRUN is None or "distributed training: MPI" not in run("info").stdout.decode(),
    reason="attn was built without MPI, or mpirun is missing")


@needs_mpi
def test_two_ranks_average_as_one_process_accumulating_two(tmp_path, reverse_data):
    """Every rank holds the same weights after each update, so each keeps the same average;
    rank 0 writes it."""
    common = ["train", "--train", reverse_data, "--no-valid", *TINY, "--batch-tokens", "256",
              "--max-steps", 12, "--ema", "1e-3"]
    shared, alone = tmp_path / "shared.safetensors", tmp_path / "alone.safetensors"
    two = subprocess.run([MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", "2", ATTN,
                          *map(str, common), "--out", shared], capture_output=True, timeout=300)
    assert two.returncode == 0, two.stderr.decode()
    one = run(*common, "--accumulate", 2, "--out", alone)
    assert one.returncode == 0, one.stderr.decode()
    a, b = tensors(shared)[0], tensors(alone)[0]
    assert a.keys() == b.keys()
    assert all(a[name].tobytes() == b[name].tobytes() for name in a)
    a, b = tensors(tmp_path / "shared.last.safetensors")[0], \
        tensors(tmp_path / "alone.last.safetensors")[0]
    assert any(name.startswith("ema.") for name in a)
    assert all(a[name].tobytes() == b[name].tobytes() for name in a)


def test_ema_refusals(tmp_path, reverse_data):
    out = tmp_path / "m.safetensors"
    for bad in ("1", "-0.5", "2"):
        refused = run("train", "--train", reverse_data, *TINY, "--out", out, "--max-steps", 1,
                      "--ema", bad)
        assert refused.returncode == 2 and b"--ema" in refused.stderr, refused.stderr.decode()
    plain = run("train", "--train", reverse_data, "--no-valid", *TINY, "--out", out,
                "--max-steps", 2)
    assert plain.returncode == 0, plain.stderr.decode()
    checkpoint = tmp_path / "m.last.safetensors"
    with_ema = run("train", "--train", reverse_data, "--no-valid", "--resume", checkpoint,
                   "--out", out, "--max-steps", 4, "--ema", "1e-3")
    assert with_ema.returncode == 1
    assert b"had no ema" in with_ema.stderr and b"no smoothed weights" in with_ema.stderr
    smoothed = run("train", "--train", reverse_data, "--no-valid", *TINY, "--out", out,
                   "--max-steps", 2, "--ema", "1e-3")
    assert smoothed.returncode == 0, smoothed.stderr.decode()
    other_rate = run("train", "--train", reverse_data, "--no-valid", "--resume", checkpoint,
                     "--out", out, "--max-steps", 4, "--ema", "1e-2")
    assert other_rate.returncode == 1
    assert b"ema (the smoothing rate) is 0.001 in the checkpoint but 0.01 here" in \
        other_rate.stderr


def test_binding_ema_update_matches_float64(rng):
    smoothed = rng.standard_normal(1000).astype(np.float32)
    expected = smoothed.astype(np.float64)
    for step in range(30):
        values = rng.standard_normal(1000).astype(np.float32)
        decay = max(0.2, 1.0 - (step + 1) / (step + 10))
        expected = (1.0 - decay) * expected + decay * values.astype(np.float64)
        optim.ema_update(smoothed, values, 0.2, step)
    np.testing.assert_allclose(smoothed, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(Exception, match=r"\[0, 1\)"):
        optim.ema_update(smoothed, values, 1.0, 0)
    with pytest.raises(ValueError):
        optim.ema_update(smoothed.astype(np.float64), values, 0.1, 0)
