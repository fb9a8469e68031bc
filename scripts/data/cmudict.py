"""Build grapheme-to-phoneme train/dev/test files from the CMU Pronouncing Dictionary as the
npm package cmu-pronouncing-dictionary ships it (index.js: one JavaScript object literal
mapping "word" or "word(2)" to "PH ON EM1 ES").

Filtering follows the standard G2P benchmark split: lower-case words of the letters a-z and
the apostrophe only (no abbreviations with dots, no hyphenated compounds), each alternative
pronunciation on its own line. Words go to train/dev/test by a hash of the word, so that all
pronunciations of a word share a part and adding words to the dictionary never moves old
ones. Standard library only."""
import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

# The 39 ARPAbet phonemes of CMUdict; vowels carry a stress digit (0, 1, 2).
VOWELS = frozenset("AA AE AH AO AW AY EH ER EY IH IY OW OY UH UW".split())
CONSONANTS = frozenset("B CH D DH F G HH JH K L M N NG P R S SH T TH V W Y Z ZH".split())
PARTS = ("train", "dev", "test")

_WORD = re.compile(r"[a-z']*[a-z][a-z']*")
_VARIANT = re.compile(r"\(\d+\)$")
_STRESSED_VOWEL = re.compile(r"([A-Z]+)([012])")

CMUDICT_NOTICE = """\
Copyright (C) 1993-2015 Carnegie Mellon University. All rights reserved.

Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions
are met:

1. Redistributions of source code must retain the above copyright
   notice, this list of conditions and the following disclaimer.
   The contents of this file are deemed to be source code.

2. Redistributions in binary form must reproduce the above copyright
   notice, this list of conditions and the following disclaimer in
   the documentation and/or other materials provided with the
   distribution.

This work was supported in part by funding from the Defense Advanced
Research Projects Agency, the Office of Naval Research and the National
Science Foundation of the United States of America, and by member
companies of the Carnegie Mellon Sphinx Speech Consortium. We acknowledge
the contributions of many volunteers to the expansion and improvement of
this dictionary.

THIS SOFTWARE IS PROVIDED BY CARNEGIE MELLON UNIVERSITY ``AS IS'' AND
ANY EXPRESSED OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO,
THE IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR
PURPOSE ARE DISCLAIMED.  IN NO EVENT SHALL CARNEGIE MELLON UNIVERSITY
NOR ITS EMPLOYEES BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL,
SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT
LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES; LOSS OF USE,
DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY
THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT
(INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
"""


def read_npm_dictionary(source):
    """The (key, pronunciation) pairs of the package's index.js, in file order."""
    start = source.find("= {")
    if start < 0:
        raise ValueError("no `= {` object literal in the dictionary source")
    return list(json.loads(source[start + 2:], object_pairs_hook=lambda pairs: pairs))


def is_valid_pronunciation(phonemes):
    """True when every symbol is an ARPAbet phoneme, vowels with a stress digit."""
    if not phonemes:
        return False
    for symbol in phonemes:
        match = _STRESSED_VOWEL.fullmatch(symbol)
        if not (symbol in CONSONANTS or (match and match.group(1) in VOWELS)):
            return False
    return True


def parse_entry(key, value):
    """(word, [phonemes with stress]) for one dictionary entry, or None when the word is not
    a plain lower-case word ("a.m.", "able-bodied") or the pronunciation is not ARPAbet.
    "word(2)" is the word's second pronunciation; "# place, dutch" comments are dropped."""
    word = _VARIANT.sub("", key.strip().lower())
    phonemes = value.split("#", 1)[0].split()
    if not _WORD.fullmatch(word) or not is_valid_pronunciation(phonemes):
        return None
    return word, phonemes


def strip_stress(phonemes):
    return [symbol.rstrip("012") for symbol in phonemes]


def word_part(word, dev_percent=5, test_percent=5):
    """"train", "dev" or "test" from a hash of the word alone: stable across dictionary
    versions, machines and Python runs (unlike hash())."""
    bucket = int.from_bytes(hashlib.sha256(word.encode("utf-8")).digest()[:8], "big") % 100
    if bucket < test_percent:
        return "test"
    if bucket < test_percent + dev_percent:
        return "dev"
    return "train"


def build_lexicons(pairs):
    """{part: sorted unique "word\\tPH ON EMES" lines} for stress removed and kept. Two
    pronunciations that differ only in stress become one line in the stress-removed files,
    as in the standard split."""
    plain = {part: set() for part in PARTS}
    stressed = {part: set() for part in PARTS}
    skipped = 0
    for key, value in pairs:
        entry = parse_entry(key, value)
        if entry is None:
            skipped += 1
            continue
        word, phonemes = entry
        part = word_part(word)
        plain[part].add(f"{word}\t{' '.join(strip_stress(phonemes))}")
        stressed[part].add(f"{word}\t{' '.join(phonemes)}")
    as_sorted = lambda table: {part: sorted(lines) for part, lines in table.items()}
    return as_sorted(plain), as_sorted(stressed), skipped


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="the package's index.js")
    parser.add_argument("--version", default="unknown", help="package version, for the README")
    parser.add_argument("--out", type=Path, required=True, help="folder for the .tsv files")
    args = parser.parse_args(argv)
    try:
        pairs = read_npm_dictionary(args.source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        sys.exit(f"cmudict.py: cannot read {args.source}: {err}")
    plain, stressed, skipped = build_lexicons(pairs)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"cmudict: {len(pairs)} entries in cmu-pronouncing-dictionary {args.version}, "
          f"{skipped} skipped (not a plain a-z/' word or not ARPAbet)")
    for part in PARTS:
        for suffix, table in ((".tsv", plain), (".stress.tsv", stressed)):
            path = args.out / f"{part}{suffix}"
            path.write_text("".join(line + "\n" for line in table[part]), encoding="utf-8")
            words = len({line.split("\t", 1)[0] for line in table[part]})
            print(f"  {path}: {words} words, {len(table[part])} lines")
    (args.out / "LICENSE").write_text(
        f"Derived from the CMU Pronouncing Dictionary (npm package cmu-pronouncing-dictionary "
        f"{args.version}) by scripts/get-data.sh.\n\n{CMUDICT_NOTICE}", encoding="utf-8")


if __name__ == "__main__":
    main()
