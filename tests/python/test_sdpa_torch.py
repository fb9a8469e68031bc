"""attn.scaled_dot_product_attention against PyTorch 1.13 in float64.

Debian's torch 1.13 has no F.scaled_dot_product_attention, so the reference is the formula
softmax(q k^T * scale + mask) v written in torch with autograd. PyTorch gives NaN for a
query row whose keys are all masked; attn gives zeros (and zero gradients). The reference
below follows attn there, and test_fully_masked_rows_are_zero_where_torch_gives_nan shows
the difference.
"""
import numpy as np
import pytest
import torch

import attn


def torch_sdpa(q, k, v, grad_out, attn_mask=None, key_padding_mask=None, is_causal=False,
               window=None, scale=None, empty_rows="zero"):
    """Output, probabilities and (dq, dk, dv) in float64. attn_mask is additive (float) or
    bool with True = takes part, [Lq, Lk] or [B, H, Lq, Lk]."""
    qt, kt, vt = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    len_q, len_k = q.shape[2], k.shape[2]
    scale = 1.0 / np.sqrt(q.shape[3]) if scale is None else scale
    scores = qt @ kt.transpose(-1, -2) * scale
    excluded = torch.zeros(scores.shape, dtype=torch.bool)
    if attn_mask is not None:
        mask = torch.tensor(attn_mask)
        if mask.dtype == torch.bool:
            excluded |= ~mask
        else:
            scores = scores + mask.double()
    if key_padding_mask is not None:
        excluded |= torch.tensor(key_padding_mask)[:, None, None, :]
    i = torch.arange(len_q)[:, None]
    j = torch.arange(len_k)[None, :]
    if is_causal:
        excluded |= j > i
    if window is not None:
        excluded |= (i - j).abs() > window
    scores = scores.masked_fill(excluded, -np.inf)
    if empty_rows == "zero":
        empty = torch.isneginf(scores).all(dim=-1, keepdim=True)
        probs = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    else:
        probs = torch.softmax(scores, dim=-1)
    out = probs @ vt
    (out * torch.tensor(grad_out, dtype=torch.float64)).sum().backward()
    return (out.detach().numpy(), probs.detach().numpy(),
            (qt.grad.numpy(), kt.grad.numpy(), vt.grad.numpy()))


def make_inputs(rng, batch, heads, len_q, len_k, dim, dim_v):
    def draw(*shape):
        return rng.uniform(-1, 1, size=shape).astype(np.float32)
    return (draw(batch, heads, len_q, dim), draw(batch, heads, len_k, dim),
            draw(batch, heads, len_k, dim_v), draw(batch, heads, len_q, dim_v))


def additive(rng, shape):
    """Random additive mask with some -inf, never on key 0 (so rows keep a key)."""
    mask = rng.uniform(-1, 1, size=shape).astype(np.float32)
    mask[rng.uniform(size=shape) < 0.25] = -np.inf
    mask[..., 0] = np.maximum(mask[..., 0], -1)
    return mask


def padding(rng, batch, len_k):
    mask = rng.uniform(size=(batch, len_k)) < 0.3
    mask[:, 0] = False
    return mask


# (name, batch, heads, len_q, len_k, dim, dim_v, options builder)
CASES = [
    ("none", 2, 3, 5, 5, 8, 8, lambda r, b, h, lq, lk: {}),
    ("cross", 2, 2, 3, 17, 8, 6, lambda r, b, h, lq, lk: {}),
    ("key padding", 2, 3, 7, 9, 8, 8,
     lambda r, b, h, lq, lk: {"key_padding_mask": padding(r, b, lk)}),
    ("causal", 2, 2, 17, 17, 7, 5, lambda r, b, h, lq, lk: {"is_causal": True}),
    ("causal cross", 1, 2, 6, 9, 8, 8, lambda r, b, h, lq, lk: {"is_causal": True}),
    ("window", 2, 2, 17, 17, 8, 8, lambda r, b, h, lq, lk: {"window": 3}),
    ("additive 2-D", 2, 3, 5, 7, 8, 8,
     lambda r, b, h, lq, lk: {"attn_mask": additive(r, (lq, lk))}),
    ("additive 4-D", 2, 3, 5, 7, 8, 8,
     lambda r, b, h, lq, lk: {"attn_mask": additive(r, (b, h, lq, lk))}),
    ("bool 2-D", 2, 2, 5, 6, 8, 8,
     lambda r, b, h, lq, lk: {"attn_mask": additive(r, (lq, lk)) != -np.inf}),
    ("causal + padding + 2-D", 2, 3, 9, 9, 8, 8,
     lambda r, b, h, lq, lk: {"is_causal": True, "key_padding_mask": padding(r, b, lk),
                              "attn_mask": additive(r, (lq, lk))}),
    ("window + padding + 4-D", 2, 2, 11, 11, 8, 4,
     lambda r, b, h, lq, lk: {"window": 2, "key_padding_mask": padding(r, b, lk),
                              "attn_mask": additive(r, (b, h, lq, lk))}),
    ("scale", 1, 2, 4, 6, 8, 8, lambda r, b, h, lq, lk: {"scale": 0.7}),
    ("dim 1", 2, 1, 3, 5, 1, 1, lambda r, b, h, lq, lk: {"is_causal": True}),
    ("dim 64", 1, 2, 33, 40, 64, 64,
     lambda r, b, h, lq, lk: {"key_padding_mask": padding(r, b, lk)}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_forward_weights_and_backward_match_torch(case, rng, assert_close):
    name, batch, heads, len_q, len_k, dim, dim_v, build = case
    q, k, v, grad_out = make_inputs(rng, batch, heads, len_q, len_k, dim, dim_v)
    options = build(rng, batch, heads, len_q, len_k)
    ref_out, ref_probs, ref_grads = torch_sdpa(q, k, v, grad_out, **options)

    out, weights = attn.scaled_dot_product_attention(q, k, v, need_weights=True, **options)
    assert out.shape == (batch, heads, len_q, dim_v) and out.dtype == np.float32
    assert_close(out, ref_out, f"{name}: out")
    assert_close(weights, ref_probs, f"{name}: weights")
    assert_close(attn.scaled_dot_product_attention(q, k, v, **options), ref_out,
                 f"{name}: out without weights")

    grads = attn.scaled_dot_product_attention_backward(q, k, v, grad_out, **options)
    for what, ours, ref in zip(("dq", "dk", "dv"), grads, ref_grads):
        assert ours.shape == ref.shape
        assert_close(ours, ref, f"{name}: {what}")


def torch_bf16_sdpa(q, k, v, grad_out, is_causal=False, key_padding_mask=None):
    """PyTorch's standard attention computed in bfloat16 (tensors, products, softmax and
    autograd all bf16): the naive low-precision computation of FlashAttention's rule."""
    qt, kt, vt = (torch.tensor(x).bfloat16().requires_grad_() for x in (q, k, v))
    scores = qt @ kt.transpose(-1, -2) * (1.0 / np.sqrt(q.shape[3]))
    excluded = torch.zeros(scores.shape, dtype=torch.bool)
    if is_causal:
        excluded |= torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
    if key_padding_mask is not None:
        excluded |= torch.tensor(key_padding_mask)[:, None, None, :]
    out = torch.softmax(scores.masked_fill(excluded, -np.inf), dim=-1) @ vt
    out.backward(torch.tensor(grad_out).bfloat16())
    return [t.detach().double().numpy() for t in (out, qt.grad, kt.grad, vt.grad)]


@pytest.mark.parametrize("options", [{}, {"is_causal": True}, {"key_padding_mask": "padding"}],
                         ids=["none", "causal", "padding"])
def test_bf16_error_is_at_most_twice_that_of_torch_in_bf16(options, rng):
    batch, heads, length, dim = 2, 2, 70, 64
    q, k, v, grad_out = make_inputs(rng, batch, heads, length, length, dim, dim)
    if options.get("key_padding_mask") == "padding":
        options = {"key_padding_mask": padding(rng, batch, length)}
    ref_out, _, ref_grads = torch_sdpa(q, k, v, grad_out, **options)
    exact = [ref_out, *ref_grads]
    naive = torch_bf16_sdpa(q, k, v, grad_out, **options)
    ours = [attn.scaled_dot_product_attention(q, k, v, precision="bf16", **options),
            *attn.scaled_dot_product_attention_backward(q, k, v, grad_out, precision="bf16",
                                                        **options)]
    fp32 = attn.scaled_dot_product_attention(q, k, v, **options)
    assert not np.array_equal(ours[0], fp32), "bf16 rounds the operands"
    for what, mine, theirs, ref in zip(("out", "dq", "dk", "dv"), ours, naive, exact):
        error, naive_error = np.abs(mine - ref).max(), np.abs(theirs - ref).max()
        assert error <= 2 * naive_error, f"{what}: error {error:.3g}, torch bf16 {naive_error:.3g}"


def test_fully_masked_rows_are_zero_where_torch_gives_nan(rng, assert_close):
    q, k, v, grad_out = make_inputs(rng, 2, 2, 4, 5, 8, 8)
    key_padding_mask = np.zeros((2, 5), dtype=bool)
    key_padding_mask[1, :] = True  # batch 1 sees no key at all
    attn_mask = np.zeros((4, 5), dtype=np.float32)
    attn_mask[2, :] = -np.inf  # and query 2 of every batch is fully masked too
    options = {"key_padding_mask": key_padding_mask, "attn_mask": attn_mask}

    torch_out, _, _ = torch_sdpa(q, k, v, grad_out, empty_rows="nan", **options)
    assert np.isnan(torch_out[1]).all() and np.isnan(torch_out[0, :, 2]).all()
    assert not np.isnan(torch_out[0, :, [0, 1, 3]]).any()

    out, weights = attn.scaled_dot_product_attention(q, k, v, need_weights=True, **options)
    assert not np.isnan(out).any()
    assert (out[1] == 0).all() and (out[0, :, 2] == 0).all()
    assert (weights[1] == 0).all() and (weights[0, :, 2] == 0).all()
    ref_out, _, ref_grads = torch_sdpa(q, k, v, grad_out, **options)
    assert_close(out, ref_out, "out where rows keep keys")

    dq, dk, dv = attn.scaled_dot_product_attention_backward(q, k, v, grad_out, **options)
    assert (dq[1] == 0).all() and (dk[1] == 0).all() and (dv[1] == 0).all()
    assert (dq[0, :, 2] == 0).all()
    for what, ours, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), ref_grads):
        assert_close(ours, ref, what)


def test_bool_and_additive_masks_agree(rng):
    q, k, v, _ = make_inputs(rng, 1, 2, 5, 6, 8, 8)
    keep = rng.uniform(size=(5, 6)) < 0.7
    keep[:, 0] = True
    as_float = np.where(keep, 0, -np.inf).astype(np.float32)
    np.testing.assert_array_equal(attn.scaled_dot_product_attention(q, k, v, attn_mask=keep),
                                  attn.scaled_dot_product_attention(q, k, v, attn_mask=as_float))


def test_bad_arguments_raise_value_error_with_the_library_message(rng):
    q, k, v, grad_out = make_inputs(rng, 2, 2, 3, 4, 8, 8)
    with pytest.raises(ValueError, match="attn_sdpa_forward: k has shape"):
        attn.scaled_dot_product_attention(q, k[..., :7], v)
    with pytest.raises(ValueError, match="attn_sdpa_forward: v has shape"):
        attn.scaled_dot_product_attention(q, k, v[:1])
    with pytest.raises(ValueError, match="attn_sdpa_backward: grad_out has shape"):
        attn.scaled_dot_product_attention_backward(q, k, v, grad_out[:, :, :2])
    with pytest.raises(ValueError, match="float32"):
        attn.scaled_dot_product_attention(q.astype(np.float64), k, v)
    with pytest.raises(ValueError, match="4 dimensions"):
        attn.scaled_dot_product_attention(q[0], k, v)
    with pytest.raises(ValueError, match="key_padding_mask"):
        attn.scaled_dot_product_attention(q, k, v, key_padding_mask=np.zeros((2, 5), bool))
    with pytest.raises(ValueError, match="key_padding_mask"):
        attn.scaled_dot_product_attention(q, k, v, key_padding_mask=np.zeros((2, 4)))
    with pytest.raises(ValueError, match="attn_mask"):
        attn.scaled_dot_product_attention(q, k, v, attn_mask=np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match="window"):
        attn.scaled_dot_product_attention(q, k, v, window=-2)
    with pytest.raises(ValueError, match="scale must be finite"):
        attn.scaled_dot_product_attention(q, k, v, scale=float("nan"))
    with pytest.raises(ValueError, match="precision"):
        attn.scaled_dot_product_attention(q, k, v, precision="int8")
