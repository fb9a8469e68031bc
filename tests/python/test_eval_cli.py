"""The `attn eval` command: sacreBLEU's printed lines, standard input, G2P scoring, and one
clear message with exit status 1 (bad data) or 2 (bad usage) for every kind of bad input.

BLEU and chrF are also checked on the real Bible verses against a small independent model
of sacreBLEU written here with Python's own `re`, str.split() and Counter (the machinery
sacreBLEU itself runs on), so that the C tokenizer's handling of real punctuation, accents
and Unicode whitespace is compared with Python's, not with itself. The G2P numbers are
checked the same way against a direct transcription of the documented rule."""
import math
import random
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from attn_program import ATTN


def _shared_data():
    for folder in Path(__file__).resolve().parents:
        if (folder / "shared" / "data" / "README.md").exists():
            return folder / "shared" / "data"
    return None


DATA = _shared_data()
needs_data = pytest.mark.skipif(DATA is None, reason="shared/data not found beside the repository")


def run(args, stdin=None):
    return subprocess.run([ATTN, "eval", *args], input=stdin, capture_output=True, timeout=120)


def write(path, lines):
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
    return str(path)


# The README example of sacreBLEU (github.com/mjpost/sacrebleu, README.md at commit
# 078c440168c6adc89ba75fe6d63f0d922d42bcfe) and the lines it prints.
README_HYPS = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
README_REF1 = ["The dog bit the man.", "It was not unexpected.", "The man bit him first."]
README_REF2 = ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."]
README_BLEU = "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)"
README_CHRF = "chrF2 = 59.73"


@pytest.fixture
def readme_refs(tmp_path):
    return write(tmp_path / "ref1.txt", README_REF1), write(tmp_path / "ref2.txt", README_REF2)


def test_help_describes_every_metric():
    result = subprocess.run([ATTN, "eval", "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    for word in ("bleu", "chrf", "wer", "per", "--ref", "--hyp", "standard input"):
        assert word in result.stdout
    listing = subprocess.run([ATTN, "--help"], capture_output=True, text=True)
    assert "eval" in listing.stdout


def test_readme_lines_from_stdin_and_from_file(tmp_path, readme_refs):
    ref1, ref2 = readme_refs
    text = "".join(h + "\n" for h in README_HYPS).encode()
    from_stdin = run(["--metric", "bleu,chrf", "--ref", ref1, "--ref", ref2], stdin=text)
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert from_stdin.stdout.decode().splitlines() == [README_BLEU, README_CHRF]
    assert from_stdin.stderr == b""
    dash = run(["--metric", "bleu", "--metric", "chrf", "--ref", ref1, "--ref", ref2,
                "--hyp", "-"], stdin=text)
    assert dash.stdout == from_stdin.stdout
    hyp = write(tmp_path / "hyp.txt", README_HYPS)
    from_file = run(["--metric", "bleu,chrf", "--ref", ref1, "--ref", ref2, "--hyp", hyp])
    assert from_file.stdout == from_stdin.stdout


def test_score_only_and_width(tmp_path, readme_refs):
    hyp = write(tmp_path / "hyp.txt", README_HYPS)
    ref1, ref2 = readme_refs
    result = run(["--metric", "bleu,chrf", "--ref", ref1, "--ref", ref2, "--hyp", hyp,
                  "--score-only", "--width", "4"])
    assert result.returncode == 0
    bleu, chrf = result.stdout.decode().split()
    for printed, published in ((bleu, "48.53"), (chrf, "59.73")):
        assert len(printed.split(".")[1]) == 4 and f"{float(printed):.2f}" == published


def test_translation_wer(tmp_path):
    ref = write(tmp_path / "ref.txt", ["the cat sat down", "a x c"])
    hyp = write(tmp_path / "hyp.txt", ["the cat sat", "a b c d"])
    result = run(["--metric", "wer", "--ref", ref, "--hyp", hyp])
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == "WER = 42.86 (3 edits / 7 reference words)\n"


# ---- an independent model of sacreBLEU 2.x's default BLEU and chrF -------------------------

_13A_RULES = [
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),
]


def tokenize_13a(line):
    line = line.rstrip()
    for old, new in [("<skipped>", ""), ("-\n", ""), ("\n", " "), ("&quot;", '"'),
                     ("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">")]:
        line = line.replace(old, new)
    line = f" {line} "
    for pattern, replacement in _13A_RULES:
        line = pattern.sub(replacement, line)
    return line.split()


def _ngrams(tokens, n):
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def model_bleu(hyps, ref_streams, order=4):
    matches, totals, hyp_len, ref_len = [0] * order, [0] * order, 0, 0
    for i, hyp in enumerate(hyps):
        refs = [tokenize_13a(s[i]) for s in ref_streams if s[i].strip()]
        tokens = tokenize_13a(hyp)
        hyp_len += len(tokens)
        ref_len += min((abs(len(tokens) - len(r)), len(r)) for r in refs)[1]
        for n in range(1, order + 1):
            best = Counter()
            for ref in refs:
                best |= _ngrams(ref, n)
            counts = _ngrams(tokens, n)
            totals[n - 1] += sum(counts.values())
            matches[n - 1] += sum(min(c, best[g]) for g, c in counts.items())
    bp = 1.0 if hyp_len >= ref_len else (math.exp(1 - ref_len / hyp_len) if hyp_len else 0.0)
    precisions, smooth = [0.0] * order, 1.0
    if any(matches):
        for n in range(order):
            if totals[n] == 0:
                break
            if matches[n] == 0:
                smooth *= 2
                precisions[n] = 100.0 / (smooth * totals[n])
            else:
                precisions[n] = 100.0 * matches[n] / totals[n]
        logs = [math.log(p) if p else -9999999999 for p in precisions]
        score = bp * math.exp(sum(logs) / order)
    else:
        score = 0.0
    ratio = hyp_len / ref_len if ref_len else 0
    return (f"BLEU = {score:.2f} {'/'.join(f'{p:.1f}' for p in precisions)} (BP = {bp:.3f} "
            f"ratio = {ratio:.3f} hyp_len = {hyp_len} ref_len = {ref_len})")


def _chrf_stats(hyp, ref, order):
    hyp, ref = "".join(hyp.split()), "".join(ref.split())
    stats = []
    for n in range(1, order + 1):
        h = Counter(hyp[i:i + n] for i in range(len(hyp) - n + 1))
        r = Counter(ref[i:i + n] for i in range(len(ref) - n + 1))
        stats.append((sum(h.values()) if r else 0, sum(r.values()), sum((h & r).values())))
    return stats


def _chrf_score(stats, beta=2):
    precision = recall = 0.0
    effective = 0
    for hyp, ref, match in stats:
        if hyp > 0 and ref > 0:
            precision += match / hyp
            recall += match / ref
            effective += 1
    if effective == 0:
        return 0.0
    precision /= effective
    recall /= effective
    if precision + recall == 0:
        return 0.0
    return 100 * (1 + beta ** 2) * precision * recall / (beta ** 2 * precision + recall)


def model_chrf(hyps, ref_streams, order=6):
    total = [[0, 0, 0] for _ in range(order)]
    for i, hyp in enumerate(hyps):
        candidates = [_chrf_stats(hyp, s[i], order) for s in ref_streams if s[i].strip()]
        best = max(candidates, key=_chrf_score)  # max keeps the first of equal scores
        for k in range(order):
            for j in range(3):
                total[k][j] += best[k][j]
    return f"chrF2 = {_chrf_score(total):.2f}"


def read_lines(path):
    return path.read_bytes().decode("utf-8").split("\n")[:-1]


def test_model_agrees_with_the_published_readme_lines():
    streams = [README_REF1, README_REF2]
    assert model_bleu(README_HYPS, streams) == README_BLEU
    assert model_chrf(README_HYPS, streams) == README_CHRF


@needs_data
def test_bible_spanish_copy_scores_0_07():
    """/work/shared/data/README.md: copying the Spanish source scores 0.07."""
    result = run(["--metric", "bleu", "--ref", str(DATA / "bible/test.en"),
                  "--hyp", str(DATA / "bible/test.es")])
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().startswith("BLEU = 0.07 ")


@needs_data
def test_bible_bleu_and_chrf_match_the_model(tmp_path):
    english = read_lines(DATA / "bible/test.en")
    spanish = read_lines(DATA / "bible/test.es")
    rng = random.Random(5)

    def damage(line):
        words, out = line.split(), []
        for word in words:
            roll = rng.random()
            if roll < 0.1:
                continue
            out.append(rng.choice(words) if roll < 0.2 else word)
            if roll > 0.95:
                out.append("the,")
        return " ".join(out)

    damaged = [damage(line) for line in english]
    second = [damage(line) if i % 9 else "" for i, line in enumerate(english)]
    ref = str(DATA / "bible/test.en")
    second_path = write(tmp_path / "second.txt", second)
    cases = [(spanish, [english], [ref]), (damaged, [english], [ref]),
             (damaged, [english, second], [ref, second_path])]
    for hyps, streams, ref_paths in cases:
        hyp = write(tmp_path / "hyp.txt", hyps)
        args = ["--metric", "bleu,chrf", "--hyp", hyp]
        for path in ref_paths:
            args += ["--ref", path]
        result = run(args)
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode().splitlines() == [model_bleu(hyps, streams),
                                                       model_chrf(hyps, streams)]


# ---- G2P ------------------------------------------------------------------------------------


def _distance(a, b):
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        diagonal, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1,
                                           diagonal + (a[i - 1] != b[j - 1]))
    return row[len(b)]


def model_g2p(ref_lines, hyp_lines):
    refs, hyps = {}, {}
    for line in ref_lines:
        word, pron = line.split("\t")
        refs.setdefault(word, []).append(pron.split())
    for line in hyp_lines:
        word, pron = line.split("\t")
        hyps[word] = pron.split()
    wrong = edits = length = 0
    for word, prons in refs.items():
        hyp = hyps.get(word, [])
        # fewest edits, then the longer pronunciation
        d, negative_length = min((_distance(hyp, p), -len(p)) for p in prons)
        wrong += d != 0
        edits += d
        length -= negative_length
    return wrong, len(refs), edits, length


@needs_data
def test_g2p_matches_the_model(tmp_path):
    ref_lines = read_lines(DATA / "g2p-std/test.tsv")
    rng = random.Random(11)
    phonemes = sorted({p for line in ref_lines for p in line.split("\t")[1].split()})
    seen, hyp_lines = set(), []
    for line in ref_lines:
        word, pron = line.split("\t")
        if word in seen or rng.random() < 0.02:  # some words missing
            seen.add(word)
            continue
        seen.add(word)
        out = []
        for p in pron.split():
            roll = rng.random()
            if roll < 0.05:
                continue
            out.append(rng.choice(phonemes) if roll < 0.1 else p)
        hyp_lines.append(f"{word}\t{' '.join(out)}")
    rng.shuffle(hyp_lines)
    hyp = write(tmp_path / "hyp.tsv", hyp_lines)
    ref = str(DATA / "g2p-std/test.tsv")
    wrong, words, edits, length = model_g2p(ref_lines, hyp_lines)
    expected = [f"WER = {100 * wrong / words:.2f} ({wrong} of {words} words wrong)",
                f"PER = {100 * edits / length:.2f} ({edits} edits / {length} reference phonemes)"]
    result = run(["--metric", "wer,per", "--ref", ref, "--hyp", hyp])
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == expected
    missing = words - len(hyp_lines)
    assert result.stderr.decode() == (
        f"attn eval: note: {missing} of the {words} words of {ref} are missing from {hyp} "
        "(counted wrong)\n")
    piped = run(["--metric", "wer,per", "--ref", ref], stdin=Path(hyp).read_bytes())
    assert piped.stdout == result.stdout


def test_g2p_small_by_hand(tmp_path):
    ref = write(tmp_path / "ref.tsv", ["read\tR IY D", "read\tR EH D", "cat\tK AE T"])
    hyp = write(tmp_path / "hyp.tsv", ["cat\tK AE", "read\tR EH D"])
    result = run(["--metric", "per,wer", "--ref", ref, "--hyp", hyp])
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == [
        "PER = 16.67 (1 edits / 6 reference phonemes)", "WER = 50.00 (1 of 2 words wrong)"]
    assert result.stderr == b""
    as_text = run(["--metric", "wer", "--ref", ref, "--hyp", hyp, "--format", "text"])
    assert as_text.returncode == 1  # 2 hypothesis lines against 3 reference lines


# ---- bad input: one message, exit 1 for data, 2 for usage -----------------------------------


def _one_message(result, code, *parts):
    assert result.returncode == code, (result.returncode, result.stderr)
    assert result.stdout == b""
    message = result.stderr.decode()
    assert message.count("\n") == 1 and message.startswith("attn eval: "), message
    for part in parts:
        assert part in message, (part, message)


def test_bad_data_exits_1(tmp_path):
    ref = write(tmp_path / "ref.txt", ["a b c", "d e f"])
    short = write(tmp_path / "short.txt", ["a b c"])
    _one_message(run(["--metric", "bleu", "--ref", ref, "--hyp", short]), 1,
                 "short.txt has 1 lines but", "ref.txt has 2")
    _one_message(run(["--metric", "chrf", "--ref", short, "--hyp", ref]), 1, "has 2 lines")
    _one_message(run(["--metric", "bleu", "--ref", str(tmp_path / "nope.txt"), "--hyp", ref]),
                 1, "nope.txt")
    _one_message(run(["--metric", "bleu", "--ref", ref, "--hyp", str(tmp_path / "gone.txt")]),
                 1, "gone.txt")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"a b c\nd \xff f\n")
    _one_message(run(["--metric", "bleu", "--ref", ref, "--hyp", str(bad)]), 1,
                 "bad.txt:2", "invalid UTF-8")
    _one_message(run(["--metric", "bleu", "--ref", ref], stdin=b"a b c\nd \xc3\n"), 1,
                 "<stdin>:2", "invalid UTF-8")
    _one_message(run(["--metric", "bleu", "--ref", ref], stdin=b""), 1, "<stdin>")
    gap = write(tmp_path / "gap.txt", ["a b c", "   "])
    _one_message(run(["--metric", "bleu", "--ref", gap, "--hyp", ref]), 1,
                 "gap.txt:2", "empty reference")

    tsv = write(tmp_path / "ref.tsv", ["a\tAH", "b\tB IY"])
    cases = [(["a\tAH", "b B IY"], "hyp.tsv:2", "no TAB"),
             (["a\tAH", "zz\tZ"], "hyp.tsv:2", "'zz' is not in"),
             (["a\tAH", "a\tEY"], "hyp.tsv:2", "first on line 1"),
             (["a\tAH\tAH"], "hyp.tsv:1", "more than one TAB")]
    for lines, place, what in cases:
        hyp = write(tmp_path / "hyp.tsv", lines)
        _one_message(run(["--metric", "per", "--ref", tsv, "--hyp", hyp]), 1, place, what)
    broken = write(tmp_path / "broken.tsv", ["a\tAH", "b\t"])
    hyp = write(tmp_path / "hyp.tsv", ["a\tAH"])
    _one_message(run(["--metric", "wer", "--ref", broken, "--hyp", hyp]), 1,
                 "broken.tsv:2", "empty pronunciation")


def test_bad_usage_exits_2(tmp_path):
    ref = write(tmp_path / "ref.txt", ["a b c"])
    tsv = write(tmp_path / "ref.tsv", ["a\tAH"])
    cases = [
        ([], "--metric is required"),
        (["--metric", "bleu"], "--ref is required"),
        (["--metric", "blue", "--ref", ref], "unknown metric 'blue'"),
        (["--metric", "bleu,", "--ref", ref], "unknown metric ''"),
        (["--metric", "bleu", "--ref", ref, "--frobnicate"], "unknown option --frobnicate"),
        (["--metric", "bleu", "--ref", ref, "stray"], "unexpected argument 'stray'"),
        (["--metric", "bleu", "--ref"], "--ref needs a value"),
        (["--metric", "bleu", "--ref", ref, "--width", "x"], "--width"),
        (["--metric", "bleu", "--ref", ref, "--format", "csv"],
         "--format expects auto, text or tsv, got 'csv'"),
        (["--metric", "bleu", "--ref", ref, "--hyp", ref, "--hyp", ref], "--hyp given twice"),
        (["--metric", "bleu", "--ref", tsv, "--hyp", tsv], "bleu scores sentences"),
        (["--metric", "per", "--ref", ref, "--hyp", ref], "per needs a word<TAB>phonemes TSV"),
        (["--metric", "wer", "--ref", tsv, "--ref", tsv, "--hyp", tsv], "one TSV"),
    ]
    for args, part in cases:
        _one_message(run(args, stdin=b"a b c\n"), 2, part)
