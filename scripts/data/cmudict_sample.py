"""Make the small CMUdict sample that ships in data/cmudict-sample/ (what `make demo` trains on)
from the stress-removed files of `scripts/get-data.sh cmudict`.

Each part of the sample is drawn from the same part of the full split, so the sample's train,
dev and test words are as disjoint as the full split's. Within a part, the words are ranked by
SHA-256 of a fixed salt and the word, and the first N are kept with all their pronunciations:
the same input gives the same bytes on any machine, and the choice is unrelated to the order of
the dictionary or to the hash that made the full split. Standard library only."""
import argparse
import hashlib
import re
import sys
from pathlib import Path

PARTS = ("train", "dev", "test")
DEFAULT_WORDS = {"train": 4000, "dev": 200, "test": 300}
SALT = b"attn cmudict-sample\0"


def read_lexicon(path):
    """{word: [pronunciation lines]} of a word<TAB>PH ON EMES file, in file order."""
    lexicon = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        word, tab, phonemes = line.partition("\t")
        if not tab or not word or not phonemes.strip():
            raise ValueError(f"{path}:{number}: not word<TAB>phonemes: {line!r}")
        lexicon.setdefault(word, []).append(line)
    return lexicon


def sample_rank(word):
    return hashlib.sha256(SALT + word.encode("utf-8")).digest()


def sample_lines(lexicon, count):
    """The sorted lines of the `count` words that rank first, every pronunciation of each."""
    if count > len(lexicon):
        raise ValueError(f"asked for {count} words of a part that has {len(lexicon)}")
    chosen = sorted(lexicon, key=sample_rank)[:count]
    return sorted(line for word in chosen for line in lexicon[word])


def readme_text(counts, lines, source_version):
    rows = "\n".join(f"| `{part}.tsv` | {counts[part]:,} | {lines[part]:,} |" for part in PARTS)
    return f"""\
# cmudict-sample: a few thousand CMUdict words for `make demo`

A small sample of the CMU Pronouncing Dictionary
({source_version}), stress removed, one
`word<TAB>PH ON EMES` line per pronunciation (39 ARPAbet phonemes; a word with several
pronunciations has several lines, always in the same file). It is what `make demo` trains its
grapheme-to-phoneme Transformer on, so the demo needs no network.

| file | words | lines |
| --- | ---: | ---: |
{rows}

How it was made (rerunning gives the same bytes):

    scripts/make-demo-data.sh

which runs `scripts/get-data.sh cmudict` into a temporary folder and then
`scripts/data/cmudict_sample.py`: each part is drawn from the same part of get-data's
hash-based word split (docs/data.md), so no word is in two parts; within a part, the words whose
SHA-256 of a fixed salt and the word sorts first are kept, with all their pronunciations.

The dictionary's licence notice is in LICENSE and must travel with any copy. For the standard
G2P benchmark use `../shared/data/g2p-std/` or the whole dictionary (`scripts/get-data.sh
cmudict`): this sample is for a two-minute demo, not for results.
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True,
                        help="folder with get-data's train.tsv, dev.tsv, test.tsv and LICENSE")
    parser.add_argument("--out", type=Path, required=True, help="folder for the sample")
    for part in PARTS:
        parser.add_argument(f"--{part}-words", type=int, default=DEFAULT_WORDS[part],
                            help=f"words in {part}.tsv [{DEFAULT_WORDS[part]}]")
    args = parser.parse_args(argv)
    counts = {part: getattr(args, f"{part}_words") for part in PARTS}
    if any(count <= 0 for count in counts.values()):
        parser.error("word counts must be positive")
    try:
        licence = (args.source / "LICENSE").read_text(encoding="utf-8")
        tables = {part: sample_lines(read_lexicon(args.source / f"{part}.tsv"), counts[part])
                  for part in PARTS}
    except (OSError, ValueError) as err:
        sys.exit(f"cmudict_sample.py: {err}")
    # get-data's LICENSE opens with "Derived from ... (npm package NAME VERSION) by ...".
    origin = re.search(r"\(([^)]*)\)", licence.split("\n", 1)[0])
    source_version = origin.group(1) if origin else "as scripts/get-data.sh fetches it"
    args.out.mkdir(parents=True, exist_ok=True)
    for part in PARTS:
        path = args.out / f"{part}.tsv"
        path.write_text("".join(line + "\n" for line in tables[part]), encoding="utf-8")
        print(f"  {path}: {counts[part]} words, {len(tables[part])} lines")
    (args.out / "LICENSE").write_text(
        licence.replace("by scripts/get-data.sh.",
                        "by scripts/get-data.sh and scripts/make-demo-data.sh.", 1),
        encoding="utf-8")
    lines = {part: len(tables[part]) for part in PARTS}
    (args.out / "README.md").write_text(readme_text(counts, lines, source_version),
                                        encoding="utf-8")


if __name__ == "__main__":
    main()
