"""attn translate (beam search, n-best, streaming, alignments) and attn viz --model from the
command line, on small Transformer and RNN models trained here for a few seconds."""
import ctypes
import json
import random
import select
import subprocess

import pytest

from attn_program import ATTN, TINY_TRANSFORMER_D32


def run(*args, stdin=None, timeout=120):
    return subprocess.run([ATTN, *map(str, args)], input=stdin, capture_output=True,
                          timeout=timeout)


def words(rng, n, alphabet="abcdefgh", lo=2, hi=6):
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A reverse-the-word Transformer trained briefly (good enough that most outputs are right
    and the search has real choices), and an RNN encoder-decoder with Bahdanau attention and
    random weights but the same tokenizers (this build's attn train does not train rnn models
    yet), which exercises the rnn paths end to end."""
    folder = tmp_path_factory.mktemp("models")
    rng = random.Random(5)
    train = folder / "train.tsv"
    train.write_text("".join(f"{w}\t{w[::-1]}\n" for w in words(rng, 3000)), encoding="utf-8")
    transformer = folder / "transformer.safetensors"
    result = run("train", "--train", train, "--out", transformer, *TINY_TRANSFORMER_D32,
                 "--dropout", "0",
                 "--label-smoothing", "0", "--lr", "3e-3", "--warmup", "30", "--max-steps", "250",
                 "--batch-tokens", "800", "--schedule", "inverse-sqrt", "--no-valid",
                 "--threads", "2", timeout=600)
    assert result.returncode == 0, result.stderr.decode()
    rnn = folder / "rnn.safetensors"
    save_random_rnn(transformer, rnn)
    return {"transformer": transformer, "rnn": rnn}


def save_random_rnn(tokenizers_from, path):
    from attn._lib import lib  # noqa: E402 (needs ATTN_LIBRARY)
    data = tokenizers_from.read_bytes()
    header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])["__metadata__"]
    source, target = header["attn_src_tokenizer"], header["attn_tgt_tokenizer"]
    config = {"version": 1, "arch": "rnn", "hidden": 24, "embedding_dim": 16,
              "attention_dim": 16, "dropout": 0.0, "max_len": 64, "attention": "bahdanau",
              "src_vocab": len(json.loads(source)["vocab"]["tokens"]),
              "tgt_vocab": len(json.loads(target)["vocab"]["tokens"])}
    config_struct = ctypes.create_string_buffer(4096)  # room for attn_model_config
    model = ctypes.c_void_p()

    def ok(status, what):
        assert status == 0, (what, lib.attn_last_error())

    ok(lib.attn_model_config_from_json(json.dumps(config).encode(), config_struct), "config")
    ok(lib.attn_model_create(config_struct, ctypes.byref(model)), "create")
    lib.attn_model_init.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    ok(lib.attn_model_init(model, 3), "init")

    class Entry(ctypes.Structure):
        _fields_ = [("key", ctypes.c_char_p), ("value", ctypes.c_char_p)]

    entries = (Entry * 2)(Entry(b"attn_src_tokenizer", source.encode()),
                          Entry(b"attn_tgt_tokenizer", target.encode()))
    lib.attn_model_save.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                                    ctypes.c_size_t]
    ok(lib.attn_model_save(model, str(path).encode(), entries, 2), "save")
    lib.attn_model_destroy.argtypes = [ctypes.c_void_p]
    lib.attn_model_destroy(model)


HELD_OUT = words(random.Random(99), 30)


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_one_line_per_input_in_order_whatever_the_batch(models, arch):
    lines = HELD_OUT[:10] + [""] + HELD_OUT[10:20]
    text = ("\n".join(lines) + "\n").encode()
    outputs = {}
    for beam, batch in [(1, 32), (1, 1), (4, 32), (4, 3), (4, 1)]:
        result = run("translate", "--model", models[arch], "--beam", beam, "--batch", batch,
                     stdin=text)
        assert result.returncode == 0, result.stderr.decode()
        out = result.stdout.decode().split("\n")
        assert out[-1] == "" and len(out) == len(lines) + 1
        assert out[10] == ""
        outputs[beam, batch] = out
    # Batching changes nothing: a batch decodes each sentence as if alone.
    assert outputs[1, 32] == outputs[1, 1]
    assert outputs[4, 32] == outputs[4, 3] == outputs[4, 1]
    if arch == "transformer":
        reversed_right = sum(o == w[::-1] for w, o in zip(lines, outputs[4, 32]) if w)
        assert reversed_right >= 15, outputs[4, 32]


def test_streams_while_stdin_stays_open(models):
    process = subprocess.Popen([ATTN, "translate", "--model", str(models["transformer"]),
                                "--beam", "3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        got = []
        for word in HELD_OUT[:3]:
            process.stdin.write((word + "\n").encode())
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], 60)
            assert ready, f"no output for {word!r} while stdin is open"
            got.append(process.stdout.readline().decode().rstrip("\n"))
        process.stdin.close()
        rest = process.stdout.read().decode()
        assert process.wait(timeout=60) == 0, process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert rest == ""
    alone = run("translate", "--model", models["transformer"], "--beam", "3",
                stdin=("\n".join(HELD_OUT[:3]) + "\n").encode())
    assert alone.stdout.decode().split("\n")[:3] == got


def test_nbest_lines(models):
    lines = HELD_OUT[:5] + [""]
    result = run("translate", "--model", models["transformer"], "--beam", "5", "--nbest", "3",
                 "--alpha", "0.6", stdin=("\n".join(lines) + "\n").encode())
    assert result.returncode == 0, result.stderr.decode()
    rows = [line.split("\t") for line in result.stdout.decode().splitlines()]
    assert len(rows) == 3 * len(lines) and all(len(row) == 3 for row in rows)
    best = run("translate", "--model", models["transformer"], "--beam", "5", "--alpha", "0.6",
               stdin=("\n".join(lines) + "\n").encode()).stdout.decode().split("\n")
    for i in range(len(lines)):
        group = rows[3 * i:3 * i + 3]
        assert [int(row[0]) for row in group] == [i + 1] * 3
        scores = [float(row[1]) for row in group]
        assert scores == sorted(scores, reverse=True)
        assert group[0][2] == best[i]
        if lines[i]:
            assert all(s < 0 for s in scores) and len({row[2] for row in group}) == 3
        else:
            assert group == [[str(i + 1), "0.000000", ""]] * 3


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_alignment_file(models, arch, tmp_path):
    lines = HELD_OUT[:4] + ["", HELD_OUT[4]]
    alignment = tmp_path / "align.jsonl"
    result = run("translate", "--model", models[arch], "--beam", "4", "--alignment", alignment,
                 stdin=("\n".join(lines) + "\n").encode())
    assert result.returncode == 0, result.stderr.decode()
    outputs = result.stdout.decode().split("\n")
    records = [json.loads(line) for line in alignment.read_text().splitlines()]
    # one record per non-empty line, naming its line
    assert [r["line"] for r in records] == [i + 1 for i, line in enumerate(lines) if line]
    for record in records:
        line, output = lines[record["line"] - 1], outputs[record["line"] - 1]
        assert record["source"] == list(line)
        target = record["target"]
        words_out = target[:-1] if target and target[-1] == "</s>" else target
        assert "".join(words_out) == output
        assert len(record["weights"]) == len(target)
        for row in record["weights"]:
            assert len(row) == len(line) and abs(sum(row) - 1) < 1e-4
    layers = {r["layer"] for r in records}
    assert layers == {0}
    # attn viz draws a record of the file
    drawn = run("viz", "--matrix", alignment, "--index", "0", "--style", "ascii")
    assert drawn.returncode == 0, drawn.stderr.decode()


def test_input_and_output_files_match_stdin_and_stdout(models, tmp_path):
    lines = HELD_OUT[:6] + ["", HELD_OUT[6]]
    text = "\n".join(lines) + "\n"
    piped = run("translate", "--model", models["transformer"], stdin=text.encode())
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text(text, encoding="utf-8")
    files = run("translate", "--model", models["transformer"], "--input", source, "--output",
                target)
    assert files.returncode == 0 and files.stdout == b"", files.stderr.decode()
    assert target.read_bytes() == piped.stdout
    missing = run("translate", "--model", models["transformer"], "--input", tmp_path / "no.txt")
    assert missing.returncode == 1 and b"--input" in missing.stderr and b"no.txt" in missing.stderr


def test_tsv_and_marian_formats(models):
    lines = HELD_OUT[:5] + [""]
    stdin = ("\n".join(lines) + "\n").encode()
    model = models["transformer"]
    plain = run("translate", "--model", model, stdin=stdin).stdout.decode().splitlines()
    tsv = run("translate", "--model", model, "--format", "tsv", stdin=stdin)
    assert tsv.returncode == 0, tsv.stderr.decode()
    assert tsv.stdout.decode().splitlines() == [f"{s}\t{t}" for s, t in zip(lines, plain)]
    nbest = run("translate", "--model", model, "--nbest", "3", stdin=stdin).stdout.decode()
    marian = run("translate", "--model", model, "--nbest", "3", "--format", "marian", stdin=stdin)
    assert marian.returncode == 0, marian.stderr.decode()
    # The same hypotheses: "LINE<TAB>SCORE<TAB>TEXT" against "I ||| TEXT ||| SCORE", I from 0.
    expected = [f"{int(n) - 1} ||| {text} ||| {score}"
                for n, score, text in (row.split("\t") for row in nbest.splitlines())]
    assert marian.stdout.decode().splitlines() == expected
    one = run("translate", "--model", model, "--format", "marian", stdin=stdin).stdout.decode()
    assert one.splitlines()[0] == expected[0]
    refused = run("translate", "--model", model, "--nbest", "3", "--format", "text", stdin=stdin)
    assert refused.returncode == 2 and b"--format" in refused.stderr


def words_of(tokens, kind):
    """The word of each token, as the Moses alignment merges them: BPE pieces (SentencePiece's)
    from one starting with its space mark U+2581 to the next, characters between spaces, word
    tokens each."""
    word, words, inside = [], -1, False
    for token in tokens:
        if kind == "char" and token.isspace():
            word.append(None)
            inside = False
            continue
        if not inside or kind == "word" or (kind == "bpe" and token.startswith("\u2581")):
            words += 1
        word.append(words)
        inside = kind in ("char", "bpe")
    return word


@pytest.fixture(scope="module")
def bpe_model(tmp_path_factory):
    """Sentences of a few words, each target the source's words in reverse order, with BPE on
    both sides so that words come in pieces."""
    folder = tmp_path_factory.mktemp("bpe")
    rng = random.Random(8)
    train = folder / "train.tsv"
    sentences = [" ".join(words(rng, rng.randint(2, 4), lo=3, hi=7)) for _ in range(600)]
    train.write_text("".join(f"{s}\t{' '.join(s.split()[::-1])}\n" for s in sentences))
    model = folder / "bpe.safetensors"
    result = run("train", "--train", train, "--out", model, *TINY_TRANSFORMER_D32,
                 "--src-tokens", "bpe:40", "--tgt-tokens",
                 "bpe:40", "--max-steps", "60", "--threads", "2", timeout=600)
    assert result.returncode == 0, result.stderr.decode()
    return model


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_moses_alignment_pairs_words(models, bpe_model, kind, tmp_path):
    model = models["transformer"] if kind == "char" else bpe_model
    lines = ([*HELD_OUT[:3], "", f"{HELD_OUT[3]} {HELD_OUT[4]}"] if kind == "char" else
             [" ".join(HELD_OUT[i:i + 3]) for i in range(0, 12, 3)] + [""])
    stdin = ("\n".join(lines) + "\n").encode()
    json_file, moses_file = tmp_path / "a.jsonl", tmp_path / "a.moses"
    result = run("translate", "--model", model, "--alignment", json_file, stdin=stdin)
    assert result.returncode == 0, result.stderr.decode()
    result = run("translate", "--model", model, "--alignment", moses_file, "--alignment-format",
                 "moses", stdin=stdin)
    assert result.returncode == 0, result.stderr.decode()
    moses = moses_file.read_text().split("\n")
    assert len(moses) == len(lines) + 1 and moses[-1] == ""  # one line per input line
    records = {r["line"]: r for r in map(json.loads, json_file.read_text().splitlines())}
    pieces = 0
    for number, line in enumerate(lines, 1):
        if number not in records:
            assert moses[number - 1] == ""
            continue
        record = records[number]
        source, target = record["source"], record["target"]
        length = len(target) - (target[-1:] == ["</s>"])
        src_word, tgt_word = words_of(source, kind), words_of(target[:length], kind)
        pairs = set()
        for t in range(length):
            row = record["weights"][t]
            candidates = [j for j in range(len(source)) if src_word[j] is not None]
            best = max(candidates, key=lambda j: (row[j], -j))
            if tgt_word[t] is not None:
                pairs.add((src_word[best], tgt_word[t]))
        expected = " ".join(f"{i}-{j}" for i, j in sorted(pairs))
        assert moses[number - 1] == expected, (line, source, target)
        assert all(i < len(line.split()) for i, _ in pairs)
        pieces += len(source) - len(line.split())
    if kind == "bpe":
        assert pieces > 0, "no word came in pieces: the test shows no merging"


def test_unknown_tokens_warn_once(models):
    result = run("translate", "--model", models["transformer"],
                 stdin="abXc\nd€e\nabc\n".encode())
    assert result.returncode == 0, result.stderr.decode()
    assert len(result.stdout.decode().split("\n")) == 4
    warnings = [line for line in result.stderr.decode().splitlines() if "<unk>" in line]
    assert len(warnings) == 1 and "stdin:1" in warnings[0], result.stderr.decode()


def test_bad_input_gives_one_clear_message(models, tmp_path):
    def one_message(result, *needles, code=1):
        err = result.stderr.decode()
        assert result.returncode == code, err
        assert len(err.strip().splitlines()) == 1, err
        for needle in needles:
            assert needle in err, err

    model = models["transformer"]
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(model.read_bytes()[:500])
    one_message(run("translate", "--model", broken, stdin=b"abc\n"), "broken.safetensors")
    one_message(run("translate", "--model", tmp_path / "none.safetensors", stdin=b"abc\n"),
                "none.safetensors")
    one_message(run("translate", "--model", model, "--beam", "2", "--nbest", "3"),
                "--nbest", code=2)
    one_message(run("translate", "--model", model, "--beam", "0"), "--beam", code=2)
    one_message(run("translate", "--model", model, "--alpha", "-1"), "--alpha", code=2)
    one_message(run("translate", "--model", model, "--max-len-ratio", "x"), "--max-len-ratio",
                code=2)
    one_message(run("translate", "--model", model, "--alignment", tmp_path / "no" / "a.jsonl",
                    stdin=b"abc\n"), "a.jsonl")
    one_message(run("translate", "--model", model, "--alignment", tmp_path / "a.jsonl",
                    "--alignment-layer", "5", stdin=b"abc\n"), "--alignment-layer")
    result = run("translate", "--model", model, "--help")
    assert result.returncode == 0
    for flag in ["--beam", "--nbest", "--batch", "--alpha", "--max-len-ratio",
                 "--max-len-offset", "--alignment", "--threads"]:
        assert flag + " " in result.stdout.decode(), flag


def test_bad_lines_do_not_stop_the_good_ones(models):
    """40 good lines, one that is not UTF-8, one too long for the model, then good ones: every
    good line is translated (as alone), each bad one gets an empty line and a message with its
    number, and the exit status says that some failed."""
    model = models["transformer"]
    good = [b"abc", b"cab", b"bca"]
    lines = [good[i % 3] for i in range(40)] + [b"ab\xffc", b"cab", b"x" * 5000, b"bca"]
    result = run("translate", "--model", model, "--beam", "1", "--batch", "16",
                 stdin=b"\n".join(lines) + b"\n")
    err = result.stderr.decode()
    assert result.returncode == 1, err
    out = result.stdout.split(b"\n")[:-1]
    assert len(out) == len(lines), (len(out), err)
    alone = {g: run("translate", "--model", model, "--beam", "1", stdin=g + b"\n").stdout
             for g in good}
    for number, (line, text) in enumerate(zip(lines, out), 1):
        if number in (41, 43):
            assert text == b"", (number, text)
        else:
            assert text + b"\n" == alone[line], (number, text)
    assert "stdin:41: not valid UTF-8 text" in err, err
    assert "stdin:43:" in err and "max_len" in err, err
    assert "2 of 44 lines could not be translated" in err, err


def test_viz_model_draws_the_translation_translate_gives(models):
    """Both default to the same beam: where greedy search and beam 5 disagree, the picture's
    title shows beam 5's output, the one attn translate writes."""
    model = models["rnn"]
    stdin = "".join(w + "\n" for w in HELD_OUT).encode()
    beam = run("translate", "--model", model, stdin=stdin).stdout.decode().splitlines()
    greedy = run("translate", "--model", model, "--beam", "1",
                 stdin=stdin).stdout.decode().splitlines()
    differing = [i for i in range(len(HELD_OUT)) if beam[i] != greedy[i]]
    assert differing, "no input where beam 5 and greedy disagree: the test shows nothing"
    for i in differing[:3]:
        shown = run("viz", "--model", model, "--text", HELD_OUT[i], "--style", "ascii",
                    "--width", "200").stdout.decode().splitlines()[0]
        assert shown.endswith(" " + beam[i]), (shown, beam[i], greedy[i])


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_viz_model(models, arch, tmp_path):
    model = models[arch]
    word = HELD_OUT[0]
    terminal = run("viz", "--model", model, "--text", word)
    assert terminal.returncode == 0, terminal.stderr.decode()
    shown = terminal.stdout.decode()
    translated = run("translate", "--model", model,
                     stdin=(word + "\n").encode()).stdout.decode().strip()
    assert f"{word} → {translated}" in shown
    svg = tmp_path / "a.svg"
    result = run("viz", "--model", model, "--text", word, "--out", svg)
    assert result.returncode == 0, result.stderr.decode()
    assert svg.read_text().lstrip().startswith(("<svg", "<?xml"))
    png = tmp_path / "a.png"
    result = run("viz", "--model", model, "--text", word, "--out", png, "--beam", "3")
    assert result.returncode == 0, result.stderr.decode()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    heads = run("viz", "--model", model, "--text", word, "--head", "all", "--style", "ascii")
    assert heads.returncode == 0, heads.stderr.decode()
    if arch == "transformer":
        assert "head 0" in heads.stdout.decode() and "head 1" in heads.stdout.decode()
    for kind in ["self", "encoder"]:
        result = run("viz", "--model", model, "--text", word, "--kind", kind, "--style", "ascii",
                     "--width", "200")
        if arch == "rnn":
            assert result.returncode == 2 and kind.encode() in result.stderr
            continue
        assert result.returncode == 0, result.stderr.decode()
        lines = result.stdout.decode().splitlines()
        assert lines[0].startswith(word) and lines[0].endswith(translated)  # ascii: no arrow
        assert lines[1].startswith(("decoder" if kind == "self" else "encoder") + " self-attention")
        header = lines[2].split()
        # Self: the tokens the decoder read (<s>, then the output's characters) along the top
        # and the token each position predicts down the side; encoder: the source on both axes.
        expected = ["<s>", *translated] if kind == "self" else list(word)
        assert header == expected, (header, expected)
        rows = [line.split()[0] for line in lines[3:3 + len(expected)]]
        assert rows == ([*translated, "</s>"] if kind == "self" else list(word))
    result = run("viz", "--model", model, "--text", word, "--kind", "diagonal")
    assert result.returncode == 2 and b"--kind" in result.stderr
    result = run("viz", "--model", model, "--text", word, "--layer", "7")
    assert result.returncode == 2 and b"--layer" in result.stderr
    result = run("viz", "--model", model)
    assert result.returncode == 2 and b"--text" in result.stderr
