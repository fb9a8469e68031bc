"""`attn viz` end to end: the SVG parses as XML with its labels, the PNG (decoded here with zlib
alone) shows the SVG's cells in the SVG's colours, terminal text, loss-curve coordinates, and
clear errors with a non-zero exit."""
import json
import os
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"

SOURCE = ["p", "h", "o", "e", "n", "i", "x"]
TARGET = ["F", "IY", "N", "IH", "K", "S"]
WEIGHTS = [[0.48, 0.46, 0.03, 0.01, 0.01, 0.005, 0.005],
           [0.01, 0.04, 0.52, 0.40, 0.02, 0.005, 0.005],
           [0.00, 0.01, 0.02, 0.06, 0.87, 0.03, 0.01],
           [0.00, 0.00, 0.01, 0.02, 0.05, 0.87, 0.05],
           [0.00, 0.00, 0.00, 0.01, 0.02, 0.08, 0.89],
           [0.00, 0.00, 0.00, 0.00, 0.01, 0.03, 0.96]]


def attn_program():
    library = os.environ.get("ATTN_LIBRARY")
    candidates = ([Path(library).parent / "attn"] if library else []) + [ROOT / "build" / "attn"]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"the attn program is not built (looked at {candidates})")


def run_viz(*args):
    return subprocess.run([str(attn_program()), "viz", *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def decode_png(path):
    """8-bit RGB or RGBA, non-interlaced: (width, height, rows of RGB bytes)."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, f"bad CRC in {kind!r}"
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and colour_type in (2, 6) and interlace == 0
    channels = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous, i = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b = previous[x]
            c = previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        previous = line
    if channels == 4:
        rows = [bytes(b for k in range(width) for b in row[4 * k:4 * k + 3]) for row in rows]
    return width, height, rows


def pixel(rows, x, y):
    return tuple(rows[y][3 * x:3 * x + 3])


def write_matrix(path, **extra):
    path.write_text(json.dumps({"source": SOURCE, "target": TARGET, "weights": WEIGHTS, **extra}))
    return path


def svg_of(path):
    root = ET.parse(path).getroot()
    assert root.tag == SVG + "svg"
    return root


def by_class(root, tag, name):
    return [e for e in root.iter(SVG + tag) if e.get("class") == name]


def test_svg_is_well_formed_with_labels_on_both_axes(tmp_path):
    out = tmp_path / "map.svg"
    result = run_viz("--matrix", write_matrix(tmp_path / "m.json"), "--out", out,
                     "--title", "G2P <phoenix> & co")
    assert result.returncode == 0, result.stderr
    root = svg_of(out)
    cells = by_class(root, "rect", "cell")
    assert len(cells) == len(TARGET) * len(SOURCE)
    for cell in cells:
        i, j = int(cell.get("data-row")), int(cell.get("data-col"))
        assert float(cell.get("data-value")) == pytest.approx(WEIGHTS[i][j], abs=1e-6)
        assert cell.find(SVG + "title").text.startswith(f"{TARGET[i]} ")
    left = min(float(c.get("x")) for c in cells)
    top = min(float(c.get("y")) for c in cells)
    rows = by_class(root, "text", "row-label")
    columns = by_class(root, "text", "col-label")
    assert [t.text for t in rows] == TARGET
    assert [t.text for t in columns] == SOURCE
    assert all(float(t.get("x")) < left for t in rows), "output tokens down the left"
    assert all(float(t.get("y")) < top for t in columns), "source tokens along the top"
    assert by_class(root, "text", "title")[0].text == "G2P <phoenix> & co"
    assert len(by_class(root, "rect", "colorbar")) == 1
    assert [t.text for t in by_class(root, "text", "colorbar-tick")] == ["0", "0.25", "0.5",
                                                                       "0.75", "1"]


def test_png_shows_the_svg_cells_in_their_colours(tmp_path):
    matrix = write_matrix(tmp_path / "m.json")
    for colormap in ("blues", "greys"):
        svg, png = tmp_path / f"{colormap}.svg", tmp_path / f"{colormap}.png"
        for out in (svg, png):
            result = run_viz("--matrix", matrix, "--out", out, "--colormap", colormap)
            assert result.returncode == 0, result.stderr
        root = svg_of(svg)
        width, height, rows = decode_png(png)
        assert (width, height) == (int(root.get("width")), int(root.get("height")))
        shades = []
        for cell in by_class(root, "rect", "cell"):
            x = int(float(cell.get("x")) + float(cell.get("width")) / 2)
            y = int(float(cell.get("y")) + float(cell.get("height")) / 2)
            fill = cell.get("fill")
            expected = tuple(int(fill[k:k + 2], 16) for k in (1, 3, 5))
            assert pixel(rows, x, y) == expected, (cell.get("data-row"), cell.get("data-col"))
            shades.append((float(cell.get("data-value")), sum(expected)))
        shades.sort()
        brightness = [s for _, s in shades]
        if colormap == "blues":
            assert brightness == sorted(brightness, reverse=True), "heavier weights are darker"
        else:
            assert brightness == sorted(brightness), "greys: heavier weights are lighter"


def test_grid_of_heads(tmp_path):
    matrix = tmp_path / "heads.jsonl"
    with matrix.open("w") as f:
        for layer in range(2):
            for head in range(2):
                f.write(json.dumps({"layer": layer, "head": head, "source": SOURCE,
                                    "target": TARGET, "weights": WEIGHTS}) + "\n")
    out = tmp_path / "grid.svg"
    result = run_viz("--matrix", matrix, "--index", "all", "--out", out)
    assert result.returncode == 0, result.stderr
    root = svg_of(out)
    assert [t.text for t in by_class(root, "text", "subtitle")] == [
        "layer 0, head 0", "layer 0, head 1", "layer 1, head 0", "layer 1, head 1"]
    assert len(by_class(root, "rect", "cell")) == 4 * 42
    result = run_viz("--matrix", matrix, "--index", 2, "--out", out)
    assert result.returncode == 0, result.stderr
    root = svg_of(out)
    assert len(by_class(root, "rect", "cell")) == 42
    assert by_class(root, "text", "title")[0].text == "layer 1, head 0"


def test_a_long_title_wraps_and_the_width_follows_the_matrix(tmp_path):
    title = " ".join(["a rather long sentence given as the title of the picture"] * 8)
    narrow, titled = tmp_path / "narrow.svg", tmp_path / "titled.svg"
    matrix = write_matrix(tmp_path / "m.json")
    assert run_viz("--matrix", matrix, "--out", narrow).returncode == 0
    result = run_viz("--matrix", matrix, "--out", titled, "--title", title)
    assert result.returncode == 0, result.stderr
    width = int(svg_of(titled).get("width"))
    # widened at most to a 40-glyph title line (12 pixels a glyph, 16-pixel margins)
    assert width <= max(int(svg_of(narrow).get("width")), 40 * 12 + 32), width
    lines = [t.text for t in by_class(svg_of(titled), "text", "title")]
    assert len(lines) == 3 and all(len(line) <= 40 for line in lines), lines
    assert title.startswith(" ".join(lines[:2])) and lines[2].endswith("\u2026")
    png = tmp_path / "titled.png"
    assert run_viz("--matrix", matrix, "--out", png, "--title", title).returncode == 0
    assert decode_png(png)[0] == width


def test_grid_panels_are_named_and_labels_drop_the_bpe_marker(tmp_path):
    """Records as attn translate --alignment writes them: a layer without a head is the mean
    of the layer's heads; BPE labels end their words in </w>."""
    matrix = tmp_path / "alignment.jsonl"
    with matrix.open("w") as f:
        for line in (1, 3):
            f.write(json.dumps({"line": line, "score": -1.0, "layer": 1,
                                "source": ["pho", "en", "ix</w>"], "target": ["F", "IY</w>"],
                                "weights": [[0.5, 0.25, 0.25], [0.1, 0.2, 0.7]]}) + "\n")
    out = tmp_path / "grid.svg"
    result = run_viz("--matrix", matrix, "--index", "all", "--out", out)
    assert result.returncode == 0, result.stderr
    root = svg_of(out)
    assert [t.text for t in by_class(root, "text", "subtitle")] == [
        "line 1, layer 1, mean of heads", "line 3, layer 1, mean of heads"]
    assert [t.text for t in by_class(root, "text", "col-label")] == ["pho", "en", "ix"] * 2
    assert [t.text for t in by_class(root, "text", "row-label")] == ["F", "IY"] * 2


def test_terminal_rendering_has_the_labels(tmp_path):
    matrix = write_matrix(tmp_path / "m.json", title="phoenix")
    result = run_viz("--matrix", matrix)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "phoenix"
    assert lines[1].split() == SOURCE
    assert [line.split()[0] for line in lines[2:8]] == TARGET
    assert "\u2588" in result.stdout
    result = run_viz("--matrix", matrix, "--style", "ascii")
    assert result.returncode == 0 and result.stdout.isascii()
    assert "@" in result.stdout
    result = run_viz("--matrix", matrix, "--style", "color")
    assert "\x1b[48;5;" in result.stdout


def test_loss_curve_points_sit_at_their_coordinates(tmp_path):
    records = [{"step": 100, "epoch": 1, "train_loss": 3.0, "lr": 0.001},
               {"step": 200, "epoch": 1, "train_loss": 2.5},
               {"step": 200, "epoch": 1, "valid_loss": 2.75},
               {"step": 300, "epoch": 2, "train_loss": 2.0},
               {"step": 400, "epoch": 2, "train_loss": 1.25, "valid_loss": 1.5}]
    log = tmp_path / "train.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    out = tmp_path / "loss.svg"
    result = run_viz("--log", log, "--out", out)
    assert result.returncode == 0, result.stderr
    root = svg_of(out)
    (area,) = by_class(root, "rect", "plot-area")
    left, top = float(area.get("x")), float(area.get("y"))
    width, height = float(area.get("width")), float(area.get("height"))
    x0, x1 = float(area.get("data-x-min")), float(area.get("data-x-max"))
    y0, y1 = float(area.get("data-y-min")), float(area.get("data-y-max"))
    for series, field in ((0, "train_loss"), (1, "valid_loss")):
        lines = [p for p in by_class(root, "polyline", "series")
                 if p.get("data-series") == str(series)]
        assert len(lines) == 1, "records without the field do not break the curve"
        points = [float(v) for p in lines[0].get("points").split() for v in p.split(",")]
        expected = [v for r in records if field in r
                    for v in (left + (r["step"] - x0) / (x1 - x0) * width,
                              top + height - (r[field] - y0) / (y1 - y0) * height)]
        assert points == pytest.approx(expected, abs=0.01)
    # attn train logs the label-smoothed loss it optimises and plain validation loss
    assert [t.text for t in by_class(root, "text", "legend-name")] == [
        "train (with label smoothing, if any)", "valid (plain cross-entropy)"]
    assert by_class(root, "text", "x-label")[0].text == "step"
    png = tmp_path / "loss.png"
    assert run_viz("--log", log, "--out", png).returncode == 0
    assert decode_png(png)[:2] == (720, 440)


def test_two_runs_share_one_loss_chart(tmp_path):
    """--log A,B: both runs' curves in one picture, each named by its file."""
    fp32, bf16 = tmp_path / "fp32.jsonl", tmp_path / "bf16.jsonl"
    fp32.write_text('{"step": 1, "train_loss": 3}\n{"step": 2, "valid_loss": 2}\n')
    bf16.write_text('{"step": 1, "train_loss": 3.1}\n{"step": 2, "valid_loss": 2.1}\n')
    out = tmp_path / "both.svg"
    result = run_viz("--log", f"{fp32},{bf16}", "--out", out)
    assert result.returncode == 0, result.stderr
    assert [t.text for t in by_class(svg_of(out), "text", "legend-name")] == [
        "fp32: train (with label smoothing, if any)", "fp32: valid (plain cross-entropy)",
        "bf16: train (with label smoothing, if any)", "bf16: valid (plain cross-entropy)"]
    result = run_viz("--log", f"{fp32},", "--out", out)
    assert result.returncode == 2 and "comma-separated" in result.stderr, result.stderr


def error_cases(tmp_path):
    good = write_matrix(tmp_path / "good.json")
    malformed = tmp_path / "malformed.jsonl"
    malformed.write_text(json.dumps({"weights": [[1]]}) + "\n" + '{"weights": [[1, 2]\n')
    ragged = tmp_path / "ragged.json"
    ragged.write_text(json.dumps({"weights": [[0.5, 0.5], [1.0]]}))
    mismatch = tmp_path / "mismatch.json"
    mismatch.write_text(json.dumps({"source": ["a", "b", "c"], "target": ["x"],
                                    "weights": [[0.5, 0.5]]}))
    bad_log = tmp_path / "bad.jsonl"
    bad_log.write_text('{"step": 1, "train_loss": 2}\n{"step": 2, "train_loss": "high"}\n')
    out = tmp_path / "out"
    out.mkdir()
    return [
        (["--matrix", good, "--out", tmp_path / "missing" / "x.png"], 1, "missing/x.png"),
        (["--matrix", malformed, "--out", out / "x.svg"], 1, "malformed.jsonl:2:"),
        (["--matrix", ragged, "--out", out / "x.svg"], 1, "ragged"),
        (["--matrix", mismatch, "--out", out / "x.svg"], 1, '"source" has 3 labels'),
        (["--matrix", good, "--out", out / "x.jpg"], 2, ".svg or .png"),
        (["--matrix", tmp_path / "absent.json"], 1, "absent.json"),
        (["--matrix", good, "--index", 1], 2, "holds 1 matrix"),
        (["--log", bad_log, "--out", out / "x.svg"], 1, 'bad.jsonl:2: "train_loss"'),
        (["--log", bad_log], 2, "--log needs --out"),
        (["--matrix", good, "--vmin", 1, "--vmax", 0], 2, "--vmin"),
        (["--matrix", good, "--bogus"], 2, "--bogus"),
        ([], 2, "--matrix"),
    ], out


def test_errors_are_clear_and_exit_non_zero(tmp_path):
    cases, out = error_cases(tmp_path)
    for args, code, fragment in cases:
        result = run_viz(*args)
        assert result.returncode == code, (args, result.stderr)
        assert fragment in result.stderr, (args, result.stderr)
        assert result.stdout == ""
    assert list(out.iterdir()) == [], "failed writes leave no files behind"


def test_output_is_replaced_whole(tmp_path):
    out = tmp_path / "map.png"
    out.write_bytes(b"old contents")
    result = run_viz("--matrix", write_matrix(tmp_path / "m.json"), "--out", out)
    assert result.returncode == 0, result.stderr
    assert decode_png(out)[0] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "map.png"]


def test_example_pictures_are_current(tmp_path):
    """docs/images holds the phoenix example, drawn by
    attn viz --matrix docs/images/phoenix.json --annotate --out docs/images/phoenix.{svg,png};
    redraw it when the drawing changes."""
    images = ROOT / "docs" / "images"
    for suffix in ("svg", "png"):
        out = tmp_path / f"phoenix.{suffix}"
        result = run_viz("--matrix", images / "phoenix.json", "--annotate", "--out", out)
        assert result.returncode == 0, result.stderr
        if suffix == "svg":
            assert out.read_text() == (images / "phoenix.svg").read_text()
        else:
            assert decode_png(out) == decode_png(images / "phoenix.png")
