"""Greedy and beam search through libattn (attn_decode.h): n-best lists with log-probs, GNMT
length-penalised scores and, on request, the cross-attention maps of each hypothesis.

    from attn.models import Model
    from attn.decode import decode
    with Model("model.safetensors") as model:
        nbest = decode(model, src, src_lengths, beam=5, nbest=2, alpha=0.6, alignments=True)
    best = nbest[0][0]   # sentence 0, best hypothesis: a dict with
                         # "tokens" (ids without <s> and </s>), "finished" (ended by </s>),
                         # "log_prob", "score", "cross" ([steps, maps, src_length] or None)

src is int32 [B, S] (padded after each row's length), src_lengths int32 [B] in [1, S].
Failures raise ValueError (bad arguments) or RuntimeError with the library's message.
"""
import ctypes

import numpy as np

from ._lib import as_int64, c_int32_p, check, lib


class _Options(ctypes.Structure):
    _fields_ = [("beam_size", ctypes.c_int64), ("nbest", ctypes.c_int64),
                ("length_penalty", ctypes.c_double), ("max_len_ratio", ctypes.c_double),
                ("max_len_offset", ctypes.c_int64), ("max_len", ctypes.c_int64),
                ("alignments", ctypes.c_int)]


class _Hypothesis(ctypes.Structure):
    _fields_ = [("tokens", c_int32_p), ("length", ctypes.c_int64), ("finished", ctypes.c_int),
                ("log_prob", ctypes.c_double), ("score", ctypes.c_double),
                ("cross", ctypes.POINTER(ctypes.c_float)), ("steps", ctypes.c_int64)]


class _Sentence(ctypes.Structure):
    _fields_ = [("src_length", ctypes.c_int64), ("count", ctypes.c_int64),
                ("hypotheses", ctypes.POINTER(_Hypothesis))]


class _Result(ctypes.Structure):
    _fields_ = [("size", ctypes.c_int64), ("sentences", ctypes.POINTER(_Sentence)),
                ("cross_maps", ctypes.c_int64), ("cross_layers", ctypes.c_int64),
                ("cross_heads", ctypes.c_int64)]


lib.attn_decode_default_options.restype = _Options
lib.attn_decode_default_options.argtypes = []
lib.attn_decode.restype = ctypes.c_int
lib.attn_decode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                            c_int32_p, c_int32_p, ctypes.POINTER(_Options),
                            ctypes.POINTER(ctypes.POINTER(_Result))]
lib.attn_decode_result_destroy.restype = None
lib.attn_decode_result_destroy.argtypes = [ctypes.POINTER(_Result)]


def _int32(name, array, ndim):
    a = np.asarray(array)
    if a.dtype != np.int32:
        raise ValueError(f"{name}: expected int32, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    return np.ascontiguousarray(a)


def decode(model, src, src_lengths, beam=1, nbest=1, alpha=0.6, max_len_ratio=1.5,
           max_len_offset=10, max_len=0, alignments=False):
    """The n-best hypotheses of every sentence (a list per sentence, best score first)."""
    src = _int32("src", src, 2)
    src_lengths = _int32("src_lengths", src_lengths, 1)
    if src_lengths.shape[0] != src.shape[0]:
        raise ValueError(f"src_lengths: {src_lengths.shape[0]} lengths for {src.shape[0]} rows")
    options = lib.attn_decode_default_options()
    options.beam_size = as_int64("beam", beam, 1)
    options.nbest = as_int64("nbest", nbest, 1)
    options.length_penalty, options.max_len_ratio = alpha, max_len_ratio
    options.max_len_offset = as_int64("max_len_offset", max_len_offset, 0)
    options.max_len = as_int64("max_len", max_len, 0)
    options.alignments = 1 if alignments else 0
    graph = ctypes.c_void_p()
    check(lib.attn_graph_create(model._params, ctypes.byref(graph)), "attn_graph_create")
    result = ctypes.POINTER(_Result)()
    try:
        check(lib.attn_decode(model._handle, graph, src.shape[0], src.shape[1],
                              src.ctypes.data_as(c_int32_p), src_lengths.ctypes.data_as(c_int32_p),
                              ctypes.byref(options), ctypes.byref(result)), "attn_decode")
        out = []
        maps = result.contents.cross_maps
        for i in range(result.contents.size):
            sentence = result.contents.sentences[i]
            hypotheses = []
            for j in range(sentence.count):
                h = sentence.hypotheses[j]
                cross = None
                if alignments:
                    shape = (h.steps, maps, sentence.src_length)
                    cross = np.ctypeslib.as_array(h.cross, shape=shape).copy()
                hypotheses.append({"tokens": [h.tokens[t] for t in range(h.length)],
                                   "finished": bool(h.finished), "log_prob": h.log_prob,
                                   "score": h.score, "cross": cross})
            out.append(hypotheses)
        return out
    finally:
        if result:
            lib.attn_decode_result_destroy(result)
        lib.attn_graph_destroy(graph)
