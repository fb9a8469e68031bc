"""Multi-head attention: attn_mha_forward and attn_mha_backward on NumPy arrays.

The functions follow torch.nn.functional.multi_head_attention_forward (without dropout,
bias_k/bias_v or add_zero_attn) but batch-first, as torch.nn.MultiheadAttention with
batch_first=True:
  query [B, Lq, E], key [B, Lk, kdim], value [B, Lk, vdim] -> out [B, Lq, E]
with in_proj_weight [3E, E] (kdim == vdim == E) or q_proj_weight [E, E],
k_proj_weight [E, kdim], v_proj_weight [E, vdim] (pass in_proj_weight=None); in_proj_bias
[3E], out_proj_weight [E, E], out_proj_bias [E]; biases may be None.

Masks, as PyTorch's MultiheadAttention:
  - key_padding_mask: bool [B, Lk], True = ignore that key.
  - attn_mask: additive float32 [Lq, Lk] or [B * num_heads, Lq, Lk]; a bool attn_mask means
    True = NOT allowed (note: the opposite of F.scaled_dot_product_attention's bool mask).
  - is_causal: key j is excluded for query i when j > i.
A query row whose keys are all excluded gets zero weights and the output out_proj_bias
(PyTorch gives NaN there).

Passing the same array object as query, key and value (self-attention) lets the library
project Q, K and V with one fused GEMM; key is value fuses K and V.
"""
import ctypes

import numpy as np

from ._lib import as_float32, as_mask, c_float_p, check, lib, ptr
from .sdpa import SdpaOptions, additive_mask


class _Dims(ctypes.Structure):
    # attn_mha_dims; rope_base stays 0 (no rotary positions) here
    _fields_ = [(name, ctypes.c_int64) for name in
                ("batch", "len_q", "len_k", "embed_dim", "num_heads", "kdim", "vdim")] + \
        [("rope_base", ctypes.c_double)]


_PARAM_NAMES = ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight",
                "in_proj_bias", "out_proj_weight", "out_proj_bias")


class _Params(ctypes.Structure):
    _fields_ = [(name, c_float_p) for name in _PARAM_NAMES]


class _Sizes(ctypes.Structure):
    _fields_ = [("saved_floats", ctypes.c_size_t), ("forward_scratch_floats", ctypes.c_size_t),
                ("backward_scratch_floats", ctypes.c_size_t)]


_dims_p, _params_p = ctypes.POINTER(_Dims), ctypes.POINTER(_Params)
lib.attn_mha_sizes.restype = ctypes.c_int
lib.attn_mha_sizes.argtypes = [_dims_p, ctypes.POINTER(_Sizes)]
lib.attn_mha_forward.restype = ctypes.c_int
lib.attn_mha_forward.argtypes = [_dims_p, _params_p, c_float_p, c_float_p, c_float_p,
                                 ctypes.POINTER(SdpaOptions), c_float_p, c_float_p, ctypes.c_int,
                                 c_float_p, c_float_p]
lib.attn_mha_backward.restype = ctypes.c_int
lib.attn_mha_backward.argtypes = [_dims_p, _params_p, c_float_p, c_float_p, c_float_p,
                                  ctypes.POINTER(SdpaOptions), c_float_p, c_float_p, c_float_p,
                                  c_float_p, c_float_p, c_float_p, _params_p]


def _expect_shape(name, array, shape):
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {array.shape}")


class _Call:
    """Checked arrays, the C structs that point into them, and the saved buffer."""

    def __init__(self, fn, query, key, value, num_heads, params, key_padding_mask, attn_mask,
                 is_causal):
        self.fn = fn
        # Aliased inputs stay one array, so the library sees one pointer and fuses.
        self.query = as_float32("query", query, 3)
        self.key = self.query if key is query else as_float32("key", key, 3)
        self.value = (self.key if value is key else
                      self.query if value is query else as_float32("value", value, 3))
        batch, len_q, embed = self.query.shape
        len_k, kdim = self.key.shape[1], self.key.shape[2]
        vdim = self.value.shape[2]
        if self.key.shape[0] != batch or self.value.shape[:2] != self.key.shape[:2]:
            raise ValueError(f"{fn}: query {self.query.shape}, key {self.key.shape} and value "
                             f"{self.value.shape} must share the batch, and key and value the "
                             "length")
        self.dims = _Dims(batch, len_q, len_k, embed, int(num_heads), kdim, vdim)

        expected = {"in_proj_weight": (3 * embed, embed), "q_proj_weight": (embed, embed),
                    "k_proj_weight": (embed, kdim), "v_proj_weight": (embed, vdim),
                    "in_proj_bias": (3 * embed,), "out_proj_weight": (embed, embed),
                    "out_proj_bias": (embed,)}
        self.params = {}
        for name in _PARAM_NAMES:
            if params[name] is None:
                self.params[name] = None
                continue
            array = as_float32(name, params[name])
            _expect_shape(name, array, expected[name])
            self.params[name] = array
        if self.params["out_proj_weight"] is None:
            raise ValueError(f"{fn}: out_proj_weight is required")
        self.param_struct = _Params(*(ptr(self.params[name]) for name in _PARAM_NAMES))

        self.options = SdpaOptions()
        self.options.window = -1
        self.options.causal = 1 if is_causal else 0
        self.padding = self.mask = None
        if key_padding_mask is not None:
            self.padding = as_mask("key_padding_mask", key_padding_mask, (batch, len_k))
            self.options.key_padding_mask = ptr(self.padding)
        if attn_mask is not None:
            heads = max(int(num_heads), 1)
            self.mask = additive_mask("attn_mask", attn_mask,
                                      [(len_q, len_k), (batch * heads, len_q, len_k)],
                                      true_means_keep=False)
            self.options.attn_mask = ptr(self.mask)
            self.options.attn_mask_per_head = 1 if self.mask.ndim == 3 else 0

        sizes = _Sizes()
        check(lib.attn_mha_sizes(ctypes.byref(self.dims), ctypes.byref(sizes)), fn)
        self.sizes = sizes
        self.saved = np.zeros(sizes.saved_floats, dtype=np.float32)

    def forward(self, need_weights, average_attn_weights):
        batch, len_q, len_k = self.dims.batch, self.dims.len_q, self.dims.len_k
        out = np.zeros((batch, len_q, self.dims.embed_dim), dtype=np.float32)
        weights = scratch = None
        if need_weights:
            shape = ((batch, len_q, len_k) if average_attn_weights
                     else (batch, self.dims.num_heads, len_q, len_k))
            weights = np.zeros(shape, dtype=np.float32)
            if average_attn_weights:
                scratch = np.zeros(self.sizes.forward_scratch_floats, dtype=np.float32)
        check(lib.attn_mha_forward(ctypes.byref(self.dims), ctypes.byref(self.param_struct),
                                   ptr(self.query), ptr(self.key), ptr(self.value),
                                   ctypes.byref(self.options), ptr(out), ptr(weights),
                                   1 if average_attn_weights else 0, ptr(self.saved),
                                   ptr(scratch)),
              self.fn)
        return out, weights

    def backward(self, grad_out):
        grad_out = as_float32("grad_out", grad_out)
        _expect_shape("grad_out", grad_out,
                      (self.dims.batch, self.dims.len_q, self.dims.embed_dim))
        grads = {"query": np.zeros_like(self.query)}
        grads["key"] = grads["query"] if self.key is self.query else np.zeros_like(self.key)
        grads["value"] = (grads["key"] if self.value is self.key else
                          grads["query"] if self.value is self.query else
                          np.zeros_like(self.value))
        for name in _PARAM_NAMES:
            array = self.params[name]
            grads[name] = None if array is None else np.zeros_like(array)
        grad_struct = _Params(*(ptr(grads[name]) for name in _PARAM_NAMES))
        scratch = np.zeros(self.sizes.backward_scratch_floats, dtype=np.float32)
        check(lib.attn_mha_backward(ctypes.byref(self.dims), ctypes.byref(self.param_struct),
                                    ptr(self.query), ptr(self.key), ptr(self.value),
                                    ctypes.byref(self.options), ptr(self.saved), ptr(grad_out),
                                    ptr(scratch), ptr(grads["query"]), ptr(grads["key"]),
                                    ptr(grads["value"]), ctypes.byref(grad_struct)),
              self.fn)
        return grads


def multi_head_attention_forward(query, key, value, num_heads, in_proj_weight, in_proj_bias,
                                 out_proj_weight, out_proj_bias, key_padding_mask=None,
                                 attn_mask=None, is_causal=False, need_weights=False,
                                 average_attn_weights=True, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None):
    """out [B, Lq, E], or (out, weights) when need_weights: weights [B, Lq, Lk] averaged
    over heads if average_attn_weights, else [B, num_heads, Lq, Lk]."""
    params = {"in_proj_weight": in_proj_weight, "q_proj_weight": q_proj_weight,
              "k_proj_weight": k_proj_weight, "v_proj_weight": v_proj_weight,
              "in_proj_bias": in_proj_bias, "out_proj_weight": out_proj_weight,
              "out_proj_bias": out_proj_bias}
    call = _Call("multi_head_attention_forward", query, key, value, num_heads, params,
                 key_padding_mask, attn_mask, is_causal)
    out, weights = call.forward(need_weights, average_attn_weights)
    return (out, weights) if need_weights else out


def multi_head_attention_backward(query, key, value, num_heads, in_proj_weight, in_proj_bias,
                                  out_proj_weight, out_proj_bias, grad_out,
                                  key_padding_mask=None, attn_mask=None, is_causal=False,
                                  q_proj_weight=None, k_proj_weight=None, v_proj_weight=None):
    """Gradients of sum(out * grad_out) as a dict with the keys query, key, value and every
    parameter name (None for a parameter passed as None). When query, key and value are one
    array, their entries are one array holding the total gradient (as torch's x.grad).
    Runs the forward again to fill the buffer the backward reads."""
    params = {"in_proj_weight": in_proj_weight, "q_proj_weight": q_proj_weight,
              "k_proj_weight": k_proj_weight, "v_proj_weight": v_proj_weight,
              "in_proj_bias": in_proj_bias, "out_proj_weight": out_proj_weight,
              "out_proj_bias": out_proj_bias}
    call = _Call("multi_head_attention_backward", query, key, value, num_heads, params,
                 key_padding_mask, attn_mask, is_causal)
    call.forward(False, True)
    return call.backward(grad_out)
