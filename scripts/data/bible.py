"""Build the Spanish-English verse-aligned corpus from two SWORD module dumps (mod2imp output):
Reina-Valera 1909 and the World English Bible.

Steps: strip the OSIS markup (keeping the verse text and canonical psalm titles), join the two
texts on their verse reference, drop chapters whose verses do not correspond, drop single
verses whose length ratio is far from the rest, and hold out whole books for dev and test.
Standard library only, so it runs on a bare Debian python3."""
import argparse
import html
import math
import re
import statistics
import sys
from pathlib import Path

TEST_BOOKS = ("Ruth", "John", "Philemon", "Jude")
DEV_BOOKS = ("Esther", "Lamentations", "Romans", "Philippians", "Titus", "James")

_KEY = re.compile(r"(.+) (\d+):(\d+)")
# Footnotes, cross-references, speaker labels and editorial headings are not part of the
# translated verse; a canonical psalm title is, and RV1909 keeps it inside verse 1 too.
_NOTE = re.compile(r"<note\b[^>]*>.*?</note>", re.S)
_SPEAKER = re.compile(r"<speaker\b[^>]*>.*?</speaker>", re.S)
_PSALM_TITLE = re.compile(r'<title\b[^>]*canonical="true"[^>]*>(.*?)</title>', re.S)
_OTHER_TITLE = re.compile(r"<title\b[^>]*>.*?</title>", re.S)
# Self-closing tags mark structure (paragraphs, poetry lines, milestones) and may stand
# between two words; paired inline tags (<w>, <q>, <transChange>) wrap part of a word run.
_EMPTY_TAG = re.compile(r"<[^>]*/>")
_ANY_TAG = re.compile(r"<[^>]*>")
_GAP = "\x00"
_OPENING = "“‘([¡¿«"
_CLOSING = ".,;:!?)]”’»"


def read_imp(lines):
    """(key, raw OSIS text) for each entry of a mod2imp dump, in module order."""
    entries = []
    key, body = None, []
    for line in lines:
        if line.startswith("$$$"):
            if key is not None:
                entries.append((key, "".join(body)))
            key, body = line[3:].rstrip("\n"), []
        elif key is not None:
            body.append(line)
    if key is not None:
        entries.append((key, "".join(body)))
    return entries


def parse_key(key):
    """(book, chapter, verse) for a verse key like "I Samuel 3:10"; None for module, book and
    chapter headings (chapter or verse 0) and anything else that is not a verse."""
    match = _KEY.fullmatch(key)
    if not match:
        return None
    chapter, verse = int(match.group(2)), int(match.group(3))
    if chapter == 0 or verse == 0:
        return None
    return match.group(1), chapter, verse


def _close_gap(match):
    """A removed note or structural tag, with the spaces around it, separates two words but
    never a word from its punctuation: "God<note/>created" -> "God created",
    "coins <note/> ?" -> "coins?"."""
    text, start, end = match.string, match.start(), match.end()
    if start == 0 or end == len(text):
        return ""
    if text[start - 1] in _OPENING or text[end] in _CLOSING:
        return ""
    return " "


def clean_osis(raw):
    """Plain verse text from one entry's OSIS markup."""
    text = _NOTE.sub(_GAP, raw)
    text = _SPEAKER.sub(_GAP, text)
    text = _PSALM_TITLE.sub(r"\1 ", text)
    text = _OTHER_TITLE.sub(_GAP, text)
    text = _EMPTY_TAG.sub(_GAP, text)
    text = _ANY_TAG.sub("", text)
    text = re.sub(r"\s*" + _GAP + r"[\s" + _GAP + "]*", _close_gap, text)
    text = html.unescape(text)
    return " ".join(text.split())


_CAPS_WORD = re.compile(r"\b([^\W\d_])([^\W\d_]+)\b")


_SENTENCE_START = re.compile(r"(^|[.!?])[\s“‘(¡¿«]*$")


def usual_casing(texts):
    """For each word (lower-cased), the spelling it has most often in `texts`, not counting
    all-capital spellings: "jehová" -> "Jehová", "acaeció" -> "acaeció"."""
    counts = {}
    for text in texts:
        for match in _CAPS_WORD.finditer(text):
            word = match.group(0)
            if not word.isupper():
                forms = counts.setdefault(word.lower(), {})
                forms[word] = forms.get(word, 0) + 1
    return {key: max(sorted(forms), key=forms.get) for key, forms in counts.items()}


def recase_first_caps_word(text, casing):
    """RV1909 prints the first word of each chapter in capitals ("EN el principio", "Y
    ACAECIÓ", "Y JEHOVÁ"); write it as an ordinary word: capitalised where a sentence starts,
    elsewhere spelled as the word usually is (`casing`, from usual_casing), lower case if the
    text has it nowhere else. Only the first all-capital word of two or more letters changes:
    later capitals (JAH, DE SIETE años, an inscription) are the translators' own."""
    for match in _CAPS_WORD.finditer(text):
        word = match.group(0)
        if word.isupper():
            if _SENTENCE_START.search(text[:match.start()]):
                recased = word[0] + word[1:].lower()
            else:
                recased = casing.get(word.lower(), word.lower())
            return text[:match.start()] + recased + text[match.end():]
    return text


def verse_table(entries, recase_chapter_start=False):
    """{(book, chapter, verse): clean text} for the non-empty verses of a dump, in module
    order. With recase_chapter_start, the capitals RV1909 puts on each chapter's first word
    are undone (see recase_first_caps_word)."""
    verses = {}
    for key, raw in entries:
        ref = parse_key(key)
        if ref is not None:
            text = clean_osis(raw)
            if text:
                verses[ref] = text
    if recase_chapter_start:
        casing = usual_casing(verses.values())
        for ref, text in verses.items():
            if ref[2] == 1:
                verses[ref] = recase_first_caps_word(text, casing)
    return verses


def misnumbered_chapters(spanish, english):
    """Chapters whose verse numbers do not correspond between the two texts. RV1909 follows
    the Hebrew numbering in places (Numbers 12:16 is its 13:1), WEB follows NRSVA (Romans
    16:25-27 is its 14:24-26): there a chapter ends on a different verse, or the English has
    a verse the Spanish lacks. A verse missing only from the English inside a chapter is a
    textual omission (WEB's Majority Text leaves out Luke 17:36), not a shift."""
    verses_es, verses_en = {}, {}
    for (book, chapter, verse) in spanish:
        verses_es.setdefault((book, chapter), set()).add(verse)
    for (book, chapter, verse) in english:
        verses_en.setdefault((book, chapter), set()).add(verse)
    return {
        chapter for chapter in verses_es.keys() & verses_en.keys()
        if verses_en[chapter] - verses_es[chapter]
        or max(verses_en[chapter]) != max(verses_es[chapter])
    }


def robust_z(values):
    """(x - median) / (1.4826 * MAD): a z-score that a few wild values cannot inflate."""
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    if mad == 0:
        return [0.0 if v == median else math.copysign(math.inf, v - median) for v in values]
    return [(v - median) / (1.4826 * mad) for v in values]


def align(spanish, english, chapter_z=3.5, chapter_outliers=3, verse_z=5.0):
    """Join the two verse tables on their reference and drop what is not a translation pair.
    Returns (pairs, dropped_chapters, dropped_verses); pairs are (ref, es, en) in the Spanish
    module's order. Length ratios are log(characters es / characters en): a chapter with
    `chapter_outliers` or more verses beyond |z| > chapter_z is out of step (a verse split
    differently), and any single verse beyond |z| > verse_z is dropped."""
    misnumbered = misnumbered_chapters(spanish, english)
    joined = [ref for ref in spanish if ref in english and ref[:2] not in misnumbered]
    if not joined:
        return [], sorted(misnumbered), []
    ratios = [math.log(len(spanish[ref]) / len(english[ref])) for ref in joined]
    z = dict(zip(joined, robust_z(ratios)))
    outliers_per_chapter = {}
    for ref in joined:
        if abs(z[ref]) > chapter_z:
            outliers_per_chapter[ref[:2]] = outliers_per_chapter.get(ref[:2], 0) + 1
    out_of_step = {ch for ch, count in outliers_per_chapter.items() if count >= chapter_outliers}
    pairs, dropped_verses = [], []
    for ref in joined:
        if ref[:2] in out_of_step:
            continue
        if abs(z[ref]) > verse_z:
            dropped_verses.append(ref)
        else:
            pairs.append((ref, spanish[ref], english[ref]))
    chapter_order = {ref[:2]: i for i, ref in enumerate(spanish)}
    dropped_chapters = sorted(misnumbered | out_of_step, key=lambda ch: chapter_order.get(ch, -1))
    return pairs, dropped_chapters, dropped_verses


def split_by_book(pairs, test_books=TEST_BOOKS, dev_books=DEV_BOOKS):
    """{"train", "dev", "test"} -> pairs; whole books are held out so that near-identical
    verses (parallel passages, refrains) cannot sit on both sides."""
    parts = {"train": [], "dev": [], "test": []}
    for pair in pairs:
        book = pair[0][0]
        part = "test" if book in test_books else "dev" if book in dev_books else "train"
        parts[part].append(pair)
    return parts


def format_ref(ref):
    return f"{ref[0]} {ref[1]}:{ref[2]}"


def write_parts(parts, out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, pairs in parts.items():
        for suffix, column in (("ref", None), ("es", 1), ("en", 2)):
            lines = [format_ref(p[0]) if column is None else p[column] for p in pairs]
            (out_dir / f"{name}.{suffix}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--es-imp", type=Path, required=True, help="mod2imp dump of spaRV1909eb")
    parser.add_argument("--en-imp", type=Path, required=True, help="mod2imp dump of engWEB2015eb")
    parser.add_argument("--out", type=Path, required=True, help="folder for {train,dev,test}.{es,en,ref}")
    args = parser.parse_args(argv)
    with open(args.es_imp, encoding="utf-8") as f:
        spanish = verse_table(read_imp(f), recase_chapter_start=True)
    with open(args.en_imp, encoding="utf-8") as f:
        english = verse_table(read_imp(f))
    if not spanish or not english:
        sys.exit(f"bible.py: no verses in {args.es_imp if not spanish else args.en_imp}")
    pairs, dropped_chapters, dropped_verses = align(spanish, english)
    parts = split_by_book(pairs)
    write_parts(parts, args.out)
    print(f"bible: {len(pairs)} verse pairs; dropped {len(dropped_chapters)} chapters "
          f"({', '.join(f'{b} {c}' for b, c in dropped_chapters)}) and {len(dropped_verses)} single verses")
    for name, part in parts.items():
        print(f"  {args.out / name}.{{es,en,ref}}: {len(part)} lines")


if __name__ == "__main__":
    main()
