"""attn serve: the HTTP JSON API against attn translate on a small Transformer trained here for a
few seconds; many clients at once, n-best and alignments, the limits, health and model, and
SIGTERM finishing a request in flight."""
import http.client
import json
import random
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from attn_program import ATTN, TINY_TRANSFORMER_D32, auto_precision


def run(*args, stdin=None, timeout=120):
    return subprocess.run([ATTN, *map(str, args)], input=stdin, capture_output=True,
                          timeout=timeout)


def words(rng, n, alphabet="abcdefgh", lo=2, hi=6):
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


HELD_OUT = words(random.Random(99), 40)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A reverse-the-word Transformer, trained just enough that beam search has real choices."""
    folder = tmp_path_factory.mktemp("serve")
    rng = random.Random(5)
    train = folder / "train.tsv"
    train.write_text("".join(f"{w}\t{w[::-1]}\n" for w in words(rng, 2000)), encoding="utf-8")
    path = folder / "model.safetensors"
    result = run("train", "--train", train, "--out", path, *TINY_TRANSFORMER_D32, "--dropout", "0",
                 "--label-smoothing", "0",
                 "--lr", "3e-3", "--warmup", "30", "--max-steps", "150", "--batch-tokens", "800",
                 "--threads", "2", timeout=600)
    assert result.returncode == 0, result.stderr.decode()
    return path


class Server:
    """attn serve on a free port (--port 0; the port is read from its first line on stderr)."""

    def __init__(self, model, *options):
        self.process = subprocess.Popen([ATTN, "serve", "--model", str(model), "--port", "0",
                                         "--threads", "1", *map(str, options)],
                                        stderr=subprocess.PIPE)
        line = self.process.stderr.readline().decode()
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        assert match, f"attn serve did not start: {line}{self.process.stderr.read().decode()}"
        self.port = int(match.group(1))

    def request(self, method, path, body=None, timeout=60):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        connection.request(method, path, body=data,
                           headers={"Content-Type": "application/json"} if data else {})
        response = connection.getresponse()
        status, payload = response.status, response.read()
        connection.close()
        return status, json.loads(payload)

    def translate(self, body):
        return self.request("POST", "/v1/translate", body)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=60)
        self.process.stderr.close()
        return code


@pytest.fixture(scope="module")
def server(model):
    s = Server(model, "--max-batch", "8", "--max-wait", "20", "--max-sentences", "50",
               "--max-body", "20000")
    yield s
    assert s.stop() == 0


def translate_cli(model, lines, *options):
    result = run("translate", "--model", model, "--threads", "1", *options,
                 stdin="".join(f"{line}\n" for line in lines).encode())
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().split("\n")[:-1]


@pytest.mark.parametrize("beam", [1, 5])
def test_translations_are_attn_translates(model, server, beam):
    status, answer = server.translate({"text": HELD_OUT, "beam": beam})
    assert status == 200, answer
    assert [r["translation"] for r in answer["results"]] == translate_cli(
        model, HELD_OUT, "--beam", beam)
    assert all(isinstance(r["score"], float) and r["score"] < 0 for r in answer["results"])


def test_many_clients_at_once_each_get_their_own_answers(model, server):
    expected = dict(zip(HELD_OUT, translate_cli(model, HELD_OUT, "--beam", 5)))
    answers, failures = {}, []

    def client(k):
        rng = random.Random(k)
        for _ in range(3):
            lines = rng.sample(HELD_OUT, rng.randint(1, 4))
            status, answer = server.translate({"text": lines})
            if status != 200:
                failures.append(answer)
                continue
            answers.setdefault(k, []).append((lines, [r["translation"] for r in answer["results"]]))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert sum(len(v) for v in answers.values()) == 48
    for replies in answers.values():
        for lines, translations in replies:
            assert translations == [expected[line] for line in lines]


def test_a_stalled_client_holds_up_nobody(server):
    # A client that sends half its body and stops: others are answered meanwhile.
    stalled = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    stalled.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                    b"\r\nContent-Length: 100\r\n\r\n{\"text\": [\"ab")
    try:
        start = time.monotonic()
        status, answer = server.translate({"text": HELD_OUT[:2]})
        assert status == 200 and len(answer["results"]) == 2
        assert time.monotonic() - start < 10
    finally:
        stalled.close()


def test_nbest_and_alignment(model, server, tmp_path):
    lines = HELD_OUT[:5]
    status, answer = server.translate({"text": lines, "beam": 4, "nbest": 3, "alignment": True})
    assert status == 200, answer
    nbest = translate_cli(model, lines, "--beam", 4, "--nbest", 3)
    alignment_file = tmp_path / "alignment.jsonl"
    translate_cli(model, lines, "--beam", 4, "--alignment", alignment_file)
    records = [json.loads(line) for line in alignment_file.read_text().splitlines()]
    for i, result in enumerate(answer["results"]):
        expected = [line.split("\t") for line in nbest[3 * i:3 * i + 3]]
        assert [h["translation"] for h in result["nbest"]] == [e[2] for e in expected]
        assert [h["score"] for h in result["nbest"]] == pytest.approx(
            [float(e[1]) for e in expected], abs=1e-5)
        assert result["translation"] == expected[0][2]
        got, want = result["alignment"], records[i]
        assert got["source"] == want["source"] and got["target"] == want["target"]
        assert got["layer"] == want["layer"]
        assert len(got["weights"]) == len(want["weights"])
        for got_row, want_row in zip(got["weights"], want["weights"]):
            assert got_row == pytest.approx(want_row, abs=1e-5)
        assert all(sum(row) == pytest.approx(1, abs=1e-4) for row in got["weights"])


def test_an_empty_sentence_gets_an_empty_translation(server):
    status, answer = server.translate({"text": ["", HELD_OUT[0]]})
    assert status == 200, answer
    assert answer["results"][0] == {"translation": "", "score": 0}
    assert answer["results"][1]["translation"] != ""


@pytest.mark.parametrize("body, status, words_in_error", [
    (b'{"text": ["abc"', 400, "not valid JSON"),
    (b'{"text": ["\xff\xfe"]}', 400, "not valid UTF-8"),
    (b'{"text": ["\\ud800"]}', 400, "not valid JSON"),  # a lone surrogate
    ({"text": "abc"}, 400, "array of strings"),
    ({"text": ["abc", 5]}, 400, "text[1] is not a string"),
    ({"text": []}, 400, "no sentences"),
    ({"text": ["abc"], "beam": 0}, 400, "\"beam\""),
    ({"text": ["abc"], "beam": 2, "nbest": 3}, 400, "\"nbest\""),
    ({"text": ["abc"], "alignment": 1}, 400, "\"alignment\""),
    ({"text": ["abc"], "bream": 3}, 400, "unknown field \"bream\""),
    ({"text": ["abc", " ".join(["a"] * 3000)]}, 400, "text[1]"),
    ({"text": ["abc"] * 51}, 413, "limit is 50"),
    ({"text": ["abc " * 6000]}, 413, "above the limit of 20000 bytes"),
])
def test_bad_requests_name_the_problem(server, body, status, words_in_error):
    got, answer = server.translate(body)
    assert got == status, answer
    assert words_in_error in answer["error"]
    # The server goes on answering the others.
    assert server.translate({"text": ["abc"]})[0] == 200


def test_health_model_and_unknown_paths(server):
    status, health = server.request("GET", "/v1/health")
    assert status == 200 and health["status"] == "ok"
    status, model = server.request("GET", "/v1/model")
    assert status == 200
    # attn serve's default --precision auto, as attn translate's.
    assert model["architecture"] == "transformer" and model["precision"] == auto_precision()
    assert model["config"]["d_model"] == 32 and model["parameters"] > 0
    assert model["source_tokenizer"]["vocab_size"] > 8
    assert model["target_tokenizer"]["kind"] in ("char", "word", "bpe", "spm")
    assert server.request("GET", "/v1/nothing")[0] == 404
    assert server.request("GET", "/v1/translate")[0] == 405


def test_sigterm_answers_the_request_in_flight_then_exits_0(model):
    # A long max-wait keeps the request queued while SIGTERM arrives.
    s = Server(model, "--max-wait", "1500", "--max-batch", "64")
    answer = {}

    def client():
        answer["reply"] = s.translate({"text": HELD_OUT[:3]})

    t = threading.Thread(target=client)
    t.start()
    time.sleep(0.5)
    s.process.send_signal(signal.SIGTERM)
    t.join(timeout=60)
    assert s.stop() == 0
    status, body = answer["reply"]
    assert status == 200 and len(body["results"]) == 3


def test_usage_errors(model):
    assert run("serve").returncode == 2
    result = run("serve", "--model", model, "--host", "localhost", "--port", "0")
    assert result.returncode == 1 and b"not an IPv4 address" in result.stderr
