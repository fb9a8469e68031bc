"""attn.multi_head_attention_forward/_backward against torch.nn.MultiheadAttention
(batch_first=True, float64) loaded with the same weights: outputs, attention weights
(averaged and per head) and the gradients of the inputs and of every parameter.

attn's is_causal is compared with torch given the equivalent -inf upper-triangle attn_mask
(torch 1.13's MultiheadAttention has no is_causal). Where every key of a query is masked,
torch gives NaN and attn gives out_proj_bias: test_fully_masked_batch_gives_bias_where_torch_gives_nan.
"""
import numpy as np
import pytest
import torch

import attn

SELF, KEY_IS_VALUE, DISTINCT = "self", "key is value", "distinct"


def make_params(rng, embed, kdim, vdim, bias):
    """float32 parameters in torch's layout, scaled by 1/sqrt(fan-in)."""
    def draw(rows, cols):
        return (rng.uniform(-1, 1, size=(rows, cols)) / np.sqrt(cols)).astype(np.float32)
    params = {"in_proj_weight": None, "q_proj_weight": None, "k_proj_weight": None,
              "v_proj_weight": None, "in_proj_bias": None, "out_proj_bias": None}
    if kdim == embed and vdim == embed:
        params["in_proj_weight"] = draw(3 * embed, embed)
    else:
        params["q_proj_weight"] = draw(embed, embed)
        params["k_proj_weight"] = draw(embed, kdim)
        params["v_proj_weight"] = draw(embed, vdim)
    params["out_proj_weight"] = draw(embed, embed)
    if bias:
        params["in_proj_bias"] = rng.uniform(-0.5, 0.5, size=3 * embed).astype(np.float32)
        params["out_proj_bias"] = rng.uniform(-0.5, 0.5, size=embed).astype(np.float32)
    return params


def torch_module(params, embed, heads, kdim, vdim, bias):
    module = torch.nn.MultiheadAttention(embed, heads, bias=bias, kdim=kdim, vdim=vdim,
                                         batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        for name in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight",
                     "in_proj_bias"):
            if params[name] is not None:
                getattr(module, name).copy_(torch.from_numpy(params[name]).double())
        module.out_proj.weight.copy_(torch.from_numpy(params["out_proj_weight"]).double())
        if bias:
            module.out_proj.bias.copy_(torch.from_numpy(params["out_proj_bias"]).double())
    return module


def torch_grads(module):
    named = {"in_proj_weight": module.in_proj_weight, "q_proj_weight": module.q_proj_weight,
             "k_proj_weight": module.k_proj_weight, "v_proj_weight": module.v_proj_weight,
             "in_proj_bias": module.in_proj_bias, "out_proj_weight": module.out_proj.weight,
             "out_proj_bias": module.out_proj.bias}
    return {name: None if p is None else p.grad.numpy() for name, p in named.items()}


def make_inputs(rng, alias, batch, len_q, len_k, embed, kdim, vdim):
    def draw(*shape):
        return rng.uniform(-1, 1, size=shape).astype(np.float32)
    query = draw(batch, len_q, embed)
    if alias == SELF:
        return query, query, query
    key = draw(batch, len_k, kdim)
    return query, key, key if alias == KEY_IS_VALUE else draw(batch, len_k, vdim)


def run_torch(module, query, key, value, alias, grad_out, **masks):
    """Output, averaged and per-head weights, and gradients, with aliased inputs passed to
    torch as one leaf tensor (so its .grad is the sum, as attn's shared entry)."""
    leaves = {"query": torch.tensor(query, dtype=torch.float64, requires_grad=True)}
    if alias == SELF:
        leaves["key"] = leaves["value"] = leaves["query"]
    else:
        leaves["key"] = torch.tensor(key, dtype=torch.float64, requires_grad=True)
        leaves["value"] = (leaves["key"] if alias == KEY_IS_VALUE else
                           torch.tensor(value, dtype=torch.float64, requires_grad=True))
    torch_masks = {name: None if m is None else torch.from_numpy(m) for name, m in masks.items()}
    out, mean_weights = module(leaves["query"], leaves["key"], leaves["value"], need_weights=True,
                               average_attn_weights=True, **torch_masks)
    (out * torch.from_numpy(grad_out).double()).sum().backward()
    with torch.no_grad():
        _, head_weights = module(leaves["query"], leaves["key"], leaves["value"],
                                 need_weights=True, average_attn_weights=False, **torch_masks)
    grads = torch_grads(module)
    for name, leaf in leaves.items():
        grads[name] = leaf.grad.numpy()
    return (out.detach().numpy(), mean_weights.detach().numpy(), head_weights.numpy(), grads)


def causal_mask(len_q, len_k):
    return np.triu(np.full((len_q, len_k), -np.inf, dtype=np.float32), k=1)


def padding(rng, batch, len_k):
    mask = rng.uniform(size=(batch, len_k)) < 0.3
    mask[:, 0] = False
    return mask


def additive(rng, shape):
    mask = rng.uniform(-1, 1, size=shape).astype(np.float32)
    mask[rng.uniform(size=shape) < 0.25] = -np.inf
    mask[..., 0] = np.maximum(mask[..., 0], -1)
    return mask


# (name, alias, batch, len_q, len_k, embed, heads, kdim, vdim, bias, masks builder); the
# builder returns (attn options, torch options).
CASES = [
    ("self", SELF, 2, 5, 5, 8, 2, 8, 8, True, lambda r, b, h, lq, lk: ({}, {})),
    ("self causal", SELF, 2, 9, 9, 12, 3, 12, 12, True,
     lambda r, b, h, lq, lk: ({"is_causal": True}, {"attn_mask": causal_mask(lq, lk)})),
    ("self padding + bool mask", SELF, 3, 6, 6, 8, 4, 8, 8, True,
     lambda r, b, h, lq, lk: (lambda kpm, m: ({"key_padding_mask": kpm, "attn_mask": m},
                                              {"key_padding_mask": kpm, "attn_mask": m}))(
         padding(r, b, lk), additive(r, (lq, lk)) == -np.inf)),
    ("cross key is value, 3-D mask", KEY_IS_VALUE, 2, 4, 7, 8, 2, 8, 8, True,
     lambda r, b, h, lq, lk: (lambda kpm, m: ({"key_padding_mask": kpm, "attn_mask": m},
                                              {"key_padding_mask": kpm, "attn_mask": m}))(
         padding(r, b, lk), additive(r, (b * h, lq, lk)))),
    ("cross distinct, causal + padding", DISTINCT, 2, 6, 8, 16, 4, 16, 16, True,
     lambda r, b, h, lq, lk: (lambda kpm: ({"key_padding_mask": kpm, "is_causal": True},
                                           {"key_padding_mask": kpm,
                                            "attn_mask": causal_mask(lq, lk)}))(
         padding(r, b, lk))),
    ("kdim/vdim", DISTINCT, 2, 5, 3, 8, 2, 5, 3, True,
     lambda r, b, h, lq, lk: (lambda m: ({"attn_mask": m}, {"attn_mask": m}))(
         additive(r, (lq, lk)))),
    ("kdim/vdim no bias", DISTINCT, 2, 3, 4, 6, 3, 7, 2, False,
     lambda r, b, h, lq, lk: (lambda kpm: ({"key_padding_mask": kpm},
                                           {"key_padding_mask": kpm}))(padding(r, b, lk))),
    ("no bias", SELF, 1, 4, 4, 8, 1, 8, 8, False, lambda r, b, h, lq, lk: ({}, {})),
    ("wider", SELF, 2, 33, 33, 64, 8, 64, 64, True,
     lambda r, b, h, lq, lk: ({"is_causal": True}, {"attn_mask": causal_mask(lq, lk)})),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_matches_torch_multihead_attention(case, rng, assert_close):
    name, alias, batch, len_q, len_k, embed, heads, kdim, vdim, bias, build = case
    params = make_params(rng, embed, kdim, vdim, bias)
    query, key, value = make_inputs(rng, alias, batch, len_q, len_k, embed, kdim, vdim)
    grad_out = rng.uniform(-1, 1, size=(batch, len_q, embed)).astype(np.float32)
    ours_options, torch_options = build(rng, batch, heads, len_q, len_k)
    module = torch_module(params, embed, heads, kdim if kdim != embed else None,
                          vdim if vdim != embed else None, bias)
    ref_out, ref_mean, ref_heads, ref_grads = run_torch(module, query, key, value, alias,
                                                        grad_out, **torch_options)

    def forward(**kwargs):
        return attn.multi_head_attention_forward(
            query, key, value, heads, params["in_proj_weight"], params["in_proj_bias"],
            params["out_proj_weight"], params["out_proj_bias"],
            q_proj_weight=params["q_proj_weight"], k_proj_weight=params["k_proj_weight"],
            v_proj_weight=params["v_proj_weight"], **ours_options, **kwargs)

    out = forward()
    assert out.shape == (batch, len_q, embed) and out.dtype == np.float32
    assert_close(out, ref_out, f"{name}: out")
    out_mean, mean_weights = forward(need_weights=True)
    assert mean_weights.shape == (batch, len_q, len_k)
    assert_close(out_mean, ref_out, f"{name}: out with weights")
    assert_close(mean_weights, ref_mean, f"{name}: averaged weights")
    _, head_weights = forward(need_weights=True, average_attn_weights=False)
    assert head_weights.shape == (batch, heads, len_q, len_k)
    assert_close(head_weights, ref_heads, f"{name}: per-head weights")

    grads = attn.multi_head_attention_backward(
        query, key, value, heads, params["in_proj_weight"], params["in_proj_bias"],
        params["out_proj_weight"], params["out_proj_bias"], grad_out,
        q_proj_weight=params["q_proj_weight"], k_proj_weight=params["k_proj_weight"],
        v_proj_weight=params["v_proj_weight"], **ours_options)
    if alias == SELF:
        assert grads["query"] is grads["key"] is grads["value"]
    if alias == KEY_IS_VALUE:
        assert grads["key"] is grads["value"]
    for grad_name, ref in ref_grads.items():
        if ref is None:
            assert grads[grad_name] is None, grad_name
        else:
            assert grads[grad_name].shape == ref.shape, grad_name
            assert_close(grads[grad_name], ref, f"{name}: d {grad_name}")


def test_fully_masked_batch_gives_bias_where_torch_gives_nan(rng, assert_close):
    batch, len_q, len_k, embed, heads = 2, 3, 4, 8, 2
    params = make_params(rng, embed, embed, embed, True)
    query, key, value = make_inputs(rng, DISTINCT, batch, len_q, len_k, embed, embed, embed)
    grad_out = rng.uniform(-1, 1, size=(batch, len_q, embed)).astype(np.float32)
    key_padding_mask = np.zeros((batch, len_k), dtype=bool)
    key_padding_mask[1] = True  # batch element 1 has no key to attend to
    module = torch_module(params, embed, heads, None, None, True)
    positional = (params["in_proj_weight"], params["in_proj_bias"], params["out_proj_weight"],
                  params["out_proj_bias"])

    torch_out, _ = module(*(torch.from_numpy(x).double() for x in (query, key, value)),
                          key_padding_mask=torch.from_numpy(key_padding_mask))
    assert torch.isnan(torch_out[1]).all() and not torch.isnan(torch_out[0]).any()

    out, weights = attn.multi_head_attention_forward(query, key, value, heads, *positional,
                                                     key_padding_mask=key_padding_mask,
                                                     need_weights=True)
    np.testing.assert_array_equal(out[1], np.broadcast_to(params["out_proj_bias"], (3, 8)))
    assert (weights[1] == 0).all()

    # Element 0 alone is an ordinary problem; element 1 only feeds out_proj_bias.
    ref_out, ref_mean, _, ref_grads = run_torch(module, query[:1], key[:1], value[:1], DISTINCT,
                                                grad_out[:1])
    assert_close(out[:1], ref_out, "out of the unmasked element")
    assert_close(weights[:1], ref_mean, "weights of the unmasked element")
    grads = attn.multi_head_attention_backward(query, key, value, heads, *positional, grad_out,
                                               key_padding_mask=key_padding_mask)
    for name in ("query", "key", "value"):
        assert (grads[name][1] == 0).all(), name
        assert_close(grads[name][:1], ref_grads[name], f"d {name}")
    ref_grads["out_proj_bias"] = ref_grads["out_proj_bias"] + grad_out[1].sum(axis=0)
    for name in ("in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias"):
        assert_close(grads[name], ref_grads[name], f"d {name}")


def test_is_causal_equals_the_explicit_mask(rng):
    params = make_params(rng, 8, 8, 8, True)
    x = rng.uniform(-1, 1, size=(2, 6, 8)).astype(np.float32)
    positional = (params["in_proj_weight"], params["in_proj_bias"], params["out_proj_weight"],
                  params["out_proj_bias"])
    causal = attn.multi_head_attention_forward(x, x, x, 2, *positional, is_causal=True)
    as_bool = attn.multi_head_attention_forward(x, x, x, 2, *positional,
                                                attn_mask=np.triu(np.ones((6, 6), bool), k=1))
    np.testing.assert_array_equal(causal, as_bool)
    unmasked = attn.multi_head_attention_forward(x, x, x, 2, *positional)
    assert not np.allclose(causal[:, :-1], unmasked[:, :-1])
    np.testing.assert_allclose(causal[:, -1], unmasked[:, -1], rtol=1e-6, atol=1e-6)


def test_bad_arguments_raise_value_error(rng):
    params = make_params(rng, 8, 8, 8, True)
    x = rng.uniform(-1, 1, size=(2, 3, 8)).astype(np.float32)
    w, b, ow, ob = (params["in_proj_weight"], params["in_proj_bias"],
                    params["out_proj_weight"], params["out_proj_bias"])
    mha = attn.multi_head_attention_forward
    with pytest.raises(ValueError, match="num_heads 3 does not divide embed_dim 8"):
        mha(x, x, x, 3, w, b, ow, ob)
    with pytest.raises(ValueError, match="num_heads must be positive"):
        mha(x, x, x, 0, w, b, ow, ob)
    with pytest.raises(ValueError, match="not both"):
        mha(x, x, x, 2, w, b, ow, ob, q_proj_weight=ow)
    five = rng.uniform(-1, 1, size=(2, 4, 5)).astype(np.float32)
    with pytest.raises(ValueError, match="needs kdim == vdim == embed_dim"):
        mha(x, five, five, 2, w, b, ow, ob)
    with pytest.raises(ValueError, match="in_proj_weight or all of"):
        mha(x, x, x, 2, None, b, ow, ob, q_proj_weight=ow)
    with pytest.raises(ValueError, match="float32"):
        mha(x.astype(np.float64), x, x, 2, w, b, ow, ob)
    with pytest.raises(ValueError, match="in_proj_weight: expected shape"):
        mha(x, x, x, 2, w[:-1], b, ow, ob)
    with pytest.raises(ValueError, match="share the batch"):
        mha(x, x[:1], x[:1], 2, w, b, ow, ob)
    with pytest.raises(ValueError, match="attn_mask"):
        mha(x, x, x, 2, w, b, ow, ob, attn_mask=np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="key_padding_mask"):
        mha(x, x, x, 2, w, b, ow, ob, key_padding_mask=np.zeros((2, 4), bool))
    with pytest.raises(ValueError, match="grad_out"):
        attn.multi_head_attention_backward(x, x, x, 2, w, b, ow, ob, x[:, :2])
