"""A text classifier written by `attn train --task classify` (arch transformer_classifier, or
rnn_classifier with --arch rnn), loaded once through libattn (attn_bundle.h): texts in, class probabilities out.

    from attn import Classifier
    with Classifier("clf.safetensors") as clf:
        clf.labels                          # ["neg", "pos"]: the classes, in the model's order
        clf.classify(["great film", "dull"])
        # [{"neg": 0.03, "pos": 0.97}, {"neg": 0.88, "pos": 0.12}]
        clf.pooling("great film")
        # [("great", 0.81), ("film", 0.19)]: the weight the pooling gives each token

classify reads each text as `attn classify` reads a line (a "label<TAB>text" line as its text)
and returns every class's probability, computed in batches of 64 as `attn classify` does.
truncate=True keeps the first tokens of a text longer than the model reads, as `attn classify
--truncate` does. Failures raise ValueError (an empty text, one too long for the model without
truncate, a file that is not a classifier) or RuntimeError with the library's message, which names the file.
"""
import ctypes
import os

from ._lib import OwnedHandle, c_int32_p, check, lib, set_bundle_precision
from .bundle import _take_ids

_BATCH = 64  # texts classified together, as attn classify's --batch default
_SOURCE_SIDE = 0  # ATTN_BUNDLE_SOURCE

for _name, _restype, _argtypes in [
        ("attn_bundle_check_classifier", ctypes.c_int, [ctypes.c_void_p]),
        ("attn_bundle_classes", ctypes.c_void_p, [ctypes.c_void_p]),
        ("attn_labels_count", ctypes.c_int64, [ctypes.c_void_p]),
        ("attn_labels_name", ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int64]),
        ("attn_bundle_encode_truncated", ctypes.c_int,
         [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(c_int32_p),
          ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64),
          ctypes.POINTER(ctypes.c_int64)]),
        ("attn_bundle_classify", ctypes.c_int,
         [ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(c_int32_p),
          ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_float)]),
        ("attn_bundle_pooling_weights", ctypes.c_int,
         [ctypes.c_void_p, c_int32_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_float)]),
        ("attn_bundle_labels", ctypes.c_int,
         [ctypes.c_void_p, ctypes.c_int, c_int32_p, ctypes.c_int64,
          ctypes.POINTER(ctypes.c_char_p)]),
        ("attn_token_text_length", ctypes.c_size_t, [ctypes.c_char_p])]:
    getattr(lib, _name).restype = _restype
    getattr(lib, _name).argtypes = _argtypes


class Classifier(OwnedHandle):
    """A classifier file's model, tokenizer and class names, read once (attn_bundle_load)."""

    _destroy = "attn_bundle_destroy"

    def __init__(self, path, precision="auto"):
        """precision: as attn classify --precision ("auto": bf16 where native, else fp32)."""
        self._open("attn_bundle_load", os.fsencode(path))
        try:
            check(lib.attn_bundle_check_classifier(self._handle), "Classifier")
            set_bundle_precision(self._handle, precision)
        except BaseException:
            self.close()
            raise
        classes = lib.attn_bundle_classes(self._handle)
        self.labels = [lib.attn_labels_name(classes, k).decode("utf-8")
                       for k in range(lib.attn_labels_count(classes))]

    def _live(self):
        if not self._handle:
            raise ValueError("the classifier is closed")
        return self._handle

    def classify(self, texts, truncate=False):
        """Every class's probability for each text (a list of strings): a list of dicts.
        truncate: read only the first tokens of a text too long for the model (else an error)."""
        if isinstance(texts, str):
            raise ValueError("texts: expected a list of strings, got one string")
        encoded = [self._encode(i, text, truncate) for i, text in enumerate(texts)]
        out = []
        for start in range(0, len(encoded), _BATCH):
            out.extend(self._classify_batch(encoded[start:start + _BATCH]))
        return out

    def pooling(self, text, truncate=False):
        """Which tokens the pooling reads in text: (token, weight) pairs in the text's order, as
        `attn viz --kind pooling` draws them (attention pooling: the learned query's weights;
        mean: 1/n each; cls: the classification token's last-layer attention); truncate as in
        classify, the pairs then covering the tokens read."""
        ids = self._encode(0, text, truncate)
        row = (ctypes.c_int32 * len(ids))(*ids)
        weights = (ctypes.c_float * len(ids))()
        tokens = (ctypes.c_char_p * len(ids))()
        check(lib.attn_bundle_pooling_weights(self._live(), row, len(ids), weights), "pooling")
        check(lib.attn_bundle_labels(self._live(), _SOURCE_SIDE, row, len(ids), tokens), "pooling")
        # A BPE token's end-of-word marker is not text.
        return [(tokens[i][:lib.attn_token_text_length(tokens[i])].decode("utf-8"), weights[i])
                for i in range(len(ids))]

    def _encode(self, index, text, truncate):
        if not isinstance(text, str):
            raise ValueError(f"texts[{index}]: expected a string, got {type(text).__name__}")
        text = text.split("\t", 1)[1] if "\t" in text else text
        ids, count = c_int32_p(), ctypes.c_int64()
        encode = lib.attn_bundle_encode_truncated if truncate else lib.attn_bundle_encode
        extra = (None,) if truncate else ()
        check(encode(self._live(), text.encode("utf-8"), ctypes.byref(ids), ctypes.byref(count),
                     None, *extra), f"texts[{index}]")
        ids = _take_ids(ids, count.value)
        if not ids:
            raise ValueError(f"texts[{index}]: no text to classify (no tokens)")
        return ids

    def _classify_batch(self, batch):
        rows = [(ctypes.c_int32 * len(ids))(*ids) for ids in batch]
        pointers = (c_int32_p * len(rows))(*[ctypes.cast(r, c_int32_p) for r in rows])
        counts = (ctypes.c_int64 * len(rows))(*[len(ids) for ids in batch])
        classes = len(self.labels)
        probabilities = (ctypes.c_float * (len(rows) * classes))()
        check(lib.attn_bundle_classify(self._live(), len(rows), pointers, counts, probabilities),
              "classify")
        return [{label: probabilities[i * classes + k] for k, label in enumerate(self.labels)}
                for i in range(len(rows))]
