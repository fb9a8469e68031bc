"""Build "Which collection is this quotation from?" from fortune(6) files (Debian's fortunes
package: /usr/share/games/fortunes): each collection file is a class, its quotations the
examples, as `label<TAB>text` lines in train.tsv, valid.tsv and test.tsv, with README.md giving
the counts per class.

  fortunes.py --dir /usr/share/games/fortunes --out DIR

A collection is a text file with no extension in --dir (not the .dat index strfile writes nor
the .u8 link beside it), not in a subfolder (Debian keeps the offensive collections in off/,
left out), quotations separated by lines holding only "%". Each quotation becomes one line:
terminal overstriking removed ("_\\bx" underlines x), tabs, newlines and runs of spaces made
one space, stripped; attributions ("-- Mark Twain") stay, being part of the fortune.
Left out: empty quotations, a quotation repeated in one collection (kept once), a quotation
found in two collections (ambiguous, in neither), and collections with fewer than
--min-per-class quotations after that. Each quotation goes to train, valid or test (80/10/10)
by a hash of its text. Standard library only."""
import argparse
import re
import sys
from pathlib import Path

import labelled

_OVERSTRUCK = re.compile("[^\x08]\x08")
_SPACE = re.compile(r"\s+")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def collection_files(folder):
    """The collections of a fortune folder: (label, path), by name."""
    files = []
    for path in sorted(Path(folder).iterdir()):
        if not path.is_file() or path.suffix in (".dat", ".u8") or "." in path.name:
            continue
        if path.is_symlink() and path.resolve().parent == Path(folder).resolve():
            continue                      # another name of a collection already listed
        if _LABEL.fullmatch(path.name):
            files.append((path.name, path))
    return files


def flatten(quotation):
    """A quotation as one line: overstriking undone, all whitespace runs one space."""
    previous = None
    while previous != quotation:
        previous, quotation = quotation, _OVERSTRUCK.sub("", quotation)
    quotation = quotation.replace("\x08", "")
    return _SPACE.sub(" ", quotation).strip()


def quotations(text):
    """The flattened, non-empty quotations of a fortune file's text, in file order."""
    found, current = [], []
    for line in text.splitlines():
        if line.rstrip() == "%":
            found.append("\n".join(current))
            current = []
        else:
            current.append(line)
    found.append("\n".join(current))
    return [q for q in (flatten(raw) for raw in found) if q]


def build(collections, min_per_class=1):
    """collections: (label, path) pairs. Returns (parts, per-label statistics, shared count)."""
    texts, stats = {}, {}
    for label, path in collections:
        text, encoding = labelled.read_text(path)
        found = quotations(text)
        texts[label] = set(found)
        stats[label] = {"encoding": encoding, "quotations": len(found),
                        "distinct": len(texts[label])}
    seen = {}
    for found in texts.values():
        for text in found:
            seen[text] = seen.get(text, 0) + 1
    shared = {text for text, count in seen.items() if count > 1}
    examples = []
    for label, found in sorted(texts.items()):
        kept = found - shared
        stats[label]["kept"] = len(kept)
        if len(kept) < min_per_class:
            stats[label]["dropped"] = True
            continue
        examples.extend((label, text) for text in kept)
    return labelled.split(examples), stats, len(shared)


def readme(parts, stats, shared, min_per_class, about):
    lines = ["# fortunes: which collection is this quotation from?", "",
             "Made by `scripts/get-data.sh fortunes` (scripts/data/fortunes.py); docs/data.md "
             "describes the files.", ""]
    lines += list(about)
    if about:
        lines.append("")
    lines += ["Lines are `label<TAB>quotation`, the quotation flattened to one line (whitespace "
              "made single spaces, overstriking removed); split 80/10/10 by a hash of the text.",
              "",
              f"Quotations found in more than one collection, left out: {shared}. "
              f"Collections with fewer than {min_per_class} quotations left, left out: "
              + (", ".join(sorted(l for l, e in stats.items() if e.get("dropped"))) or "none")
              + ".", "",
              "| collection | quotations | distinct | kept |", "| --- | ---: | ---: | ---: |"]
    for label, entry in sorted(stats.items()):
        kept = "left out" if entry.get("dropped") else entry["kept"]
        lines.append(f"| {label} | {entry['quotations']} | {entry['distinct']} | {kept} |")
    lines += ["", "Examples per class and part:", "", labelled.counts_table(parts)]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="a folder of fortune files")
    parser.add_argument("--min-per-class", type=int, default=50,
                        help="leave out collections with fewer quotations (default 50)")
    parser.add_argument("--about", action="append", default=[],
                        help="a line for README.md saying where the files came from; repeat")
    parser.add_argument("--out", type=Path, required=True, help="folder for the .tsv files")
    args = parser.parse_args(argv)
    collections = collection_files(args.dir)
    if len(collections) < 2:
        parser.error(f"{args.dir} has fewer than two fortune collections")
    parts, stats, shared = build(collections, args.min_per_class)
    classes = labelled.counts(parts)
    if len(classes) < 2:
        parser.error(f"fewer than two collections have {args.min_per_class} quotations")
    labelled.write_parts(parts, args.out)
    (args.out / "README.md").write_text(readme(parts, stats, shared, args.min_per_class, args.about),
                                        encoding="utf-8")
    total = sum(len(lines) for lines in parts.values())
    print(f"  {args.out}: {total} quotations of {len(classes)} collections "
          f"({', '.join(f'{p} {len(parts[p])}' for p in labelled.PARTS)}); "
          f"{shared} in several collections left out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
