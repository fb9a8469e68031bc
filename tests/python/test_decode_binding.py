"""attn.decode.decode (beam search through the binding) against NumPy on the model's own
logits: beam 1 is greedy decoding done by hand, every returned log-prob is the teacher-forced
one, alignments have their documented shape and sum to 1 over the source, and bad arguments
raise ValueError."""
import ctypes
import json

import numpy as np
import pytest

from attn._lib import lib
from attn.decode import decode
from attn.models import Model

SRC_VOCAB, TGT_VOCAB = 10, 12


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A small Transformer with its random weights scaled up (peaked distributions)."""
    path = tmp_path_factory.mktemp("decode") / "model.safetensors"
    config = {"version": 1, "arch": "transformer", "d_model": 16, "num_heads": 2, "ffn_dim": 32,
              "encoder_layers": 1, "decoder_layers": 2, "dropout": 0.0, "src_vocab": SRC_VOCAB,
              "tgt_vocab": TGT_VOCAB, "max_len": 40, "tie_output": False}
    config_struct = ctypes.create_string_buffer(4096)  # room for attn_model_config
    handle = ctypes.c_void_p()
    assert lib.attn_model_config_from_json(json.dumps(config).encode(), config_struct) == 0
    assert lib.attn_model_create(config_struct, ctypes.byref(handle)) == 0
    lib.attn_model_init.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    assert lib.attn_model_init(handle, 4) == 0
    lib.attn_params_buffer.restype = ctypes.POINTER(ctypes.c_float)
    lib.attn_params_buffer.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.attn_params_buffer_floats.restype = ctypes.c_size_t
    lib.attn_params_buffer_floats.argtypes = [ctypes.c_void_p]
    params = lib.attn_model_params(handle)
    values = np.ctypeslib.as_array(lib.attn_params_buffer(params, 0),
                                   shape=(lib.attn_params_buffer_floats(params),))
    values *= 4.0
    lib.attn_model_save.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                                    ctypes.c_size_t]
    assert lib.attn_model_save(handle, str(path).encode(), None, 0) == 0
    lib.attn_model_destroy(handle)
    with Model(path) as m:
        yield m


def sources(seed, n=8, longest=7):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, longest + 1, size=n).astype(np.int32)
    src = np.zeros((n, longest), dtype=np.int32)
    for i, length in enumerate(lengths):
        src[i, :length] = rng.integers(4, SRC_VOCAB, size=length)
    return src, lengths


def log_softmax(x):
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def teacher_forced(model, src_row, length, tokens, finished):
    tgt = np.array([[1, *tokens, 2]], dtype=np.int32)  # <s> tokens </s>
    steps = len(tokens) + (1 if finished else 0)
    logits = model.logits({"src": src_row[None, :length], "src_lengths":
                           np.array([length], dtype=np.int32), "tgt": tgt,
                           "tgt_lengths": np.array([tgt.shape[1]], dtype=np.int32)})
    lp = log_softmax(logits[0])
    nexts = list(tokens) + [2]
    return sum(lp[t, nexts[t]] for t in range(steps)), np.abs(logits[0][:steps]).max(axis=1).sum()


def test_beam_one_is_greedy_by_hand(model):
    src, lengths = sources(1)
    got = decode(model, src, lengths, beam=1, alpha=0.0, max_len_ratio=1.0, max_len_offset=5)
    for i, length in enumerate(lengths):
        tokens, max_length = [], int(length) + 5
        while len(tokens) < max_length:
            tgt = np.array([[1, *tokens]], dtype=np.int32)
            logits = model.logits({"src": src[i:i + 1, :length],
                                   "src_lengths": np.array([length], dtype=np.int32),
                                   "tgt": np.concatenate([tgt, [[2]]], axis=1).astype(np.int32),
                                   "tgt_lengths": np.array([tgt.shape[1] + 1], dtype=np.int32)})
            best = 2 + int(np.argmax(logits[0, -1, 2:]))  # never <pad> or <s>
            if best == 2:
                break
            tokens.append(best)
        assert got[i][0]["tokens"] == tokens, i
        assert got[i][0]["finished"] == (len(tokens) < max_length)


def test_log_probs_and_alignments(model):
    src, lengths = sources(2)
    got = decode(model, src, lengths, beam=4, nbest=3, alpha=0.6, alignments=True)
    finished = 0
    for i, length in enumerate(lengths):
        assert len(got[i]) == 3
        scores = [h["score"] for h in got[i]]
        assert scores == sorted(scores, reverse=True)
        for h in got[i]:
            expected, scale = teacher_forced(model, src[i], length, h["tokens"], h["finished"])
            assert abs(h["log_prob"] - expected) <= 4e-6 * scale + 1e-6
            assert h["score"] == pytest.approx(h["log_prob"] / ((5 + len(h["tokens"])) / 6) ** 0.6,
                                               rel=1e-12)
            steps = len(h["tokens"]) + h["finished"]
            assert h["cross"].shape == (steps, 4, length)
            np.testing.assert_allclose(h["cross"].sum(axis=2), 1.0, atol=1e-5)
            finished += h["finished"]
    assert finished > 0


def test_bad_arguments(model):
    src, lengths = sources(3)
    with pytest.raises(ValueError, match="nbest"):
        decode(model, src, lengths, beam=2, nbest=3)
    with pytest.raises(ValueError, match="int32"):
        decode(model, src.astype(np.int64), lengths)
    with pytest.raises(ValueError, match="src_lengths"):
        decode(model, src, lengths[:3])
    bad = lengths.copy()
    bad[0] = src.shape[1] + 1
    with pytest.raises(ValueError, match="src_lengths"):
        decode(model, src, bad)
    assert decode(model, src[:0], lengths[:0]) == []
