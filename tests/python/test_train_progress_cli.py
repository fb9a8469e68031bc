"""attn train's progress bar on a terminal (a pseudo-terminal here): it follows whichever limit
ends the run first, the epoch plan or --time-limit."""
import os
import pty
import random
import re
import subprocess
import time

from attn_program import ATTN, TINY_TRANSFORMER_D16


def bars_drawn(args, timeout=120):
    """The bars attn train drew on its terminal (stderr), in order."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen([ATTN, *map(str, args)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=terminal)
    os.close(terminal)
    shown = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal's other end closed: the program ended
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    assert process.wait(timeout=10) == 0, shown.decode(errors="replace")
    return [line for line in re.split(rb"[\r\n]", shown.decode(errors="replace").encode())
            if b"[" in line and b"]" in line and b"step" in line]


def test_bar_follows_the_time_limit_when_it_comes_first(tmp_path):
    rng = random.Random(4)
    train = tmp_path / "train.tsv"
    words = ["".join(rng.choice("abcdef") for _ in range(rng.randint(2, 6))) for _ in range(400)]
    train.write_text("".join(f"{w}\t{w[::-1]}\n" for w in words), encoding="utf-8")
    # A hundred thousand epochs would take far longer than the three seconds allowed.
    bars = bars_drawn(["train", "--train", train, "--out", tmp_path / "m.safetensors",
                       *TINY_TRANSFORMER_D16,
                       "--epochs", "100000", "--time-limit", "3", "--threads", "1",
                       "--eval-every", "100000"])
    assert bars, "no progress bar drawn"
    last = bars[-1].decode()
    filled = re.search(r"\[([#.]{20})\]", last).group(1).count("#")
    assert filled >= 14, last  # most of the three seconds had passed at the last redraw
    assert "time 0:0" in last and "/0:03" in last, last
