"""A model file written by `attn train`, loaded once through libattn (attn_bundle.h): the
model, its config and its source and target tokenizers; strings in, translations out.

    from attn import Bundle
    with Bundle("model.safetensors") as bundle:
        bundle.translate(["hello", "world"])                 # ["...", "..."]: the best of each
        bundle.translate(["hello"], beam=5, nbest=3)         # [[("...", -0.41), ...]]
        bundle.source_tokenizer.encode("hello")              # [7, 4, 9, 9, 12]
        bundle.target_tokenizer.decode([7, 4])               # "..."

translate searches as `attn translate` does (beam 5, length penalty alpha 0.6, the maximum
output length 1.5 x source + 10, batches of 32 sentences) and gives the same text: with
nbest=1 a string per input, else a list of (text, score) pairs per input, best first, as the
CLI's "number<TAB>score<TAB>text" lines. An empty input is not searched: it gives "" (nbest=1)
or no pairs. precision (Bundle, Ensemble) is attn translate's --precision, "auto" by default:
an fp32 model runs in bf16 where the processor multiplies bf16 natively, else in fp32; "fp32"
keeps the file's weights as they are. Failures raise ValueError (bad arguments, a text longer
than the model's max_len) or RuntimeError with the library's message, which names the file.
"""
import ctypes
import json
import os

from ._lib import OwnedHandle, c_int32_p, check, lib, set_bundle_precision
from .decode import _Options, _Result

_SOURCE, _TARGET = 0, 1
_BATCH = 32  # sentences per search, as attn translate's --batch default

_handle_p = ctypes.POINTER(ctypes.c_void_p)
for _name, _restype, _argtypes in [
        ("attn_bundle_load", ctypes.c_int, [ctypes.c_char_p, _handle_p]),
        ("attn_bundle_destroy", None, [ctypes.c_void_p]),
        ("attn_bundle_config", ctypes.c_void_p, [ctypes.c_void_p]),
        ("attn_bundle_tokenizer", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]),
        ("attn_bundle_check_encoder_decoder", ctypes.c_int, [ctypes.c_void_p]),
        ("attn_bundle_encode", ctypes.c_int,
         [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(c_int32_p),
          ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64)]),
        ("attn_bundle_decode", ctypes.c_int,
         [ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(c_int32_p),
          ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(_Options),
          ctypes.POINTER(ctypes.POINTER(_Result))]),
        ("attn_bundle_check_ensemble", ctypes.c_int,
         [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64]),
        ("attn_bundle_decode_ensemble", ctypes.c_int,
         [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64, ctypes.c_int64,
          ctypes.POINTER(c_int32_p), ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(_Options),
          ctypes.POINTER(ctypes.POINTER(_Result))]),
        ("attn_bundle_average", ctypes.c_int,
         [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int64, ctypes.c_char_p]),
        ("attn_bundle_text", ctypes.c_int,
         [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
        ("attn_decode_default_options", _Options, []),
        ("attn_decode_result_destroy", None, [ctypes.POINTER(_Result)]),
        ("attn_model_config_to_json", ctypes.c_int,
         [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
        ("attn_tokenizer_encode", ctypes.c_int,
         [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(c_int32_p),
          ctypes.POINTER(ctypes.c_int64)]),
        ("attn_tokenizer_decode", ctypes.c_int,
         [ctypes.c_void_p, c_int32_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)]),
        ("attn_tokenizer_vocab", ctypes.c_void_p, [ctypes.c_void_p]),
        ("attn_vocab_size", ctypes.c_int64, [ctypes.c_void_p]),
        ("attn_vocab_token", ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int32])]:
    getattr(lib, _name).restype = _restype
    getattr(lib, _name).argtypes = _argtypes

_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def _take_string(pointer):
    """The text of a malloc'ed C string, which is freed."""
    try:
        return ctypes.string_at(pointer).decode("utf-8")
    finally:
        _libc.free(pointer)


def _take_ids(pointer, count):
    try:
        return [pointer[i] for i in range(count)]
    finally:
        _libc.free(ctypes.cast(pointer, ctypes.c_void_p))


class Tokenizer:
    """One of a bundle's tokenizers (it stays valid while the bundle is open)."""

    def __init__(self, bundle, side):
        self._bundle = bundle  # keeps the bundle, which owns the tokenizer, alive
        self._handle = lib.attn_bundle_tokenizer(bundle._live(), side)

    def encode(self, text):
        """The ids of text (no <s> or </s>); tokens outside the vocabulary give <unk> (3)."""
        ids, count = c_int32_p(), ctypes.c_int64()
        check(lib.attn_tokenizer_encode(self._live(), text.encode("utf-8"), ctypes.byref(ids),
                                        ctypes.byref(count)), "attn_tokenizer_encode")
        return _take_ids(ids, count.value)

    def decode(self, ids):
        """The text of ids, special ids (<pad>, <s>, </s>, <unk>) left out."""
        array = (ctypes.c_int32 * len(ids))(*ids)
        text = ctypes.c_void_p()
        check(lib.attn_tokenizer_decode(self._live(), array, len(ids), ctypes.byref(text)),
              "attn_tokenizer_decode")
        return _take_string(text)

    def __len__(self):
        """The vocabulary size, specials included."""
        return lib.attn_vocab_size(lib.attn_tokenizer_vocab(self._live()))

    def token(self, token_id):
        """The vocabulary string of an id ("<s>" for the specials' ids), or None."""
        token = lib.attn_vocab_token(lib.attn_tokenizer_vocab(self._live()), token_id)
        return None if token is None else token.decode("utf-8")

    def _live(self):
        self._bundle._live()
        return self._handle


class _Translator:
    """translate, shared by a Bundle and an Ensemble: the first model's handle encodes and
    writes the texts (the tokenizers agree), _decode searches."""

    def translate(self, texts, beam=5, nbest=1, alpha=0.6, max_len_ratio=1.5, max_len_offset=10,
                  max_len=0):
        """Translations of texts (a list of strings): see the module's documentation."""
        if isinstance(texts, str):
            raise ValueError("texts: expected a list of strings, got one string")
        handle = self._first_handle()
        options = lib.attn_decode_default_options()
        options.beam_size, options.nbest = beam, nbest
        options.length_penalty, options.max_len_ratio = alpha, max_len_ratio
        options.max_len_offset, options.max_len = max_len_offset, max_len
        sources = [self._encode(handle, i, text) for i, text in enumerate(texts)]
        out = []
        for start in range(0, len(sources), _BATCH):
            out.extend(self._translate_batch(handle, sources[start:start + _BATCH], options))
        return out

    def _encode(self, handle, index, text):
        ids, count = c_int32_p(), ctypes.c_int64()
        check(lib.attn_bundle_encode(handle, text.encode("utf-8"), ctypes.byref(ids),
                                     ctypes.byref(count), None), f"texts[{index}]")
        return _take_ids(ids, count.value)

    def _translate_batch(self, handle, sources, options):
        searched = [ids for ids in sources if ids]
        hypotheses = iter(self._search(handle, searched, options) if searched else [])
        empty = "" if options.nbest == 1 else []
        return [next(hypotheses) if ids else empty for ids in sources]

    def _search(self, handle, sources, options):
        rows = [(ctypes.c_int32 * len(ids))(*ids) for ids in sources]
        row_pointers = (c_int32_p * len(rows))(*[ctypes.cast(r, c_int32_p) for r in rows])
        counts = (ctypes.c_int64 * len(rows))(*[len(ids) for ids in sources])
        result = ctypes.POINTER(_Result)()
        try:
            self._decode(len(rows), row_pointers, counts, options, result)
            out = []
            for i in range(result.contents.size):
                sentence = result.contents.sentences[i]
                pairs = [(self._text(handle, sentence.hypotheses[j]),
                          sentence.hypotheses[j].score) for j in range(sentence.count)]
                if options.nbest == 1:
                    out.append(pairs[0][0] if pairs else "")
                else:
                    out.append(pairs)
            return out
        finally:
            if result:
                lib.attn_decode_result_destroy(result)

    @staticmethod
    def _text(handle, hypothesis):
        text = ctypes.c_void_p()
        check(lib.attn_bundle_text(handle, ctypes.byref(hypothesis), ctypes.byref(text)),
              "attn_bundle_text")
        return _take_string(text)


class Bundle(OwnedHandle, _Translator):
    """A model file's model, config and tokenizers, read once (attn_bundle_load)."""

    _destroy = "attn_bundle_destroy"

    def __init__(self, path, precision="auto"):
        self._open("attn_bundle_load", os.fsencode(path))
        try:
            set_bundle_precision(self._handle, precision)
        except BaseException:
            self.close()
            raise
        self.source_tokenizer = Tokenizer(self, _SOURCE)
        self.target_tokenizer = Tokenizer(self, _TARGET)

    def _live(self):
        if not self._handle:
            raise ValueError("the bundle is closed")
        return self._handle

    @property
    def config(self):
        """The model's config as a dict (the JSON stored in the file)."""
        text = ctypes.c_void_p()
        check(lib.attn_model_config_to_json(lib.attn_bundle_config(self._live()),
                                            ctypes.byref(text)), "attn_model_config_to_json")
        return json.loads(_take_string(text))

    def _first_handle(self):
        handle = self._live()
        check(lib.attn_bundle_check_encoder_decoder(handle), "translate")
        return handle

    def _decode(self, n, rows, counts, options, result):
        check(lib.attn_bundle_decode(self._live(), n, rows, counts, ctypes.byref(options),
                                     ctypes.byref(result)), "attn_bundle_decode")


class Ensemble(_Translator):
    """Several model files translating as one (attn_bundle_decode_ensemble): the mean of the
    models' log-probabilities at each step, renormalised. The models may differ in
    architecture but must share their tokenizers. `bundles` are the members, the first's
    tokenizers are the ensemble's."""

    def __init__(self, paths, precision="auto"):
        if isinstance(paths, (str, bytes, os.PathLike)):
            raise ValueError("paths: expected a list of model files, got one path")
        self.bundles = []
        try:
            for path in paths:
                self.bundles.append(Bundle(path, precision))
            if not self.bundles:
                raise ValueError("paths: expected at least one model file")
            check(lib.attn_bundle_check_ensemble(self._handles(), len(self.bundles)), "Ensemble")
        except BaseException:
            self.close()
            raise
        self.source_tokenizer = self.bundles[0].source_tokenizer
        self.target_tokenizer = self.bundles[0].target_tokenizer

    def _handles(self):
        return (ctypes.c_void_p * len(self.bundles))(*[b._live() for b in self.bundles])

    def _first_handle(self):
        if not self.bundles:
            raise ValueError("the ensemble is closed")
        return self.bundles[0]._live()

    def _decode(self, n, rows, counts, options, result):
        check(lib.attn_bundle_decode_ensemble(self._handles(), len(self.bundles), n, rows, counts,
                                              ctypes.byref(options), ctypes.byref(result)),
              "attn_bundle_decode_ensemble")

    def close(self):
        for bundle in self.bundles:
            bundle.close()
        self.bundles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def average(out, paths):
    """Writes to out the element-wise mean of the weights of the model files (or checkpoints)
    at paths, with the first's config and tokenizers (attn_bundle_average, as `attn average`).
    Files of another config or other tokenizers raise ValueError naming both files."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise ValueError("paths: expected a list of model files, got one path")
    encoded = [os.fsencode(p) for p in paths]
    array = (ctypes.c_char_p * len(encoded))(*encoded)
    check(lib.attn_bundle_average(array, len(encoded), os.fsencode(out)), "average")
