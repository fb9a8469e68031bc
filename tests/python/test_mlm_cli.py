"""attn train --task mlm (BERT's masked language model on plain text) and the transfer to a
classifier (attn train --task classify --init): the masked-token loss falls on a text a model can
learn, resume continues the run to the bit, attn eval --metric perplexity scores the masked
tokens with a fixed seed, --init carries the encoder over bit for bit with the pretrained model's
tokenizer, --freeze-encoder keeps it so while the head learns, and a bad --init is refused with
the problem and its fix."""
import json
import random
import struct
import subprocess

import numpy as np
import pytest

from attn_program import ATTN, TINY_TRANSFORMER_D32

TINY = [*TINY_TRANSFORMER_D32, "--threads", "2", "--dropout", "0"]
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehavior")


def run(*args, timeout=240):
    return subprocess.run([ATTN, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def refused(*args):
    r = run(*args)
    for mark in SANITIZER_MARKS:
        assert mark not in r.stderr, r.stderr
    assert r.returncode != 0 and r.stderr.strip(), (r.returncode, r.stderr)
    return r


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


def text_line(rng):
    # A letter repeated: every masked letter can be told from the others, so the masked-token
    # loss can fall far below a guess over the letters (ln 10).
    return rng.choice("abcdefghij") * rng.randint(4, 10)


def losses(log):
    return [json.loads(l)["train_loss"] for l in log.read_text().splitlines()
            if '"event":"step"' in l]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mlm")
    rng = random.Random(1)
    (folder / "text.txt").write_text("".join(text_line(rng) + "\n" for _ in range(2000)))
    (folder / "held.txt").write_text("".join(text_line(rng) + "\n" for _ in range(300)))
    out, log = folder / "enc.safetensors", folder / "log.jsonl"
    r = run("train", "--task", "mlm", "--train", folder / "text.txt", "--valid",
            folder / "held.txt", "--out", out, *TINY, "--max-steps", 150, "--eval-every", 50,
            "--log", log)
    assert r.returncode == 0, r.stderr
    return folder, out, log, r.stderr


def test_masked_token_loss_falls(encoder):
    folder, out, log, stderr = encoder
    assert "15% of the tokens chosen for the masked-token loss" in stderr
    assert "valid masked-token loss" in stderr
    steps = losses(log)
    assert len(steps) == 150
    first, last = np.mean(steps[:10]), np.mean(steps[-10:])
    # From a guess over the vocabulary to far below a guess over the ten letters.
    assert first > 1.5 and last < 0.5 * first and last < np.log(10) / 2, (first, last)
    _, metadata = tensors(out)
    assert json.loads(metadata["attn_config"])["arch"] == "transformer_mlm"
    assert "attn_src_tokenizer" in metadata


def test_resume_continues_the_run_exactly(encoder, tmp_path):
    folder = encoder[0]

    def train(out, log, *extra):
        return run("train", "--task", "mlm", "--train", folder / "text.txt", "--valid",
                   folder / "held.txt", "--out", out, "--log", log, "--schedule",
                   "inverse-sqrt", "--warmup", 10, "--eval-every", 10, *extra)

    out, log = tmp_path / "enc.safetensors", tmp_path / "log.jsonl"
    assert train(out, log, *TINY, "--max-steps", 10).returncode == 0
    r = train(out, log, "--resume", tmp_path / "enc.last.safetensors", "--max-steps", 20,
              "--threads", 2)
    assert r.returncode == 0 and "resuming at step 10" in r.stderr, r.stderr
    whole_log = tmp_path / "whole.jsonl"
    assert train(tmp_path / "whole.safetensors", whole_log, *TINY, "--max-steps", 20).returncode == 0
    assert len(losses(log)) == 20 and losses(log) == losses(whole_log)


def test_eval_scores_masked_tokens_with_a_fixed_seed(encoder):
    folder, out, _, _ = encoder
    r = run("eval", "--metric", "perplexity", "--model", out, "--ref", folder / "held.txt")
    assert r.returncode == 0, r.stderr
    assert "seed 1" in r.stdout and "masked-token cross-entropy" in r.stdout
    masked, tokens = map(int, r.stdout.split("masked language model: ")[1].split()[0:3:2])
    assert abs(masked / tokens - 0.15) < 0.03, r.stdout
    perplexity = float(r.stdout.split("perplexity = ")[1].split()[0])
    assert 1.0 <= perplexity < 3.0, r.stdout
    again = run("eval", "--metric", "perplexity", "--model", out, "--ref", folder / "held.txt")
    assert again.stdout == r.stdout


def labelled(folder, rng, n):
    lines = [text_line(rng) for _ in range(n)]
    path = folder / f"labelled{n}.tsv"
    path.write_text("".join(f"{'early' if l[0] < 'f' else 'late'}\t{l}\n" for l in lines))
    return path


def fine_tune(folder, out, init, *extra):
    return run("train", "--task", "classify", "--init", init, "--train",
               labelled(folder, random.Random(3), 200), "--no-valid", "--out", out,
               "--threads", 2, "--dropout", 0, *extra)


def test_freeze_keeps_the_encoder_to_the_bit_and_trains_the_head(encoder, tmp_path):
    folder, enc, _, _ = encoder
    pretrained, enc_metadata = tensors(enc)
    early, late = tmp_path / "early.safetensors", tmp_path / "late.safetensors"
    r = fine_tune(tmp_path, early, enc, "--freeze-encoder", "--max-steps", 1)
    assert r.returncode == 0, r.stderr
    assert "--freeze-encoder: only the new head learns" in r.stderr
    r = fine_tune(tmp_path, late, enc, "--freeze-encoder", "--max-steps", 30)
    assert r.returncode == 0, r.stderr
    after_one, metadata = tensors(early)
    after_many, _ = tensors(late)
    # The classifier reads text with the encoder's tokenizer.
    assert metadata["attn_src_tokenizer"] == enc_metadata["attn_src_tokenizer"]
    encoder_names = [name for name in pretrained if not name.startswith("generator.")]
    assert "embed.weight" in encoder_names and "encoder.layers.0.linear1.weight" in encoder_names
    for name in encoder_names:
        assert np.array_equal(after_many[name].view(np.uint32), pretrained[name].view(np.uint32)), name
    head = [name for name in after_many if name not in pretrained]
    assert "classifier.weight" in head
    assert not np.array_equal(after_one["classifier.weight"], after_many["classifier.weight"])
    config = json.loads(metadata["attn_config"])
    assert config["arch"] == "transformer_classifier" and config["d_model"] == 32


def test_without_freeze_the_encoder_learns_on(encoder, tmp_path):
    _, enc, _, _ = encoder
    pretrained, _ = tensors(enc)
    out = tmp_path / "clf.safetensors"
    r = fine_tune(tmp_path, out, enc, "--max-steps", 30, "--pooling", "cls")
    assert r.returncode == 0, r.stderr
    tuned, _ = tensors(out)
    assert not np.array_equal(tuned["embed.weight"], pretrained["embed.weight"])


def test_a_bad_init_is_refused_with_the_fix(encoder, tmp_path):
    folder, enc, _, _ = encoder
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("abc\tcba\nbca\tacb\n" * 20)
    translator = tmp_path / "t.safetensors"
    r = run("train", "--train", pairs, "--out", translator, *TINY, "--max-steps", 1, "--no-valid")
    assert r.returncode == 0, r.stderr
    r = refused("train", "--task", "classify", "--init", translator, "--train",
                labelled(tmp_path, random.Random(4), 50), "--out", tmp_path / "x.safetensors",
                "--max-steps", 1)
    assert r.returncode == 2
    assert "a translation model (arch transformer)" in r.stderr
    assert "attn train --task mlm" in r.stderr
    r = refused("train", "--task", "classify", "--init", enc, "--d-model", 64, "--train",
                labelled(tmp_path, random.Random(4), 50), "--out", tmp_path / "x.safetensors",
                "--max-steps", 1)
    assert r.returncode == 2 and "--d-model 64 disagrees" in r.stderr and "has 32" in r.stderr
    r = refused("train", "--task", "classify", "--init", enc, "--src-tokens", "word", "--train",
                labelled(tmp_path, random.Random(4), 50), "--out", tmp_path / "x.safetensors",
                "--max-steps", 1)
    assert r.returncode == 2 and "tokenizer" in r.stderr
    r = refused("train", "--task", "classify", "--freeze-encoder", "--train",
                labelled(tmp_path, random.Random(4), 50), "--out", tmp_path / "x.safetensors",
                "--max-steps", 1)
    assert r.returncode == 2 and "--init" in r.stderr
    r = refused("train", "--task", "mlm", "--init", enc, "--train", folder / "text.txt",
                "--out", tmp_path / "x.safetensors", "--max-steps", 1)
    assert r.returncode == 2
    r = refused("train", "--task", "classify", "--init", tmp_path / "missing.safetensors",
                "--train", labelled(tmp_path, random.Random(4), 50), "--out",
                tmp_path / "x.safetensors", "--max-steps", 1)
    assert "missing.safetensors" in r.stderr
    empty = tmp_path / "empty_line.txt"
    empty.write_text("abc\n\nabc\n")
    r = refused("train", "--task", "mlm", "--train", empty, "--out", tmp_path / "x.safetensors",
                "--max-steps", 1)
    assert "empty_line.txt:2" in r.stderr
