"""What the classification data sets of scripts/get-data.sh share: a stable split by a hash of
the text, reading text files in UTF-8 or Latin-1, and writing `label<TAB>text` files with a
notes file of counts per class. Standard library only."""
import hashlib
from pathlib import Path

PARTS = ("train", "valid", "test")


def digest(text):
    """16 bytes of SHA-256 of the text: stable across machines, versions and Python runs
    (unlike hash())."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


def part_of(text, valid_percent=10, test_percent=10):
    """"train", "valid" or "test" from the first 8 bytes of the text's hash (80/10/10 by
    default), so a text's part never depends on what else is in the data."""
    bucket = int.from_bytes(digest(text)[:8], "big") % 100
    if bucket < test_percent:
        return "test"
    if bucket < test_percent + valid_percent:
        return "valid"
    return "train"


def sample_key(text):
    """Order for taking a class's sample: the hash's other 8 bytes, independent of the split."""
    return int.from_bytes(digest(text)[8:], "big")


def read_text(path):
    """A file's text: UTF-8 when it decodes as such, else Latin-1 (some of Debian's word lists
    are ISO-8859-1)."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return raw.decode("latin-1"), "latin-1"


def split(examples):
    """{part: "label\\ttext" lines} of (label, text) pairs, each text to its hash's part. Each
    part is in the order of the texts' hashes: the classes mixed, not one after the other (a
    learner that reads the file in order, as fastText does, would otherwise end on one class),
    and the same order on every run."""
    parts = {part: [] for part in PARTS}
    for label, text in sorted(examples, key=lambda pair: (sample_key(pair[1]), pair)):
        parts[part_of(text)].append(f"{label}\t{text}")
    return parts


def counts(parts):
    """{label: {part: count}} of split()'s output."""
    table = {}
    for part, lines in parts.items():
        for line in lines:
            label = line.split("\t", 1)[0]
            table.setdefault(label, dict.fromkeys(PARTS, 0))[part] += 1
    return dict(sorted(table.items()))


def counts_table(parts):
    """The per-class counts as a Markdown table, with totals."""
    table = counts(parts)
    rows = ["| class | train | valid | test | all |", "| --- | ---: | ---: | ---: | ---: |"]
    for label, by_part in table.items():
        values = [by_part[p] for p in PARTS]
        rows.append(f"| {label} | " + " | ".join(str(v) for v in values) + f" | {sum(values)} |")
    totals = [len(parts[p]) for p in PARTS]
    rows.append("| all | " + " | ".join(str(v) for v in totals) + f" | {sum(totals)} |")
    return "\n".join(rows) + "\n"


def write_parts(parts, out):
    """train.tsv, valid.tsv and test.tsv in the folder out."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for part in PARTS:
        with open(out / f"{part}.tsv", "w", encoding="utf-8", newline="\n") as file:
            file.writelines(f"{line}\n" for line in parts[part])
