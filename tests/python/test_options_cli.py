"""The option parser every attn command shares: --opt=value and --opt value alike, one line
naming the option for a usage error (exit 2) with the nearest known option for a typo, and the
same --help layout (exit 0) for every command."""
import subprocess

import pytest

from attn_program import ATTN


COMMANDS = [["train"], ["translate"], ["generate"], ["classify"], ["viz"], ["eval"], ["info"],
            ["bench", "attention"], ["bench", "gemm"], ["bench", "decode"], ["bench", "generate"],
            ["bench", "train"], ["average"]]


def run(*args, stdin=b""):
    return subprocess.run([ATTN, *map(str, args)], input=stdin, capture_output=True,
                          timeout=120)


def usage_error(result, *parts):
    """One line on stderr starting with "attn ", containing every part; exit 2, no output."""
    message = result.stderr.decode()
    assert result.returncode == 2, (result.returncode, message)
    assert result.stdout == b""
    assert message.count("\n") == 1 and message.startswith("attn "), message
    for part in parts:
        assert part in message, (part, message)
    return message.rstrip("\n")


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_has_one_layout(command):
    for flag in ("--help", "-h"):
        result = run(*command, flag)
        assert result.returncode == 0 and result.stderr == b"", result.stderr
        text = result.stdout.decode()
        assert text.startswith("usage: attn " + " ".join(command)), text
        assert "\n  --help                     this text\n" in text, text
        option_lines = [line for line in text.splitlines() if line.startswith("  --")]
        assert option_lines, text
        for line in option_lines:
            name = line.split()[0]
            # the help column starts at column 29, or on the next line after a long name
            assert len(line) <= 80, line
            assert line[28:29] == " " or len(line.split()) <= 2, line
            assert name.count("-") >= 2, line


def test_help_wins_over_a_bad_value_and_shows_defaults():
    result = run("translate", "--beam", "0", "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert "hypotheses kept per sentence; 1: greedy [5]" in text
    assert "--batch N                  sentences decoded together, at most [32]" in text


def test_attn_and_bench_help():
    for args in (["--help"], ["bench", "--help"]):
        result = run(*args)
        assert result.returncode == 0 and result.stdout.startswith(b"usage: attn"), result


@pytest.mark.parametrize("args, typo, meant", [
    (["translate"], "--bem", "--beam"),
    (["translate"], "--nbset", "--nbest"),
    (["train"], "--max-step", "--max-steps"),
    (["train"], "--lable-smoothing", "--label-smoothing"),
    (["viz"], "--colourmap", "--colormap"),
    (["eval"], "--metrc", "--metric"),
    (["bench", "decode"], "--rep", "--reps"),
    (["bench", "gemm"], "--thread", "--threads"),
    (["bench", "attention"], "--quik", "--quick"),
    (["bench", "train"], "--step", "--steps"),
    (["average"], "--outt", "--out"),
])
def test_unknown_option_names_the_nearest(args, typo, meant):
    message = usage_error(run(*args, typo, "1"))
    assert message == f"attn {' '.join(args)}: unknown option {typo} (did you mean {meant}?)"
    # with =value too, the name alone is compared
    usage_error(run(*args, f"{typo}=1"), f"unknown option {typo} (did you mean {meant}?)")


def test_unknown_option_far_from_all_gets_the_help_hint():
    usage_error(run("translate", "--frobnicate"), "unknown option --frobnicate",
                "see 'attn translate --help'")


def test_unknown_command_and_benchmark():
    assert run("tarnslate").stderr.decode() == (
        "attn: unknown command 'tarnslate' (did you mean translate?)\n")
    result = run("bench", "gem")
    assert result.returncode == 2
    assert result.stderr.decode() == "attn bench: unknown benchmark 'gem' (did you mean gemm?)\n"


@pytest.mark.parametrize("args, option, what", [
    (["translate", "--model", "m"], "--beam", "an integer in [1, 1024]"),
    (["translate"], "--model", "FILE"),
    (["translate"], "--alpha", "a number in [0, 100]"),
    (["train", "--train", "t.tsv", "--out", "m"], "--schedule",
     "inverse-sqrt, noam, cosine or constant"),
    (["train", "--train", "t.tsv"], "--seed", "an integer >= 0"),
    (["viz"], "--head", "an integer in [0, 1000000] or all"),
    (["eval"], "--ref", "FILE"),
    (["bench", "decode"], "--batch", "1, 64 or both"),
    (["bench", "decode"], "--min-seconds", "a number in [0.001, 600]"),
    (["bench", "generate"], "--batch", "1, 32 or both"),
    (["bench", "gemm"], "--isa", "reference, portable, avx2, avx512, neon, neon-dotprod or neon-bf16"),
])
def test_missing_value_says_what_the_option_takes(args, option, what):
    usage_error(run(*args, option), f"{option} needs a value: {what}")


@pytest.mark.parametrize("args, bad, what", [
    (["translate", "--model", "m"], ["--beam", "0"], "--beam expects an integer in [1, 1024], got '0'"),
    (["translate", "--model", "m"], ["--beam=x"], "--beam expects an integer in [1, 1024], got 'x'"),
    (["translate", "--model", "m"], ["--alpha", "nan"], "--alpha expects a number in [0, 100]"),
    (["train", "--train", "t.tsv", "--out", "m"], ["--epochs", "2.5"],
     "--epochs expects an integer, got '2.5'"),
    (["train", "--train", "t.tsv", "--out", "m"], ["--dropout", "x"],
     "--dropout expects a number, got 'x'"),
    (["train", "--train", "t.tsv", "--out", "m"], ["--log-every=0"],
     "--log-every expects an integer >= 1, got '0'"),
    (["train", "--train", "t.tsv", "--out", "m"], ["--arch", "lstm"],
     "--arch expects transformer or rnn, got 'lstm'"),
    (["viz", "--matrix", "x"], ["--style", "plaid"],
     "--style expects shades, color, colour or ascii, got 'plaid'"),
    (["viz", "--matrix", "x"], ["--index", "-1"], "--index expects an integer in [0, 1000000000] or all"),
    (["eval", "--metric", "bleu", "--ref", "r"], ["--width", "18"],
     "--width expects an integer in [0, 17], got '18'"),
    (["bench", "attention"], ["--reps", "65"], "--reps expects an integer in [1, 64], got '65'"),
    (["bench", "train"], ["--config=huge"], "--config expects small, base, both, gpt2 or classify, got 'huge'"),
])
def test_bad_value_says_what_the_option_takes(args, bad, what):
    usage_error(run(*args, *bad), what)


def test_flags_take_no_value_and_options_come_once():
    usage_error(run("eval", "--metric", "bleu", "--ref", "r", "--score-only=yes"),
                "--score-only takes no value")
    usage_error(run("translate", "--model", "m", "--beam", "2", "--beam=3"), "--beam given twice")
    usage_error(run("info", "extra"), "unexpected argument 'extra'")


def test_equals_form_means_the_same(tmp_path):
    ref = tmp_path / "ref.txt"
    ref.write_text("the cat sat on the mat\nhello there\n")
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("the cat sat on a mat\nhello there\n")
    spaced = run("eval", "--metric", "bleu,chrf", "--ref", ref, "--hyp", hyp, "--width", "3")
    joined = run("eval", "--metric=bleu,chrf", f"--ref={ref}", f"--hyp={hyp}", "--width=3")
    assert spaced.returncode == 0, spaced.stderr
    assert joined.returncode == 0 and joined.stdout == spaced.stdout, joined.stderr
    # a value may itself hold '=' and start with '-'
    matrix = tmp_path / "m=1.json"
    matrix.write_text('{"source": ["a", "b"], "target": ["x"], "weights": [[0.25, 0.75]]}')
    a = run("viz", "--matrix", matrix, "--style", "ascii", "--width", "40", "--vmin", "-1")
    b = run("viz", f"--matrix={matrix}", "--style=ascii", "--width=40", "--vmin=-1")
    assert a.returncode == 0, a.stderr
    assert b.returncode == 0 and a.stdout == b.stdout, b.stderr
