"""attn reproduces llm.c's GPT-2 training step for step. From one random checkpoint (2 layers,
4 heads, 128 channels, V 1000, Vp 1024) and a token file of exactly 4 x 64 + 1 tokens (so that
llm.c's loader gives the same batch at every step), llm.c's train_gpt2.c (built here as its
Makefile builds it, from ../shared/peers/llmc) prints 41 training losses (steps 0-40: B 4, T 64,
AdamW lr 1e-4, betas 0.9/0.999, eps 1e-8, no weight decay). attn, from the same checkpoint
through `attn convert --from llmc`, with the flags that mean the same, must print the same losses
within 1e-3 at every step; and the same after a round trip through `attn convert --to llmc`."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attn_program import ATTN

HERE = Path(__file__).resolve().parent
PEER = HERE.parents[2] / "shared" / "peers" / "llmc"
B, T, V, VP = 4, 64, 1000, 1024


def write_tokenizer(path, vocab):
    # llm.c's tokenizer file (only read to print samples): 256 uint32 (magic 20240328,
    # version 2, vocabulary, end-of-text id), then each token as a length byte and its bytes.
    header = np.zeros(256, dtype="<u4")
    header[:4] = [20240328, 2, vocab, vocab - 1]
    pieces = b"".join(bytes([len(t)]) + t for t in (b"t%d " % i for i in range(vocab)))
    path.write_bytes(header.tobytes() + pieces)


@pytest.fixture(scope="module")
def llmc(tmp_path_factory):
    if not (PEER / "train_gpt2.c").exists():
        pytest.skip(f"llm.c's source is not at {PEER} (shared/peers/llmc beside the repository)")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build llm.c")
    work = tmp_path_factory.mktemp("llmc")
    shutil.copytree(PEER, work / "src")
    # llm.c's Makefile line for its CPU trainer.
    subprocess.run(["gcc", "-Ofast", "-Wno-unused-result", "-march=native", "-fopenmp", "-DOMP",
                    "train_gpt2.c", "-lm", "-o", str(work / "train_gpt2")],
                   cwd=work / "src", check=True, capture_output=True, timeout=300)
    subprocess.run([sys.executable, HERE / "make_llmc_checkpoint.py", work / "model.bin",
                    "--tokens", work / "tokens.bin", "--layers", "2", "--heads", "4",
                    "--channels", "128", "--vocab", str(V), "--padded-vocab", str(VP),
                    "--max-t", str(T), "--count", str(B * T + 1), "--seed", "5"],
                   check=True, capture_output=True, timeout=120)
    return work


def llmc_losses(work, checkpoint):
    """The 41 losses train_gpt2 prints, run in a folder laid out as it expects."""
    run = work / ("run-" + checkpoint.stem)
    data = run / "dev" / "data" / "tinyshakespeare"
    data.mkdir(parents=True)
    shutil.copy(checkpoint, run / "gpt2_124M.bin")
    write_tokenizer(run / "gpt2_tokenizer.bin", V)
    for split in ("train", "val"):
        shutil.copy(work / "tokens.bin", data / f"tiny_shakespeare_{split}.bin")
    env = dict(os.environ, OMP_NUM_THREADS="2")
    r = subprocess.run([work / "train_gpt2"], cwd=run, capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    found = re.findall(r"step (\d+): train loss ([0-9.]+)", r.stdout)
    assert [int(step) for step, _ in found] == list(range(41)), r.stdout[-2000:]
    return [float(loss) for _, loss in found]


def attn_losses(work, checkpoint, name):
    model = work / f"{name}.safetensors"
    r = subprocess.run([ATTN, "convert", "--from", "llmc", checkpoint, "--out", model],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    log = work / f"{name}.jsonl"
    r = subprocess.run(
        [ATTN, "train", "--task", "lm", "--init", model, "--train-tokens", work / "tokens.bin",
         "--no-valid", "--out", work / f"{name}-trained.safetensors", "--shuffle", "none",
         "--batch-sequences", str(B), "--context", str(T), "--optimizer", "adamw",
         "--lr", "1e-4", "--beta1", "0.9", "--beta2", "0.999", "--eps", "1e-8",
         "--weight-decay", "0", "--schedule", "constant", "--warmup", "0", "--dropout", "0",
         "--clip-norm", "0", "--max-steps", "41", "--log", log, "--threads", "2"],
        capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return [json.loads(line)["train_loss"] for line in log.read_text().splitlines()
            if '"event":"step"' in line]


def test_attn_trains_as_llmc_step_for_step(llmc):
    expected = llmc_losses(llmc, llmc / "model.bin")
    got = attn_losses(llmc, llmc / "model.bin", "converted")
    assert len(got) == 41
    worst = max(abs(a - b) for a, b in zip(got, expected))
    assert worst <= 1e-3, list(zip(expected, got))
    # The same batch every step: a working optimizer lowers the loss.
    assert expected[-1] < expected[0] - 0.5


def test_a_round_trip_through_llmc_trains_the_same(llmc):
    back = llmc / "back.bin"
    r = subprocess.run([ATTN, "convert", "--to", "llmc", llmc / "converted.safetensors",
                        "--out", back], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    expected = llmc_losses(llmc, back)
    got = attn_losses(llmc, back, "round-trip")
    worst = max(abs(a - b) for a, b in zip(got, expected))
    assert len(got) == 41 and worst <= 1e-3, list(zip(expected, got))
