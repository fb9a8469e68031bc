"""A language model written by `attn train --task lm` (arch transformer_lm), loaded once
through libattn (attn_bundle.h): prompts in, sampled continuations out, and the perplexity of a
text.

    from attn import LanguageModel
    with LanguageModel("lm.safetensors") as lm:
        lm.generate(["In the beginning", "And"], max_new_tokens=50, seed=7)   # ["...", "..."]
        lm.perplexity("some held-out text\\nover lines")
        # Perplexity(cross_entropy=1.52, perplexity=4.57, bits_per_token=2.19,
        #            bits_per_character=2.05, tokens=33, characters=33, unknown=0)

generate samples as `attn generate --input` does (temperature 1, no top-k or top-p, seed 0,
200 new tokens, batches of 32 prompts): prompt i draws from its own stream, (seed, i), so its
continuation is the line `attn generate --input` writes for the i-th line of a file, whatever
the other prompts. A continuation ends at the model's end of line (stop_at_end_of_line=False
lets it write several lines, each end of line a "\\n"), after max_new_tokens tokens or when the
model's context is full. perplexity scores as `attn eval --metric perplexity` does. Failures
raise ValueError (bad arguments, a prompt too long for the context without truncate=True, an
encoder-decoder) or RuntimeError with the library's message, which names the file.
"""
import ctypes
import os
from dataclasses import dataclass

from ._lib import OwnedHandle, as_int64, c_int32_p, check, lib, set_bundle_precision
from .bundle import Tokenizer, _take_ids, _take_string, _TARGET

_BATCH = 32  # prompts sampled together, as attn generate's --batch default
_SCORE_BATCH = 16  # windows scored together, as attn eval's --batch default
_EOS = 2


class _SampleOptions(ctypes.Structure):
    _fields_ = [("temperature", ctypes.c_double), ("top_k", ctypes.c_int64),
                ("top_p", ctypes.c_double), ("seed", ctypes.c_uint64), ("greedy", ctypes.c_int),
                ("max_new_tokens", ctypes.c_int64), ("stop_token", ctypes.c_int32)]


class _Generation(ctypes.Structure):
    _fields_ = [("tokens", c_int32_p), ("length", ctypes.c_int64), ("stop", ctypes.c_int)]


class _GenerateResult(ctypes.Structure):
    _fields_ = [("size", ctypes.c_int64), ("generations", ctypes.POINTER(_Generation))]


class _TextScore(ctypes.Structure):
    _fields_ = [("tokens", ctypes.c_int64), ("characters", ctypes.c_int64),
                ("unknown", ctypes.c_int64), ("nats", ctypes.c_double),
                ("cross_entropy", ctypes.c_double), ("perplexity", ctypes.c_double),
                ("bits_per_token", ctypes.c_double), ("bits_per_character", ctypes.c_double)]


for _name, _restype, _argtypes in [
        ("attn_bundle_check_language_model", ctypes.c_int, [ctypes.c_void_p]),
        ("attn_bundle_encode_prompt", ctypes.c_int,
         [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(c_int32_p),
          ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64),
          ctypes.POINTER(ctypes.c_int64)]),
        ("attn_bundle_generate", ctypes.c_int,
         [ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(c_int32_p),
          ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_uint64),
          ctypes.POINTER(_SampleOptions), ctypes.c_void_p, ctypes.c_void_p,
          ctypes.POINTER(ctypes.POINTER(_GenerateResult))]),
        ("attn_bundle_generated_text", ctypes.c_int,
         [ctypes.c_void_p, c_int32_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)]),
        ("attn_generate_result_destroy", None, [ctypes.POINTER(_GenerateResult)]),
        ("attn_sample_default_options", _SampleOptions, []),
        ("attn_sample_options_validate", ctypes.c_int, [ctypes.POINTER(_SampleOptions)]),
        ("attn_bundle_score_text", ctypes.c_int,
         [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int64, ctypes.c_int64,
          ctypes.POINTER(_TextScore)])]:
    getattr(lib, _name).restype = _restype
    getattr(lib, _name).argtypes = _argtypes


@dataclass(frozen=True)
class Perplexity:
    """How well the model predicts a text, as `attn eval --metric perplexity` prints it."""
    cross_entropy: float       # nats per predicted token
    perplexity: float          # exp(cross_entropy)
    bits_per_token: float      # cross_entropy / ln 2
    bits_per_character: float  # the total bits over the text's characters (a newline is one)
    tokens: int                # predicted tokens
    characters: int            # UTF-8 characters, each line's newline counted as one
    unknown: int               # tokens outside the vocabulary, read as <unk>


class LanguageModel(OwnedHandle):
    """A language model file's model, config and tokenizer, read once (attn_bundle_load)."""

    _destroy = "attn_bundle_destroy"

    def __init__(self, path, precision="auto"):
        """precision: as attn generate --precision ("auto": bf16 where native, else fp32)."""
        self._open("attn_bundle_load", os.fsencode(path))
        try:
            check(lib.attn_bundle_check_language_model(self._handle), "LanguageModel")
            set_bundle_precision(self._handle, precision)
        except BaseException:
            self.close()
            raise
        self.tokenizer = Tokenizer(self, _TARGET)

    def _live(self):
        if not self._handle:
            raise ValueError("the language model is closed")
        return self._handle

    def generate(self, prompts, max_new_tokens=200, temperature=1.0, top_k=0, top_p=1.0, seed=0,
                 greedy=False, stop_at_end_of_line=True, truncate=False):
        """The continuation of each prompt (a list of strings): see the module's
        documentation."""
        if isinstance(prompts, str):
            raise ValueError("prompts: expected a list of strings, got one string")
        options = lib.attn_sample_default_options()
        options.temperature, options.top_p = float(temperature), float(top_p)
        options.top_k = as_int64("top_k", top_k, 0)
        options.seed = as_int64("seed", seed, 0, 2**64 - 1)
        options.greedy = bool(greedy)
        options.max_new_tokens = as_int64("max_new_tokens", max_new_tokens, 1)
        options.stop_token = _EOS if stop_at_end_of_line else -1
        check(lib.attn_sample_options_validate(ctypes.byref(options)), "generate")
        encoded = [self._encode_prompt(i, text, truncate) for i, text in enumerate(prompts)]
        out = []
        for start in range(0, len(encoded), _BATCH):
            out.extend(self._generate_batch(encoded[start:start + _BATCH], start, options))
        return out

    def _encode_prompt(self, index, text, truncate):
        if not isinstance(text, str):
            raise ValueError(f"prompts[{index}]: expected a string, got {type(text).__name__}")
        ids, count = c_int32_p(), ctypes.c_int64()
        check(lib.attn_bundle_encode_prompt(self._live(), text.encode("utf-8"), bool(truncate),
                                            ctypes.byref(ids), ctypes.byref(count), None, None),
              f"prompts[{index}]")
        return _take_ids(ids, count.value)

    def _generate_batch(self, prompts, first, options):
        rows = [(ctypes.c_int32 * len(ids))(*ids) for ids in prompts]
        row_pointers = (c_int32_p * len(rows))(*[ctypes.cast(r, c_int32_p) for r in rows])
        counts = (ctypes.c_int64 * len(rows))(*[len(ids) for ids in prompts])
        # Each prompt's stream is its index in the call, not in the batch.
        streams = (ctypes.c_uint64 * len(rows))(*range(first, first + len(rows)))
        result = ctypes.POINTER(_GenerateResult)()
        try:
            check(lib.attn_bundle_generate(self._live(), len(rows), row_pointers, counts, streams,
                                           ctypes.byref(options), None, None,
                                           ctypes.byref(result)), "generate")
            return [self._text(result.contents.generations[i]) for i in range(len(rows))]
        finally:
            if result:
                lib.attn_generate_result_destroy(result)

    def _text(self, generation):
        text = ctypes.c_void_p()
        check(lib.attn_bundle_generated_text(self._live(), generation.tokens, generation.length,
                                             ctypes.byref(text)), "attn_bundle_generated_text")
        return _take_string(text)

    def perplexity(self, text):
        """The scores of text (a string; its lines are read as the model was trained, each
        line's tokens then the end of line, a final newline ending the last line)."""
        if not isinstance(text, str):
            raise ValueError(f"text: expected a string, got {type(text).__name__}")
        lines = text.split("\n")
        if len(lines) > 1 and lines[-1] == "":
            lines.pop()  # a final newline ends the last line, as in a file
        encoded = [line.encode("utf-8") for line in lines]
        array = (ctypes.c_char_p * len(encoded))(*encoded)
        score = _TextScore()
        check(lib.attn_bundle_score_text(self._live(), array, len(encoded), _SCORE_BATCH,
                                         ctypes.byref(score)), "perplexity")
        return Perplexity(score.cross_entropy, score.perplexity, score.bits_per_token,
                          score.bits_per_character, score.tokens, score.characters,
                          score.unknown)
