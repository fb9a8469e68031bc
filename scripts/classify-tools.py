"""The classification recipes' shared steps, so that fastText and attn are fed and scored
alike (recipes/classify-fasttext.sh, recipes/classify.sh). Standard library only.

  classify-tools.py fasttext --in T.tsv --out T.txt [--text T.text] [--shuffle SEED]
      `label<TAB>text` lines as fastText's `__label__label text` (whitespace in the text made
      single spaces); --text also writes the texts alone; --shuffle SEED writes the lines in a
      random order fixed by the seed (fastText learns from its file in order).
  classify-tools.py score --ref GOLD.tsv --hyp PRED [--json OUT.json]
      accuracy and macro-F1 of predicted labels against `label<TAB>text` gold lines. A
      prediction line is a label, `label<TAB>probability` (attn classify) or `__label__label`
      (fastText predict); only its first field counts. Macro-F1 is the mean of the classes' F1
      over every label of the gold or the predictions (a class never predicted scores 0), as
      scikit-learn's f1_score(average="macro")."""
import argparse
import json
import random
import re
import sys

_SPACE = re.compile(r"\s+")
FASTTEXT_PREFIX = "__label__"


def read_labelled(path):
    """(label, text) pairs of a `label<TAB>text` file."""
    pairs = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            line = line.rstrip("\n")
            label, tab, text = line.partition("\t")
            if not tab or not label:
                raise ValueError(f"{path}:{number}: not `label<TAB>text`")
            pairs.append((label, text))
    return pairs


def fasttext_line(label, text):
    return f"{FASTTEXT_PREFIX}{label} {_SPACE.sub(' ', text).strip()}"


def predicted_label(line):
    """The label of a prediction line: its first tab-separated field, without fastText's
    __label__ prefix."""
    label = line.rstrip("\n").split("\t", 1)[0].strip().split(" ", 1)[0]
    return label[len(FASTTEXT_PREFIX):] if label.startswith(FASTTEXT_PREFIX) else label


def scores(gold, predicted):
    """accuracy, macro-F1 and per-class precision/recall/F1 of two label lists."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold labels but {len(predicted)} predictions")
    if not gold:
        raise ValueError("nothing to score")
    labels = sorted(set(gold) | set(predicted))
    true_pos = dict.fromkeys(labels, 0)
    gold_count = dict.fromkeys(labels, 0)
    pred_count = dict.fromkeys(labels, 0)
    for g, p in zip(gold, predicted):
        gold_count[g] += 1
        pred_count[p] += 1
        if g == p:
            true_pos[g] += 1
    per_class = {}
    for label in labels:
        precision = true_pos[label] / pred_count[label] if pred_count[label] else 0.0
        recall = true_pos[label] / gold_count[label] if gold_count[label] else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[label] = {"precision": precision, "recall": recall, "f1": f1,
                            "support": gold_count[label]}
    return {"n": len(gold), "accuracy": sum(true_pos.values()) / len(gold),
            "macro_f1": sum(c["f1"] for c in per_class.values()) / len(labels),
            "classes": len(labels), "per_class": per_class}


def cmd_fasttext(args):
    pairs = read_labelled(args.input)
    if args.shuffle is not None:
        random.Random(args.shuffle).shuffle(pairs)
    with open(args.out, "w", encoding="utf-8", newline="\n") as file:
        file.writelines(fasttext_line(label, text) + "\n" for label, text in pairs)
    if args.text:
        with open(args.text, "w", encoding="utf-8", newline="\n") as file:
            file.writelines(_SPACE.sub(" ", text).strip() + "\n" for _, text in pairs)
    return 0


def cmd_score(args):
    gold = [label for label, _ in read_labelled(args.ref)]
    with open(args.hyp, encoding="utf-8") as file:
        predicted = [predicted_label(line) for line in file]
    result = scores(gold, predicted)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump(result, file, indent=1, sort_keys=True)
            file.write("\n")
    print(f"accuracy = {100 * result['accuracy']:.2f}%  macro-F1 = {100 * result['macro_f1']:.2f}%"
          f"  ({result['n']} lines, {result['classes']} classes)")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("fasttext", help="label<TAB>text lines as fastText's format")
    convert.add_argument("--in", dest="input", required=True)
    convert.add_argument("--out", required=True)
    convert.add_argument("--text", help="also write the texts alone, one a line")
    convert.add_argument("--shuffle", type=int, metavar="SEED")
    convert.set_defaults(run=cmd_fasttext)
    score = commands.add_parser("score", help="accuracy and macro-F1")
    score.add_argument("--ref", required=True)
    score.add_argument("--hyp", required=True)
    score.add_argument("--json")
    score.set_defaults(run=cmd_score)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (OSError, ValueError) as error:
        print(f"classify-tools: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
