"""The attn program that belongs to the library under test (beside $ATTN_LIBRARY, else the
source tree's build/), and the tiny model shapes the command-line tests share."""
import os
import subprocess
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]


def _attn_binary():
    library = os.environ.get("ATTN_LIBRARY")
    candidates = [Path(library).resolve().parent / "attn"] if library else []
    candidates.append(_ROOT / "build" / "attn")
    for candidate in candidates:
        if candidate.exists():
            return str(candidate)
    pytest.fail("the attn program was not found beside ATTN_LIBRARY or in build/")


ATTN = _attn_binary()


def auto_precision():
    """What --precision auto chooses for an fp32 model here (under this environment's
    ATTN_ISA): bf16 where attn info calls bf16 native, else fp32."""
    info = subprocess.run([ATTN, "info"], capture_output=True, text=True, timeout=60).stdout
    return "bf16" if "bf16: native" in info else "fp32"

# The tests' one-layer Transformers (`attn train` flags), so that those built alike stay alike:
# a D16 run takes about a second, a D32 one learns a toy task in a few hundred steps.
TINY_TRANSFORMER_D16 = ["--layers", "1", "--d-model", "16", "--heads", "2", "--ffn", "32"]
TINY_TRANSFORMER_D32 = ["--layers", "1", "--d-model", "32", "--heads", "2", "--ffn", "64"]
