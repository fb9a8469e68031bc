"""attn train --task classify --arch rnn (Yang et al. 2016's word encoder with attention pooling,
arch rnn_classifier) through every command a classifier has: it learns the task one letter
decides (test_classify_cli.py's) far above chance, with the plan line and the JSON log; attn
classify, attn eval, the Python binding and attn serve give the same classes; the pooling's
largest weight falls on the deciding letter (attn viz --kind pooling, Classifier.pooling,
/v1/attention); --config with arch rnn_classifier, resume and bf16 work; and what does not apply
to a recurrent classifier is refused with a message saying why."""
import json

import pytest

from test_classify_cli import metadata, refused, run, write_lines

RNN = ["--arch", "rnn", "--hidden", "24", "--embedding-dim", "16", "--threads", "2",
       "--dropout", "0", "--lr", "0.01"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rnn_classify")
    train = write_lines(folder / "train.tsv", 3000, 1)
    valid = write_lines(folder / "valid.tsv", 300, 2)
    return folder, train, valid


@pytest.fixture(scope="module")
def model(data):
    folder, _, _ = data
    out, log = folder / "rnn.safetensors", folder / "log.jsonl"
    r = run("train", "--task", "classify", "--train", folder / "train.tsv", "--valid",
            folder / "valid.tsv", "--out", out, *RNN, "--max-steps", 300, "--log", log)
    assert r.returncode == 0, r.stderr
    return out, r.stderr, log


def deciding_letter(text):
    """The letter that decides text's class when exactly one does (None otherwise)."""
    for letter in "abc":
        if text.count(letter) == 1:
            return letter
        if letter in text:
            return None
    return None


def classify(path, texts, *extra):
    r = run("classify", "--model", path, "--format", "json", "--threads", 1, *extra,
            stdin="".join(f"{text}\n" for text in texts))
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_learns_far_above_chance(data, model):
    folder, _, valid = data
    out, stderr, log = model
    assert "plan: cosine schedule over 300 updates" in stderr, stderr
    assert "training lines per class" in stderr
    config = json.loads(metadata(out)["attn_config"])
    assert config["arch"] == "rnn_classifier" and config["pooling"] == "attention"
    assert config["bidirectional"] is True and config["hidden"] == 24
    assert config["cell"] == "gru" and config["num_classes"] == 4
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(e.get("event") == "eval" for e in events), events[-3:]
    answers = classify(out, [text for _, text in valid])
    right = sum(a["label"] == label for a, (label, _) in zip(answers, valid))
    assert right / len(valid) >= 0.9, right / len(valid)
    predicted = folder / "predicted.txt"
    predicted.write_text("".join(f"{a['label']}\n" for a in answers), encoding="utf-8")
    gold = folder / "gold.txt"
    gold.write_text("".join(f"{label}\n" for label, _ in valid), encoding="utf-8")
    r = run("eval", "--metric", "accuracy", "--ref", gold, "--hyp", predicted)
    assert r.returncode == 0 and f"{100 * right / len(valid):.2f}" in r.stdout, r.stdout


def test_the_binding_classifies_as_the_program(data, model):
    from attn import Classifier
    _, _, valid = data
    out, _, _ = model
    texts = [text for _, text in valid[:40]]
    expected = classify(out, texts)
    with Classifier(out) as clf:
        got = clf.classify(texts)
    for probabilities, want in zip(got, expected):
        assert max(probabilities, key=probabilities.get) == want["label"]
        assert probabilities == pytest.approx(want["probabilities"], abs=1e-5)


def test_the_pooling_reads_the_deciding_letter(data, model):
    from attn import Classifier
    _, _, valid = data
    out, _, _ = model
    decided = [text for _, text in valid if deciding_letter(text)]
    on_the_letter = 0
    with Classifier(out) as clf:
        for text in decided:
            pooled = clf.pooling(text)
            assert [token for token, _ in pooled] == list(text)
            assert sum(w for _, w in pooled) == pytest.approx(1.0, abs=1e-5)
            best = max(range(len(pooled)), key=lambda i: pooled[i][1])
            on_the_letter += text[best] == deciding_letter(text)
    assert len(decided) >= 50 and on_the_letter >= 0.9 * len(decided), (on_the_letter,
                                                                         len(decided))


def test_viz_draws_the_pooling_and_refuses_the_encoder(model, tmp_path):
    out, _, _ = model
    r = run("viz", "--model", out, "--text", "ddadd", "--kind", "pooling")
    assert r.returncode == 0, r.stderr
    picture = tmp_path / "pooling.svg"
    r = run("viz", "--model", out, "--text", "ddadd", "--out", picture)
    assert r.returncode == 0 and picture.read_text().startswith("<"), r.stderr
    message = refused("viz", "--model", out, "--text", "ddadd", "--kind", "encoder")
    assert "no self-attention" in message and "--kind pooling" in message, message


@pytest.fixture(scope="module")
def server(model):
    from test_serve import Server
    s = Server(model[0], "--max-batch", "8", "--max-wait", "30")
    yield s
    assert s.stop() == 0


def test_serve_classifies_and_shows_the_pooling(model, server):
    out, _, _ = model
    texts = ["ddadd", "cbd", "ghe"]
    status, answer = server.request("POST", "/v1/classify", {"text": texts})
    assert status == 200, answer
    expected = classify(out, texts)
    assert [r["label"] for r in answer["results"]] == [e["label"] for e in expected]
    status, pooling = server.request("POST", "/v1/attention", {"text": "ddadd"})
    assert status == 200 and pooling["kind"] == "pooling", pooling
    assert pooling["columns"] == list("ddadd")
    weights = pooling["weights"][0]
    assert max(range(5), key=lambda i: weights[i]) == 2, weights
    status, answer = server.request("POST", "/v1/attention",
                                    {"text": "ddadd", "kind": "encoder"})
    assert status == 400 and "no self-attention" in answer["error"], answer
    status, described = server.request("GET", "/v1/model")
    assert status == 200 and described["architecture"] == "rnn_classifier"
    assert described["classes"] == ["alpha", "bravo", "charlie", "none"]


def test_the_page_shows_the_pooling(server, tmp_path):
    from test_serve_page import CHROMIUM, open_page
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    status, answer = server.request("POST", "/v1/attention", {"text": "dbdd"})
    assert status == 200, answer
    dom = open_page(tmp_path, server.port, text="dbdd", kind="pooling")
    assert dom.state == "ready", dom.error
    assert dom.translation == f"{answer['label']} ({answer['probability']:.2f})"
    assert len(dom.cells) == 4
    for (i, j), weight in dom.cells.items():
        assert i == 0 and weight == pytest.approx(answer["weights"][0][j], abs=1e-5)


def test_config_file_resume_bf16_and_ema(data, tmp_path):
    folder, _, _ = data
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"version": 1, "arch": "rnn_classifier", "cell": "lstm",
                                  "hidden": 8, "embedding_dim": 8, "pooling": "mean",
                                  "src_vocab": 1, "num_classes": 1}), encoding="utf-8")
    out = tmp_path / "lstm.safetensors"
    r = run("train", "--task", "classify", "--train", folder / "train.tsv", "--out", out,
            "--config", config, "--max-steps", 6, "--checkpoint-every", 3, "--no-valid",
            "--threads", 2, "--precision", "bf16", "--ema", "1e-3")
    assert r.returncode == 0, r.stderr
    assert "precision bf16" in r.stderr and "moving average (ema 0.001)" in r.stderr, r.stderr
    written = json.loads(metadata(out)["attn_config"])
    assert written["cell"] == "lstm" and written["pooling"] == "mean"
    r = run("train", "--task", "classify", "--train", folder / "train.tsv", "--out", out,
            "--resume", tmp_path / "lstm.last.safetensors", "--max-steps", 9, "--no-valid",
            "--threads", 2)
    assert r.returncode == 0 and "resuming at step 6" in r.stderr, r.stderr
    assert len(classify(out, ["abc", "hhh"], "--precision", "bf16")) == 2


@pytest.mark.parametrize("extra, says", [
    (["--pooling", "cls"], "--pooling cls needs --arch transformer"),
    (["--init", "enc.safetensors"], "--arch rnn trains its recurrent encoder from scratch"),
    (["--heads", "2"], "--heads applies to --arch transformer only"),
    (["--d-model", "32"], "--d-model applies to --arch transformer only"),
    (["--norm", "rms"], "--norm applies to --arch transformer only"),
    (["--attention", "luong-dot"], "the rnn classifier is its encoder alone"),
    (["--reverse-source"], "the rnn classifier is its encoder alone"),
])
def test_what_does_not_apply_is_refused(data, tmp_path, extra, says):
    folder, _, _ = data
    out = tmp_path / "no.safetensors"
    message = refused("train", "--task", "classify", "--arch", "rnn", "--train",
                      folder / "train.tsv", "--out", out, "--max-steps", 2, *extra)
    assert says in message, message
    assert not out.exists()


def test_config_and_arch_must_agree(data, tmp_path):
    folder, _, _ = data
    config = tmp_path / "transformer.json"
    config.write_text(json.dumps({"version": 1, "arch": "transformer_classifier", "d_model": 16,
                                  "num_heads": 2, "ffn_dim": 32, "encoder_layers": 1}),
                      encoding="utf-8")
    message = refused("train", "--task", "classify", "--arch", "rnn", "--config", config,
                      "--train", folder / "train.tsv", "--out", tmp_path / "x.safetensors",
                      "--max-steps", 2)
    assert "contradicts --config" in message, message
    config.write_text(json.dumps({"version": 1, "arch": "rnn_classifier", "pooling": "cls"}),
                      encoding="utf-8")
    message = refused("train", "--task", "classify", "--config", config, "--train",
                      folder / "train.tsv", "--out", tmp_path / "x.safetensors", "--max-steps", 2)
    assert "cls" in message, message
    message = refused("train", "--task", "mlm", "--arch", "rnn", "--train", folder / "train.tsv",
                      "--out", tmp_path / "x.safetensors", "--max-steps", 2)
    assert "leave out --arch rnn" in message, message
