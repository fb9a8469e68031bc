"""attn.classic against the formulas written directly in NumPy (float64): forwards compared
directly, backwards against NumPy central finite differences of the same formulas."""
import numpy as np
import pytest

import attn

SCORES = ["dot", "general", "concat"]
LOCALS = [None, "m", "p"]


# ---- the formulas in NumPy ---------------------------------------------------------------

def masked_softmax(e, active):
    e = np.where(active, e, -np.inf)
    m = e.max(axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.where(active, np.exp(e - m), 0.0)
    total = p.sum(axis=1, keepdims=True)
    return np.divide(p, total, out=np.zeros_like(p), where=total > 0)


def unmasked_of(mask, shape):
    return np.ones(shape, dtype=bool) if mask is None else ~mask


def np_additive(query, keys, values, w_query, w_key, v, bias, mask):
    pre = (query @ w_query.T)[:, None, :] + keys @ w_key.T
    if bias is not None:
        pre = pre + bias
    scores = np.tanh(pre) @ v
    weights = masked_softmax(scores, unmasked_of(mask, scores.shape))
    return np.einsum("bj,bjd->bd", weights, values), weights, scores


def sentence_lengths(unmasked):
    positions = np.arange(1, unmasked.shape[1] + 1)
    return (unmasked * positions).max(axis=1)


def np_luong(query, keys, values, score, w, v, local, window, position, w_p, v_p, mask):
    batch, src_len, _ = keys.shape
    ds = query.shape[1]
    if score == "dot":
        scores = np.einsum("bd,bjd->bj", query, keys)
    elif score == "general":
        scores = np.einsum("bi,ik,bjk->bj", query, w, keys)
    else:
        pre = (query @ w[:, :ds].T)[:, None, :] + keys @ w[:, ds:].T
        scores = np.tanh(pre) @ v
    unmasked = unmasked_of(mask, scores.shape)
    active, gauss, center = unmasked, 1.0, None
    if local is not None:
        j = np.arange(src_len)[None, :]
        length = sentence_lengths(unmasked)[:, None]
        if local == "m":
            center = np.full((batch, 1), float(position))
            mid = center
        else:
            z = np.tanh(query @ w_p.T) @ v_p
            center = length / (1 + np.exp(-z[:, None]))
            mid = np.floor(center + 0.5)
            gauss = np.exp(-((j - center) ** 2) / (2 * (window / 2) ** 2))
        active = unmasked & (j >= mid - window) & (j <= mid + window) & (j < length)
    weights = masked_softmax(scores, active) * gauss
    return np.einsum("bj,bjd->bd", weights, values), weights, scores, center


def numeric_gradients(forward, arrays, grad_context, grad_weights, eps=1e-6):
    """Central differences of sum(gc * context) + sum(gw * weights) in float64."""
    def loss():
        context, weights = forward(arrays)[:2]
        return (grad_context * context).sum() + (grad_weights * weights).sum()
    grads = {}
    for name, a in arrays.items():
        if a is None:
            continue
        g = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            saved = a[i]
            a[i] = saved + eps
            up = loss()
            a[i] = saved - eps
            down = loss()
            a[i] = saved
            g[i] = (up - down) / (2 * eps)
        grads[name] = g
    return grads


# ---- data --------------------------------------------------------------------------------

def f32(rng, *shape, scale=1.0):
    return (rng.uniform(-1, 1, size=shape) * scale).astype(np.float32)


def padding_mask(rng, batch, src_len):
    lengths = rng.integers(1, src_len + 1, size=batch)
    mask = np.arange(src_len)[None, :] >= lengths[:, None]
    if batch >= 3:
        mask[1] = True  # one sentence with nothing to attend to
    return mask


def f64(arrays):
    return {k: (None if a is None else a.astype(np.float64)) for k, a in arrays.items()}


def additive_arrays(rng, batch=3, src_len=6, ds=4, dk=5, dv=3, da=7, bias=True, values=True):
    return {"query": f32(rng, batch, ds), "keys": f32(rng, batch, src_len, dk),
            "values": f32(rng, batch, src_len, dv) if values else None,
            "w_query": f32(rng, da, ds, scale=0.8), "w_key": f32(rng, da, dk, scale=0.8),
            "v": f32(rng, da, scale=1.5), "bias": f32(rng, da, scale=0.5) if bias else None}


def additive_np(a, mask):
    values = a["keys"] if a["values"] is None else a["values"]
    return np_additive(a["query"], a["keys"], values, a["w_query"], a["w_key"], a["v"],
                       a["bias"], mask)


def luong_arrays(rng, score, local, batch=3, src_len=7, ds=4, dk=5, dv=3, da=6, dp=3,
                 values=True):
    ds = dk if score == "dot" else ds
    a = {"query": f32(rng, batch, ds), "keys": f32(rng, batch, src_len, dk),
         "values": f32(rng, batch, src_len, dv) if values else None,
         "w": None, "v": None, "w_p": None, "v_p": None}
    if score == "general":
        a["w"] = f32(rng, ds, dk, scale=0.6)
    if score == "concat":
        a["w"] = f32(rng, da, ds + dk, scale=0.6)
        a["v"] = f32(rng, da, scale=1.5)
    if local == "p":
        a["w_p"] = f32(rng, dp, ds)
        a["v_p"] = f32(rng, dp, scale=2.0)
    return a


def luong_np(a, score, local, window, position, mask):
    values = a["keys"] if a["values"] is None else a["values"]
    return np_luong(a["query"], a["keys"], values, score, a["w"], a["v"], local, window,
                    position, a["w_p"], a["v_p"], mask)


def clear_luong_problem(seed, score, local, window, mask_fn, **sizes):
    """Arrays whose p_t all sit clear of rounding boundaries (x.5), so finite differences
    and float rounding cannot move a local-p window."""
    for attempt in range(200):
        rng = np.random.default_rng(seed + 1000 * attempt)
        a = luong_arrays(rng, score, local, **sizes)
        mask = mask_fn(rng)
        center = luong_np(f64(a), score, local, window, 0, mask)[3]
        if local != "p" or np.all(np.abs(center - np.floor(center) - 0.5) > 1e-3):
            return a, mask
    raise AssertionError("no seed gives p_t clear of rounding boundaries")


# ---- additive ----------------------------------------------------------------------------

@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("values", [True, False])
@pytest.mark.parametrize("masked", [True, False])
def test_additive_forward_matches_numpy(bias, values, masked):
    rng = np.random.default_rng(1)
    a = additive_arrays(rng, batch=5, src_len=9, bias=bias, values=values)
    mask = padding_mask(rng, 5, 9) if masked else None
    context, weights = attn.additive_attention(**a, mask=mask)
    ref_context, ref_weights, ref_scores = additive_np(f64(a), mask)
    np.testing.assert_allclose(context, ref_context, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(weights, ref_weights, rtol=1e-5, atol=1e-6)
    scores = attn.additive_scores(a["query"], a["keys"], w_query=a["w_query"],
                                  w_key=a["w_key"], v=a["v"], bias=a["bias"])
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("values", [True, False])
def test_additive_backward_matches_finite_differences(values):
    rng = np.random.default_rng(2)
    a = additive_arrays(rng, values=values)
    mask = padding_mask(rng, 3, 6)
    dv = a["values"].shape[2] if values else a["keys"].shape[2]
    grad_context, grad_weights = f32(rng, 3, dv), f32(rng, 3, 6)
    grads = attn.additive_attention_backward(grad_context, **a, mask=mask,
                                             grad_weights=grad_weights)
    expected = numeric_gradients(lambda x: additive_np(x, mask), f64(a), grad_context,
                                 grad_weights)
    assert set(grads) == set(expected)
    for name, g in expected.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-4, atol=2e-5, err_msg=name)


# ---- Luong -------------------------------------------------------------------------------

@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("local", LOCALS)
def test_luong_forward_matches_numpy(score, local):
    window, position = 2, 3
    a, mask = clear_luong_problem(10, score, local, window,
                                  lambda rng: padding_mask(rng, 6, 11), batch=6, src_len=11)
    context, weights = attn.luong_attention(**a, score=score, local=local, window=window,
                                            position=position, mask=mask)
    ref_context, ref_weights, ref_scores, _ = luong_np(f64(a), score, local, window, position,
                                                       mask)
    np.testing.assert_allclose(context, ref_context, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(weights, ref_weights, rtol=1e-5, atol=1e-6)
    scores = attn.luong_scores(a["query"], a["keys"], score=score, w=a["w"], v=a["v"])
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("local", LOCALS)
@pytest.mark.parametrize("values", [True, False])
def test_luong_backward_matches_finite_differences(score, local, values):
    window, position = 2, 2
    a, mask = clear_luong_problem(20, score, local, window,
                                  lambda rng: padding_mask(rng, 3, 7), values=values)
    rng = np.random.default_rng(21)
    dv = (a["values"] if values else a["keys"]).shape[2]
    grad_context, grad_weights = f32(rng, 3, dv), f32(rng, 3, 7)
    grads = attn.luong_attention_backward(grad_context, **a, score=score, local=local,
                                          window=window, position=position, mask=mask,
                                          grad_weights=grad_weights)
    expected = numeric_gradients(lambda x: luong_np(x, score, local, window, position, mask),
                                 f64(a), grad_context, grad_weights)
    assert set(grads) == set(expected)
    for name, g in expected.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-4, atol=2e-5, err_msg=name)


def test_fully_masked_rows_give_zeros():
    rng = np.random.default_rng(3)
    mask = np.ones((3, 6), dtype=bool)
    a = additive_arrays(rng)
    context, weights = attn.additive_attention(**a, mask=mask)
    assert not context.any() and not weights.any()
    grads = attn.additive_attention_backward(f32(rng, 3, 3), **a, mask=mask)
    assert all(not g.any() for g in grads.values())
    for score in SCORES:
        for local in LOCALS:
            b = luong_arrays(rng, score, local, src_len=6)
            context, weights = attn.luong_attention(**b, score=score, local=local, window=1,
                                                    position=0, mask=mask)
            assert not context.any() and not weights.any()
            grads = attn.luong_attention_backward(f32(rng, 3, 3), **b, score=score, local=local,
                                                  window=1, position=0, mask=mask)
            assert all(np.isfinite(g).all() and not g.any() for g in grads.values())


# ---- hard attention ----------------------------------------------------------------------

def test_hard_argmax_matches_numpy():
    rng = np.random.default_rng(4)
    scores, values = f32(rng, 8, 10), f32(rng, 8, 10, 3)
    mask = padding_mask(rng, 8, 10)
    index, weights, context = attn.hard_attention(scores, values, mask)
    masked_scores = np.where(mask, -np.inf, scores)
    expected = np.where(mask.all(axis=1), -1, masked_scores.argmax(axis=1))
    np.testing.assert_array_equal(index, expected)
    rows = np.arange(8)
    np.testing.assert_array_equal(context[expected >= 0], values[rows, expected][expected >= 0])
    assert not context[expected < 0].any()
    one_hot = np.zeros((8, 10), dtype=np.float32)
    one_hot[rows[expected >= 0], expected[expected >= 0]] = 1
    np.testing.assert_array_equal(weights, one_hot)


def test_hard_sampling_is_seeded_and_follows_softmax():
    scores = np.tile(np.array([0.5, -1.0, 1.5, 2.0], dtype=np.float32), (40000, 1))
    mask = np.zeros(scores.shape, dtype=bool)
    mask[:, 3] = True
    values = np.broadcast_to(np.arange(4, dtype=np.float32)[None, :, None], (40000, 4, 1))
    index, _, context = attn.hard_attention(scores, values, mask, mode="sample", seed=7)
    again, _, _ = attn.hard_attention(scores, values, mask, mode="sample", seed=7)
    other, _, _ = attn.hard_attention(scores, values, mask, mode="sample", seed=8)
    np.testing.assert_array_equal(index, again)
    assert (index != other).any()
    np.testing.assert_array_equal(context[:, 0], index.astype(np.float32))
    p = np.exp([0.5, -1.0, 1.5]) / np.exp([0.5, -1.0, 1.5]).sum()
    freq = np.bincount(index, minlength=4) / len(index)
    assert freq[3] == 0
    np.testing.assert_allclose(freq[:3], p, atol=4 * np.sqrt(p * (1 - p) / len(index)).max())


# ---- positional encoding -----------------------------------------------------------------

@pytest.mark.parametrize("d_model", [1, 2, 7, 64, 80])
def test_positional_encoding_matches_formula(d_model):
    pos = np.arange(50, dtype=np.float64)[:, None]
    i = np.arange(d_model)
    angle = pos * 10000.0 ** (-(2 * (i // 2)) / d_model)
    interleaved = np.where(i % 2 == 0, np.sin(angle), np.cos(angle))
    np.testing.assert_allclose(attn.positional_encoding(50, d_model), interleaved, rtol=0,
                               atol=1e-7)
    half = d_model // 2
    sines, cosines = interleaved[:, 0:2 * half:2], interleaved[:, 1:2 * half:2]
    tail = interleaved[:, d_model - 1:] if d_model % 2 else interleaved[:, :0]
    concatenated = np.concatenate([sines, cosines, tail], axis=1)
    np.testing.assert_allclose(attn.positional_encoding(50, d_model, layout="concatenated"),
                               concatenated, rtol=0, atol=1e-7)


# ---- bad input ---------------------------------------------------------------------------

def test_bad_input_raises_value_error():
    rng = np.random.default_rng(5)
    a = additive_arrays(rng)
    with pytest.raises(ValueError, match="float32"):
        attn.additive_attention(**{**a, "query": a["query"].astype(np.float64)})
    with pytest.raises(ValueError, match="w_key"):
        attn.additive_attention(**{**a, "w_key": a["w_key"][:, :2]})
    with pytest.raises(ValueError, match="mask"):
        attn.additive_attention(**a, mask=np.zeros((3, 5), dtype=bool))
    with pytest.raises(ValueError, match="grad_context"):
        attn.additive_attention_backward(np.zeros((3, 9), np.float32), **a)
    b = luong_arrays(rng, "general", None)
    with pytest.raises(ValueError, match="query_dim == key_dim"):  # the library's message
        attn.luong_attention(b["query"], b["keys"], score="dot")
    with pytest.raises(ValueError, match="position must be >= 0"):
        attn.luong_attention(b["query"], b["keys"], score="general", w=b["w"], local="m",
                             window=1, position=-1)
    with pytest.raises(ValueError, match="window"):
        p = luong_arrays(rng, "dot", "p")
        attn.luong_attention(p["query"], p["keys"], local="p", window=0, w_p=p["w_p"],
                             v_p=p["v_p"])
    with pytest.raises(ValueError, match="score"):
        attn.luong_attention(b["query"], b["keys"], score="cosine")
    with pytest.raises(ValueError, match="seed"):
        attn.hard_attention(f32(rng, 2, 3), f32(rng, 2, 3, 1), mode="sample")
    with pytest.raises(ValueError, match="length must be >= 0"):
        attn.positional_encoding(-1, 4)
    with pytest.raises(ValueError, match="layout"):
        attn.positional_encoding(3, 4, layout="halves")
