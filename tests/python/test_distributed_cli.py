"""attn train under mpirun (data-parallel training over Open MPI): two ranks give one process's
--accumulate 2 weights to the bit, three ranks come close to --accumulate 3, a rank killed with
kill -9 ends the whole run within seconds and leaves a checkpoint that resumes with another
number of processes. Skipped when the build has no MPI (attn info says so) or mpirun is
missing."""
import os
import random
import shutil
import signal
import struct
import subprocess
import time
import json

import numpy as np
import pytest

from attn_program import ATTN, TINY_TRANSFORMER_D32

MPIRUN = shutil.which("mpirun")


def run(*args, timeout=300):
    return subprocess.run([ATTN, *map(str, args)], capture_output=True, timeout=timeout)


def mpi_built():
    info = run("info").stdout.decode()
    return "distributed training: MPI" in info


def test_info_says_whether_mpi_is_in():
    info = run("info")
    assert info.returncode == 0
    lines = [line for line in info.stdout.decode().splitlines()
             if line.startswith("distributed training: ")]
    assert len(lines) == 1, info.stdout.decode()
    assert "MPI" in lines[0] or "without MPI" in lines[0]


needs_mpi = pytest.mark.skipif(MPIRUN is None or not mpi_built(),
                               reason="attn was built without MPI, or mpirun is missing")


def mpirun(ranks, *args, timeout=300, **popen):
    command = [MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", str(ranks), ATTN,
               *map(str, args)]
    if popen:
        return subprocess.Popen(command, **popen)
    return subprocess.run(command, capture_output=True, timeout=timeout)


@pytest.fixture
def reverse_tsv(tmp_path):
    rng = random.Random(5)
    lines = []
    for _ in range(1500):
        word = "".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 8)))
        lines.append(f"{word}\t{word[::-1]}\n")
    path = tmp_path / "train.tsv"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def tensors(path):
    """name -> float32 array of a safetensors file."""
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = np.frombuffer(data[8 + size + begin:8 + size + end], dtype=np.float32)
    return out


def train_state(path):
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    return json.loads(json.loads(data[8:8 + size])["__metadata__"]["attn_train_state"])


RNN = ["--arch", "rnn", "--attention", "luong-general", "--input-feeding", "--hidden", "32",
       "--embedding-dim", "16"]


def common(train, out, steps=50):
    return ["train", "--train", train, "--no-valid", "--threads", "1", "--batch-tokens", "256",
            "--max-steps", steps, "--dropout", "0.1", "--out", out]


@needs_mpi
@pytest.mark.parametrize("model", [TINY_TRANSFORMER_D32, RNN], ids=["transformer", "rnn"])
def test_two_ranks_equal_one_process_accumulating_two(tmp_path, reverse_tsv, model):
    shared, alone = tmp_path / "shared.safetensors", tmp_path / "alone.safetensors"
    two = mpirun(2, *common(reverse_tsv, shared), *model, "--log", tmp_path / "shared.jsonl")
    assert two.returncode == 0, two.stderr.decode()
    one = run(*common(reverse_tsv, alone), *model, "--accumulate", 2,
              "--log", tmp_path / "alone.jsonl")
    assert one.returncode == 0, one.stderr.decode()
    a, b = tensors(shared), tensors(alone)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name
    # One log, rank 0's, with the same losses (17 digits) as the process that accumulated.
    losses = [[entry["train_loss"] for entry in map(json.loads, log.read_text().splitlines())
               if entry["event"] == "step"]
              for log in (tmp_path / "shared.jsonl", tmp_path / "alone.jsonl")]
    assert len(losses[0]) == 50 and losses[0] == losses[1]
    assert "rank 0 validates and writes the files" in two.stderr.decode()


@needs_mpi
def test_an_rnn_classifier_on_two_ranks_equals_one_process_accumulating_two(tmp_path):
    """--task classify --arch rnn over mpirun: the same weights, to the bit."""
    rng = random.Random(6)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 8)))
             for _ in range(1500)]
    labelled = tmp_path / "labelled.tsv"
    labelled.write_text("".join(f"{'a' in w}\t{w}\n" for w in words), encoding="utf-8")
    flags = ["--task", "classify", "--arch", "rnn", "--cell", "lstm", "--hidden", "16",
             "--embedding-dim", "8"]
    shared, alone = tmp_path / "shared.safetensors", tmp_path / "alone.safetensors"
    two = mpirun(2, *common(labelled, shared, steps=20), *flags)
    assert two.returncode == 0, two.stderr.decode()
    one = run(*common(labelled, alone, steps=20), *flags, "--accumulate", 2)
    assert one.returncode == 0, one.stderr.decode()
    a, b = tensors(shared), tensors(alone)
    assert a.keys() == b.keys() and "pooling.query" in a
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name


@needs_mpi
@pytest.mark.parametrize("ranks", [3, 4])
def test_more_ranks_come_close_to_one_process_accumulating_as_many(tmp_path, reverse_tsv, ranks):
    """N gradients are summed in the order Open MPI's all-reduce picks (docs/distributed.md),
    not necessarily one process's ((g0 + g1) + g2) + ...: a few ulps apart in a sum, which
    Adam can turn into steps of up to about the learning rate where a gradient is near zero.
    So the weights agree to a few learning rates, and the losses closely."""
    shared, alone = tmp_path / "shared.safetensors", tmp_path / "alone.safetensors"
    logs = tmp_path / "shared.jsonl", tmp_path / "alone.jsonl"
    lr = 1e-3
    flags = [*TINY_TRANSFORMER_D32, "--lr", lr]
    many = mpirun(ranks, *common(reverse_tsv, shared), *flags, "--log", logs[0])
    assert many.returncode == 0, many.stderr.decode()
    one = run(*common(reverse_tsv, alone), *flags, "--accumulate", ranks, "--log", logs[1])
    assert one.returncode == 0, one.stderr.decode()
    a, b = tensors(shared), tensors(alone)
    for name in a:
        assert np.abs(a[name] - b[name]).max() <= 5 * lr, \
            (name, float(np.abs(a[name] - b[name]).max()))
    losses = [[entry["train_loss"] for entry in map(json.loads, log.read_text().splitlines())
               if entry["event"] == "step"] for log in logs]
    assert np.allclose(losses[0], losses[1], rtol=1e-2)


def rank_processes(launcher_pid):
    """pid -> rank of the processes mpirun started."""
    ranks = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            if parent != launcher_pid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as environ:
                for variable in environ.read().split(b"\0"):
                    if variable.startswith(b"OMPI_COMM_WORLD_RANK="):
                        ranks[int(entry)] = int(variable.split(b"=")[1])
        except (OSError, IndexError, ValueError):
            continue
    return ranks


@needs_mpi
def test_a_killed_rank_ends_the_run_and_the_checkpoint_resumes_with_another_number(
        tmp_path, reverse_tsv):
    out, checkpoint = tmp_path / "k.safetensors", tmp_path / "k.last.safetensors"
    flags = ["--train", reverse_tsv, "--no-valid", "--threads", "1", "--batch-tokens", "256",
             "--checkpoint-every", "5", "--out", out]
    process = mpirun(2, "train", *flags, *TINY_TRANSFORMER_D32, "--max-steps", 1000000,
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not checkpoint.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert checkpoint.exists(), "the run wrote a checkpoint"
        time.sleep(1.0)
        ranks = rank_processes(process.pid)
        assert sorted(ranks.values()) == [0, 1], ranks
        killed = time.monotonic()
        os.kill(next(pid for pid, rank in ranks.items() if rank == 1), signal.SIGKILL)
        process.wait(timeout=30)
        ended = time.monotonic() - killed
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = process.stderr.read().decode()
    process.stderr.close()
    assert ended < 10, f"the run took {ended:.1f} s to end after a rank died"
    assert process.returncode != 0
    assert "rank 1" in stderr and "signal 9" in stderr, stderr
    step = train_state(checkpoint)["step"]
    assert step >= 5

    # One process, no mpirun: an update is still two batches (the checkpoint's accumulate 2).
    alone = run("train", *flags, "--resume", checkpoint, "--max-steps", step + 3)
    assert alone.returncode == 0, alone.stderr.decode()
    assert train_state(checkpoint)["step"] == step + 3
    assert train_state(checkpoint)["options"]["accumulate"] == 2
    # Three processes: one of them has no batch in an update, and adds zeros.
    three = mpirun(3, "train", *flags, "--resume", checkpoint, "--max-steps", step + 6)
    assert three.returncode == 0, three.stderr.decode()
    assert train_state(checkpoint)["step"] == step + 6
    # Asking one process for updates of one batch would change the curve: refused.
    changed = run("train", *flags, "--resume", checkpoint, "--accumulate", 1)
    assert changed.returncode != 0
    assert "accumulate" in changed.stderr.decode()


@needs_mpi
def test_a_language_model_over_two_ranks_equals_one_process_accumulating_two(tmp_path):
    # Each rank takes its share of every update's windows of the token stream.
    book = tmp_path / "book.txt"
    rng = random.Random(5)
    book.write_text("".join(" ".join(rng.choice(["in", "the", "beginning", "was", "word"])
                                     for _ in range(8)) + "\n" for _ in range(300)),
                    encoding="utf-8")
    flags = ["train", "--task", "lm", "--train", book, "--no-valid", "--threads", "1",
             *TINY_TRANSFORMER_D32, "--context", 16, "--batch-sequences", 4, "--max-steps", 30,
             "--dropout", "0.1"]
    shared, alone = tmp_path / "shared.safetensors", tmp_path / "alone.safetensors"
    two = mpirun(2, *flags, "--out", shared)
    assert two.returncode == 0, two.stderr.decode()
    one = run(*flags, "--out", alone, "--accumulate", 2)
    assert one.returncode == 0, one.stderr.decode()
    a, b = tensors(shared), tensors(alone)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name


@needs_mpi
def test_a_token_file_over_two_ranks_equals_one_process_and_the_text(tmp_path):
    # Each rank maps the token file attn tokenize wrote and reads its own windows of it: two
    # ranks equal one process accumulating two, and the two-rank run on the text itself.
    book = tmp_path / "book.txt"
    rng = random.Random(7)
    book.write_text("".join(" ".join(rng.choice(["in", "the", "beginning", "was", "word"])
                                     for _ in range(8)) + "\n" for _ in range(300)),
                    encoding="utf-8")
    tokens, tokenizer = tmp_path / "book.bin", tmp_path / "book.tokenizer.json"
    made = run("tokenize", "--input", book, "--out", tokens)
    assert made.returncode == 0, made.stderr.decode()
    flags = ["train", "--task", "lm", "--no-valid", "--threads", "1", *TINY_TRANSFORMER_D32,
             "--context", 16, "--batch-sequences", 4, "--max-steps", 20, "--dropout", "0.1"]
    from_tokens = [*flags, "--train-tokens", tokens, "--tokenizer", tokenizer]
    shared, alone, text = (tmp_path / f"{n}.safetensors" for n in ("shared", "alone", "text"))
    two = mpirun(2, *from_tokens, "--out", shared)
    assert two.returncode == 0, two.stderr.decode()
    one = run(*from_tokens, "--out", alone, "--accumulate", 2)
    assert one.returncode == 0, one.stderr.decode()
    on_text = mpirun(2, *flags, "--train", book, "--out", text)
    assert on_text.returncode == 0, on_text.stderr.decode()
    a, b, c = tensors(shared), tensors(alone), tensors(text)
    assert a.keys() == b.keys() == c.keys()
    for name in a:
        assert a[name].tobytes() == b[name].tobytes() == c[name].tobytes(), name
