"""The attention page of attn serve in a real browser: Debian's chromium, headless, opens
/?text=...&kind=..., runs the page's JavaScript against the server, and dumps the DOM; the
translation and every heat-map cell (td.cell data-row, data-col, data-weight) must match
attn translate --alignment for the same sentence. Also the /v1/attention endpoint itself."""
import html.parser
import json
import shutil
import urllib.parse

import pytest

from attn_program import ATTN  # noqa: F401 (the program under test)
from test_serve import HELD_OUT, Server, model, translate_cli  # noqa: F401 (fixture)

CHROMIUM = shutil.which("chromium")


@pytest.fixture(scope="module")
def server(model):  # noqa: F811 (the fixture imported above)
    s = Server(model)
    yield s
    assert s.stop() == 0


class PageDom(html.parser.HTMLParser):
    """The parts of the dumped DOM the page promises: the translation, the cells, the state."""

    def __init__(self):
        super().__init__()
        self.cells, self.translation, self.state, self.error = {}, None, None, ""
        self._inside = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.state = a.get("data-state")
        if tag == "td" and a.get("class") == "cell":
            self.cells[(int(a["data-row"]), int(a["data-col"]))] = float(a["data-weight"])
        if a.get("id") in ("translation", "error"):
            self._inside = a["id"]

    def handle_endtag(self, tag):
        self._inside = None

    def handle_data(self, data):
        if self._inside == "translation":
            self.translation = (self.translation or "") + data
        elif self._inside == "error":
            self.error += data


def open_page(tmp_path, port, **query):
    """Loads the page in headless chromium and parses the DOM once the page has settled.

    --dump-dom fires when chromium's virtual time budget runs out; under load a streamed answer
    can still be arriving then, and the page is dumped before it is "ready" or "error". Such a
    dump says nothing about the page, so it is loaded again with a longer budget."""
    import subprocess
    url = f"http://127.0.0.1:{port}/?{urllib.parse.urlencode(query)}"
    for budget_ms in (10000, 30000, 90000):
        result = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={tmp_path / 'chromium-profile'}",
             f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
            capture_output=True, timeout=240)
        assert result.returncode == 0, result.stderr.decode()[-2000:]
        dom = PageDom()
        dom.feed(result.stdout.decode())
        if dom.state in ("ready", "error"):
            break
    return dom


@pytest.mark.skipif(CHROMIUM is None,
                    reason="chromium is not installed (apt-get install chromium): the page is "
                           "tested in a real browser")
def test_the_page_shows_the_translation_and_the_alignment_of_attn_translate(
        model, server, tmp_path):  # noqa: F811
    sentence = HELD_OUT[3]
    alignment_file = tmp_path / "alignment.jsonl"
    [translation] = translate_cli(model, [sentence], "--alignment", alignment_file)
    record = json.loads(alignment_file.read_text())
    dom = open_page(tmp_path, server.port, text=sentence, kind="cross")
    assert dom.state == "ready", dom.error
    assert dom.translation == translation
    weights = record["weights"]
    assert len(dom.cells) == len(weights) * len(weights[0])
    for (i, j), weight in dom.cells.items():
        assert weight == pytest.approx(weights[i][j], abs=1e-5), (i, j)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_page_shows_self_attention_of_one_head(server, tmp_path):
    sentence = HELD_OUT[4]
    status, answer = server.request("POST", "/v1/attention",
                                    {"text": sentence, "kind": "encoder", "layer": 0, "head": 1})
    assert status == 200, answer
    dom = open_page(tmp_path, server.port, text=sentence, kind="encoder", layer=0, head=1)
    assert dom.state == "ready", dom.error
    assert len(dom.cells) == len(sentence) ** 2
    for (i, j), weight in dom.cells.items():
        assert weight == pytest.approx(answer["weights"][i][j], abs=1e-6)


def test_attention_endpoint_kinds_heads_and_errors(model, server, tmp_path):  # noqa: F811
    sentence = HELD_OUT[5]
    alignment_file = tmp_path / "alignment.jsonl"
    translate_cli(model, [sentence], "--alignment", alignment_file, "--alignment-head", 0)
    record = json.loads(alignment_file.read_text())
    status, cross = server.request("POST", "/v1/attention",
                                   {"text": sentence, "kind": "cross", "head": 0})
    assert status == 200, cross
    assert cross["rows"] == record["target"] and cross["columns"] == record["source"]
    for got, want in zip(cross["weights"], record["weights"]):
        assert got == pytest.approx(want, abs=1e-5)

    heads = []
    for head in (0, 1):
        status, answer = server.request("POST", "/v1/attention",
                                        {"text": sentence, "kind": "self", "head": head})
        assert status == 200, answer
        heads.append(answer["weights"])
    status, mean = server.request("POST", "/v1/attention", {"text": sentence, "kind": "self"})
    assert status == 200 and mean["head"] == "mean" and mean["columns"][0] == "<s>"
    steps = len(mean["rows"])
    for i in range(steps):
        assert mean["weights"][i] == pytest.approx(
            [(a + b) / 2 for a, b in zip(heads[0][i], heads[1][i])], abs=1e-6)
        assert all(w == 0 for w in mean["weights"][i][i + 1:])  # causal

    for body, words in [({"text": sentence, "kind": "sideways"}, "\"kind\""),
                        ({"text": sentence, "layer": 3}, "\"layer\" 3"),
                        ({"text": sentence, "head": 2}, "\"head\" 2"),
                        ({"text": ""}, "no tokens"),
                        ({"text": [sentence]}, "must be a string")]:
        status, answer = server.request("POST", "/v1/attention", body)
        assert status == 400 and words in answer["error"], (body, answer)


def test_the_page_files_are_built_in(server):
    import http.client
    for path, kind in [("/", "text/html"), ("/page.js", "text/javascript"),
                       ("/page.css", "text/css")]:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        connection.close()
        assert response.status == 200 and response.getheader("Content-Type").startswith(kind)
        assert b"http://" not in body and b"https://" not in body  # no CDN: works offline
