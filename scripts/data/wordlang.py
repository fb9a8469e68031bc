"""Build "Which language is this word?" from word lists (Debian's /usr/share/dict files of the
w* packages): one class per language, `label<TAB>word` lines in train.tsv, valid.tsv and
test.tsv, and README.md with the counts per class.

  wordlang.py --list en=american-english --list en=british-english --list fr=french ... --out DIR

Several lists of one label (American and British English, Norwegian bokmål and nynorsk) are
one language: their union is one class, not two classes of near-identical words.

Filtering, in this order:
  1. each line is stripped, put in Unicode NFC and lower-cased (German nouns, names and
     sentence-initial forms would otherwise give the language away by their capital);
  2. only words of two or more letters (Unicode letters, nothing else) are kept: no
     possessives ("cat's"), elisions ("l'home"), hyphenated compounds, abbreviations with
     dots, digits;
  3. a word found in the lists of more than one language is left out of every class (after
     steps 1-2, so "Paris" and "paris" are one word);
  4. a class larger than --max-per-class keeps that many of its words, the ones of the lowest
     hash (a fixed sample; the inflected lists of Polish or Ukrainian have millions of forms).
Each word goes to train, valid or test (80/10/10) by a hash of the word alone. Files that are
not UTF-8 are read as ISO-8859-1 (some of Debian's lists are). Standard library only."""
import argparse
import sys
import unicodedata
from pathlib import Path

import labelled

MIN_LETTERS = 2


def clean_word(line):
    """The word of a list's line as it is classified (NFC, lower case), or None when the
    filter leaves it out."""
    word = unicodedata.normalize("NFC", line.strip()).lower()
    if len(word) < MIN_LETTERS or not all(ch.isalpha() for ch in word):
        return None
    return word


def read_list(text):
    """(the set of kept words, how many non-empty lines were left out) of a list's text."""
    words, dropped = set(), 0
    for line in text.splitlines():
        if not line.strip():
            continue
        word = clean_word(line)
        if word is None:
            dropped += 1
        else:
            words.add(word)
    return words, dropped


def exclusive_words(vocabularies):
    """{label: words of that label only} and the number of words shared by two or more labels
    (left out of every class)."""
    seen = {}
    for label, words in vocabularies.items():
        for word in words:
            seen[word] = seen.get(word, 0) + 1
    shared = {word for word, count in seen.items() if count > 1}
    return {label: words - shared for label, words in vocabularies.items()}, len(shared)


def cap(words, max_words):
    """At most max_words of the words: those of the lowest hash, a sample fixed by the words."""
    if max_words is None or len(words) <= max_words:
        return set(words)
    return set(sorted(words, key=lambda w: (labelled.sample_key(w), w))[:max_words])


def build(lists, max_per_class=None):
    """lists: (label, path) pairs. Returns (parts, per-label statistics, shared word count)."""
    vocabularies, stats = {}, {}
    for label, path in lists:
        text, encoding = labelled.read_text(path)
        words, dropped = read_list(text)
        vocabularies.setdefault(label, set()).update(words)
        entry = stats.setdefault(label, {"files": [], "filtered_out": 0})
        entry["files"].append(f"{Path(path).name} ({encoding})")
        entry["filtered_out"] += dropped
    for label, words in vocabularies.items():
        stats[label]["words"] = len(words)
    exclusive, shared = exclusive_words(vocabularies)
    examples = []
    for label, words in sorted(exclusive.items()):
        stats[label]["exclusive"] = len(words)
        kept = cap(words, max_per_class)
        stats[label]["kept"] = len(kept)
        examples.extend((label, word) for word in kept)
    return labelled.split(examples), stats, shared


def readme(parts, stats, shared, max_per_class, about):
    lines = ["# wordlang: which language is this word?", "",
             "Made by `scripts/get-data.sh wordlang` (scripts/data/wordlang.py); docs/data.md "
             "describes the files.", ""]
    lines += [f"{line}" for line in about]
    if about:
        lines.append("")
    lines += ["Lines are `label<TAB>word`; words lower-cased, letters only, two or more; a word of "
              "two languages' lists is in no class; split 80/10/10 by a hash of the word; "
              f"at most {max_per_class if max_per_class else 'all'} words per class.", "",
              f"Words in the lists of more than one language, left out: {shared}.", "",
              "| class | lists | lines filtered out | words | only in this language | kept |",
              "| --- | --- | ---: | ---: | ---: | ---: |"]
    for label, entry in sorted(stats.items()):
        lines.append(f"| {label} | {', '.join(entry['files'])} | {entry['filtered_out']} | "
                     f"{entry['words']} | {entry['exclusive']} | {entry['kept']} |")
    lines += ["", "Examples per class and part:", "", labelled.counts_table(parts)]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="append", required=True, metavar="LABEL=FILE",
                        help="a word list (one word a line) and its language's label; repeat")
    parser.add_argument("--max-per-class", type=int, default=None,
                        help="keep at most this many words of each class (default: all)")
    parser.add_argument("--about", action="append", default=[],
                        help="a line for README.md saying where the lists came from; repeat")
    parser.add_argument("--out", type=Path, required=True, help="folder for the .tsv files")
    args = parser.parse_args(argv)
    lists = []
    for item in args.list:
        label, sep, path = item.partition("=")
        if not sep or not label or not path or not label.isascii() or not label.isalnum():
            parser.error(f"--list takes LABEL=FILE with a label of letters and digits, not {item!r}")
        lists.append((label, path))
    if len({label for label, _ in lists}) < 2:
        parser.error("needs the lists of two languages at least")
    parts, stats, shared = build(lists, args.max_per_class)
    labelled.write_parts(parts, args.out)
    (args.out / "README.md").write_text(readme(parts, stats, shared, args.max_per_class, args.about),
                                        encoding="utf-8")
    total = sum(len(lines) for lines in parts.values())
    print(f"  {args.out}: {total} words of {len(stats)} languages "
          f"({', '.join(f'{p} {len(parts[p])}' for p in labelled.PARTS)}); "
          f"{shared} words of several languages left out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
