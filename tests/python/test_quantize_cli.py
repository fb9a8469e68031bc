"""attn quantize and inference in bf16 and int8 (attn translate --precision, attn viz, Python's
attn.Bundle) on a small Transformer trained here for a few seconds: the files are smaller,
load everywhere, translate (nearly) as the fp32 model does, and refuse what they cannot do."""
import json
import os
import random
import subprocess

import pytest

from attn_program import ATTN


def run(*args, stdin=None, timeout=300, env=None):
    return subprocess.run([ATTN, *map(str, args)], input=stdin, capture_output=True,
                          timeout=timeout, env=env)


def words(rng, n, alphabet="abcdefgh", lo=2, hi=6):
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


def header(path):
    data = path.read_bytes()
    return json.loads(data[8:8 + int.from_bytes(data[:8], "little")])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A reverse-the-word Transformer (fp32) and its bf16 and int8 files."""
    folder = tmp_path_factory.mktemp("quantize")
    rng = random.Random(5)
    train = folder / "train.tsv"
    train.write_text("".join(f"{w}\t{w[::-1]}\n" for w in words(rng, 3000)), encoding="utf-8")
    fp32 = folder / "fp32.safetensors"
    result = run("train", "--train", train, "--out", fp32, "--layers", "2",
                 "--d-model", "64", "--heads", "4", "--ffn", "128", "--dropout", "0",
                 "--label-smoothing", "0", "--lr", "3e-3", "--warmup", "30", "--max-steps", "300",
                 "--batch-tokens", "800", "--schedule", "inverse-sqrt", "--no-valid",
                 "--threads", "2", timeout=600)
    assert result.returncode == 0, result.stderr.decode()
    files = {"fp32": fp32, "train": train}
    for precision in ("bf16", "int8"):
        files[precision] = folder / f"{precision}.safetensors"
        result = run("quantize", "--model", fp32, "--out", files[precision],
                     "--precision", precision)
        assert result.returncode == 0, result.stderr.decode()
        assert precision in result.stdout.decode()
    return files


HELD_OUT = words(random.Random(99), 60)


def translate(model, *options, env=None):
    result = run("translate", "--model", model, *options,
                 stdin="".join(w + "\n" for w in HELD_OUT).encode(), env=env)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().splitlines(), result.stderr.decode()


def token_agreement(a, b):
    """Share of positions (over the longer of each pair) where two outputs have the same
    token."""
    same = total = 0
    for x, y in zip(a, b):
        x, y = x.split(), y.split()
        total += max(len(x), len(y))
        same += sum(p == q for p, q in zip(x, y))
    return same / total


def test_files_are_smaller_and_say_their_precision(models):
    fp32 = models["fp32"].stat().st_size
    assert models["int8"].stat().st_size <= 0.30 * fp32
    assert models["bf16"].stat().st_size <= 0.55 * fp32
    int8 = header(models["int8"])
    assert int8["__metadata__"]["attn_precision"] == "int8"
    weight = "decoder.layers.0.linear1.weight"
    assert int8[weight]["dtype"] == "I8"
    assert int8[weight + ".scale"]["dtype"] == "F32"
    assert int8[weight + ".scale"]["shape"] == [int8[weight]["shape"][0]]
    assert int8["decoder.layers.0.linear1.bias"]["dtype"] == "F32"
    assert "attn_src_tokenizer" in int8["__metadata__"]
    bf16 = header(models["bf16"])
    assert bf16["__metadata__"]["attn_precision"] == "bf16"
    assert bf16[weight]["dtype"] == "BF16"
    assert "attn_precision" not in header(models["fp32"])["__metadata__"]


def test_quantized_models_translate_nearly_as_fp32(models):
    reference, _ = translate(models["fp32"], "--precision", "fp32")
    assert sum(w[::-1] == t.replace(" ", "") for w, t in zip(HELD_OUT, reference)) >= 30
    for precision, least in (("bf16", 0.97), ("int8", 0.9)):
        outputs, _ = translate(models[precision])
        assert len(outputs) == len(HELD_OUT)
        agreement = token_agreement(reference, outputs)
        print(f"{precision}: token agreement with fp32 {agreement:.3f}")
        assert agreement >= least, (precision, agreement)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_quantizing_at_load_equals_the_quantized_file(models, precision):
    at_load, _ = translate(models["fp32"], "--precision", precision)
    from_file, _ = translate(models[precision])
    same_file, _ = translate(models[precision], "--precision", precision)
    assert at_load == from_file == same_file


def test_emulation_gives_a_notice_and_the_same_int8_products(models):
    env = {**os.environ, "ATTN_ISA": "avx2"}
    emulated, notice = translate(models["int8"], env=env)
    assert "emulated" in notice and len(notice.strip().splitlines()) == 1
    assert token_agreement(emulated, translate(models["int8"])[0]) >= 0.97


def test_auto_runs_fp32_models_in_bf16_only_where_native(models):
    """Issue 33: the default --precision auto translates an fp32 model as --precision bf16 does
    where bf16 is native and as fp32 elsewhere (ATTN_ISA=avx2), with no warning, and keeps a
    quantized file's own precision."""
    stdin = "".join(w + "\n" for w in HELD_OUT).encode()
    for isa in (None, "avx2"):
        env = {**os.environ, **({"ATTN_ISA": isa} if isa else {})}
        info = run("info", env=env)
        if info.returncode != 0:
            continue  # no avx2 path to force on this CPU
        expected = "bf16" if "bf16: native" in info.stdout.decode() else "fp32"
        assert isa is None or expected == "fp32"
        default, notice = translate(models["fp32"], env=env)
        assert default == translate(models["fp32"], "--precision", expected, env=env)[0]
        assert notice == "", notice
        assert translate(models["int8"], env=env)[0] == translate(
            models["int8"], "--precision", "auto", env=env)[0]
        kept = run("translate", "--model", models["bf16"], "--precision", "auto", stdin=stdin,
                   env=env)
        assert kept.returncode == 0, kept.stderr.decode()


def test_emulated_bf16_warns_once_for_a_whole_ensemble(models):
    env = {**os.environ, "ATTN_ISA": "avx2"}
    if "bf16: native" in run("info", env=env).stdout.decode():
        pytest.skip("no path without bf16 to force")
    _, notice = translate(f"{models['fp32']},{models['fp32']}", "--precision", "bf16", env=env)
    assert notice.count("warning: bf16 runs emulated here") == 1, notice


def test_a_quantized_file_refuses_a_higher_precision(models):
    for precision, higher in (("int8", "fp32"), ("int8", "bf16"), ("bf16", "fp32")):
        result = run("translate", "--model", models[precision], "--precision", higher,
                     stdin=b"abc\n")
        assert result.returncode != 0
        message = result.stderr.decode()
        assert precision in message and "fp32 model file" in message, message
    result = run("translate", "--model", models["fp32"], "--precision", "fp16", stdin=b"abc\n")
    assert result.returncode != 0 and "auto, fp32, bf16 or int8" in result.stderr.decode()
    for precision in ("fp32", "auto"):
        result = run("quantize", "--model", models["fp32"], "--out", models["fp32"].parent / "x",
                     "--precision", precision)
        assert result.returncode == 2 and "bf16 or int8" in result.stderr.decode()


def test_training_refuses_a_quantized_file(models, tmp_path):
    result = run("train", "--resume", models["int8"], "--train", models["train"],
                 "--out", tmp_path / "again.safetensors", "--max-steps", "5", "--no-valid")
    assert result.returncode != 0
    message = result.stderr.decode()
    assert "int8" in message, message


def test_viz_and_python_load_quantized_files(models, tmp_path):
    from attn import Bundle
    word = HELD_OUT[0]
    cli, _ = translate(models["int8"])
    with Bundle(str(models["int8"])) as bundle:
        assert bundle.translate(HELD_OUT[:5])[:5] == cli[:5]
    shown = run("viz", "--model", models["int8"], "--text", word)
    assert shown.returncode == 0, shown.stderr.decode()
    assert f"{word} → {cli[0]}" in shown.stdout.decode()


def test_ensembles_run_every_model_at_the_precision(models):
    alone, _ = translate(models["int8"])
    assert translate(f"{models['int8']},{models['int8']}")[0] == alone
    assert translate(f"{models['fp32']},{models['fp32']}", "--precision", "int8")[0] == alone


def test_averaging_refuses_quantized_files(models, tmp_path):
    result = run("average", "--out", tmp_path / "mean.safetensors", models["fp32"], models["int8"])
    assert result.returncode != 0
    message = result.stderr.decode()
    assert "int8" in message and "attn quantize" in message, message


@pytest.fixture(scope="module")
def rnn_models(models, tmp_path_factory):
    """Two small reverse-the-word RNN models (fp32) on the Transformer's data: a GRU with
    Bahdanau attention and an LSTM with Luong's general attention and input feeding."""
    folder = tmp_path_factory.mktemp("quantize_rnn")
    files = {}
    for name, flags in (("gru-bahdanau", ["--cell", "gru", "--attention", "bahdanau"]),
                        ("lstm-luong", ["--cell", "lstm", "--attention", "luong-general",
                                        "--input-feeding"])):
        files[name] = folder / f"{name}.safetensors"
        result = run("train", "--train", models["train"], "--out", files[name], "--arch", "rnn",
                     *flags, "--hidden", "64", "--embedding-dim", "32", "--attention-dim", "32",
                     "--dropout", "0", "--label-smoothing", "0", "--lr", "1e-2", "--warmup", "20",
                     "--max-steps", "250", "--batch-tokens", "800", "--schedule", "inverse-sqrt",
                     "--no-valid", "--threads", "2", timeout=600)
        assert result.returncode == 0, result.stderr.decode()
    return files


@pytest.mark.parametrize("beam", [1, 5])
def test_rnn_models_translate_nearly_as_fp32(rnn_models, beam):
    """RNN models multiply the stored bf16 or int8 matrices (their cells, linear layers and
    output layer): greedy and beam outputs stay those of fp32 on nearly every token, and the
    quantized file translates as quantizing at load does."""
    for name, model in rnn_models.items():
        reference, _ = translate(model, "--beam", beam)
        assert sum(w[::-1] == t.replace(" ", "") for w, t in zip(HELD_OUT, reference)) >= 30, name
        for precision, least in (("bf16", 0.97), ("int8", 0.9)):
            outputs, _ = translate(model, "--beam", beam, "--precision", precision)
            agreement = token_agreement(reference, outputs)
            print(f"{name} beam {beam} {precision}: token agreement with fp32 {agreement:.3f}")
            assert agreement >= least, (name, beam, precision, agreement)
            stored = model.parent / f"{name}.{precision}.safetensors"
            if not stored.exists():
                result = run("quantize", "--model", model, "--out", stored,
                             "--precision", precision)
                assert result.returncode == 0, result.stderr.decode()
            assert translate(stored, "--beam", beam)[0] == outputs, (name, precision)
