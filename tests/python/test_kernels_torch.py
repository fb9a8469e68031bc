"""PyTorch 1.13 parity of the element-wise and row-wise kernels: forward values and
gradients (from torch.autograd) on random data, on every instruction set the CPU has."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attn import kernels
from attn._lib import lib

torch.set_num_threads(1)  # one pool on two cores: see the design notes on thread fights

ISAS = [(code, name) for code, name in enumerate(["reference", "portable", "avx2", "avx512", "neon",
                                                  "neon-dotprod", "neon-bf16"])
        if lib.attn_isa_supported(code)]


@pytest.fixture(params=ISAS, ids=[name for _, name in ISAS], autouse=True)
def isa(request):
    assert lib.attn_set_isa(request.param[0]) == 0
    yield request.param[1]
    lib.attn_set_isa(-1)


def rng(seed):
    return np.random.default_rng(seed)


def grad_of(fn, *arrays, weights):
    """Values of fn(*arrays) and the gradients of sum(weights * fn) for each array."""
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*tensors)
    (out * torch.tensor(weights)).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in tensors]


SHAPES = [(1, 1), (3, 7), (17, 64), (5, 3, 80), (9, 1037)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_matches_torch(shape, log):
    r = rng(sum(shape))
    x = r.uniform(-8, 8, shape).astype(np.float32)
    x[..., ::5] = -np.inf  # masked entries (every row keeps finite ones unless width 1)
    if shape[-1] == 1:
        x[...] = r.uniform(-8, 8, shape)
    dy = r.uniform(-1, 1, shape).astype(np.float32)
    fn = (lambda t: F.log_softmax(t, dim=-1)) if log else (lambda t: F.softmax(t, dim=-1))
    expected, (expected_dx,) = grad_of(fn, x, weights=dy)
    y = kernels.log_softmax(x) if log else kernels.softmax(x)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    dx = (kernels.log_softmax_backward if log else kernels.softmax_backward)(y, dy)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-5, atol=1e-6)


def test_fully_masked_row_gives_zeros_where_torch_gives_nan():
    x = np.full((2, 6), -np.inf, dtype=np.float32)
    x[1] = np.arange(6)
    assert np.isnan(F.softmax(torch.tensor(x), dim=-1).numpy()[0]).all()
    y = kernels.softmax(x)
    assert (y[0] == 0).all()
    np.testing.assert_allclose(y[1], F.softmax(torch.tensor(x[1]), dim=-1).numpy(), rtol=1e-6)
    assert (kernels.log_softmax(x)[0] == -np.inf).all()


@pytest.mark.parametrize("rows,vocab", [(1, 1), (7, 5), (33, 80), (64, 1037)])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_cross_entropy_matches_torch(rows, vocab, smoothing, ignore_index):
    r = rng(rows * vocab + int(smoothing * 10))
    logits = r.uniform(-6, 6, (rows, vocab)).astype(np.float32)
    targets = r.integers(0, vocab, rows)
    targets[::4] = ignore_index  # every fourth row ignored

    t_logits = torch.tensor(logits, requires_grad=True)
    t_targets = torch.tensor(targets, dtype=torch.long)
    loss = F.cross_entropy(t_logits, t_targets, ignore_index=ignore_index,
                           label_smoothing=smoothing, reduction="sum")
    loss.backward()

    loss_sum, counted, lse = kernels.cross_entropy(logits, targets, ignore_index, smoothing)
    assert counted == int((targets != ignore_index).sum())
    assert loss_sum == pytest.approx(loss.item(), rel=1e-5, abs=1e-5)
    dlogits = kernels.cross_entropy_backward(logits, targets, lse, ignore_index, smoothing)
    np.testing.assert_allclose(dlogits, t_logits.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert (dlogits[targets == ignore_index] == 0).all()

    if counted > 0:  # the mean reduction: divide by the rows counted
        mean = F.cross_entropy(torch.tensor(logits), t_targets, ignore_index=ignore_index,
                               label_smoothing=smoothing, reduction="mean")
        assert loss_sum / counted == pytest.approx(mean.item(), rel=1e-5, abs=1e-6)


def test_cross_entropy_rejects_out_of_range_targets():
    logits = np.zeros((3, 4), dtype=np.float32)
    with pytest.raises(ValueError, match=r"targets\[1\] = 4"):
        kernels.cross_entropy(logits, [0, 4, 1])


# Not dim 1: there torch's x * rstd - mean * rstd (rstd = 1/sqrt(eps) = 316) is off by ~1e-5
# where the exact answer is beta; the C tests check dim 1 against the double reference.
@pytest.mark.parametrize("shape", [(1, 2), (3, 7), (17, 64), (4, 5, 80), (9, 1037)], ids=str)
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm_matches_torch(shape, affine):
    r = rng(sum(shape) + affine)
    dim = shape[-1]
    x = (r.uniform(-3, 3, shape) + 2).astype(np.float32)
    dy = r.uniform(-1, 1, shape).astype(np.float32)
    if affine:
        gamma = r.uniform(0.5, 1.5, dim).astype(np.float32)
        beta = r.uniform(-1, 1, dim).astype(np.float32)
        expected, (dx_t, dg_t, db_t) = grad_of(
            lambda a, g, b: F.layer_norm(a, (dim,), g, b, eps=1e-5), x, gamma, beta, weights=dy)
    else:
        gamma = beta = None
        expected, (dx_t,) = grad_of(lambda a: F.layer_norm(a, (dim,), eps=1e-5), x, weights=dy)
    y, mean, rstd = kernels.layer_norm(x, gamma, beta, eps=1e-5)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=2e-6)
    dx, dgamma, dbeta = kernels.layer_norm_backward(x, gamma, mean, rstd, dy)
    np.testing.assert_allclose(dx, dx_t, rtol=1e-5, atol=2e-6)
    if affine:
        np.testing.assert_allclose(dgamma, dg_t, rtol=1e-5, atol=2e-6)
        np.testing.assert_allclose(dbeta, db_t, rtol=1e-5, atol=2e-6)


TORCH_ACTIVATIONS = {
    "relu": F.relu,
    "gelu": lambda t: F.gelu(t, approximate="none"),
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "silu": F.silu,
}


@pytest.mark.parametrize("name", sorted(TORCH_ACTIVATIONS))
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 80), (2, 3, 1037)], ids=str)
def test_activation_matches_torch(name, shape):
    r = rng(sum(shape) + len(name))
    x = r.uniform(-10, 10, shape).astype(np.float32)
    x.flat[0] = 0.0 if x.size > 1 else x.flat[0]
    dy = r.uniform(-1, 1, shape).astype(np.float32)
    expected, (expected_dx,) = grad_of(TORCH_ACTIVATIONS[name], x, weights=dy)
    # torch evaluates 0.5 x (1 + erf) in float: absolute error ~1e-7 |x| for negative x
    np.testing.assert_allclose(kernels.activation(name, x), expected, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(kernels.activation_backward(name, x, dy), expected_dx,
                               rtol=1e-5, atol=2e-6)


def test_wrappers_reject_bad_input():
    with pytest.raises(ValueError, match="float32"):
        kernels.softmax(np.zeros((2, 3), dtype=np.float64))
    with pytest.raises(ValueError, match="unknown activation"):
        kernels.activation("swish", np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError, match="dim must be positive"):
        kernels.layer_norm(np.zeros((2, 0), dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        kernels.softmax_backward(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))
