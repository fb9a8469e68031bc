"""The classification data sets of scripts/get-data.sh (wordlang, fortunes), their scorer and
the fastText recipe, on small fake word lists and fortune files: the real run installs Debian
packages, so it stays out of CI. The fastText recipe runs only where fastText is installed."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
_SCRIPTS = _ROOT / "scripts"
sys.path.insert(0, str(_SCRIPTS / "data"))

import fortunes  # noqa: E402
import labelled  # noqa: E402
import wordlang  # noqa: E402

_TOOLS = _SCRIPTS / "classify-tools.py"


def read_tsv(path):
    return [tuple(line.split("\t")) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def all_parts(folder):
    return {part: read_tsv(Path(folder) / f"{part}.tsv") for part in labelled.PARTS}


# ---- the split ---------------------------------------------------------------------------

def test_split_is_a_stable_80_10_10_split_by_the_text_alone():
    words = [f"w{i}" for i in range(20000)]
    parts = [labelled.part_of(w) for w in words]
    assert parts == [labelled.part_of(w) for w in words]
    share = {p: parts.count(p) / len(parts) for p in labelled.PARTS}
    assert share["train"] == pytest.approx(0.80, abs=0.01)
    assert share["valid"] == pytest.approx(0.10, abs=0.006)
    assert share["test"] == pytest.approx(0.10, abs=0.006)
    # Known values: a change of hash or rule would move every word, and is caught here.
    assert [labelled.part_of(w) for w in ("hund", "chien", "perro", "cane", "dog")] == \
        [labelled.part_of(w) for w in ("hund", "chien", "perro", "cane", "dog")]
    assert labelled.digest("dog").hex() == "cd6357efdd966de8c0cb2f876cc89ec7"


def test_split_does_not_depend_on_the_other_examples_and_mixes_the_classes():
    examples = [("a", f"x{i}") for i in range(300)] + [("b", f"y{i}") for i in range(300)]
    whole = labelled.split(examples)
    half = labelled.split(examples[:300])
    for part in labelled.PARTS:
        assert [l for l in whole[part] if l.startswith("a\t")] == half[part]
    labels = [line.split("\t")[0] for line in whole["train"]]
    # Not one class after the other: the first hundred lines hold both.
    assert set(labels[:100]) == {"a", "b"}
    assert whole == labelled.split(list(reversed(examples)))


def test_read_text_falls_back_to_latin1(tmp_path):
    (tmp_path / "utf8").write_bytes("smörgås\n".encode("utf-8"))
    (tmp_path / "latin1").write_bytes("smörgås\n".encode("latin-1"))
    assert labelled.read_text(tmp_path / "utf8") == ("smörgås\n", "utf-8")
    assert labelled.read_text(tmp_path / "latin1") == ("smörgås\n", "latin-1")


# ---- wordlang ------------------------------------------------------------------------------

@pytest.mark.parametrize("line, word", [
    ("Haus\n", "haus"), ("  chien ", "chien"), ("smo\u0308rga\u030as", "smörgås"),
    ("Straße", "straße"), ("ящур", "ящур"),
    ("cat's", None), ("l'home", None), ("after-shave", None), ("e.g.", None),
    ("r2d2", None), ("a", None), ("", None),
])
def test_clean_word(line, word):
    assert wordlang.clean_word(line) == word


def test_exclusive_words_leaves_out_words_of_two_languages():
    exclusive, shared = wordlang.exclusive_words({
        "en": {"dog", "hand", "pain"}, "fr": {"chien", "main", "pain"},
        "de": {"hund", "hand"}})
    assert exclusive == {"en": {"dog"}, "fr": {"chien", "main"}, "de": {"hund"}}
    assert shared == 2


def test_cap_keeps_a_fixed_sample():
    words = {f"w{i}" for i in range(100)}
    kept = wordlang.cap(words, 10)
    assert len(kept) == 10 and kept <= words
    assert kept == wordlang.cap(set(sorted(words, reverse=True)), 10)
    assert wordlang.cap(words, None) == words and wordlang.cap(words, 1000) == words


def write_lists(folder):
    folder.mkdir()
    (folder / "american").write_text("color\nDog\ndog's\nhand\nPain\nParis\n", encoding="utf-8")
    (folder / "british").write_text("colour\ndog\nhand\nParis\n", encoding="utf-8")
    (folder / "french").write_text("chien\nmain\npain\nparis\nété\n", encoding="utf-8")
    (folder / "german").write_bytes("Hund\nHand\nSchön\nParis\n".encode("latin-1"))
    return [("en", folder / "american"), ("en", folder / "british"), ("fr", folder / "french"),
            ("de", folder / "german")]


def test_wordlang_main_writes_the_split_and_counts(tmp_path, capsys):
    lists = write_lists(tmp_path / "dict")
    out = tmp_path / "out"
    args = [item for label, path in lists for item in ("--list", f"{label}={path}")]
    wordlang.main([*args, "--about", "- fake lists", "--out", str(out)])
    parts = all_parts(out)
    pairs = sorted(pair for lines in parts.values() for pair in lines)
    # American and British English are one class; "pain", "hand" and "paris" are in two
    # languages' lists (after lower-casing) and in no class; "dog's" is filtered out.
    assert pairs == sorted([("en", "color"), ("en", "colour"), ("en", "dog"), ("fr", "chien"),
                            ("fr", "main"), ("fr", "été"), ("de", "hund"), ("de", "schön")])
    for part, lines in parts.items():
        assert all(labelled.part_of(word) == part for _, word in lines)
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert "- fake lists" in readme and "german (latin-1)" in readme
    assert "left out: 3." in readme
    assert "| en | american (utf-8), british (utf-8) | 1 |" in readme
    assert "8 words of 3 languages" in capsys.readouterr().out
    # The same lists give the same files.
    again = tmp_path / "again"
    wordlang.main([*args, "--out", str(again)])
    for part in labelled.PARTS:
        assert (again / f"{part}.tsv").read_bytes() == (out / f"{part}.tsv").read_bytes()


def test_wordlang_max_per_class_caps_each_class(tmp_path):
    (tmp_path / "a").write_text("".join(f"a{chr(97 + i)}{chr(97 + j)}\n" for i in range(26)
                                        for j in range(26)))
    (tmp_path / "b").write_text("".join(f"b{chr(97 + i)}\n" for i in range(26)))
    wordlang.main(["--list", f"x={tmp_path / 'a'}", "--list", f"y={tmp_path / 'b'}",
                   "--max-per-class", "40", "--out", str(tmp_path / "out")])
    labels = [label for lines in all_parts(tmp_path / "out").values() for label, _ in lines]
    assert labels.count("x") == 40 and labels.count("y") == 26


@pytest.mark.parametrize("args", [["--list", "en"], ["--list", "e n=x"], ["--list", "en=x"]])
def test_wordlang_rejects_bad_lists(args, tmp_path):
    with pytest.raises(SystemExit):
        wordlang.main([*args, "--out", str(tmp_path / "out")])


# ---- fortunes ------------------------------------------------------------------------------

def test_flatten_undoes_overstriking_and_whitespace():
    assert fortunes.flatten("_\bb_\bo_\bl_\bd  and\tB\bBright\n\t\t-- Someone\n") == \
        "bold and Bright -- Someone"


def test_quotations_splits_on_percent_lines_and_drops_empty_ones():
    text = "One\nline two\n%\n%\n  \n%\nThree\n%\n"
    assert fortunes.quotations(text) == ["One line two", "Three"]
    assert fortunes.quotations("No separator at the end") == ["No separator at the end"]


def write_fortunes(folder):
    folder.mkdir()
    (folder / "science").write_text(
        "E = mc^2\n%\nThe cosmos is\n\tbig.\n%\nShared quote\n%\nE = mc^2\n%\n", encoding="utf-8")
    (folder / "science.dat").write_bytes(b"\x00\x00\x00\x02binary")
    (folder / "science.u8").symlink_to("science")
    (folder / "love").write_text("Love is blind.\n%\nShared quote\n%\nL\bLove\n", encoding="utf-8")
    (folder / "tiny").write_text("Only one.\n", encoding="utf-8")
    (folder / "off").mkdir()
    (folder / "off" / "rude").write_text("Rude.\n%\nRuder.\n", encoding="utf-8")
    return folder


def test_collection_files_skips_indexes_links_and_subfolders(tmp_path):
    folder = write_fortunes(tmp_path / "fortunes")
    assert [label for label, _ in fortunes.collection_files(folder)] == ["love", "science", "tiny"]


def test_fortunes_main_writes_one_class_per_collection(tmp_path, capsys):
    folder = write_fortunes(tmp_path / "fortunes")
    out = tmp_path / "out"
    fortunes.main(["--dir", str(folder), "--min-per-class", "2", "--out", str(out)])
    pairs = sorted(pair for lines in all_parts(out).values() for pair in lines)
    # The repeated quotation once, the shared one in neither class, "tiny" too small.
    assert pairs == sorted([("science", "E = mc^2"), ("science", "The cosmos is big."),
                            ("love", "Love is blind."), ("love", "Love")])
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert "left out: 1." in readme and "left out: tiny." in readme
    assert "| science | 4 | 3 | 2 |" in readme
    assert "4 quotations of 2 collections" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        fortunes.main(["--dir", str(folder), "--min-per-class", "3", "--out", str(out)])


# ---- the scorer ----------------------------------------------------------------------------

def tools(*args):
    return subprocess.run(["/usr/bin/python3", str(_TOOLS), *args], capture_output=True,
                          text=True, timeout=60)


def test_score_gives_accuracy_and_macro_f1_as_scikit_learn(tmp_path):
    gold = ["a", "a", "a", "b", "b", "c"]
    predicted = ["a", "a", "b", "b", "c", "c"]
    (tmp_path / "gold.tsv").write_text("".join(f"{g}\ttext {i}\n" for i, g in enumerate(gold)))
    # Each of the three prediction formats gives the same labels.
    hyp = ["a\t0.9", "__label__a", "b", "b\t0.5", "__label__c", "c\t1"]
    (tmp_path / "pred").write_text("\n".join(hyp) + "\n")
    result = tools("score", "--ref", str(tmp_path / "gold.tsv"), "--hyp", str(tmp_path / "pred"),
                   "--json", str(tmp_path / "s.json"))
    assert result.returncode == 0, result.stderr
    scores = json.loads((tmp_path / "s.json").read_text())
    assert scores["accuracy"] == pytest.approx(4 / 6)
    # F1: a = 2*1*(2/3)/(5/3) = 0.8, b = 2*(1/2)*(1/2)/1 = 0.5, c = 2*(1/2)*1/(3/2) = 2/3
    assert scores["macro_f1"] == pytest.approx((0.8 + 0.5 + 2 / 3) / 3)
    assert scores["per_class"]["a"]["support"] == 3
    assert "accuracy = 66.67%" in result.stdout


def test_score_counts_a_label_only_predicted_and_refuses_a_length_mismatch(tmp_path):
    (tmp_path / "gold.tsv").write_text("a\tx\na\ty\n")
    (tmp_path / "pred").write_text("a\nz\n")
    result = tools("score", "--ref", str(tmp_path / "gold.tsv"), "--hyp", str(tmp_path / "pred"),
                   "--json", str(tmp_path / "s.json"))
    scores = json.loads((tmp_path / "s.json").read_text())
    assert scores["classes"] == 2 and scores["macro_f1"] == pytest.approx((2 / 3 + 0) / 2)
    (tmp_path / "short").write_text("a\n")
    result = tools("score", "--ref", str(tmp_path / "gold.tsv"), "--hyp", str(tmp_path / "short"))
    assert result.returncode == 1 and "2 gold labels but 1 predictions" in result.stderr


def test_fasttext_conversion_shuffles_by_the_seed_only(tmp_path):
    lines = [f"{'ab'[i % 2]}\tword  {i}\tmore" for i in range(50)]
    (tmp_path / "t.tsv").write_text("\n".join(lines) + "\n")
    runs = []
    for name in ("one", "two"):
        result = tools("fasttext", "--in", str(tmp_path / "t.tsv"), "--out", str(tmp_path / name),
                       "--text", str(tmp_path / f"{name}.text"), "--shuffle", "3")
        assert result.returncode == 0, result.stderr
        runs.append((tmp_path / name).read_text().splitlines())
    assert runs[0] == runs[1]
    assert sorted(runs[0]) == sorted(f"__label__{'ab'[i % 2]} word {i} more" for i in range(50))
    assert runs[0] != sorted(runs[0], key=lambda l: int(l.rsplit(" ", 2)[1]))
    texts = (tmp_path / "one.text").read_text().splitlines()
    assert texts == [line.split(" ", 1)[1] for line in runs[0]]
    tools("fasttext", "--in", str(tmp_path / "t.tsv"), "--out", str(tmp_path / "plain"))
    assert (tmp_path / "plain").read_text().splitlines()[0] == "__label__a word 0 more"


# ---- the recipes ----------------------------------------------------------------------------

def tiny_task(folder):
    """Two easily told apart classes of made-up words."""
    folder.mkdir()
    examples = [("x", "zq" + "".join(chr(97 + (i * 7 + j) % 26) for j in range(4))) for i in range(120)]
    examples += [("y", "ow" + "".join(chr(97 + (i * 5 + j) % 26) for j in range(4))) for i in range(120)]
    parts = labelled.split(examples)
    labelled.write_parts(parts, folder)
    return parts


@pytest.mark.skipif(shutil.which("fasttext") is None, reason="Debian's fasttext is not installed")
def test_fasttext_recipe_tunes_on_valid_and_scores_test(tmp_path):
    parts = tiny_task(tmp_path / "data")
    out = tmp_path / "run"
    result = subprocess.run(
        ["recipes/classify-fasttext.sh", "wordlang", str(tmp_path / "data")], cwd=_ROOT,
        env={**os.environ, "OUT": str(out), "THREADS": "1",
             "GRID": "-minn 1 -maxn 3 -epoch 2 -bucket 1000;-minn 2 -maxn 3 -epoch 20 -lr 0.5 -bucket 1000"},
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    grid = (out / "grid.tsv").read_text().splitlines()
    assert grid[0].split("\t") == ["setting", "valid_accuracy", "valid_macro_f1", "train_seconds"]
    assert len(grid) == 3
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task"] == "wordlang" and summary["settings_tried"] == 2
    assert summary["selected_on"] == "valid accuracy" and summary["threads"] == 1
    best = max(grid[1:], key=lambda line: float(line.split("\t")[1]))
    assert summary["best_setting"] == best.split("\t")[0]
    assert summary["test_lines"] == len(parts["test"])
    assert 0 <= summary["test_macro_f1"] <= 1 and 0 <= summary["test_accuracy"] <= 1
    assert summary["predict_lines_per_second"] > 0
    assert len((out / "test.pred").read_text().splitlines()) == len(parts["test"])
    assert (out / "model.bin").stat().st_size > 0
    assert "Test (" in (out / "summary.md").read_text()
    assert not list(out.glob("work.*")), "the recipe leaves its work folder behind"


def test_fasttext_recipe_rejects_an_unknown_task(tmp_path):
    result = subprocess.run(["recipes/classify-fasttext.sh", "sentiment", str(tmp_path)], cwd=_ROOT,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "wordlang or fortunes" in result.stderr


def test_attn_recipe_skips_or_runs_by_what_attn_train_offers(tmp_path):
    library = os.environ.get("ATTN_LIBRARY")
    build = Path(library).parent if library else _ROOT / "build"
    if not (build / "attn").exists():
        pytest.skip(f"no attn program in {build}")
    tiny_task(tmp_path / "data")
    out = tmp_path / "run"
    result = subprocess.run(["recipes/classify.sh", "wordlang", str(tmp_path / "data")], cwd=_ROOT,
                            env={**os.environ, "OUT": str(out), "BUILD": str(build),
                                 "THREADS": "1", "TIME_LIMIT": "2"},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    help_text = subprocess.run([str(build / "attn"), "train", "--help"], capture_output=True,
                               text=True, timeout=30)
    if "classify" not in help_text.stdout + help_text.stderr:
        assert "skipped" in result.stdout and not out.exists()
        return
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task"] == "wordlang" and summary["time_limit"] == 2
    assert 0 <= summary["test_accuracy"] <= 1 and summary["classify_lines_per_second"] > 0
    assert "--task classify" in (out / "command.txt").read_text()
