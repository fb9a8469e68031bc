"""The command line's messages for what a newcomer gets wrong first: the file and line without
the library's function names, and the fix where the command knows it."""
import subprocess

from attn_program import ATTN


def run(*args):
    return subprocess.run([ATTN, *map(str, args)], capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_a_one_language_file_given_as_train_points_to_train_src(tmp_path):
    text = tmp_path / "english.txt"
    text.write_text("the cat sat\non the mat\n", encoding="utf-8")
    result = run("train", "--train", text, "--out", tmp_path / "m.safetensors")
    err = result.stderr.decode()
    assert result.returncode == 1, err
    assert f"attn train: {text}:1: expected source<TAB>target" in err, err
    assert "attn_corpus" not in err, err
    assert "--train-src FILE --train-tgt FILE" in err and len(err.splitlines()) == 1, err
    ragged = tmp_path / "ragged.tsv"  # a pair file with a bad line is not one language
    ragged.write_text("a\tb\nc\n", encoding="utf-8")
    err = run("train", "--train", ragged, "--out", tmp_path / "m.safetensors").stderr.decode()
    assert f"{ragged}:2: expected source<TAB>target" in err and "--train-src" not in err, err


def test_a_file_that_is_not_a_model_is_called_so(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello world\nsecond line\n", encoding="utf-8")
    for command in (["translate", "--model", text], ["viz", "--model", text, "--text", "a"]):
        result = run(*command)
        err = result.stderr.decode()
        assert result.returncode == 1, err
        assert f"{text} is not a safetensors model file" in err, err
        assert "header length" not in err and "attn_" not in err, err
        assert "'attn train --out' wrote" in err and len(err.splitlines()) == 1, err


def test_a_missing_model_names_the_file_not_the_function(tmp_path):
    missing = tmp_path / "missing.safetensors"
    result = run("translate", "--model", missing)
    err = result.stderr.decode()
    assert result.returncode == 1 and str(missing) in err, err
    assert "attn_" not in err, err
