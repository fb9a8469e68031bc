"""The CMUdict sample committed under data/cmudict-sample/ (what `make demo` trains on) is
well-formed, carries its licence, and is what scripts/data/cmudict_sample.py draws."""
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
_SAMPLE = _ROOT / "data" / "cmudict-sample"
sys.path.insert(0, str(_ROOT / "scripts" / "data"))

import cmudict  # noqa: E402
import cmudict_sample  # noqa: E402

PHONEMES = cmudict.VOWELS | cmudict.CONSONANTS
LETTERS = set("abcdefghijklmnopqrstuvwxyz'")


def read_part(part):
    return (_SAMPLE / f"{part}.tsv").read_text(encoding="utf-8")


@pytest.mark.parametrize("part", cmudict_sample.PARTS)
def test_every_line_is_a_word_a_tab_and_known_phonemes(part):
    text = read_part(part)
    assert text.endswith("\n") and "\r" not in text
    lines = text.splitlines()
    assert len(lines) >= 100
    for line in lines:
        fields = line.split("\t")
        assert len(fields) == 2, f"{part}.tsv: not word<TAB>phonemes: {line!r}"
        word, pronunciation = fields
        assert word and set(word) <= LETTERS and any(c.isalpha() for c in word), line
        phonemes = pronunciation.split(" ")
        assert phonemes and all(p in PHONEMES for p in phonemes), \
            f"{part}.tsv: unknown phoneme or stray space in {line!r}"
    assert lines == sorted(set(lines)), f"{part}.tsv: lines not sorted or repeated"


def test_no_word_is_in_two_parts():
    words = {part: {line.split("\t")[0] for line in read_part(part).splitlines()}
             for part in cmudict_sample.PARTS}
    assert not words["train"] & words["dev"]
    assert not words["train"] & words["test"]
    assert not words["dev"] & words["test"]
    assert len(words["train"]) >= 10 * len(words["test"])


def test_the_sample_is_small_and_carries_the_cmudict_notice():
    size = sum(path.stat().st_size for path in _SAMPLE.iterdir())
    assert size < 150_000
    licence = (_SAMPLE / "LICENSE").read_text(encoding="utf-8")
    assert "Carnegie Mellon University" in licence
    assert cmudict.CMUDICT_NOTICE in licence
    assert "make-demo-data.sh" in (_SAMPLE / "README.md").read_text(encoding="utf-8")


def test_the_readme_counts_match_the_files():
    readme = (_SAMPLE / "README.md").read_text(encoding="utf-8")
    for part in cmudict_sample.PARTS:
        lines = read_part(part).splitlines()
        words = len({line.split("\t")[0] for line in lines})
        assert f"| `{part}.tsv` | {words:,} | {len(lines):,} |" in readme


def make_source(folder, words_per_part):
    """A fake get-data output: several pronunciations for some words, unsorted lines."""
    folder.mkdir()
    for part, words in words_per_part.items():
        lines = []
        for index, word in enumerate(words):
            lines.append(f"{word}\tK AE T")
            if index % 3 == 0:
                lines.append(f"{word}\tK AA T")
        (folder / f"{part}.tsv").write_text("".join(f"{line}\n" for line in reversed(lines)))
    (folder / "LICENSE").write_text(
        "Derived from the CMU Pronouncing Dictionary (npm package x 9.9) by scripts/get-data.sh.\n"
        "\nnotice\n")


def test_the_drawing_is_deterministic_keeps_whole_words_and_the_parts(tmp_path):
    words = {part: [f"{part}word{chr(97 + i % 26)}{i}" for i in range(60)]
             for part in cmudict_sample.PARTS}
    make_source(tmp_path / "full", words)
    argv = ["--source", str(tmp_path / "full"), "--train-words", "20", "--dev-words", "5",
            "--test-words", "7"]
    cmudict_sample.main(argv + ["--out", str(tmp_path / "one")])
    cmudict_sample.main(argv + ["--out", str(tmp_path / "two")])
    for name in ("train.tsv", "dev.tsv", "test.tsv", "LICENSE", "README.md"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    full = {part: cmudict_sample.read_lexicon(tmp_path / "full" / f"{part}.tsv")
            for part in cmudict_sample.PARTS}
    for part, count in (("train", 20), ("dev", 5), ("test", 7)):
        sample = cmudict_sample.read_lexicon(tmp_path / "one" / f"{part}.tsv")
        assert len(sample) == count
        for word, lines in sample.items():
            assert sorted(lines) == sorted(full[part][word]), "a word lost a pronunciation"
    assert "npm package x 9.9" in (tmp_path / "one" / "README.md").read_text()
    assert (tmp_path / "one" / "LICENSE").read_text().endswith("\nnotice\n")


def test_asking_for_more_words_than_a_part_has_fails(tmp_path):
    make_source(tmp_path / "full", {part: ["aa", "bb"] for part in cmudict_sample.PARTS})
    with pytest.raises(SystemExit):
        cmudict_sample.main(["--source", str(tmp_path / "full"), "--out", str(tmp_path / "o"),
                             "--train-words", "3"])
