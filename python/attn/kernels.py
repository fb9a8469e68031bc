"""Element-wise and row-wise kernels of libattn: softmax, log-softmax, cross-entropy,
layer norm and activations, forward and backward.

Row-wise functions work over the last axis of arrays of any rank. Backward functions
return fresh gradients (the C functions accumulate; here they accumulate into zeros).
Arrays must be float32; targets may be any integer array whose values fit in int32.
"""
import ctypes

import numpy as np

from ._lib import as_float32, check, lib, ptr

ACTIVATIONS = {"relu": 0, "gelu": 1, "gelu_tanh": 2, "tanh": 3, "sigmoid": 4, "silu": 5}

_i64 = ctypes.c_int64
_i32 = ctypes.c_int32
_f32 = ctypes.c_float
_fp = ctypes.POINTER(ctypes.c_float)
_ip = ctypes.POINTER(ctypes.c_int32)

for _name, _args in {
    "attn_softmax_forward": [_i64, _i64, _fp, _fp],
    "attn_softmax_backward": [_i64, _i64, _fp, _fp, _fp],
    "attn_log_softmax_forward": [_i64, _i64, _fp, _fp],
    "attn_log_softmax_backward": [_i64, _i64, _fp, _fp, _fp],
    "attn_cross_entropy_forward": [_i64, _i64, _fp, _ip, _i32, _f32,
                                   ctypes.POINTER(ctypes.c_double), ctypes.POINTER(_i64), _fp],
    "attn_cross_entropy_backward": [_i64, _i64, _fp, _ip, _i32, _f32, _fp, _f32, _fp],
    "attn_layer_norm_forward": [_i64, _i64, _fp, _fp, _fp, _f32, _fp, _fp, _fp],
    "attn_layer_norm_backward": [_i64, _i64, _fp, _fp, _fp, _fp, _fp, _fp, _fp, _fp],
    "attn_activation_forward": [ctypes.c_int, _i64, _fp, _fp],
    "attn_activation_backward": [ctypes.c_int, _i64, _fp, _fp, _fp],
}.items():
    getattr(lib, _name).argtypes = _args
    getattr(lib, _name).restype = ctypes.c_int


def _rows(name, x):
    """x as float32 with at least one axis, and its (rows, cols) view of the last axis."""
    a = as_float32(name, x)
    if a.ndim == 0:
        raise ValueError(f"{name}: expected at least 1 dimension, got a scalar")
    cols = a.shape[-1]
    return a, (a.size // cols if cols else 0), cols


def _same_shape(name, a, shape):
    if a.shape != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {a.shape}")
    return a


def _targets(targets, rows):
    t = np.asarray(targets)
    if not np.issubdtype(t.dtype, np.integer):
        raise ValueError(f"targets: expected integers, got {t.dtype}")
    if t.size != rows:
        raise ValueError(f"targets: expected {rows} values (one per row), got shape {t.shape}")
    info = np.iinfo(np.int32)
    if t.size and (t.min() < info.min or t.max() > info.max):
        raise ValueError("targets: values must fit in int32")
    return np.ascontiguousarray(t.reshape(-1), dtype=np.int32)


def _activation_code(name):
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; expected one of {sorted(ACTIVATIONS)}")


# ---- softmax ---------------------------------------------------------------------------------

def softmax(x):
    """Softmax over the last axis. A row of all -inf gives zeros (not NaN)."""
    x, rows, cols = _rows("x", x)
    y = np.empty_like(x)
    check(lib.attn_softmax_forward(rows, cols, ptr(x), ptr(y)), "attn_softmax_forward")
    return y


def softmax_backward(y, dy):
    """Gradient with respect to the input of softmax, given its output y."""
    y, rows, cols = _rows("y", y)
    dy = _same_shape("dy", as_float32("dy", dy), y.shape)
    dx = np.zeros_like(y)
    check(lib.attn_softmax_backward(rows, cols, ptr(y), ptr(dy), ptr(dx)),
          "attn_softmax_backward")
    return dx


def log_softmax(x):
    """Log-softmax over the last axis. A row of all -inf gives -inf."""
    x, rows, cols = _rows("x", x)
    y = np.empty_like(x)
    check(lib.attn_log_softmax_forward(rows, cols, ptr(x), ptr(y)), "attn_log_softmax_forward")
    return y


def log_softmax_backward(y, dy):
    """Gradient with respect to the input of log-softmax, given its output y."""
    y, rows, cols = _rows("y", y)
    dy = _same_shape("dy", as_float32("dy", dy), y.shape)
    dx = np.zeros_like(y)
    check(lib.attn_log_softmax_backward(rows, cols, ptr(y), ptr(dy), ptr(dx)),
          "attn_log_softmax_backward")
    return dx


# ---- cross-entropy ---------------------------------------------------------------------------

def cross_entropy(logits, targets, ignore_index=-100, label_smoothing=0.0):
    """Summed cross-entropy over the rows of logits [..., vocab], as
    torch.nn.functional.cross_entropy(..., reduction='sum').

    Returns (loss_sum, counted, lse): the number of rows not ignored (divide by it for the
    mean) and each row's log-sum-exp (shape logits.shape[:-1]) for the backward."""
    logits, rows, vocab = _rows("logits", logits)
    t = _targets(targets, rows)
    loss = ctypes.c_double()
    counted = _i64()
    lse = np.empty(logits.shape[:-1], dtype=np.float32)
    check(lib.attn_cross_entropy_forward(rows, vocab, ptr(logits), ptr(t), ignore_index,
                                         label_smoothing, ctypes.byref(loss),
                                         ctypes.byref(counted), ptr(lse)),
          "attn_cross_entropy_forward")
    return loss.value, counted.value, lse


def cross_entropy_backward(logits, targets, lse, ignore_index=-100, label_smoothing=0.0,
                           grad_scale=1.0):
    """Gradient of grad_scale * (summed loss) with respect to the logits; use
    grad_scale = 1 / counted for the mean."""
    logits, rows, vocab = _rows("logits", logits)
    t = _targets(targets, rows)
    lse = _same_shape("lse", as_float32("lse", lse), logits.shape[:-1])
    dlogits = np.zeros_like(logits)
    check(lib.attn_cross_entropy_backward(rows, vocab, ptr(logits), ptr(t), ignore_index,
                                          label_smoothing, ptr(lse), grad_scale, ptr(dlogits)),
          "attn_cross_entropy_backward")
    return dlogits


# ---- layer norm ------------------------------------------------------------------------------

def layer_norm(x, gamma=None, beta=None, eps=1e-5):
    """Layer norm over the last axis, as torch.nn.functional.layer_norm.
    Returns (y, mean, rstd); mean and rstd (shape x.shape[:-1]) feed the backward."""
    x, rows, dim = _rows("x", x)
    if gamma is not None:
        gamma = _same_shape("gamma", as_float32("gamma", gamma), (dim,))
    if beta is not None:
        beta = _same_shape("beta", as_float32("beta", beta), (dim,))
    y = np.empty_like(x)
    mean = np.empty(x.shape[:-1], dtype=np.float32)
    rstd = np.empty(x.shape[:-1], dtype=np.float32)
    check(lib.attn_layer_norm_forward(rows, dim, ptr(x), ptr(gamma), ptr(beta), eps, ptr(y),
                                      ptr(mean), ptr(rstd)), "attn_layer_norm_forward")
    return y, mean, rstd


def layer_norm_backward(x, gamma, mean, rstd, dy):
    """Returns (dx, dgamma, dbeta) of layer norm; gamma may be None (no affine scale)."""
    x, rows, dim = _rows("x", x)
    if gamma is not None:
        gamma = _same_shape("gamma", as_float32("gamma", gamma), (dim,))
    mean = _same_shape("mean", as_float32("mean", mean), x.shape[:-1])
    rstd = _same_shape("rstd", as_float32("rstd", rstd), x.shape[:-1])
    dy = _same_shape("dy", as_float32("dy", dy), x.shape)
    dx = np.zeros_like(x)
    dgamma = np.zeros(dim, dtype=np.float32)
    dbeta = np.zeros(dim, dtype=np.float32)
    check(lib.attn_layer_norm_backward(rows, dim, ptr(x), ptr(gamma), ptr(mean), ptr(rstd),
                                       ptr(dy), ptr(dx), ptr(dgamma), ptr(dbeta)),
          "attn_layer_norm_backward")
    return dx, dgamma, dbeta


# ---- activations -----------------------------------------------------------------------------

def activation(name, x):
    """One of ACTIVATIONS applied element-wise; "gelu" is exact (erf), "gelu_tanh" the
    tanh approximation, as torch's gelu(approximate='none' | 'tanh')."""
    code = _activation_code(name)
    x = as_float32("x", x)
    y = np.empty_like(x)
    check(lib.attn_activation_forward(code, x.size, ptr(x), ptr(y)), "attn_activation_forward")
    return y


def activation_backward(name, x, dy):
    """Gradient of activation(name, x) with respect to x, given dy."""
    code = _activation_code(name)
    x = as_float32("x", x)
    dy = _same_shape("dy", as_float32("dy", dy), x.shape)
    dx = np.zeros_like(x)
    check(lib.attn_activation_backward(code, x.size, ptr(x), ptr(dy), ptr(dx)),
          "attn_activation_backward")
    return dx
