"""attn serve on a language model (attn train --task lm, 20 steps here): POST /v1/generate
against attn generate with the same seed and options, streamed pieces joining to the same text,
clients at once batched together with their own answers, the language model's attention map and
model description, and the refusals (bad fields, a prompt too long for the context, the wrong
endpoint for the model)."""
import http.client
import json
import random
import shutil
import threading

import pytest

from attn_program import ATTN, TINY_TRANSFORMER_D16
from test_serve import Server, run

CONTEXT = 24


@pytest.fixture(scope="module")
def language_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve_lm")
    rng = random.Random(3)
    book = folder / "book.txt"
    book.write_text("".join(" ".join("".join(rng.choice("abcdefgh") for _ in range(4))
                                     for _ in range(4)) + "\n" for _ in range(200)),
                    encoding="utf-8")
    path = folder / "lm.safetensors"
    result = run("train", "--task", "lm", "--train", book, "--out", path, *TINY_TRANSFORMER_D16,
                 "--context", CONTEXT, "--max-steps", 20, "--threads", 1)
    assert result.returncode == 0, result.stderr.decode()
    return path


@pytest.fixture(scope="module")
def server(language_model):
    s = Server(language_model, "--max-batch", "8", "--max-wait", "30", "--max-sentences", "5",
               "--max-new-tokens", "40")
    yield s
    assert s.stop() == 0


def generate_cli(model, *options):
    result = run("generate", "--model", model, "--threads", "1", *options)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def generate(server, body):
    return server.request("POST", "/v1/generate", body)


def stream(server, body, timeout=60):
    """The lines of a streamed answer, as they arrive, each parsed."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    connection.request("POST", "/v1/generate", body=json.dumps({**body, "stream": True}),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type").startswith("application/x-ndjson")
    assert response.getheader("Transfer-Encoding") == "chunked"
    lines = []
    for _ in range(1000):
        line = response.readline()
        if not line:
            break
        lines.append(json.loads(line))
    connection.close()
    return lines


@pytest.mark.parametrize("options", [{"seed": 3}, {"seed": 11, "temperature": 0.7, "top_k": 5},
                                     {"greedy": True}, {"seed": 2, "top_p": 0.8}])
def test_a_prompt_continues_as_attn_generate_prompt(language_model, server, options):
    flags = [f"--{k.replace('_', '-')}" if v is True else f"--{k.replace('_', '-')}={v}"
             for k, v in options.items()]
    status, answer = generate(server, {"prompt": "abc", "max_new_tokens": 15, **options})
    assert status == 200, answer
    (result,) = answer["results"]
    expected = generate_cli(language_model, "--prompt", "abc", "--max-new-tokens", 15, *flags)
    # attn generate ends its output with a newline unless the continuation ended a line.
    assert result["text"] == expected or result["text"] + "\n" == expected
    assert result["tokens"] == 15 and result["stop"] == "max_new_tokens"
    assert result["prompt_tokens"] == 4  # </s> a b c


def test_prompts_stopping_at_end_of_line_are_attn_generate_input_lines(language_model, server,
                                                                        tmp_path):
    prompts = ["abc", "", "head", "bad cab", "fade"]
    status, answer = generate(server, {"prompts": prompts, "seed": 9, "max_new_tokens": 12,
                                       "temperature": 0.8, "stop_at_end_of_line": True})
    assert status == 200, answer
    file = tmp_path / "prompts.txt"
    file.write_text("".join(p + "\n" for p in prompts))
    expected = generate_cli(language_model, "--input", file, "--seed", 9, "--max-new-tokens", 12,
                            "--temperature", 0.8).split("\n")[:-1]
    assert [r["text"] for r in answer["results"]] == expected
    assert all(r["stop"] in ("end_of_line", "max_new_tokens") for r in answer["results"])


def test_streamed_pieces_join_to_the_same_text(server):
    body = {"prompts": ["abc", "de"], "seed": 5, "max_new_tokens": 25}
    status, answer = generate(server, body)
    assert status == 200, answer
    lines = stream(server, body)
    final = lines[-1]
    assert final["done"] is True and final["results"] == answer["results"]
    for prompt in (0, 1):
        pieces = [line for line in lines[:-1] if line["prompt"] == prompt]
        assert len(pieces) == answer["results"][prompt]["tokens"]  # one line per token
        assert "".join(p["text"] for p in pieces) == answer["results"][prompt]["text"]


def test_two_clients_at_once_get_what_each_gets_alone(server):
    bodies = [{"prompts": ["abc", "gag"], "seed": 4, "max_new_tokens": 20},
              {"prompt": "ebb", "seed": 4, "max_new_tokens": 20},
              {"prompt": "ebb", "seed": 8, "max_new_tokens": 20, "stream": True}]
    alone = []
    for body in bodies:
        if body.get("stream"):
            alone.append(stream(server, body)[-1]["results"])
        else:
            status, answer = generate(server, body)
            assert status == 200, answer
            alone.append(answer["results"])
    together, failures = [None] * len(bodies), []

    def client(k):
        for _ in range(2):
            if bodies[k].get("stream"):
                together[k] = stream(server, bodies[k])[-1]["results"]
                continue
            status, answer = generate(server, bodies[k])
            if status != 200:
                failures.append(answer)
            together[k] = answer.get("results")

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert failures == []
    assert together == alone


def test_the_model_and_its_attention(server):
    status, model = server.request("GET", "/v1/model")
    assert status == 200
    assert model["architecture"] == "transformer_lm" and model["context"] == CONTEXT
    assert model["max_new_tokens"] == 40  # the server's cap
    assert "source_tokenizer" not in model and model["target_tokenizer"]["kind"] == "char"
    status, answer = server.request("POST", "/v1/attention", {"text": "abc", "head": 1})
    assert status == 200, answer
    assert answer["kind"] == "self" and answer["rows"] == answer["columns"] == ["</s>", "a", "b",
                                                                                 "c"]
    weights = answer["weights"]
    for i, row in enumerate(weights):
        assert abs(sum(row) - 1) < 1e-4
        assert all(w == 0 for w in row[i + 1:])  # causal: nothing after the row's own token
    status, answer = server.request("POST", "/v1/attention", {"text": "abc", "kind": "cross"})
    assert status == 400 and "\"kind\": \"self\"" in answer["error"]


@pytest.mark.parametrize("body, status, words", [
    ({"prompt": "a", "prompts": ["b"]}, 400, "either"),
    ({}, 400, "either"),
    ({"prompts": []}, 400, "no prompts"),
    ({"prompts": ["a", 3]}, 400, "prompts[1]"),
    ({"prompts": ["a"] * 6}, 413, "limit is 5"),
    ({"prompt": "a", "max_new_tokens": 41}, 400, "max_new_tokens"),
    ({"prompt": "a", "max_new_tokens": 0}, 400, "max_new_tokens"),
    ({"prompt": "a", "temperature": 0}, 400, "temperature"),
    ({"prompt": "a", "top_p": 1.5}, 400, "top_p"),
    ({"prompt": "a", "top_k": -1}, 400, "top_k"),
    ({"prompt": "a", "seed": 1.5}, 400, "seed"),
    ({"prompt": "a", "greedy": 1}, 400, "greedy"),
    ({"prompt": "a", "stream": "yes"}, 400, "stream"),
    ({"prompt": "a", "beam": 5}, 400, "unknown field \"beam\""),
    ({"prompt": "a" * CONTEXT}, 400, "\"truncate\": true"),
    ({"prompt": "a" * CONTEXT, "stream": True}, 400, "prompts[0]"),
])
def test_refusals_name_the_field(server, body, status, words):
    got, answer = generate(server, body)
    assert got == status and words in answer["error"], answer


def test_a_long_prompt_is_cut_when_asked(server):
    status, answer = generate(server, {"prompt": "a" * (2 * CONTEXT), "truncate": True,
                                       "max_new_tokens": 5, "greedy": True})
    assert status == 200, answer
    assert answer["results"][0]["prompt_tokens"] == CONTEXT - 1
    assert answer["results"][0]["stop"] == "context"  # one new token fills the context


def test_each_model_names_its_endpoint(server, tmp_path):
    status, answer = server.request("POST", "/v1/translate", {"text": ["abc"]})
    assert status == 400 and "POST /v1/generate" in answer["error"]


def test_an_encoder_decoder_sends_generate_to_translate(tmp_path):
    train = tmp_path / "train.tsv"
    train.write_text("ab\tba\ncd\tdc\n" * 20)
    path = tmp_path / "m.safetensors"
    result = run("train", "--train", train, "--out", path, *TINY_TRANSFORMER_D16,
                 "--max-steps", 2, "--threads", 1)
    assert result.returncode == 0, result.stderr.decode()
    s = Server(path)
    try:
        status, answer = generate(s, {"prompt": "ab"})
        assert status == 400 and "POST /v1/translate" in answer["error"]
    finally:
        assert s.stop() == 0


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="chromium is not installed (apt-get install chromium): the page is "
                           "tested in a real browser")
def test_the_page_continues_a_prompt_and_shows_its_self_attention(server, tmp_path):
    from test_serve_page import open_page
    status, continued = generate(server, {"prompt": "bad", "max_new_tokens": 40})
    assert status == 200, continued
    status, attention = server.request("POST", "/v1/attention", {"text": "bad", "layer": 0})
    assert status == 200, attention
    dom = open_page(tmp_path, server.port, text="bad", layer=0, head="mean")
    assert dom.state == "ready", dom.error
    assert dom.translation == continued["results"][0]["text"]  # the streamed pieces, joined
    assert len(dom.cells) == 4 * 4  # </s> b a d, both ways
    for (i, j), weight in dom.cells.items():
        assert weight == pytest.approx(attention["weights"][i][j], abs=1e-6)


def test_a_streaming_client_that_hangs_up_holds_up_nobody(server):
    import socket
    body = json.dumps({"prompts": ["abc"] * 5, "max_new_tokens": 40, "stream": True}).encode()
    for _ in range(3):
        hung_up = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        hung_up.sendall(b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                        b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        hung_up.recv(16)  # the answer has started
        hung_up.close()
    status, answer = generate(server, {"prompt": "abc", "max_new_tokens": 5})
    assert status == 200 and answer["results"][0]["tokens"] == 5
