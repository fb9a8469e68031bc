"""Bogus ATTN_ISA / ATTN_NUM_THREADS values are refused by the attn program and warned about by
the Python binding, and integers the binding cannot pass to C are refused instead of wrapped."""
import os
import subprocess
import sys

import numpy as np
import pytest

import attn

from attn_program import ATTN


BAD = [("ATTN_ISA", "avx1024", "not an instruction set"),
       ("ATTN_NUM_THREADS", "two", "not a thread count"),
       ("ATTN_NUM_THREADS", "-3", "not a thread count"),
       ("ATTN_NUM_THREADS", str(2**70), "not a thread count")]


@pytest.mark.parametrize("name,value,says", BAD)
def test_program_refuses_bad_variables(name, value, says):
    env = dict(os.environ, **{name: value})
    result = subprocess.run([ATTN, "info"], env=env, capture_output=True, timeout=60)
    message = result.stderr.decode()
    assert result.returncode == 2, message
    assert f"{name}={value}" in message and says in message, message
    assert result.stdout == b""


@pytest.mark.parametrize("name,value", [("ATTN_ISA", "reference"), ("ATTN_NUM_THREADS", "1"),
                                        ("ATTN_NUM_THREADS", "0"), ("ATTN_ISA", "")])
def test_program_accepts_good_variables(name, value):
    env = dict(os.environ, **{name: value})
    result = subprocess.run([ATTN, "info"], env=env, capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()


@pytest.mark.parametrize("name,value,says", BAD[:2])
def test_binding_warns_about_bad_variables(name, value, says):
    env = dict(os.environ, **{name: value})
    code = "import warnings; warnings.simplefilter('error'); import attn"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            timeout=60)
    message = result.stderr.decode()
    assert result.returncode != 0 and "RuntimeWarning" in message and says in message, message


@pytest.mark.parametrize("window", [2**64, 2**63, -1, 1.5, "3"])
def test_binding_refuses_integers_it_cannot_pass(window):
    q = np.zeros((1, 1, 4, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="window"):
        attn.scaled_dot_product_attention(q, q, q, window=window)
