"""The guards around a training run (issue 16): files no healthy run writes (NaN or infinite
weights, negative Adam second moments) are refused at load naming the tensor; a diverging run
stops with an error; over-long pairs are skipped; outputs that name an input or each other, that
cannot be written, or that another run is writing are refused before any work; SIGTERM ends a run
with exit 128 + 15 and a loadable checkpoint; the summary and the JSON log tell the truth."""
import json
import random
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from attn_program import ATTN, TINY_TRANSFORMER_D16


def run(*args, stdin=None):
    return subprocess.run([ATTN, *map(str, args)], input=stdin, capture_output=True, timeout=300)


def overwrite_first_float(src, dst, tensor_prefix, value):
    """Copies a safetensors file, replacing element 0 of the first tensor whose name starts with
    tensor_prefix; returns that tensor's name."""
    data = bytearray(Path(src).read_bytes())
    header_len = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + header_len])
    name = next(k for k in sorted(header) if k != "__metadata__" and k.startswith(tensor_prefix))
    assert header[name]["dtype"] == "F32"
    offset = 8 + header_len + header[name]["data_offsets"][0]
    data[offset:offset + 4] = struct.pack("<f", value)
    Path(dst).write_bytes(bytes(data))
    return name


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corrupt")
    rng = random.Random(3)
    words = ["".join(rng.choice("abcdef") for _ in range(rng.randint(2, 5))) for _ in range(400)]
    train = folder / "train.tsv"
    train.write_text("".join(f"{w}\t{w[::-1]}\n" for w in words), encoding="utf-8")
    model = folder / "m.safetensors"
    result = run("train", "--train", train, "--out", model, *TINY_TRANSFORMER_D16, "--max-steps",
                 "10", "--threads", "2")
    assert result.returncode == 0, result.stderr.decode()
    return {"folder": folder, "train": train, "model": model,
            "checkpoint": folder / "m.last.safetensors"}


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_translate_refuses_non_finite_weights(trained, value):
    bad = trained["folder"] / "nonfinite.safetensors"
    name = overwrite_first_float(trained["model"], bad, "decoder.", value)
    result = run("translate", "--model", bad, stdin=b"abc\n")
    message = result.stderr.decode()
    assert result.returncode == 1, message
    assert result.stdout == b""
    assert f"'{name}'" in message and "corrupted" in message, message
    good = run("translate", "--model", trained["model"], stdin=b"abc\n")
    assert good.returncode == 0 and len(good.stdout.splitlines()) == 1, good.stderr.decode()


def test_resume_refuses_negative_second_moments(trained):
    bad = trained["folder"] / "negative.last.safetensors"
    name = overwrite_first_float(trained["checkpoint"], bad, "optimizer.exp_avg_sq.", -0.5)
    out = trained["folder"] / "resumed.safetensors"
    result = run("train", "--train", trained["train"], "--out", out, "--resume", bad,
                 "--max-steps", "12", "--threads", "2")
    message = result.stderr.decode()
    assert result.returncode == 1, message
    assert f"'{name}'" in message and "negative Adam second moment" in message, message
    assert not out.exists()
    # The intact checkpoint resumes.
    result = run("train", "--train", trained["train"], "--out", out, "--resume",
                 trained["checkpoint"], "--max-steps", "12", "--threads", "2")
    assert result.returncode == 0, result.stderr.decode()


def test_diverging_run_stops_with_an_error_and_writes_nothing(trained):
    """--lr 1e30 without clipping blows the weights up at the first update; every later
    gradient is NaN. The run must stop after the stated number of skipped updates with exit 1,
    not finish with exit 0 and a NaN model."""
    out = trained["folder"] / "diverged.safetensors"
    result = run("train", "--train", trained["train"], "--out", out, "--lr", "1e30",
                 "--warmup", "1", "--clip-norm", "0", "--epochs", "0", "--max-steps", "200",
                 *TINY_TRANSFORMER_D16,
                 "--checkpoint-every", "5", "--threads", "2")
    message = result.stderr.decode()
    assert result.returncode == 1, message
    assert "training diverged: the last 20 updates (to step 21)" in message, message
    assert not out.exists()
    assert not (trained["folder"] / "diverged.last.safetensors").exists()


def test_max_skipped_sets_when_a_diverging_run_stops(trained):
    out = trained["folder"] / "diverged5.safetensors"
    result = run("train", "--train", trained["train"], "--out", out, "--lr", "1e30",
                 "--warmup", "1", "--clip-norm", "0", "--epochs", "0", "--max-steps", "200",
                 *TINY_TRANSFORMER_D16,
                 "--max-skipped", "5", "--threads", "2")
    message = result.stderr.decode()
    assert result.returncode == 1, message
    assert "the last 5 updates (to step 6)" in message, message


def test_over_long_pairs_are_skipped_and_counted(trained, tmp_path):
    """A 1 MB line used to set max_len and the size of its batch (minutes and a gigabyte for one
    update); it is skipped by the default --max-len and the start-up says so."""
    lines = trained["train"].read_text(encoding="utf-8").splitlines()
    lines.insert(7, "a" * 1_000_000 + "\tb")
    lines.insert(9, "abc\t" + "x" * 300)
    train = tmp_path / "long.tsv"
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    valid = tmp_path / "valid.tsv"
    valid.write_text("abc\tcba\n" + "b" * 257 + "\tc\n", encoding="utf-8")
    out = tmp_path / "m.safetensors"
    args = ["--train", train, "--valid", valid, "--out", out, *TINY_TRANSFORMER_D16,
            "--max-steps", "3", "--threads", "2"]
    result = run("train", *args)
    message = result.stderr.decode()
    assert result.returncode == 0, message
    assert "skipped 2 training and 1 validation pairs longer than --max-len 256 tokens" in message
    config = json.loads(_metadata(out)["attn_config"])
    assert config["max_len"] <= 1024, config["max_len"]  # the default, not raised to 10^6
    result = run("train", *args, "--max-len", "2")
    assert result.returncode == 1
    assert "every validation pair is longer than --max-len 2 tokens" in result.stderr.decode()


def _metadata(path):
    data = Path(path).read_bytes()
    header_len = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + header_len])["__metadata__"]


SMALL = [*TINY_TRANSFORMER_D16, "--threads", "2"]


def test_outputs_that_name_an_input_or_each_other_are_refused(trained, tmp_path):
    train = tmp_path / "t.tsv"
    train.write_bytes(trained["train"].read_bytes())
    before = train.read_bytes()
    out = tmp_path / "m.safetensors"
    cases = [
        (["--out", train], "--out", "is the --train file"),
        (["--out", out, "--checkpoint", train], "--checkpoint", "is the --train file"),
        (["--out", out, "--checkpoint", out], "--out and --checkpoint are the same file", ""),
        (["--out", out, "--log", tmp_path / "." / "m.safetensors"],
         "--out and --log are the same file", ""),
        (["--out", out, "--log", tmp_path / "m.last.safetensors"],
         "--checkpoint and --log are the same file", ""),
    ]
    for extra, *says in cases:
        result = run("train", "--train", train, *extra, "--max-steps", "2", *SMALL)
        message = result.stderr.decode()
        assert result.returncode == 2, message
        assert all(part in message for part in says), message
        assert train.read_bytes() == before
        assert not out.exists()


@pytest.mark.parametrize("make_out,says", [
    (lambda d: d / "missing-folder" / "m.safetensors", "No such file or directory"),
    (lambda d: d, "is a folder"),
    (lambda d: "", "the path is empty"),
])
def test_unwritable_outputs_are_found_before_training(trained, tmp_path, make_out, says):
    result = run("train", "--train", trained["train"], "--out", make_out(tmp_path),
                 "--max-steps", "2", *SMALL)
    message = result.stderr.decode()
    assert result.returncode == 1, message
    assert says in message and "starting at step" not in message, message


def test_one_run_per_output_and_sigterm_ends_with_an_exit_status(trained, tmp_path):
    out = tmp_path / "m.safetensors"
    first = subprocess.Popen([ATTN, "train", "--train", str(trained["train"]), "--out", str(out),
                              "--epochs", "0", "--max-steps", "1000000", *SMALL],
                             stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "m.safetensors.lock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        second = run("train", "--train", trained["train"], "--out", out, "--max-steps", "2",
                     *SMALL)
        message = second.stderr.decode()
        assert second.returncode == 1, message
        assert f"being written by another process (pid {first.pid})" in message, message
        started = time.monotonic()
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=30)
        assert time.monotonic() - started < 10
    finally:
        if first.poll() is None:
            first.kill()
    message = err.decode()
    assert first.returncode == 128 + signal.SIGTERM, message
    assert "stopped by SIGTERM; resume with --resume" in message, message
    assert not (tmp_path / "m.safetensors.lock").exists()
    resumed = run("train", "--train", trained["train"], "--out", out, "--resume",
                  tmp_path / "m.last.safetensors", "--max-steps", "1", "--threads", "2")
    assert resumed.returncode == 0, resumed.stderr.decode()


def test_a_run_that_keeps_no_model_says_so_and_its_log_stays_json(trained, tmp_path):
    """NaN from the first update on (and --max-skipped 0: never give up): no validation loss is
    finite, so no model is kept; the summary must not name a file that does not exist, and the
    log must hold null where the numbers are not finite ("-nan" is not JSON)."""
    valid = tmp_path / "valid.tsv"
    valid.write_text("abc\tcba\nde\ted\n", encoding="utf-8")
    out, log = tmp_path / "m.safetensors", tmp_path / "log.jsonl"
    result = run("train", "--train", trained["train"], "--valid", valid, "--out", out,
                 "--log", log, "--lr", "1e30", "--warmup", "1", "--clip-norm", "0",
                 "--max-skipped", "0", "--epochs", "0", "--max-steps", "4", "--eval-every", "2",
                 *SMALL)
    message = result.stderr.decode()
    assert result.returncode == 1, message
    assert "model: not written (no validation loss was finite" in message, message
    assert not out.exists(), message
    records = [json.loads(line) for line in log.read_text().splitlines()]
    evals = [r for r in records if r["event"] == "eval"]
    assert evals and all(r["valid_loss"] is None for r in evals), evals
    assert any(r["event"] == "step" and r["train_loss"] is None for r in records)


def test_sigterm_ends_a_long_update_within_seconds(tmp_path):
    """One update of this model takes several seconds (long sentences, a wide model, one large
    batch); SIGTERM a second into it must not wait for its end: the update is dropped, the
    checkpoint holds step 0, and a resumed run starts there. No validation ran, so no model is
    kept, and the summary says why."""
    rng = random.Random(1)
    lines = ["".join(rng.choice("abcdefgh") for _ in range(240)) for _ in range(120)]
    train = tmp_path / "long.tsv"
    train.write_text("".join(f"{w}\t{w[::-1]}\n" for w in lines), encoding="utf-8")
    out = tmp_path / "m.safetensors"
    run_args = ["train", "--train", str(train), "--valid", str(train), "--out", str(out),
                "--layers", "2",
                "--d-model", "512", "--heads", "8", "--ffn", "2048", "--batch-tokens", "6000",
                "--max-steps", "1", "--threads", "2"]
    process = subprocess.Popen([ATTN, *run_args], stderr=subprocess.PIPE)
    try:
        seen = b""
        while b"starting at step 0" not in seen:
            line = process.stderr.readline()
            assert line, seen.decode()
            seen += line
        time.sleep(1.0)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
        waited = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
    message = (seen + err).decode()
    assert process.returncode == 128 + signal.SIGTERM, message
    assert waited < 10, f"SIGTERM took {waited:.1f} s to end the run"
    assert "model: not written (interrupted before any validation kept weights)" in message
    assert not out.exists(), message
    checkpoint = (tmp_path / "m.last.safetensors").read_bytes()
    header_len = struct.unpack("<Q", checkpoint[:8])[0]
    state = json.loads(json.loads(checkpoint[8:8 + header_len])["__metadata__"]["attn_train_state"])
    assert state["step"] == 0 and state["batch_index"] == 0, state
