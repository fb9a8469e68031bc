"""Transformer models through libattn: load a saved model, run it on a batch, read its
parameters and their gradients.

    from attn.models import Model
    with Model("model.safetensors") as model:   # config from the file's metadata
        logits = model.logits(batch)             # [B, T - 1, V], or [B, classes]
        loss, grads = model.loss_and_grads(batch)

A batch is a dict of int32 arrays, as attn_model_batch: "src" [B, S] and "src_lengths" [B]
(transformer, classifier), "tgt" [B, T] (<s> ... </s>) and "tgt_lengths" [B] (transformer,
language model), "labels" [B] (classifier), "mlm_targets" [B, S] (masked language model: the
original id at each masked position of "src", -1 elsewhere). Failures raise ValueError (bad arguments) or
RuntimeError with the library's message.
"""
import ctypes
import json
import os

import numpy as np

from ._lib import OwnedHandle, c_int32_p, check, lib

_MAX_DIMS = 6
_VALUES, _GRADS = 0, 1


class _Batch(ctypes.Structure):
    _fields_ = [("size", ctypes.c_int64), ("src_len", ctypes.c_int64), ("src", c_int32_p),
                ("src_lengths", c_int32_p), ("tgt_len", ctypes.c_int64), ("tgt", c_int32_p),
                ("tgt_lengths", c_int32_p), ("labels", c_int32_p),
                ("teacher", ctypes.POINTER(ctypes.c_float)), ("teacher_vocab", ctypes.c_int64),
                ("teacher_weight", ctypes.c_double), ("mlm_targets", c_int32_p)]


class _Init(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("scale", ctypes.c_float)]


class _ParamInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * _MAX_DIMS), ("numel", ctypes.c_int64),
                ("offset", ctypes.c_size_t), ("init", _Init)]


class _Var(ctypes.Structure):
    _fields_ = [("data", ctypes.POINTER(ctypes.c_float)), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * _MAX_DIMS), ("stride", ctypes.c_int64 * _MAX_DIMS),
                ("grad", ctypes.POINTER(ctypes.c_float)), ("requires_grad", ctypes.c_int)]


_handle_p = ctypes.POINTER(ctypes.c_void_p)
_var_pp = ctypes.POINTER(ctypes.POINTER(_Var))
for _name, _restype, _argtypes in [
        ("attn_model_load", ctypes.c_int, [ctypes.c_char_p, _handle_p]),
        ("attn_model_destroy", None, [ctypes.c_void_p]),
        ("attn_model_params", ctypes.c_void_p, [ctypes.c_void_p]),
        ("attn_model_get_config", ctypes.c_void_p, [ctypes.c_void_p]),
        ("attn_model_config_to_json", ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
        ("attn_model_forward_logits", ctypes.c_int,
         [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_Batch), _var_pp]),
        ("attn_model_forward_loss", ctypes.c_int,
         [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_Batch), _var_pp]),
        ("attn_graph_create", ctypes.c_int, [ctypes.c_void_p, _handle_p]),
        ("attn_graph_destroy", None, [ctypes.c_void_p]),
        ("attn_graph_set_recording", None, [ctypes.c_void_p, ctypes.c_int]),
        ("attn_graph_set_training", None, [ctypes.c_void_p, ctypes.c_int]),
        ("attn_graph_backward", ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_Var)]),
        ("attn_params_count", ctypes.c_size_t, [ctypes.c_void_p]),
        ("attn_params_info", ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(_ParamInfo)]),
        ("attn_params_data", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int]),
        ("attn_params_zero_grad", None, [ctypes.c_void_p])]:
    getattr(lib, _name).restype = _restype
    getattr(lib, _name).argtypes = _argtypes

_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def _int32(name, array, ndim):
    a = np.asarray(array)
    if a.dtype != np.int32:
        raise ValueError(f"{name}: expected int32, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    return np.ascontiguousarray(a)


class Model(OwnedHandle):
    """A model loaded from a file written by attn_model_save (or by a tool storing the same
    config JSON under "attn_config" and the same parameter names)."""

    _destroy = "attn_model_destroy"

    def __init__(self, path):
        self._open("attn_model_load", os.fsencode(path))
        self._params = lib.attn_model_params(self._handle)

    @property
    def config(self):
        """The model's config as a dict (the JSON stored in its files)."""
        text = ctypes.c_void_p()
        check(lib.attn_model_config_to_json(lib.attn_model_get_config(self._handle),
                                            ctypes.byref(text)), "attn_model_config_to_json")
        try:
            return json.loads(ctypes.string_at(text).decode("utf-8"))
        finally:
            _libc.free(text)

    def _arrays(self, which):
        out = {}
        info = _ParamInfo()
        for index in range(lib.attn_params_count(self._params)):
            check(lib.attn_params_info(self._params, index, ctypes.byref(info)),
                  "attn_params_info")
            shape = tuple(info.shape[d] for d in range(info.ndim))
            address = lib.attn_params_data(self._params, index, which)
            buffer = (ctypes.c_float * info.numel).from_address(address)
            out[info.name.decode("utf-8")] = np.array(buffer, dtype=np.float32).reshape(shape)
        return out

    def parameters(self):
        """Copies of every parameter's value, by name."""
        return self._arrays(_VALUES)

    def _batch(self, batch):
        keep = {}
        c_batch = _Batch()
        if "src" in batch:
            keep["src"] = _int32("src", batch["src"], 2)
            keep["src_lengths"] = _int32("src_lengths", batch["src_lengths"], 1)
            c_batch.size, c_batch.src_len = keep["src"].shape
            c_batch.src = keep["src"].ctypes.data_as(c_int32_p)
            c_batch.src_lengths = keep["src_lengths"].ctypes.data_as(c_int32_p)
        if "tgt" in batch:
            keep["tgt"] = _int32("tgt", batch["tgt"], 2)
            keep["tgt_lengths"] = _int32("tgt_lengths", batch["tgt_lengths"], 1)
            c_batch.size, c_batch.tgt_len = keep["tgt"].shape
            c_batch.tgt = keep["tgt"].ctypes.data_as(c_int32_p)
            c_batch.tgt_lengths = keep["tgt_lengths"].ctypes.data_as(c_int32_p)
        if "labels" in batch:
            keep["labels"] = _int32("labels", batch["labels"], 1)
            c_batch.labels = keep["labels"].ctypes.data_as(c_int32_p)
        if "mlm_targets" in batch:
            keep["mlm_targets"] = _int32("mlm_targets", batch["mlm_targets"], 2)
            if keep["mlm_targets"].shape[1] != c_batch.src_len:
                raise ValueError(f"mlm_targets: {keep['mlm_targets'].shape[1]} columns, src has "
                                 f"{c_batch.src_len}")
            c_batch.mlm_targets = keep["mlm_targets"].ctypes.data_as(c_int32_p)
        for name, array in keep.items():
            if array.shape[0] != c_batch.size:
                raise ValueError(f"{name}: {array.shape[0]} rows, the batch has {c_batch.size}")
        return c_batch, keep

    def _run(self, batch, loss, training, precision):
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be 'fp32' or 'bf16', not {precision!r}")
        c_batch, keep = self._batch(batch)
        c_precision = ctypes.c_int()
        check(lib.attn_precision_parse(precision.encode("utf-8"), ctypes.byref(c_precision)),
              "attn_precision_parse")
        graph = ctypes.c_void_p()
        check(lib.attn_graph_create(self._params, ctypes.byref(graph)), "attn_graph_create")
        try:
            lib.attn_graph_set_recording(graph, 1 if loss else 0)
            lib.attn_graph_set_training(graph, 1 if training else 0)
            lib.attn_graph_set_precision(graph, c_precision)
            out = ctypes.POINTER(_Var)()
            if loss:
                lib.attn_params_zero_grad(self._params)
                check(lib.attn_model_forward_loss(self._handle, graph, ctypes.byref(c_batch),
                                                  ctypes.byref(out)), "attn_model_forward_loss")
                check(lib.attn_graph_backward(graph, out), "attn_graph_backward")
                return float(out.contents.data[0]), self._arrays(_GRADS)
            check(lib.attn_model_forward_logits(self._handle, graph, ctypes.byref(c_batch),
                                                ctypes.byref(out)), "attn_model_forward_logits")
            var = out.contents
            shape = tuple(var.shape[d] for d in range(var.ndim))
            count = int(np.prod(shape))
            buffer = (ctypes.c_float * count).from_address(ctypes.addressof(var.data.contents))
            return np.array(buffer, dtype=np.float32).reshape(shape)
        finally:
            lib.attn_graph_destroy(graph)
            del keep

    def logits(self, batch, training=False, precision="fp32"):
        """[B, T - 1, tgt_vocab] (transformer, language model) or [B, classes] (classifier).
        precision: the operands of the products, "fp32" or "bf16" (as attn train
        --precision)."""
        return self._run(batch, loss=False, training=training, precision=precision)

    def loss_and_grads(self, batch, training=False, precision="fp32"):
        """The training loss (with the config's label smoothing) and the gradient of every
        parameter, by name. precision "bf16" is mixed precision as attn train --precision
        bf16 computes it: bf16 operands of the products, fp32 sums and gradients."""
        return self._run(batch, loss=True, training=training, precision=precision)
