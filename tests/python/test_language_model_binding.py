"""attn.LanguageModel (python/attn/language_model.py) on a language model trained here for 20
steps: generate gives the lines attn generate --input writes, perplexity the numbers attn eval
--metric perplexity prints, and the refusals raise with the library's message."""
import random
import re
import subprocess

import pytest

import attn
from attn_program import ATTN, TINY_TRANSFORMER_D16

CONTEXT = 24


def run(*args):
    # Bytes, decoded here: text mode would turn a generated "\r" into a line break.
    result = subprocess.run([ATTN, *map(str, args)], capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.decode("utf-8")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lm_binding")
    rng = random.Random(4)
    book = folder / "book.txt"
    book.write_text("".join(" ".join("".join(rng.choice("abcdefgh") for _ in range(4))
                                     for _ in range(3)) + "\n" for _ in range(150)),
                    encoding="utf-8")
    path = folder / "lm.safetensors"
    run("train", "--task", "lm", "--train", book, "--out", path, *TINY_TRANSFORMER_D16,
        "--context", CONTEXT, "--max-steps", 20, "--threads", 1)
    return path


@pytest.mark.parametrize("options, flags", [
    ({"seed": 9, "max_new_tokens": 12, "temperature": 0.8, "top_k": 6},
     ["--seed", 9, "--max-new-tokens", 12, "--temperature", 0.8, "--top-k", 6]),
    ({"greedy": True, "max_new_tokens": 8}, ["--greedy", "--max-new-tokens", 8]),
    ({"seed": 1, "top_p": 0.7}, ["--seed", 1, "--top-p", 0.7]),
])
def test_generate_gives_attn_generate_inputs_lines(model, tmp_path, options, flags):
    prompts = ["abc", "", "head", "bad cab", "fade"] * 8  # 40: more than one batch of 32
    file = tmp_path / "prompts.txt"
    file.write_text("".join(p + "\n" for p in prompts))
    expected = run("generate", "--model", model, "--input", file, "--threads", 1,
                   *flags).split("\n")[:-1]
    with attn.LanguageModel(model) as lm:
        assert lm.generate(prompts, **options) == expected
        # A prompt's stream is its index: alone at index 0 it continues as line 1 does.
        assert lm.generate(prompts[:1], **options) == expected[:1]


def test_several_lines_when_not_stopping_at_the_end_of_a_line(model):
    with attn.LanguageModel(model) as lm:
        (text,) = lm.generate(["abc"], seed=3, max_new_tokens=15, stop_at_end_of_line=False)
    printed = run("generate", "--model", model, "--prompt", "abc", "--seed", 3,
                  "--max-new-tokens", 15, "--threads", 1)
    assert text == printed or text + "\n" == printed


def test_perplexity_is_attn_evals(model, tmp_path):
    text = "abcd efgh\nhead bead\n\ncafe\n"
    file = tmp_path / "held_out.txt"
    file.write_text(text)
    printed = run("eval", "--metric", "perplexity", "--model", model, "--ref", file,
                  "--width", 10)
    numbers = {name: float(value) for name, value in
               re.findall(r"^([\w/-]+) = ([\d.]+)", printed, flags=re.MULTILINE)}
    # attn eval scores the file's own fp32 weights; the binding's default is auto.
    with attn.LanguageModel(model, precision="fp32") as lm:
        score = lm.perplexity(text)
        assert lm.perplexity(text.rstrip("\n")) == score  # a final newline ends the last line
    assert score.cross_entropy == pytest.approx(numbers["cross-entropy"], abs=1e-9)
    assert score.perplexity == pytest.approx(numbers["perplexity"], abs=1e-9)
    assert score.bits_per_token == pytest.approx(numbers["bits/token"], abs=1e-9)
    assert score.bits_per_character == pytest.approx(numbers["bits/char"], abs=1e-9)
    assert score.tokens == 25 and score.characters == 26 and score.unknown == 0


def test_refusals(model, tmp_path):
    with attn.LanguageModel(model) as lm:
        with pytest.raises(ValueError, match="truncate"):
            lm.generate(["a" * CONTEXT])
        assert len(lm.generate(["a" * CONTEXT], truncate=True, max_new_tokens=1)) == 1
        with pytest.raises(ValueError, match="temperature"):
            lm.generate(["a"], temperature=0)
        with pytest.raises(ValueError, match="one string"):
            lm.generate("abc")
        with pytest.raises(ValueError, match="at least 2"):
            lm.perplexity("")
    with pytest.raises(ValueError, match="closed"):
        lm.generate(["a"])
    train = tmp_path / "pairs.tsv"
    train.write_text("ab\tba\n" * 10)
    translator = tmp_path / "translator.safetensors"
    run("train", "--train", train, "--out", translator, *TINY_TRANSFORMER_D16, "--max-steps", 1,
        "--threads", 1)
    with pytest.raises(ValueError, match="not a language model"):
        attn.LanguageModel(translator)
