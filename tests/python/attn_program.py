"""The attn program that belongs to the library under test (beside $ATTN_LIBRARY, else the
source tree's build/), for the command-line tests."""
import os
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
