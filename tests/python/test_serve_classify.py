"""attn serve on a classifier (attn train --task classify, a few seconds on a task one letter
decides): POST /v1/classify against attn classify --format json, clients at once batched with
their own answers, the pooling's weights against the Python binding's, the classifier's views
on /v1/attention (pooling and encoder) and on the page in a real browser, and the refusals."""
import json
import threading

import pytest

from attn_program import TINY_TRANSFORMER_D32
from test_classify_cli import run, write_lines
from test_serve import Server
from test_serve_page import CHROMIUM, open_page


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve_classify")
    write_lines(folder / "train.tsv", 3000, 1)
    valid = write_lines(folder / "valid.tsv", 40, 2)
    path = folder / "clf.safetensors"
    r = run("train", "--task", "classify", "--pooling", "attention", "--train",
            folder / "train.tsv", "--out", path, *TINY_TRANSFORMER_D32, "--dropout", 0,
            "--threads", 2, "--time-limit", 6, "--no-valid")
    assert r.returncode == 0, r.stderr
    return path, [text for _, text in valid]


@pytest.fixture(scope="module")
def server(classifier):
    s = Server(classifier[0], "--max-batch", "8", "--max-wait", "30", "--max-sentences", "50")
    yield s
    assert s.stop() == 0


def classify_cli(path, texts):
    r = run("classify", "--model", path, "--format", "json", "--threads", 1,
            stdin="".join(f"{text}\n" for text in texts))
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_answers_are_attn_classifys(classifier, server):
    path, texts = classifier
    status, answer = server.request("POST", "/v1/classify", {"text": texts})
    assert status == 200, answer
    expected = classify_cli(path, texts)
    assert [r["label"] for r in answer["results"]] == [e["label"] for e in expected]
    for got, want in zip(answer["results"], expected):
        assert got["probability"] == pytest.approx(want["probability"], abs=1e-5)
        assert got["probabilities"] == pytest.approx(want["probabilities"], abs=1e-5)


def test_clients_at_once_get_their_own_answers(classifier, server):
    _, texts = classifier
    alone = [server.request("POST", "/v1/classify", {"text": [text]})[1]["results"][0]
             for text in texts[:12]]
    answers = [None] * 12

    def ask(i):
        answers[i] = server.request("POST", "/v1/classify", {"text": [texts[i]]})

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (status, answer), single in zip(answers, alone):
        assert status == 200, answer
        assert answer["results"][0]["label"] == single["label"]
        assert answer["results"][0]["probability"] == pytest.approx(single["probability"],
                                                                    abs=1e-5)


def test_pooling_weights_are_the_bindings(classifier, server):
    from attn import Classifier
    path, texts = classifier
    status, answer = server.request("POST", "/v1/classify", {"text": texts[:5], "pooling": True})
    assert status == 200, answer
    with Classifier(path) as clf:
        for text, result in zip(texts, answer["results"]):
            pooled = clf.pooling(text)
            assert result["tokens"] == [token for token, _ in pooled] == list(text)
            assert result["pooling"] == pytest.approx([w for _, w in pooled], abs=1e-6)
            assert sum(result["pooling"]) == pytest.approx(1.0, abs=1e-5)
    status, answer = server.request("POST", "/v1/classify", {"text": texts[:1]})
    assert "pooling" not in answer["results"][0] and "tokens" not in answer["results"][0]


def test_attention_shows_the_pooling_and_the_encoder(server):
    status, classified = server.request("POST", "/v1/classify",
                                        {"text": ["ddadd"], "pooling": True})
    assert status == 200, classified
    status, pooling = server.request("POST", "/v1/attention", {"text": "ddadd"})
    assert status == 200, pooling
    result = classified["results"][0]
    assert pooling["kind"] == "pooling" and pooling["label"] == result["label"] == "alpha"
    assert pooling["rows"] == ["alpha"] and pooling["columns"] == list("ddadd")
    assert pooling["weights"][0] == pytest.approx(result["pooling"], abs=1e-6)
    status, encoder = server.request("POST", "/v1/attention",
                                     {"text": "ddadd", "kind": "encoder", "head": 1})
    assert status == 200, encoder
    assert encoder["rows"] == encoder["columns"] == list("ddadd") and encoder["head"] == 1
    for row in encoder["weights"]:
        assert sum(row) == pytest.approx(1.0, abs=1e-5)
    status, answer = server.request("POST", "/v1/attention",
                                    {"text": "ddadd", "kind": "encoder", "head": 2})
    assert status == 400 and "heads per layer" in answer["error"]
    status, answer = server.request("POST", "/v1/attention", {"text": "ddadd", "kind": "cross"})
    assert status == 400 and "\"pooling\" or \"encoder\"" in answer["error"]


def test_refusals_name_the_problem(server):
    status, answer = server.request("POST", "/v1/classify", {"text": ["abc", ""]})
    assert status == 400 and answer["error"] == "text[1] has no tokens to classify"
    status, answer = server.request("POST", "/v1/classify", {"text": "abc"})
    assert status == 400 and "array of strings" in answer["error"]
    status, answer = server.request("POST", "/v1/classify", {"text": ["abc"], "pooling": "yes"})
    assert status == 400 and "\"pooling\" must be true or false" in answer["error"]
    status, answer = server.request("POST", "/v1/classify", {"text": ["abc"], "beam": 4})
    assert status == 400 and "unknown field \"beam\"" in answer["error"]
    status, answer = server.request("POST", "/v1/translate", {"text": ["abc"]})
    assert status == 400 and "POST /v1/classify" in answer["error"]
    status, answer = server.request("POST", "/v1/generate", {"prompt": "abc"})
    assert status == 400 and "POST /v1/classify" in answer["error"]
    status, model = server.request("GET", "/v1/model")
    assert status == 200 and model["classes"] == ["alpha", "bravo", "charlie", "none"]
    assert model["architecture"] == "transformer_classifier" and "target_tokenizer" not in model


def test_a_text_too_long_is_refused_or_read_as_its_head(server):
    status, model = server.request("GET", "/v1/model")
    limit = model["config"]["max_len"]  # attention pooling: no classification token's place
    head = "dj" * (limit // 2)
    long = head + "aa" * limit
    status, answer = server.request("POST", "/v1/classify", {"text": ["abc", long]})
    assert status == 400, answer
    assert answer["error"] == (f"text[1] has {3 * limit} tokens, above the {limit} the model "
                               f"reads; shorten it, or send \"truncate\": true to classify its "
                               f"first {limit} tokens")
    status, cut = server.request("POST", "/v1/classify",
                                 {"text": [long], "truncate": True, "pooling": True})
    assert status == 200, cut
    status, alone = server.request("POST", "/v1/classify", {"text": [head], "pooling": True})
    assert status == 200, alone
    # the head decides: the tail's letter (which would say "alpha") is never read
    assert cut["results"][0]["tokens"] == list(head)
    assert cut["results"][0]["label"] == alone["results"][0]["label"]
    assert cut["results"][0]["probabilities"] == pytest.approx(
        alone["results"][0]["probabilities"], abs=1e-6)
    status, answer = server.request("POST", "/v1/classify", {"text": ["abc"], "truncate": 1})
    assert status == 400 and "\"truncate\" must be true or false" in answer["error"]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_page_shows_the_class_and_the_pooling(server, tmp_path):
    status, answer = server.request("POST", "/v1/attention", {"text": "dbdd"})
    assert status == 200, answer
    dom = open_page(tmp_path, server.port, text="dbdd", kind="pooling")
    assert dom.state == "ready", dom.error
    assert dom.translation == f"{answer['label']} ({answer['probability']:.2f})"
    assert len(dom.cells) == 4
    for (i, j), weight in dom.cells.items():
        assert i == 0 and weight == pytest.approx(answer["weights"][0][j], abs=1e-5)
