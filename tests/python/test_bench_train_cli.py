"""attn bench train: the JSON it prints, the model it times (the same as bench/torch_train.py's),
its FLOP count, and bad flags. Timings themselves are never checked."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_ROOT / "bench"))
import torch_train  # noqa: E402  (bench/ is not a package)

from attn_program import ATTN


def run(*args):
    return subprocess.run([ATTN, "bench", "train", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def matmul_gflop(cfg):
    """Forward FLOPs of every matrix product of nn.Transformer plus the tied projection, times 3
    for forward + backward, counted here from the layer shapes one product at a time."""
    b, s, t = cfg["batch"], cfg["src_len"], cfg["tgt_len"]
    d, f, v = cfg["d_model"], cfg["ffn"], cfg["tgt_vocab"]

    def linear(tokens, fan_in, fan_out):
        return 2 * tokens * fan_in * fan_out

    def attention(queries, keys):  # Q K^T and P V over all heads
        return 2 * (2 * b * queries * keys * d)

    encoder = (3 * linear(b * s, d, d) + attention(s, s) + linear(b * s, d, d)
               + linear(b * s, d, f) + linear(b * s, f, d))
    decoder = (3 * linear(b * t, d, d) + attention(t, t) + linear(b * t, d, d)
               + linear(b * t, d, d) + 2 * linear(b * s, d, d) + attention(t, s)
               + linear(b * t, d, d) + linear(b * t, d, f) + linear(b * t, f, d))
    forward = (cfg["encoder_layers"] * encoder + cfg["decoder_layers"] * decoder
               + linear(b * t, d, v))
    return 3 * forward / 1e9


def test_small_json_describes_the_torch_model_and_its_flops():
    result = run("--config", "small", "--steps", "1", "--threads", "2", "--json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 1
    row = rows[0]
    cfg = torch_train.CONFIGS["small"]
    assert row["config"] == "small"
    assert row["tgt_tokens_per_step"] == cfg["batch"] * cfg["tgt_len"]
    assert row["tgt_tokens_per_s"] > 0
    assert row["tgt_tokens_per_s"] == pytest.approx(
        row["tgt_tokens_per_step"] / row["median_step_s"], rel=1e-3)
    assert row["gflop_per_step"] == pytest.approx(matmul_gflop(cfg), abs=0.01)
    assert row["threads"] == 2 and row["steps"] == 1
    # the arena stops growing after the warm-up, and the loss is a loss over 64 words
    assert row["arena_stable"] is True
    assert 0 < row["final_loss"] < 10
    torch_params = sum(p.numel() for p in torch_train.Seq2SeqTransformer(cfg).parameters())
    # attn's tied generator keeps a bias (tgt_vocab floats) that torch's projection lacks
    assert row["params"] == torch_params + cfg["tgt_vocab"]


def test_classify_times_the_torch_classifiers_shape_in_text_tokens():
    result = run("--config", "classify", "--steps", "1", "--threads", "2", "--json")
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout.splitlines()[0])
    cfg = torch_train.CONFIGS["classify"]
    assert row["config"] == "classify" and row["context"] == cfg["src_len"]
    assert row["tgt_tokens_per_step"] == cfg["batch"] * cfg["src_len"]
    assert row["params"] == sum(p.numel() for p in torch_train.Classifier(cfg).parameters())
    b, s, d, f = cfg["batch"], cfg["src_len"], cfg["d_model"], cfg["ffn"]
    layer = 8 * b * s * d * d + 4 * b * s * s * d + 4 * b * s * d * f
    assert row["gflop_per_step"] == pytest.approx(3 * cfg["encoder_layers"] * layer / 1e9,
                                                  abs=0.01)
    # random classes of 20: the loss starts near ln 20
    assert row["arena_stable"] is True and 2 < row["final_loss"] < 4


def test_bf16_json_names_its_precision_and_keeps_the_arena_stable():
    result = run("--config", "small", "--steps", "1", "--threads", "2", "--json",
                 "--precision", "bf16")
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout.splitlines()[0])
    assert row["precision"] == "bf16"
    assert row["arena_stable"] is True
    assert 0 < row["final_loss"] < 10


def test_default_precision_is_bf16_only_where_native():
    """The default --precision auto: bf16 where the path has native bf16 products, fp32 on a
    path without them (ATTN_ISA=avx2), and the header says which and why."""
    info = subprocess.run([ATTN, "info"], capture_output=True, text=True).stdout
    cases = [({}, "bf16" if "bf16: native" in info else "fp32")]
    if any(line.split() == ["avx2", "supported"] for line in info.splitlines()):
        cases.append(({"ATTN_ISA": "avx2"}, "fp32"))
    for env, expected in cases:
        result = subprocess.run([ATTN, "bench", "train", "--config", "small", "--steps", "1",
                                 "--threads", "2"], capture_output=True, text=True,
                                env=dict(os.environ, **env), timeout=600)
        assert result.returncode == 0, result.stderr
        assert f"precision auto -> {expected} (" in result.stdout, result.stdout


def test_text_output_names_the_config():
    result = run("--config", "small", "--steps", "1", "--threads", "1")
    assert result.returncode == 0, result.stderr
    assert "small:" in result.stdout and "target tokens/s" in result.stdout
    assert "base:" not in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--config", "huge"], "--config expects small, base, both, gpt2 or classify, got 'huge'"),
    (["--steps", "0"], "--steps expects an integer in [1, 1000], got '0'"),
    (["--threads", "x"], "--threads expects an integer"),
    (["--steps"], "--steps needs a value"),
    (["--frobnicate"], "unknown option --frobnicate"),
    (["--precision", "int8"], "--precision expects auto, fp32 or bf16, got 'int8'"),
])
def test_bad_flags_exit_2_with_a_message(args, message):
    result = run(*args)
    assert result.returncode == 2
    assert message in result.stderr


def test_bench_generate_json_counts_the_weights_it_reads():
    """attn bench generate: one JSON row per batch; the weight bytes a token reads are GPT-2
    124M's matrices at the precision's width, and batch 1 relates them to a bandwidth it
    measured (a positive one: 0 would mean the reads were not made)."""
    rows = {}
    for precision in ("fp32", "int8"):
        out = subprocess.run([ATTN, "bench", "generate", "--json", "--batch", "1", "--prompt", "2",
                              "--new-tokens", "2", "--reps", "1", "--precision", precision],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        rows[precision] = json.loads(out.stdout)
    matrices = 12 * (4 * 768 * 768 + 2 * 768 * 3072) + 50257 * 768
    assert rows["fp32"]["weight_bytes_per_token"] == 4 * matrices
    assert matrices < rows["int8"]["weight_bytes_per_token"] < 1.01 * matrices
    for row in rows.values():
        assert row["config"] == "gpt2" and row["batch"] == 1 and row["new_tokens_per_s"] > 0
        assert row["read_bandwidth_gb_s"] > 0
        assert row["bandwidth_share"] == pytest.approx(
            row["weight_gb_s"] / row["read_bandwidth_gb_s"], rel=2e-2)
