"""Scaled dot-product attention: attn_sdpa_forward and attn_sdpa_backward on NumPy arrays.

Masks combine (a pair takes part only if no mask excludes it):
  - attn_mask: additive float32 [Lq, Lk] or [B, H, Lq, Lk]; -inf excludes a pair. A bool
    attn_mask is also accepted with the convention of torch's F.scaled_dot_product_attention:
    True = takes part (it becomes 0 where True and -inf where False).
  - key_padding_mask: bool [B, Lk], True = ignore that key (as torch.nn.MultiheadAttention).
  - is_causal: key j is excluded for query i when j > i (aligned at the top left).
  - window: excludes |i - j| > window (local attention).
A query row whose keys are all excluded yields zeros (PyTorch yields NaN) and no gradient.
"""
import ctypes

import numpy as np

from ._lib import as_float32, as_int64, as_mask, c_float_p, c_uint8_p, check, lib, ptr

_MAX_DIMS = 6


class Tensor(ctypes.Structure):
    """attn_tensor: a view (data, ndim, shape, strides in elements)."""

    _fields_ = [
        ("data", c_float_p),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * _MAX_DIMS),
        ("stride", ctypes.c_int64 * _MAX_DIMS),
    ]


class SdpaOptions(ctypes.Structure):
    """attn_sdpa_options."""

    _fields_ = [
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("window", ctypes.c_int64),
        ("key_padding_mask", c_uint8_p),
        ("attn_mask", c_float_p),
        ("attn_mask_per_head", ctypes.c_int),
        ("precision", ctypes.c_int),  # attn_precision: 0 fp32, 1 bf16
    ]


_tensor_p = ctypes.POINTER(Tensor)
_options_p = ctypes.POINTER(SdpaOptions)
lib.attn_sdpa_forward.restype = ctypes.c_int
lib.attn_sdpa_forward.argtypes = [_tensor_p, _tensor_p, _tensor_p, _options_p, _tensor_p,
                                  c_float_p, c_float_p]
lib.attn_sdpa_backward.restype = ctypes.c_int
lib.attn_sdpa_backward.argtypes = [_tensor_p, _tensor_p, _tensor_p, _options_p, _tensor_p,
                                   c_float_p, _tensor_p, _tensor_p, _tensor_p, _tensor_p]


def tensor_view(array):
    """An attn_tensor over a C-contiguous float32 array (which must outlive the view)."""
    t = Tensor()
    t.data = ptr(array)
    t.ndim = array.ndim
    for axis, (size, stride) in enumerate(zip(array.shape, array.strides)):
        t.shape[axis] = size
        t.stride[axis] = stride // array.itemsize
    return t


def additive_mask(name, attn_mask, shapes, true_means_keep):
    """A float32 additive mask of one of the given shapes; a bool mask becomes 0 / -inf."""
    a = np.asarray(attn_mask)
    if a.dtype == np.bool_:
        keep = a if true_means_keep else ~a
        a = np.where(keep, np.float32(0), np.float32(-np.inf)).astype(np.float32)
    a = as_float32(name, a)
    if tuple(a.shape) not in [tuple(s) for s in shapes]:
        expected = " or ".join(str(tuple(s)) for s in shapes)
        raise ValueError(f"{name}: expected shape {expected}, got {a.shape}")
    return a


# attn_precision values the attention accepts.
_PRECISIONS = {"fp32": 0, "bf16": 1}


class _Options:
    """SdpaOptions plus the arrays its pointers refer to (kept alive with it)."""

    def __init__(self, batch, heads, len_q, len_k, attn_mask, key_padding_mask, is_causal,
                 window, scale, precision):
        self.struct = SdpaOptions()
        if precision not in _PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(_PRECISIONS)}, got {precision!r}")
        self.struct.precision = _PRECISIONS[precision]
        self.struct.scale = 0.0 if scale is None else float(scale)
        self.struct.causal = 1 if is_causal else 0
        self.struct.window = -1 if window is None else as_int64("window", window, 0)
        self.padding = None
        if key_padding_mask is not None:
            self.padding = as_mask("key_padding_mask", key_padding_mask, (batch, len_k))
            self.struct.key_padding_mask = ptr(self.padding)
        self.mask = None
        if attn_mask is not None:
            self.mask = additive_mask("attn_mask", attn_mask,
                                      [(len_q, len_k), (batch, heads, len_q, len_k)],
                                      true_means_keep=True)
            self.struct.attn_mask = ptr(self.mask)
            self.struct.attn_mask_per_head = 1 if self.mask.ndim == 4 else 0


def _prepare(q, k, v, attn_mask, key_padding_mask, is_causal, window, scale, precision):
    q = as_float32("q", q, 4)
    k = as_float32("k", k, 4)
    v = as_float32("v", v, 4)
    batch, heads, len_q, _ = q.shape
    options = _Options(batch, heads, len_q, k.shape[2], attn_mask, key_padding_mask, is_causal,
                       window, scale, precision)
    return q, k, v, options


def _forward(q, k, v, options, need_weights):
    batch, heads, len_q, _ = q.shape
    len_k = k.shape[2]
    out = np.zeros((batch, heads, len_q, v.shape[3]), dtype=np.float32)
    lse = np.zeros((batch, heads, len_q), dtype=np.float32)
    weights = (np.zeros((batch, heads, len_q, len_k), dtype=np.float32)
               if need_weights else None)
    tq, tk, tv, tout = tensor_view(q), tensor_view(k), tensor_view(v), tensor_view(out)
    check(lib.attn_sdpa_forward(ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv),
                                ctypes.byref(options.struct), ctypes.byref(tout), ptr(lse),
                                ptr(weights)),
          "scaled_dot_product_attention")
    return out, lse, weights


def scaled_dot_product_attention(q, k, v, attn_mask=None, key_padding_mask=None,
                                 is_causal=False, window=None, scale=None, need_weights=False,
                                 precision="fp32"):
    """softmax(q k^T * scale + mask) v for q [B,H,Lq,d], k [B,H,Lk,d], v [B,H,Lk,dv].

    scale None (or 0) means 1/sqrt(d). Returns out [B,H,Lq,dv], or (out, weights) with
    weights [B,H,Lq,Lk] when need_weights. See the module docstring for the masks.
    precision "bf16" rounds the operands of the products to bfloat16 (float32 accumulation).
    """
    q, k, v, options = _prepare(q, k, v, attn_mask, key_padding_mask, is_causal, window, scale,
                                precision)
    out, _, weights = _forward(q, k, v, options, need_weights)
    return (out, weights) if need_weights else out


def scaled_dot_product_attention_backward(q, k, v, grad_out, attn_mask=None,
                                          key_padding_mask=None, is_causal=False, window=None,
                                          scale=None, precision="fp32"):
    """Gradients (dq, dk, dv) of sum(out * grad_out), with the options of the forward
    (which this runs again to get the output and log-sum-exp the backward reads)."""
    q, k, v, options = _prepare(q, k, v, attn_mask, key_padding_mask, is_causal, window, scale,
                                precision)
    grad_out = as_float32("grad_out", grad_out, 4)
    out, lse, _ = _forward(q, k, v, options, False)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    views = [tensor_view(a) for a in (q, k, v, out, grad_out, dq, dk, dv)]
    tq, tk, tv, tout, tgrad, tdq, tdk, tdv = views
    check(lib.attn_sdpa_backward(ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv),
                                 ctypes.byref(options.struct), ctypes.byref(tout), ptr(lse),
                                 ctypes.byref(tgrad), ctypes.byref(tdq), ctypes.byref(tdk),
                                 ctypes.byref(tdv)),
          "scaled_dot_product_attention_backward")
    return dq, dk, dv
