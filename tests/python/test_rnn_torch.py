"""attn's GRU and LSTM against PyTorch 1.13 in float64 with the same weights:
torch.nn.GRUCell / LSTMCell, and torch.nn.GRU / LSTM (num_layers=2, bidirectional=True,
batch_first=True) over sentences packed by their lengths (pack_padded_sequence with
enforce_sorted=False, padded back with zeros). Outputs, final states, and the gradients of
the input, the initial states and every weight for a random linear loss on all outputs.
"""
import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import attn

GRAD_RTOL = 1e-4  # gradients sum over steps, sentences and layers in float32


def draw(rng, *shape, scale=1.0):
    return (rng.uniform(-1, 1, size=shape) * scale).astype(np.float32)


def leaf(array):
    return torch.tensor(array, dtype=torch.float64, requires_grad=True)


def load(module, params):
    """Copy attn's float32 parameters into a float64 torch module, under the same names."""
    with torch.no_grad():
        for name, value in params.items():
            getattr(module, name).copy_(torch.from_numpy(value).double())


def param_grads(module):
    return {name: p.grad.numpy() for name, p in module.named_parameters()}


def random_params(rng, module):
    """float32 parameters with torch's names and shapes, uniform in +-1/sqrt(H) as torch
    initialises them."""
    bound = 1.0 / np.sqrt(module.hidden_size)
    return {name: draw(rng, *p.shape, scale=bound) for name, p in module.named_parameters()}


def check_grads(ours, theirs, names, assert_close):
    for name in names:
        assert_close(ours[name], theirs[name], name, rtol=GRAD_RTOL)


# ---- cells --------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["gru", "lstm"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("with_state", [True, False])
def test_cell_matches_torch(rng, assert_close, mode, bias, with_state):
    batch, input_size, hidden = 5, 7, 9
    cls = torch.nn.GRUCell if mode == "gru" else torch.nn.LSTMCell
    module = cls(input_size, hidden, bias=bias, dtype=torch.float64)
    params = random_params(rng, module)
    load(module, params)
    x = draw(rng, batch, input_size)
    h = draw(rng, batch, hidden) if with_state else None
    c = draw(rng, batch, hidden) if with_state and mode == "lstm" else None
    grad_h, grad_c = draw(rng, batch, hidden), draw(rng, batch, hidden)

    tx = leaf(x)
    th = leaf(h if with_state else np.zeros((batch, hidden), np.float32))
    tc = leaf(c if c is not None else np.zeros((batch, hidden), np.float32))
    if mode == "gru":
        h_new = module(tx, th)
        loss = (h_new * torch.from_numpy(grad_h).double()).sum()
        ours = attn.gru_cell(x, h, params=params)
        grads = attn.gru_cell_backward(grad_h, x, h, params=params)
    else:
        h_new, c_new = module(tx, (th, tc))
        loss = ((h_new * torch.from_numpy(grad_h).double()).sum() +
                (c_new * torch.from_numpy(grad_c).double()).sum())
        ours, ours_c = attn.lstm_cell(x, h, c, params=params)
        assert_close(ours_c, c_new.detach().numpy(), "c'")
        grads = attn.lstm_cell_backward(grad_h, grad_c, x, h, c, params=params)
    loss.backward()
    if mode == "lstm":
        assert_close(grads["cx"], tc.grad.numpy(), "dc", rtol=GRAD_RTOL)
    assert_close(ours, h_new.detach().numpy(), "h'")
    assert_close(grads["input"], tx.grad.numpy(), "dx", rtol=GRAD_RTOL)
    assert_close(grads["hx"], th.grad.numpy(), "dh", rtol=GRAD_RTOL)
    expected = param_grads(module)
    assert set(grads) - {"input", "hx", "cx"} == set(expected)
    check_grads(grads, expected, expected, assert_close)


# ---- stacked, bidirectional layers over packed sentences ---------------------------------

def run_torch(module, x, lengths, h0, c0, grad_out, grad_h, grad_c):
    tx, th = leaf(x), leaf(h0)
    packed = pack_padded_sequence(tx, torch.tensor(lengths), batch_first=True,
                                  enforce_sorted=False)
    if isinstance(module, torch.nn.LSTM):
        tc = leaf(c0)
        out, (h_n, c_n) = module(packed, (th, tc))
    else:
        tc, c_n = None, None
        out, h_n = module(packed, th)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    loss = (out * torch.from_numpy(grad_out).double()).sum()
    loss = loss + (h_n * torch.from_numpy(grad_h).double()).sum()
    if c_n is not None:
        loss = loss + (c_n * torch.from_numpy(grad_c).double()).sum()
    loss.backward()
    grads = param_grads(module)
    grads["input"], grads["h0"] = tx.grad.numpy(), th.grad.numpy()
    if tc is not None:
        grads["c0"] = tc.grad.numpy()
    return (out.detach().numpy(), h_n.detach().numpy(),
            None if c_n is None else c_n.detach().numpy(), grads)


# (mode, num_layers, bidirectional, bias, batch, seq_len, input_size, hidden)
STACKS = [
    ("gru", 2, True, True, 5, 7, 6, 8),
    ("lstm", 2, True, True, 5, 7, 6, 8),
    ("gru", 2, True, False, 4, 9, 3, 17),
    ("lstm", 2, True, False, 4, 9, 3, 17),
    ("lstm", 1, False, True, 3, 6, 5, 7),
    ("gru", 3, True, True, 17, 12, 16, 32),
]


@pytest.mark.parametrize("case", STACKS, ids=[
    f"{m}-L{layers}-{'bi' if bi else 'uni'}-{'bias' if bias else 'nobias'}-B{b}-T{t}-I{i}-H{h}"
    for m, layers, bi, bias, b, t, i, h in STACKS])
def test_stack_matches_torch_on_packed_sentences(rng, assert_close, case):
    mode, layers, bidirectional, bias, batch, seq_len, input_size, hidden = case
    directions = 2 if bidirectional else 1
    cls = torch.nn.GRU if mode == "gru" else torch.nn.LSTM
    module = cls(input_size, hidden, num_layers=layers, bias=bias, batch_first=True,
                 bidirectional=bidirectional, dtype=torch.float64)
    params = random_params(rng, module)
    load(module, params)
    # unsorted lengths, one full and one of a single token
    lengths = rng.integers(1, seq_len + 1, size=batch)
    lengths[batch // 2] = seq_len
    lengths[-1] = 1
    x = draw(rng, batch, seq_len, input_size)
    states = (layers * directions, batch, hidden)
    h0, c0 = draw(rng, *states), draw(rng, *states)
    grad_out = draw(rng, batch, seq_len, directions * hidden)
    grad_h, grad_c = draw(rng, *states), draw(rng, *states)

    out_t, h_t, c_t, grads_t = run_torch(module, x, lengths, h0, c0, grad_out, grad_h, grad_c)
    kwargs = dict(params=params, num_layers=layers, bidirectional=bidirectional, h0=h0,
                  c0=c0 if mode == "lstm" else None)
    out, h_n, c_n = attn.rnn(mode, x, lengths, **kwargs)
    assert_close(out, out_t, "output")
    assert_close(h_n, h_t, "h_n")
    if mode == "lstm":
        assert_close(c_n, c_t, "c_n")
    else:
        assert c_n is None
    for b, length in enumerate(lengths):
        assert not out[b, length:].any(), "zeros at padding"

    grads = attn.rnn_backward(mode, grad_out, x, lengths, grad_h_n=grad_h,
                              grad_c_n=grad_c if mode == "lstm" else None, **kwargs)
    assert set(grads) == set(grads_t)
    check_grads(grads, grads_t, grads_t, assert_close)


def test_default_lengths_and_states_are_full_and_zero(rng, assert_close):
    """lengths=None means every sentence is full; h0=None means zeros, as torch without
    packing and without an initial state."""
    module = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True,
                           dtype=torch.float64)
    params = random_params(rng, module)
    load(module, params)
    x = draw(rng, 3, 5, 4)
    out_t, (h_t, c_t) = module(torch.from_numpy(x).double())
    out, h_n, c_n = attn.rnn("lstm", x, params=params, num_layers=2, bidirectional=True)
    assert_close(out, out_t.detach().numpy(), "output")
    assert_close(h_n, h_t.detach().numpy(), "h_n")
    assert_close(c_n, c_t.detach().numpy(), "c_n")


def test_bad_arguments_raise_value_error(rng):
    module = torch.nn.GRU(4, 6, batch_first=True, dtype=torch.float64)
    params = random_params(rng, module)
    x = draw(rng, 2, 3, 4)
    with pytest.raises(ValueError, match="lengths"):
        attn.rnn("gru", x, [3, 4], params=params)  # longer than T: the library's message
    with pytest.raises(ValueError, match="lengths"):
        attn.rnn("gru", x, [3, -1], params=params)
    with pytest.raises(ValueError, match="weight_ih_l0"):
        attn.rnn("gru", draw(rng, 2, 3, 5), params=params)
    with pytest.raises(ValueError, match="mode"):
        attn.rnn("rnn_tanh", x, params=params)
    with pytest.raises(ValueError, match="float32"):
        attn.rnn("gru", x.astype(np.float64), params=params)
    with pytest.raises(ValueError, match="weight_hh_l1"):
        attn.rnn("gru", x, params=params, num_layers=2)
