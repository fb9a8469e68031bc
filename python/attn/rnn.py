"""GRU and LSTM with PyTorch's weight layout and gate order: one step (as torch.nn.GRUCell and
torch.nn.LSTMCell) and stacked, optionally bidirectional layers over padded batch-first
sentences with lengths (as torch.nn.GRU / nn.LSTM with batch_first=True given
pack_padded_sequence(..., enforce_sorted=False)).

    x        [B, I] for a cell, [B, T, I] for a stack
    lengths  [B] integers in [0, T], or None (every sentence has T tokens); positions past a
             sentence's length are padding: zero outputs, no state update
    params   a dict with PyTorch's names: weight_ih, weight_hh, bias_ih, bias_hh for a cell;
             weight_ih_l{k}[_reverse], ... for a stack (biases may be missing or None)
    h0, c0   initial states, [B, H] for a cell, [L * D, B, H] for a stack (D = 2 when
             bidirectional; layer k direction d at index k * D + d), or None for zeros

All arrays are float32. Each function returns new arrays; backward functions rerun the
forward and return a dict of gradients named like the arguments ("input", "h0", "c0" and
the parameter names) for the loss sum(grad_output * output) + sum(grad_h_n * h_n)
(+ sum(grad_c_n * c_n)). Dropout between layers is not applied. Wrong dtypes or shapes
raise ValueError; so do arguments the library rejects, with its own message.
"""
import ctypes

import numpy as np

from ._lib import as_float32, check, lib, ptr

__all__ = ["gru_cell", "gru_cell_backward", "lstm_cell", "lstm_cell_backward", "rnn",
           "rnn_backward"]

_c_float_p = ctypes.POINTER(ctypes.c_float)
_c_int64_p = ctypes.POINTER(ctypes.c_int64)
_i64 = ctypes.c_int64
_CELLS = {"gru": 0, "lstm": 1}
_GATES = {"gru": 3, "lstm": 4}


class _CellDims(ctypes.Structure):
    _fields_ = [("cell", ctypes.c_int), ("batch", _i64), ("input_size", _i64),
                ("hidden_size", _i64)]


class _LayerDims(ctypes.Structure):
    _fields_ = [("cell", ctypes.c_int), ("batch", _i64), ("seq_len", _i64),
                ("input_size", _i64), ("hidden_size", _i64), ("reverse", ctypes.c_int),
                ("output_stride", _i64), ("precision", ctypes.c_int)]


class _Params(ctypes.Structure):
    _fields_ = [(name, _c_float_p) for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]


class _Grads(ctypes.Structure):
    _fields_ = [(name, _c_float_p) for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]


def _declare(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


_f = _c_float_p
_cell_p, _layer_p = ctypes.POINTER(_CellDims), ctypes.POINTER(_LayerDims)
_params_p, _grads_p = ctypes.POINTER(_Params), ctypes.POINTER(_Grads)
_declare("attn_rnn_cell_saved_floats", ctypes.c_size_t, _cell_p)
_declare("attn_rnn_cell_workspace_floats", ctypes.c_size_t, _cell_p)
_declare("attn_rnn_cell_forward", ctypes.c_int, _cell_p, _params_p, _f, _f, _f, _f, _f, _f, _f)
_declare("attn_rnn_cell_backward", ctypes.c_int, _cell_p, _params_p, _f, _f, _f, _f, _f, _f, _f,
         _f, _grads_p)
_declare("attn_rnn_layer_saved_floats", ctypes.c_size_t, _layer_p)
_declare("attn_rnn_layer_workspace_floats", ctypes.c_size_t, _layer_p)
_declare("attn_rnn_layer_forward", ctypes.c_int, _layer_p, _params_p, _f, _c_int64_p, _f, _f,
         _f, _f, _f, _f, _f)
_declare("attn_rnn_layer_backward", ctypes.c_int, _layer_p, _params_p, _f, _c_int64_p, _f, _f,
         _f, _f, _f, _f, _f, _f, _grads_p)


def _expect_shape(name, array, shape):
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(array.shape)}")


def _zeros(*shape):
    return np.zeros(shape, dtype=np.float32)


def _buffer(count):
    return np.empty(max(int(count), 1), dtype=np.float32)


def _at(array, offset):
    """Pointer to array's float `offset` (for the second direction's half of an output)."""
    if array is None:
        return None
    return ctypes.cast(array.ctypes.data + 4 * offset, _c_float_p)


def _optional(name, array, shape):
    if array is None:
        return None
    a = as_float32(name, array, len(shape))
    _expect_shape(name, a, shape)
    return a


def _mode(mode):
    if mode not in _CELLS:
        raise ValueError(f"mode: expected 'gru' or 'lstm', got {mode!r}")
    return mode


class _Weights:
    """One cell's checked parameters, looked up under PyTorch's names plus a suffix."""

    def __init__(self, mode, params, suffix, input_size, hidden_size=None):
        def get(name):
            return params.get(name + suffix)
        w_hh = get("weight_hh")
        if w_hh is None or get("weight_ih") is None:
            raise ValueError(f"params: weight_ih{suffix} and weight_hh{suffix} are required")
        self.w_hh = as_float32("weight_hh" + suffix, w_hh, 2)
        rows = self.w_hh.shape[0]
        self.hidden = hidden_size if hidden_size is not None else rows // _GATES[mode]
        _expect_shape("weight_hh" + suffix, self.w_hh, (_GATES[mode] * self.hidden, self.hidden))
        self.w_ih = _optional("weight_ih" + suffix, get("weight_ih"), (rows, input_size))
        self.b_ih = _optional("bias_ih" + suffix, get("bias_ih"), (rows,))
        self.b_hh = _optional("bias_hh" + suffix, get("bias_hh"), (rows,))
        self.c = _Params(ptr(self.w_ih), ptr(self.w_hh), ptr(self.b_ih), ptr(self.b_hh))

    def new_grads(self, suffix):
        grads = {"weight_ih" + suffix: np.zeros_like(self.w_ih),
                 "weight_hh" + suffix: np.zeros_like(self.w_hh)}
        if self.b_ih is not None:
            grads["bias_ih" + suffix] = np.zeros_like(self.b_ih)
        if self.b_hh is not None:
            grads["bias_hh" + suffix] = np.zeros_like(self.b_hh)
        return grads

    @staticmethod
    def c_grads(grads, suffix):
        return _Grads(*(ptr(grads.get(name + suffix)) for name in
                        ("weight_ih", "weight_hh", "bias_ih", "bias_hh")))


# ---- one step -------------------------------------------------------------------------------

class _Cell:
    def __init__(self, mode, x, h, c, params):
        self.mode = mode
        self.x = as_float32("input", x, 2)
        batch, input_size = self.x.shape
        self.w = _Weights(mode, params, "", input_size)
        hidden = self.w.hidden
        self.h = _optional("hx", h, (batch, hidden))
        self.c = _optional("cx", c, (batch, hidden)) if mode == "lstm" else None
        self.dims = _CellDims(_CELLS[mode], batch, input_size, hidden)
        self.saved = _buffer(lib.attn_rnn_cell_saved_floats(ctypes.byref(self.dims)))
        self.workspace = _buffer(lib.attn_rnn_cell_workspace_floats(ctypes.byref(self.dims)))

    def forward(self, what):
        d = self.dims
        h_out = _zeros(d.batch, d.hidden_size)
        c_out = _zeros(d.batch, d.hidden_size) if self.mode == "lstm" else None
        check(lib.attn_rnn_cell_forward(ctypes.byref(d), ctypes.byref(self.w.c), ptr(self.x),
                                        ptr(self.h), ptr(self.c), ptr(h_out), ptr(c_out),
                                        ptr(self.saved), ptr(self.workspace)), what)
        return h_out, c_out

    def backward(self, grad_h, grad_c, what):
        d = self.dims
        self.forward(what)
        dh = _optional("grad_h", grad_h, (d.batch, d.hidden_size))
        dc = _optional("grad_c", grad_c, (d.batch, d.hidden_size))
        grads = {"input": np.zeros_like(self.x), "hx": _zeros(d.batch, d.hidden_size)}
        if self.mode == "lstm":
            grads["cx"] = _zeros(d.batch, d.hidden_size)
        grads.update(self.w.new_grads(""))
        c_grads = _Weights.c_grads(grads, "")
        check(lib.attn_rnn_cell_backward(ctypes.byref(d), ctypes.byref(self.w.c), ptr(self.x),
                                         ptr(self.saved), ptr(dh), ptr(dc), ptr(self.workspace),
                                         ptr(grads["input"]), ptr(grads["hx"]),
                                         ptr(grads.get("cx")), ctypes.byref(c_grads)), what)
        return grads


def gru_cell(x, h=None, *, params):
    """One GRU step, as torch.nn.GRUCell: x [B, I], h [B, H] or None (zeros), params with
    weight_ih [3H, I], weight_hh [3H, H], bias_ih, bias_hh [3H] (biases optional).
    Returns h' [B, H]."""
    return _Cell("gru", x, h, None, params).forward("gru_cell")[0]


def gru_cell_backward(grad_h, x, h=None, *, params):
    """Gradients of gru_cell for the loss sum(grad_h * h'): a dict with "input", "hx" and the
    parameter names."""
    return _Cell("gru", x, h, None, params).backward(grad_h, None, "gru_cell_backward")


def lstm_cell(x, h=None, c=None, *, params):
    """One LSTM step, as torch.nn.LSTMCell: x [B, I], h and c [B, H] or None (zeros), params
    with weight_ih [4H, I], weight_hh [4H, H], bias_ih, bias_hh [4H] (biases optional).
    Returns (h' [B, H], c' [B, H])."""
    return _Cell("lstm", x, h, c, params).forward("lstm_cell")


def lstm_cell_backward(grad_h, grad_c, x, h=None, c=None, *, params):
    """Gradients of lstm_cell for the loss sum(grad_h * h') + sum(grad_c * c') (either
    gradient may be None): a dict with "input", "hx", "cx" and the parameter names."""
    return _Cell("lstm", x, h, c, params).backward(grad_h, grad_c, "lstm_cell_backward")


# ---- stacked, bidirectional layers ----------------------------------------------------------

class _Stack:
    """A stack of layers as attn_rnn.h composes it: layer k of both directions reads the
    [B, T, D*H] output of layer k-1 and writes its own, one saved buffer per layer and
    direction."""

    def __init__(self, mode, x, lengths, params, num_layers, bidirectional, h0, c0):
        self.mode = _mode(mode)
        self.x = as_float32("input", x, 3)
        batch, seq_len, input_size = self.x.shape
        if num_layers < 1:
            raise ValueError(f"num_layers: expected >= 1, got {num_layers}")
        self.layers, self.directions = num_layers, 2 if bidirectional else 1
        self.lengths = None
        if lengths is not None:
            self.lengths = np.ascontiguousarray(np.asarray(lengths), dtype=np.int64)
            _expect_shape("lengths", self.lengths, (batch,))
        self.weights = []
        hidden = None
        for k in range(num_layers):
            row = []
            for d in range(self.directions):
                size = input_size if k == 0 else self.directions * hidden
                w = _Weights(mode, params, self._suffix(k, d), size, hidden)
                hidden = w.hidden
                row.append(w)
            self.weights.append(row)
        self.hidden = hidden
        states = (num_layers * self.directions, batch, hidden)
        self.h0 = _optional("h0", h0, states)
        self.c0 = _optional("c0", c0, states) if mode == "lstm" else None
        self.batch, self.seq_len, self.input_size = batch, seq_len, input_size

    def _suffix(self, k, d):
        return f"_l{k}" + ("_reverse" if d == 1 else "")

    def _dims(self, k, d):
        size = self.input_size if k == 0 else self.directions * self.hidden
        return _LayerDims(_CELLS[self.mode], self.batch, self.seq_len, size, self.hidden, d,
                          self.directions * self.hidden)

    def _lengths_p(self):
        return None if self.lengths is None else self.lengths.ctypes.data_as(_c_int64_p)

    def forward(self, what):
        states = (self.layers * self.directions, self.batch, self.hidden)
        h_n = _zeros(*states)
        c_n = _zeros(*states) if self.mode == "lstm" else None
        self.inputs, self.saved = [], []
        layer_in = self.x
        for k in range(self.layers):
            out = _zeros(self.batch, self.seq_len, self.directions * self.hidden)
            saved_k = []
            for d in range(self.directions):
                dims = self._dims(k, d)
                saved = _buffer(lib.attn_rnn_layer_saved_floats(ctypes.byref(dims)))
                workspace = _buffer(lib.attn_rnn_layer_workspace_floats(ctypes.byref(dims)))
                i = k * self.directions + d
                check(lib.attn_rnn_layer_forward(
                    ctypes.byref(dims), ctypes.byref(self.weights[k][d].c), ptr(layer_in),
                    self._lengths_p(), ptr(None if self.h0 is None else self.h0[i]),
                    ptr(None if self.c0 is None else self.c0[i]), _at(out, d * self.hidden),
                    ptr(h_n[i]), ptr(None if c_n is None else c_n[i]), ptr(saved),
                    ptr(workspace)), what)
                saved_k.append(saved)
            self.inputs.append(layer_in)
            self.saved.append(saved_k)
            layer_in = out
        return layer_in, h_n, c_n

    def backward(self, grad_output, grad_h_n, grad_c_n, what):
        self.forward(what)
        states = (self.layers * self.directions, self.batch, self.hidden)
        dout = _optional("grad_output", grad_output,
                         (self.batch, self.seq_len, self.directions * self.hidden))
        dh_n = _optional("grad_h_n", grad_h_n, states)
        dc_n = _optional("grad_c_n", grad_c_n, states) if self.mode == "lstm" else None
        grads = {"h0": _zeros(*states)}
        if self.mode == "lstm":
            grads["c0"] = _zeros(*states)
        for k in range(self.layers - 1, -1, -1):
            din = np.zeros_like(self.inputs[k])
            for d in range(self.directions):
                dims = self._dims(k, d)
                suffix = self._suffix(k, d)
                grads.update(self.weights[k][d].new_grads(suffix))
                c_grads = _Weights.c_grads(grads, suffix)
                workspace = _buffer(lib.attn_rnn_layer_workspace_floats(ctypes.byref(dims)))
                i = k * self.directions + d
                check(lib.attn_rnn_layer_backward(
                    ctypes.byref(dims), ctypes.byref(self.weights[k][d].c), ptr(self.inputs[k]),
                    self._lengths_p(), ptr(self.saved[k][d]), _at(dout, d * self.hidden),
                    ptr(None if dh_n is None else dh_n[i]),
                    ptr(None if dc_n is None else dc_n[i]), ptr(workspace), ptr(din),
                    ptr(grads["h0"][i]), ptr(grads["c0"][i] if "c0" in grads else None),
                    ctypes.byref(c_grads)), what)
            dout = din
        grads["input"] = dout
        return grads


def rnn(mode, x, lengths=None, *, params, num_layers=1, bidirectional=False, h0=None,
        c0=None):
    """A stack of GRU (mode "gru") or LSTM ("lstm") layers over x [B, T, I], as
    torch.nn.GRU / nn.LSTM(I, H, num_layers, bidirectional=..., batch_first=True) given the
    sentences packed by their lengths. Returns (output [B, T, D*H] with zeros at padding,
    h_n [L*D, B, H], c_n [L*D, B, H] or None for GRU)."""
    return _Stack(mode, x, lengths, params, num_layers, bidirectional, h0, c0).forward("rnn")


def rnn_backward(mode, grad_output, x, lengths=None, *, params, num_layers=1,
                 bidirectional=False, h0=None, c0=None, grad_h_n=None, grad_c_n=None):
    """Gradients of rnn for sum(grad_output * output) + sum(grad_h_n * h_n) + sum(grad_c_n *
    c_n) (each gradient may be None): a dict with "input" [B, T, I], "h0", "c0" (LSTM) and
    every parameter name."""
    stack = _Stack(mode, x, lengths, params, num_layers, bidirectional, h0, c0)
    return stack.backward(grad_output, grad_h_n, grad_c_n, "rnn_backward")
