"""Attention for RNN encoder-decoders: additive (Bahdanau), multiplicative (Luong) and hard
attention, and the sinusoidal positional encoding.

One call is one decoder step for a batch of B sentences. Shapes:

    query    [B, ds]       the decoder state
    keys     [B, Lk, dk]   the encoder annotations (the wrappers project them when the score
                           needs it, so pass them raw)
    values   [B, Lk, dv]   what the context averages; None means the keys themselves, and
                           then the keys' gradient includes both paths
    mask     [B, Lk]       bool or uint8, True = padding (never attended)

All arrays are float32. Each function returns new arrays; backward functions recompute the
forward and return a dict of gradients named like the arguments. A row with nothing left
to attend to (all masked, or a local window outside the sentence) gets zero weights, zero
context and zero gradients. Wrong dtypes or shapes raise ValueError; so do arguments the
library rejects, with its own message.
"""
import ctypes

import numpy as np

from ._lib import as_float32, as_int64, as_mask, check, lib, ptr

__all__ = [
    "additive_scores",
    "additive_attention",
    "additive_attention_backward",
    "luong_scores",
    "luong_attention",
    "luong_attention_backward",
    "hard_attention",
    "positional_encoding",
]

_c_float_p = ctypes.POINTER(ctypes.c_float)
_c_uint8_p = ctypes.POINTER(ctypes.c_uint8)
_c_int64_p = ctypes.POINTER(ctypes.c_int64)
_i64 = ctypes.c_int64


class _AdditiveDims(ctypes.Structure):
    _fields_ = [(name, _i64) for name in
                ("batch", "src_len", "query_dim", "key_dim", "value_dim", "attn_dim")] + [
                    ("precision", ctypes.c_int)]


class _AdditiveParams(ctypes.Structure):
    _fields_ = [("w_query", _c_float_p), ("bias", _c_float_p), ("v", _c_float_p)]


class _AdditiveGrads(ctypes.Structure):
    _fields_ = [("w_query", _c_float_p), ("bias", _c_float_p), ("v", _c_float_p)]


class _LuongConfig(ctypes.Structure):
    _fields_ = [("score", ctypes.c_int), ("align", ctypes.c_int)] + [
        (name, _i64) for name in ("batch", "src_len", "query_dim", "key_dim", "value_dim",
                                  "attn_dim", "predict_dim", "window")] + [
        ("precision", ctypes.c_int)]


class _LuongParams(ctypes.Structure):
    _fields_ = [("w", _c_float_p), ("v", _c_float_p), ("w_p", _c_float_p), ("v_p", _c_float_p)]


class _LuongGrads(ctypes.Structure):
    _fields_ = [("w", _c_float_p), ("v", _c_float_p), ("w_p", _c_float_p), ("v_p", _c_float_p)]


class _Rng(ctypes.Structure):
    _fields_ = [("state", ctypes.c_uint64 * 4)]


def _declare(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


_status = ctypes.c_int
_f, _u8 = _c_float_p, _c_uint8_p
_dims_p, _config_p = ctypes.POINTER(_AdditiveDims), ctypes.POINTER(_LuongConfig)
_declare("attn_additive_saved_floats", ctypes.c_size_t, _dims_p)
_declare("attn_additive_workspace_floats", ctypes.c_size_t, _dims_p)
_declare("attn_additive_project_keys", _status, _dims_p, _f, _f, _f)
_declare("attn_additive_project_keys_backward", _status, _dims_p, _f, _f, _f, _f, _f)
_declare("attn_additive_scores", _status, _dims_p, ctypes.POINTER(_AdditiveParams), _f, _f,
         _f, _f)
_declare("attn_additive_forward", _status, _dims_p, ctypes.POINTER(_AdditiveParams), _f, _f,
         _f, _u8, _f, _f, _f)
_declare("attn_additive_backward", _status, _dims_p, ctypes.POINTER(_AdditiveParams), _f, _f,
         _f, _u8, _f, _f, _f, _f, _f, _f, _f, ctypes.POINTER(_AdditiveGrads), _f)
_declare("attn_luong_saved_floats", ctypes.c_size_t, _config_p)
_declare("attn_luong_workspace_floats", ctypes.c_size_t, _config_p)
_declare("attn_luong_project_keys", _status, _config_p, _f, _f, _f)
_declare("attn_luong_project_keys_backward", _status, _config_p, _f, _f, _f, _f, _f)
_declare("attn_luong_scores", _status, _config_p, ctypes.POINTER(_LuongParams), _f, _f, _f, _f)
_declare("attn_luong_forward", _status, _config_p, ctypes.POINTER(_LuongParams), _i64, _f, _f,
         _f, _u8, _f, _f, _f)
_declare("attn_luong_backward", _status, _config_p, ctypes.POINTER(_LuongParams), _i64, _f, _f,
         _f, _u8, _f, _f, _f, _f, _f, _f, _f, ctypes.POINTER(_LuongGrads), _f)
_declare("attn_hard_attention", _status, _i64, _i64, _i64, _f, _u8, _f, ctypes.c_int,
         ctypes.POINTER(_Rng), _c_int64_p, _f, _f)
_declare("attn_rng_seed", None, ctypes.POINTER(_Rng), ctypes.c_uint64)
_declare("attn_positional_encoding", _status, _i64, _i64, ctypes.c_int, _f)


def _expect_shape(name, array, shape):
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(array.shape)}")


def _zeros(*shape):
    return np.zeros(shape, dtype=np.float32)


def _buffer(count):
    return np.empty(int(count), dtype=np.float32)


def _step_inputs(query, keys, values, mask):
    """Checked query [B, ds], keys [B, Lk, dk], values (or None) and mask."""
    q = as_float32("query", query, 2)
    k = as_float32("keys", keys, 3)
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"keys: batch {k.shape[0]} differs from the query's {q.shape[0]}")
    x = None
    if values is not None:
        x = as_float32("values", values, 3)
        if x.shape[:2] != k.shape[:2]:
            raise ValueError(f"values: expected shape {k.shape[:2]} + (dv,), got {x.shape}")
    m = None if mask is None else as_mask("mask", mask, k.shape[:2])
    return q, k, x, m


# ---- additive attention ------------------------------------------------------------------

class _Additive:
    """Checked arguments and the C structures of one additive-attention call."""

    def __init__(self, query, keys, values, w_query, w_key, v, bias, mask):
        self.q, self.k, self.x, self.mask = _step_inputs(query, keys, values, mask)
        self.values = self.k if self.x is None else self.x
        batch, src_len, key_dim = self.k.shape
        self.wq = as_float32("w_query", w_query, 2)
        attn_dim = self.wq.shape[0]
        _expect_shape("w_query", self.wq, (attn_dim, self.q.shape[1]))
        self.wk = as_float32("w_key", w_key, 2)
        _expect_shape("w_key", self.wk, (attn_dim, key_dim))
        self.v = as_float32("v", v, 1)
        _expect_shape("v", self.v, (attn_dim,))
        self.bias = None if bias is None else as_float32("bias", bias, 1)
        if self.bias is not None:
            _expect_shape("bias", self.bias, (attn_dim,))
        self.dims = _AdditiveDims(batch, src_len, self.q.shape[1], key_dim,
                                  self.values.shape[2], attn_dim)
        self.params = _AdditiveParams(ptr(self.wq), ptr(self.bias), ptr(self.v))
        self.saved = _buffer(lib.attn_additive_saved_floats(ctypes.byref(self.dims)))

    def projected_keys(self, what):
        d = self.dims
        keys = _zeros(d.batch, d.src_len, d.attn_dim)
        check(lib.attn_additive_project_keys(ctypes.byref(d), ptr(self.k), ptr(self.wk),
                                             ptr(keys)), what)
        return keys

    def forward(self, keys, what):
        d = self.dims
        context, weights = _zeros(d.batch, d.value_dim), _zeros(d.batch, d.src_len)
        check(lib.attn_additive_forward(ctypes.byref(d), ctypes.byref(self.params), ptr(self.q),
                                        ptr(keys), ptr(self.values), ptr(self.mask),
                                        ptr(context), ptr(weights), ptr(self.saved)), what)
        return context, weights


def additive_scores(query, keys, *, w_query, w_key, v, bias=None):
    """Raw additive scores v . tanh(W_s s + W_h h_j + b), shape [B, Lk], no mask applied
    (for instance to feed hard_attention).

    query [B, ds], keys [B, Lk, dk], w_query [da, ds], w_key [da, dk], v [da], bias [da].
    """
    a = _Additive(query, keys, None, w_query, w_key, v, bias, None)
    keys_p = a.projected_keys("additive_scores")
    scores = _zeros(a.dims.batch, a.dims.src_len)
    check(lib.attn_additive_scores(ctypes.byref(a.dims), ctypes.byref(a.params), ptr(a.q),
                                   ptr(keys_p), ptr(scores), ptr(a.saved)), "additive_scores")
    return scores


def additive_attention(query, keys, values=None, *, w_query, w_key, v, bias=None, mask=None):
    """Additive attention (Bahdanau et al. 2015) for one decoder step.

    score_j = v . tanh(w_query @ query + w_key @ keys_j + bias), weights = softmax over the
    unmasked j, context = sum_j weights_j values_j.

    query [B, ds], keys [B, Lk, dk], values [B, Lk, dv] or None (= keys), w_query [da, ds],
    w_key [da, dk], v [da], bias [da] or None, mask [B, Lk] (True = padding) or None.
    Returns (context [B, dv], weights [B, Lk]).
    """
    a = _Additive(query, keys, values, w_query, w_key, v, bias, mask)
    return a.forward(a.projected_keys("additive_attention"), "additive_attention")


def additive_attention_backward(grad_context, query, keys, values=None, *, w_query, w_key, v,
                                bias=None, mask=None, grad_weights=None):
    """Gradients of additive_attention for the loss sum(grad_context * context) +
    sum(grad_weights * weights).

    grad_context [B, dv]; grad_weights [B, Lk] or None; the other arguments as for
    additive_attention. Returns a dict with "query", "keys", "w_query", "w_key", "v", and
    "values" (when values is given) and "bias" (when bias is given). With values=None the
    keys' gradient holds both the scoring and the averaging path.
    """
    what = "additive_attention_backward"
    a = _Additive(query, keys, values, w_query, w_key, v, bias, mask)
    d = a.dims
    dctx = as_float32("grad_context", grad_context, 2)
    _expect_shape("grad_context", dctx, (d.batch, d.value_dim))
    dwts = None if grad_weights is None else as_float32("grad_weights", grad_weights, 2)
    if dwts is not None:
        _expect_shape("grad_weights", dwts, (d.batch, d.src_len))
    keys_p = a.projected_keys(what)
    _, weights = a.forward(keys_p, what)

    grads = {"query": _zeros(d.batch, d.query_dim), "keys": _zeros(d.batch, d.src_len, d.key_dim),
             "w_query": _zeros(d.attn_dim, d.query_dim), "w_key": _zeros(d.attn_dim, d.key_dim),
             "v": _zeros(d.attn_dim)}
    if a.x is not None:
        grads["values"] = _zeros(*a.x.shape)
    if a.bias is not None:
        grads["bias"] = _zeros(d.attn_dim)
    c_grads = _AdditiveGrads(ptr(grads["w_query"]), ptr(grads.get("bias")), ptr(grads["v"]))
    dkeys_p = _zeros(d.batch, d.src_len, d.attn_dim)
    workspace = _buffer(lib.attn_additive_workspace_floats(ctypes.byref(d)))
    check(lib.attn_additive_backward(ctypes.byref(d), ctypes.byref(a.params), ptr(a.q),
                                     ptr(keys_p), ptr(a.values), ptr(a.mask), ptr(weights),
                                     ptr(a.saved), ptr(dctx), ptr(dwts), ptr(grads["query"]),
                                     ptr(dkeys_p), ptr(grads.get("values", grads["keys"])),
                                     ctypes.byref(c_grads), ptr(workspace)), what)
    check(lib.attn_additive_project_keys_backward(ctypes.byref(d), ptr(a.k), ptr(a.wk),
                                                  ptr(dkeys_p), ptr(grads["keys"]),
                                                  ptr(grads["w_key"])), what)
    return grads


# ---- Luong attention ---------------------------------------------------------------------

_SCORES = {"dot": 0, "general": 1, "concat": 2}
_ALIGNS = {None: 0, "m": 1, "p": 2}


class _Luong:
    """Checked arguments and the C structures of one Luong-attention call."""

    def __init__(self, query, keys, values, score, w, v, local, window, position, w_p, v_p,
                 mask):
        if score not in _SCORES:
            raise ValueError(f"score: expected one of {sorted(_SCORES)}, got {score!r}")
        if local not in _ALIGNS:
            raise ValueError(f"local: expected None, 'm' or 'p', got {local!r}")
        self.q, self.k, self.x, self.mask = _step_inputs(query, keys, values, mask)
        self.values = self.k if self.x is None else self.x
        self.score, self.local = score, local
        batch, src_len, key_dim = self.k.shape
        query_dim = self.q.shape[1]
        self.w = self.v = self.w_p = self.v_p = None
        attn_dim = predict_dim = 0
        if score == "general":
            self.w = as_float32("w", w, 2)
            _expect_shape("w", self.w, (query_dim, key_dim))
        elif score == "concat":
            self.w = as_float32("w", w, 2)
            attn_dim = self.w.shape[0]
            _expect_shape("w", self.w, (attn_dim, query_dim + key_dim))
            self.v = as_float32("v", v, 1)
            _expect_shape("v", self.v, (attn_dim,))
        if local is not None and window is None:
            raise ValueError("window: local attention needs a window D")
        if local == "m" and position is None:
            raise ValueError("position: local-m attention needs the target position t")
        if local == "p":
            self.w_p = as_float32("w_p", w_p, 2)
            predict_dim = self.w_p.shape[0]
            _expect_shape("w_p", self.w_p, (predict_dim, query_dim))
            self.v_p = as_float32("v_p", v_p, 1)
            _expect_shape("v_p", self.v_p, (predict_dim,))
        self.position = 0 if position is None else as_int64("position", position)
        self.config = _LuongConfig(_SCORES[score], _ALIGNS[local], batch, src_len, query_dim,
                                   key_dim, self.values.shape[2], attn_dim, predict_dim,
                                   0 if window is None else as_int64("window", window))
        self.params = _LuongParams(ptr(self.w), ptr(self.v), ptr(self.w_p), ptr(self.v_p))
        self.saved = _buffer(lib.attn_luong_saved_floats(ctypes.byref(self.config)))

    def step_keys(self, what):
        """The keys a step scores: the annotations, or their projection for concat."""
        if self.score != "concat":
            return self.k
        c = self.config
        keys = _zeros(c.batch, c.src_len, c.attn_dim)
        check(lib.attn_luong_project_keys(ctypes.byref(c), ptr(self.k), ptr(self.w), ptr(keys)),
              what)
        return keys

    def forward(self, keys, what):
        c = self.config
        context, weights = _zeros(c.batch, c.value_dim), _zeros(c.batch, c.src_len)
        check(lib.attn_luong_forward(ctypes.byref(c), ctypes.byref(self.params), self.position,
                                     ptr(self.q), ptr(keys), ptr(self.values), ptr(self.mask),
                                     ptr(context), ptr(weights), ptr(self.saved)), what)
        return context, weights


def luong_scores(query, keys, *, score="dot", w=None, v=None):
    """Raw Luong scores [B, Lk] with no mask, window or Gaussian (e.g. for hard_attention).

    score="dot": query . keys_j (ds == dk); "general": query . (w @ keys_j) with w [ds, dk];
    "concat": v . tanh(w @ [query; keys_j]) with w [da, ds + dk], v [da].
    """
    lu = _Luong(query, keys, None, score, w, v, None, None, None, None, None, None)
    keys_s = lu.step_keys("luong_scores")
    scores = _zeros(lu.config.batch, lu.config.src_len)
    check(lib.attn_luong_scores(ctypes.byref(lu.config), ctypes.byref(lu.params), ptr(lu.q),
                                ptr(keys_s), ptr(scores), ptr(lu.saved)), "luong_scores")
    return scores


def luong_attention(query, keys, values=None, *, score="dot", w=None, v=None, local=None,
                    window=None, position=None, w_p=None, v_p=None, mask=None):
    """Luong attention (Luong, Pham and Manning 2015) for one decoder step.

    score: "dot", "general" (w [ds, dk]) or "concat" (w [da, ds + dk], v [da]); see
    luong_scores. local: None for global attention over every unmasked position;
    "m" for positions [position - window, position + window] clipped to the sentence;
    "p" for a window of half-width `window` (>= 1) around p_t = S * sigmoid(v_p .
    tanh(w_p @ query)), w_p [dp, ds], v_p [dp], S the unpadded sentence length, the softmax
    over the window then multiplied by exp(-(j - p_t)^2 / (2 (window/2)^2)) without
    renormalising. query [B, ds], keys [B, Lk, dk], values [B, Lk, dv] or None (= keys),
    mask [B, Lk] (True = padding) or None. Returns (context [B, dv], weights [B, Lk]).
    """
    lu = _Luong(query, keys, values, score, w, v, local, window, position, w_p, v_p, mask)
    return lu.forward(lu.step_keys("luong_attention"), "luong_attention")


def luong_attention_backward(grad_context, query, keys, values=None, *, score="dot", w=None,
                             v=None, local=None, window=None, position=None, w_p=None,
                             v_p=None, mask=None, grad_weights=None):
    """Gradients of luong_attention for the loss sum(grad_context * context) +
    sum(grad_weights * weights).

    Returns a dict with "query" and "keys", plus "values" when values is given and the
    gradients of whichever of "w", "v", "w_p", "v_p" the configuration uses. local-p
    gradients reach w_p and v_p through p_t (the choice of window itself is piecewise
    constant).
    """
    what = "luong_attention_backward"
    lu = _Luong(query, keys, values, score, w, v, local, window, position, w_p, v_p, mask)
    c = lu.config
    dctx = as_float32("grad_context", grad_context, 2)
    _expect_shape("grad_context", dctx, (c.batch, c.value_dim))
    dwts = None if grad_weights is None else as_float32("grad_weights", grad_weights, 2)
    if dwts is not None:
        _expect_shape("grad_weights", dwts, (c.batch, c.src_len))
    keys_s = lu.step_keys(what)
    _, weights = lu.forward(keys_s, what)

    grads = {"query": _zeros(*lu.q.shape), "keys": _zeros(*lu.k.shape)}
    if lu.x is not None:
        grads["values"] = _zeros(*lu.x.shape)
    for name in ("w", "v", "w_p", "v_p"):
        if getattr(lu, name) is not None:
            grads[name] = _zeros(*getattr(lu, name).shape)
    c_grads = _LuongGrads(*(ptr(grads.get(name)) for name in ("w", "v", "w_p", "v_p")))
    dkeys_s = _zeros(*keys_s.shape) if score == "concat" else grads["keys"]
    workspace = _buffer(lib.attn_luong_workspace_floats(ctypes.byref(c)))
    check(lib.attn_luong_backward(ctypes.byref(c), ctypes.byref(lu.params), lu.position,
                                  ptr(lu.q), ptr(keys_s), ptr(lu.values), ptr(lu.mask),
                                  ptr(weights), ptr(lu.saved), ptr(dctx), ptr(dwts),
                                  ptr(grads["query"]), ptr(dkeys_s),
                                  ptr(grads.get("values", grads["keys"])),
                                  ctypes.byref(c_grads), ptr(workspace)), what)
    if score == "concat":
        check(lib.attn_luong_project_keys_backward(ctypes.byref(c), ptr(lu.k), ptr(lu.w),
                                                   ptr(dkeys_s), ptr(grads["keys"]),
                                                   ptr(grads["w"])), what)
    return grads


# ---- hard attention ----------------------------------------------------------------------

_MODES = {"argmax": 0, "sample": 1}


def hard_attention(scores, values, mask=None, *, mode="argmax", seed=None):
    """Hard attention: one position per row.

    scores [B, Lk] (from additive_scores, luong_scores or anything else; -inf excludes a
    position), values [B, Lk, dv], mask [B, Lk] or None. mode="argmax" takes the highest
    score (ties: the lowest index); mode="sample" draws from the softmax of the scores with
    the library's generator seeded by `seed` (required), one draw per row. Returns
    (index int64 [B], -1 for a row with nothing to choose; weights [B, Lk] one-hot;
    context [B, dv] = the chosen values, zeros for -1). Not differentiable.
    """
    if mode not in _MODES:
        raise ValueError(f"mode: expected 'argmax' or 'sample', got {mode!r}")
    s = as_float32("scores", scores, 2)
    x = as_float32("values", values, 3)
    if x.shape[:2] != s.shape:
        raise ValueError(f"values: expected shape {s.shape} + (dv,), got {x.shape}")
    m = None if mask is None else as_mask("mask", mask, s.shape)
    rng = None
    if mode == "sample":
        if seed is None:
            raise ValueError("seed: sampling needs a seed")
        rng = _Rng()
        lib.attn_rng_seed(ctypes.byref(rng), int(seed) & 0xFFFFFFFFFFFFFFFF)
    batch, src_len, value_dim = x.shape
    index = np.empty(batch, dtype=np.int64)
    weights, context = _zeros(batch, src_len), _zeros(batch, value_dim)
    check(lib.attn_hard_attention(batch, src_len, value_dim, ptr(s), ptr(m), ptr(x),
                                  _MODES[mode], None if rng is None else ctypes.byref(rng),
                                  index.ctypes.data_as(_c_int64_p), ptr(weights), ptr(context)),
          "hard_attention")
    return index, weights, context


# ---- positional encoding -----------------------------------------------------------------

_LAYOUTS = {"interleaved": 0, "concatenated": 1}


def positional_encoding(length, d_model, layout="interleaved"):
    """Sinusoidal positional encoding [length, d_model], float32.

    layout="interleaved" (the paper): PE[pos, 2i] = sin(pos * w_i), PE[pos, 2i+1] =
    cos(pos * w_i), w_i = 10000^(-2i/d_model). "concatenated": the same sines in the first
    half and cosines in the second (as Hugging Face's Marian/BART). An odd d_model ends with
    one more sine in both layouts.
    """
    if layout not in _LAYOUTS:
        raise ValueError(f"layout: expected 'interleaved' or 'concatenated', got {layout!r}")
    length, d_model = int(length), int(d_model)
    out = _zeros(max(length, 0), max(d_model, 0))
    check(lib.attn_positional_encoding(length, d_model, _LAYOUTS[layout], ptr(out)),
          "positional_encoding")
    return out
