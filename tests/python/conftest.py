"""Shared setup for the Python binding tests: find the package and the library when pytest
runs outside CTest, and keep PyTorch to one thread so it does not fight attn's threads
for the two cores."""
import os
import sys
from pathlib import Path

import numpy as np
import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT / "python") not in sys.path:
    sys.path.insert(0, str(_ROOT / "python"))
if "ATTN_LIBRARY" not in os.environ and (_ROOT / "build" / "libattn.so").exists():
    os.environ["ATTN_LIBRARY"] = str(_ROOT / "build" / "libattn.so")

import torch  # noqa: E402

torch.set_num_threads(1)


def _assert_close(ours, reference, what, rtol=1e-5):
    """float32 results against a float64 reference: relative to each value, with an absolute
    floor relative to the array's largest value (for entries that cancel to near zero)."""
    reference = np.asarray(reference, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(reference), initial=0.0)))
    np.testing.assert_allclose(ours, reference, rtol=rtol, atol=rtol * scale, err_msg=what)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def assert_close():
    return _assert_close


def _check_loss_and_gradients(torch_model, model, batch):
    """attn's loss and every parameter's gradient against the PyTorch twin's (float64), for the
    parity tests whose twins have .loss(batch) and .attn_parameters() and whose models have
    .loss_and_grads(batch)."""
    torch_model.zero_grad()
    expected = torch_model.loss(batch)
    expected.backward()
    loss, grads = model.loss_and_grads(batch)
    assert abs(loss - expected.item()) <= 1e-5 * max(1.0, abs(expected.item()))
    named = torch_model.attn_parameters()
    assert sorted(grads) == sorted(named)
    for name, parameter in named.items():
        # float32 against float64: measured within 1e-6 of each tensor's largest gradient.
        _assert_close(grads[name], parameter.grad.numpy(), name, rtol=1e-5)


@pytest.fixture
def check_loss_and_gradients():
    return _check_loss_and_gradients
