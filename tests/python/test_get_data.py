"""The cleaning, aligning and splitting steps behind scripts/get-data.sh, on small inline
samples. The real run installs packages and reads the registries, so it stays out of CI."""
import random
import subprocess
import sys
from pathlib import Path

import pytest

_SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(_SCRIPTS / "data"))

import bible  # noqa: E402
import cmudict  # noqa: E402


# ---- bible: reading the mod2imp dump ----------------------------------------------------

IMP_DUMP = """$$$[ Module Heading ]

$$$[ Testament 1 Heading ]
<milestone type="x-importer" n="x"/>
$$$Genesis 0:0
<title level="1" type="main">Genesis</title>
$$$Genesis 1:0
<chapter n="1" osisID="Gen.1" sID="Gen.1"/>
$$$Genesis 1:1
<w lemma="strong:H7225">EN el principio</w> <w lemma="strong:H1254">crió</w>.
$$$I Samuel 3:10
Line one
line two
"""


def test_read_imp_keeps_every_entry_in_order_with_its_lines():
    entries = bible.read_imp(IMP_DUMP.splitlines(keepends=True))
    assert [key for key, _ in entries] == [
        "[ Module Heading ]", "[ Testament 1 Heading ]", "Genesis 0:0", "Genesis 1:0",
        "Genesis 1:1", "I Samuel 3:10"]
    assert entries[-1][1] == "Line one\nline two\n"


def test_parse_key_accepts_verses_only():
    assert bible.parse_key("I Samuel 3:10") == ("I Samuel", 3, 10)
    assert bible.parse_key("Revelation of John 22:21") == ("Revelation of John", 22, 21)
    assert bible.parse_key("Genesis 0:0") is None
    assert bible.parse_key("Genesis 1:0") is None
    assert bible.parse_key("[ Module Heading ]") is None


# ---- bible: markup -----------------------------------------------------------------------

def test_clean_osis_keeps_the_words_of_strongs_tagged_text():
    raw = ('<w lemma="strong:H0430">In</w> <w lemma="strong:H7225">the beginning</w>, '
           '<w lemma="strong:H1254">God</w> created.\n')
    assert bible.clean_osis(raw) == "In the beginning, God created."


def test_clean_osis_drops_footnotes_without_gluing_words_or_detaching_punctuation():
    note = '<note placement="foot"><reference type="annotateRef">1:1 </reference>Hebrew: “x”.</note>'
    assert bible.clean_osis(f"<w>God</w>{note}<w>created</w>") == "God created"
    assert bible.clean_osis(f"two coins</q> {note} <q>?") == "two coins?"
    assert bible.clean_osis(f"penny.</q> {note} <q>”") == "penny.”"
    assert bible.clean_osis(f"said, {note}“Come”") == "said, “Come”"
    cross = '<note type="crossReference"><reference>Gen 1:1</reference></note>'
    assert bible.clean_osis(f"“{cross}Let there be light") == "“Let there be light"


def test_clean_osis_drops_headings_and_speakers_but_keeps_psalm_titles():
    raw = ('<title type="x-heading">Deliverance</title> <speaker>Beloved</speaker> '
           '<title canonical="true" type="psalm">A Psalm by David.</title> <lg sID="a"/>'
           '<l level="1" sID="b"/>Yahweh, hear me!<l eID="b" level="1"/> <l level="2" sID="c"/>'
           'Answer me.<l eID="c" level="2"/>')
    assert bible.clean_osis(raw) == "A Psalm by David. Yahweh, hear me! Answer me."


def test_clean_osis_separates_words_split_only_by_a_structural_tag():
    assert bible.clean_osis('Israel.<l eID="a"/><l sID="b"/>Then') == "Israel. Then"
    assert bible.clean_osis('Israel<lb type="x-p"/>Then') == "Israel Then"


def test_clean_osis_leaves_inline_tags_as_the_module_spells_them():
    # RV1909 has added words (<transChange>) with no space before the next word; the shared
    # copy keeps them so, and so does this one.
    raw = '<w>Y FUÉ</w><transChange type="added">que</transChange><w>á los</w> &amp; más'
    assert bible.clean_osis(raw) == "Y FUÉqueá los & más"


def test_clean_osis_of_markup_only_is_empty():
    assert bible.clean_osis('<chapter n="3" sID="Ps.3"/> <milestone type="x"/>\n') == ""


# ---- bible: RV1909's capitals at chapter starts -------------------------------------------

CASING = {"jehová": "Jehová", "acaeció": "acaeció"}


@pytest.mark.parametrize("before, after", [
    ("EN el principio crió Dios", "En el principio crió Dios"),
    ("Y ACAECIÓ que", "Y acaeció que"),
    ("Y JEHOVÁ dijo", "Y Jehová dijo"),
    ("Y PASABA por allí", "Y pasaba por allí"),
    ("DE SIETE años era Joas", "De SIETE años era Joas"),
    ("Salmo de David. YO DIJE: Atenderé", "Salmo de David. Yo DIJE: Atenderé"),
    ("Salmo de David. ¡OH Jehová", "Salmo de David. ¡Oh Jehová"),
    ("Entonces dijo: AMARTE he", "Entonces dijo: amarte he"),
    ("Y El ángel de Jehová subió", "Y El ángel de Jehová subió"),
])
def test_recase_first_caps_word(before, after):
    assert bible.recase_first_caps_word(before, CASING) == after


def test_usual_casing_takes_the_commonest_spelling_and_ignores_capitals():
    casing = bible.usual_casing(["Y Jehová dijo", "oh Jehová", "jehová", "JEHOVÁ JEHOVÁ JEHOVÁ"])
    assert casing["jehová"] == "Jehová"
    assert casing["dijo"] == "dijo"
    assert bible.usual_casing(["Oh", "oh"])["oh"] == bible.usual_casing(["oh", "Oh"])["oh"]


def test_verse_table_recases_only_first_verses_and_skips_empty_ones():
    entries = [("Genesis 1:1", "<w>EN el</w> principio"), ("Genesis 1:2", "Y DIOS dijo"),
               ("Genesis 1:3", "<milestone/>"), ("Genesis 2:1", "Y FUERON acabados"),
               ("Genesis 2:2", "y fueron")]
    table = bible.verse_table(entries, recase_chapter_start=True)
    assert table == {("Genesis", 1, 1): "En el principio", ("Genesis", 1, 2): "Y DIOS dijo",
                     ("Genesis", 2, 1): "Y fueron acabados", ("Genesis", 2, 2): "y fueron"}
    assert bible.verse_table(entries)[("Genesis", 1, 1)] == "EN el principio"


# ---- bible: alignment ----------------------------------------------------------------------

def _chapter(book, chapter, count, text, skip=()):
    return {(book, chapter, v): text for v in range(1, count + 1) if v not in skip}


def test_misnumbered_chapters():
    spanish = {**_chapter("Num", 12, 15, "x"), **_chapter("Luke", 17, 37, "x"),
               **_chapter("Rom", 16, 27, "x"), **_chapter("Gen", 1, 31, "x")}
    english = {**_chapter("Num", 12, 16, "x"), **_chapter("Luke", 17, 37, "x", skip={36}),
               **_chapter("Rom", 16, 25, "x"), **_chapter("Gen", 1, 31, "x")}
    # Numbers 12:16 only in English, Romans 16 ends on another verse; Luke 17:36 is a verse
    # the English leaves out, not a shift.
    assert bible.misnumbered_chapters(spanish, english) == {("Num", 12), ("Rom", 16)}


def test_robust_z_ignores_a_wild_value():
    z = bible.robust_z([1.0, 2.0, 3.0, 4.0, 1000.0])
    assert z[2] == 0.0
    assert z[1] == pytest.approx(-1 / 1.4826) and z[3] == pytest.approx(1 / 1.4826)
    assert z[4] > 500
    assert bible.robust_z([2.0, 2.0, 2.0, 5.0]) == [0.0, 0.0, 0.0, float("inf")]


def test_align_drops_chapters_out_of_step_and_wild_single_verses():
    rng = random.Random(5)
    spanish, english = {}, {}
    for chapter in range(1, 11):
        for verse in range(1, 21):
            length = rng.randint(40, 200)
            english[("Gen", chapter, verse)] = "w" * length
            spanish[("Gen", chapter, verse)] = "w" * round(length * rng.uniform(0.8, 1.25))
    for verse in (2, 5, 9):                      # a chapter split differently: 3 outliers
        spanish[("Gen", 4, verse)] = "w" * 2000
    spanish[("Gen", 7, 3)] = "w" * 2000          # one stray verse
    del english[("Gen", 8, 5)]                 # a verse the English leaves out
    english[("Gen", 9, 21)] = "w" * 50         # numbered differently
    pairs, dropped_chapters, dropped_verses = bible.align(spanish, english)
    refs = [ref for ref, _, _ in pairs]
    assert dropped_chapters == [("Gen", 4), ("Gen", 9)]
    assert dropped_verses == [("Gen", 7, 3)]
    assert len(pairs) == 8 * 20 - 2
    assert ("Gen", 8, 5) not in refs and ("Gen", 8, 6) in refs
    assert refs == sorted(refs)
    assert all(es == spanish[ref] and en == english[ref] for ref, es, en in pairs)


def test_align_of_disjoint_tables_is_empty():
    assert bible.align({("Gen", 1, 1): "a"}, {("Exo", 1, 1): "b"}) == ([], [], [])


def test_split_by_book_holds_out_whole_books():
    pairs = [((book, 1, 1), "es", "en") for book in ("Genesis", "Ruth", "Esther", "John", "Acts")]
    parts = bible.split_by_book(pairs)
    assert [p[0][0] for p in parts["train"]] == ["Genesis", "Acts"]
    assert [p[0][0] for p in parts["dev"]] == ["Esther"]
    assert [p[0][0] for p in parts["test"]] == ["Ruth", "John"]


def test_bible_main_writes_parallel_files(tmp_path, capsys):
    spanish = "".join(f"$$$Ruth 1:{v}\n<w>Verso</w> {v}.\n$$$Genesis 1:{v}\nVerso {v}.\n" for v in (1, 2))
    english = "".join(f"$$$Ruth 1:{v}\nVerse {v}.\n$$$Genesis 1:{v}\n<w>Verse</w> {v}.\n" for v in (1, 2))
    (tmp_path / "es.imp").write_text(spanish, encoding="utf-8")
    (tmp_path / "en.imp").write_text(english, encoding="utf-8")
    out = tmp_path / "out"
    bible.main(["--es-imp", str(tmp_path / "es.imp"), "--en-imp", str(tmp_path / "en.imp"),
                "--out", str(out)])
    assert (out / "test.ref").read_text() == "Ruth 1:1\nRuth 1:2\n"
    assert (out / "test.es").read_text(encoding="utf-8") == "Verso 1.\nVerso 2.\n"
    assert (out / "train.en").read_text(encoding="utf-8") == "Verse 1.\nVerse 2.\n"
    assert (out / "dev.es").read_text() == ""
    assert "4 verse pairs" in capsys.readouterr().out


# ---- cmudict -------------------------------------------------------------------------------

NPM_INDEX = """/** @type {{ [word: string]: string }} */
export const dictionary = {
  "'bout": "B AW1 T",
  "a": "AH0",
  "a(2)": "EY1",
  "a.m.": "EY2 EH1 M",
  "aalborg": "AO1 L B AO0 R G # place, danish",
  "able-bodied": "EY1 B AH0 L B AA1 D IY0 D",
  "hers": "HH ER1 Z",
  "hers(2)": "HH ER0 Z",
  "zyuganov": "Z Y UW1 G AA0 N AA0 V"
}
"""


def test_read_npm_dictionary_keeps_order_and_alternates():
    pairs = cmudict.read_npm_dictionary(NPM_INDEX)
    assert pairs[0] == ("'bout", "B AW1 T")
    assert pairs[1:3] == [("a", "AH0"), ("a(2)", "EY1")]
    assert len(pairs) == 9
    with pytest.raises(ValueError):
        cmudict.read_npm_dictionary("export default 3")


@pytest.mark.parametrize("key, value, expected", [
    ("a(2)", "EY1", ("a", ["EY1"])),
    ("'Bout", "B AW1 T", ("'bout", ["B", "AW1", "T"])),
    ("aalborg", "AO1 L B AO0 R G # place, danish", ("aalborg", ["AO1", "L", "B", "AO0", "R", "G"])),
    ("a.m.", "EY2 EH1 M", None),
    ("able-bodied", "EY1 B AH0 L", None),
    ("3-d", "TH R IY1 D IY1", None),
    ("'", "AH0", None),
    ("bad", "B AE D", None),          # a vowel without its stress digit
    ("bad", "B AE1 XX", None),        # not an ARPAbet phoneme
    ("bad", "# only a comment", None),
])
def test_parse_entry(key, value, expected):
    assert cmudict.parse_entry(key, value) == expected


def test_strip_stress():
    assert cmudict.strip_stress(["HH", "ER1", "Z", "AA0", "OW2"]) == ["HH", "ER", "Z", "AA", "OW"]


def test_word_part_is_a_stable_90_5_5_split():
    words = [f"w{i}" for i in range(20000)]
    parts = [cmudict.word_part(w) for w in words]
    assert parts == [cmudict.word_part(w) for w in words]
    share = {p: parts.count(p) / len(parts) for p in cmudict.PARTS}
    assert share["train"] == pytest.approx(0.90, abs=0.01)
    assert share["dev"] == pytest.approx(0.05, abs=0.005)
    assert share["test"] == pytest.approx(0.05, abs=0.005)
    assert {cmudict.word_part(w, dev_percent=0, test_percent=100) for w in words[:50]} == {"test"}


def test_build_lexicons_keeps_a_words_pronunciations_together():
    pairs = cmudict.read_npm_dictionary(NPM_INDEX)
    plain, stressed, skipped = cmudict.build_lexicons(pairs)
    assert skipped == 2
    lines = {part: plain[part] for part in cmudict.PARTS}
    where = {line.split("\t")[0]: part for part in cmudict.PARTS for line in lines[part]}
    assert set(where) == {"'bout", "a", "aalborg", "hers", "zyuganov"}
    assert plain[where["a"]].count("a\tAH") == 1 and "a\tEY" in plain[where["a"]]
    # Two stresses of one pronunciation: one line without stress, two with.
    assert [l for l in plain[where["hers"]] if l.startswith("hers\t")] == ["hers\tHH ER Z"]
    assert [l for l in stressed[where["hers"]] if l.startswith("hers\t")] == [
        "hers\tHH ER0 Z", "hers\tHH ER1 Z"]
    for part in cmudict.PARTS:
        assert plain[part] == sorted(plain[part]) and stressed[part] == sorted(stressed[part])


def test_cmudict_main_writes_both_variants_and_the_notice(tmp_path):
    (tmp_path / "index.js").write_text(NPM_INDEX, encoding="utf-8")
    out = tmp_path / "out"
    cmudict.main(["--source", str(tmp_path / "index.js"), "--version", "9.9.9", "--out", str(out)])
    plain = "".join((out / f"{p}.tsv").read_text() for p in cmudict.PARTS)
    stressed = "".join((out / f"{p}.stress.tsv").read_text() for p in cmudict.PARTS)
    assert sorted(plain.splitlines()) == sorted([
        "'bout\tB AW T", "a\tAH", "a\tEY", "aalborg\tAO L B AO R G", "hers\tHH ER Z",
        "zyuganov\tZ Y UW G AA N AA V"])
    assert len(stressed.splitlines()) == 7
    notice = (out / "LICENSE").read_text()
    assert "9.9.9" in notice and "Carnegie Mellon University" in notice


# ---- the script's own argument checks (they fail before any install) -----------------------

@pytest.mark.parametrize("args, code, message", [
    ([], 2, "scripts/get-data.sh [--out DIR] cmudict|bible|wordlang|fortunes"),
    (["nosuchset"], 2, "unknown argument"),
    (["--out", "/nonexistent", "cmudict", "bible"], 1, "one data set at a time"),
])
def test_get_data_rejects_bad_arguments(args, code, message):
    result = subprocess.run(["bash", str(_SCRIPTS / "get-data.sh"), *args],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == code
    assert message in result.stderr
