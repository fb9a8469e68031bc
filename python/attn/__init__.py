"""attn: Python view of libattn through ctypes (no compile step).

Each submodule wraps one part of the C library; this package re-exports them.
"""
from ._lib import lib as _lib  # noqa: F401  (fails early with a clear message if missing)
from .sdpa import scaled_dot_product_attention, scaled_dot_product_attention_backward  # noqa: F401,E501
from .mha import multi_head_attention_forward, multi_head_attention_backward  # noqa: F401
from .classic import *  # noqa: F401,F403  (additive, Luong, hard attention, positional encoding)
from . import kernels  # noqa: F401,E402
from .rnn import *  # noqa: F401,F403  (GRU and LSTM cells and stacked, bidirectional layers)
from . import models  # noqa: F401,E402  (Transformer models: attn.models.Model)
from . import decode  # noqa: F401,E402  (greedy and beam search: attn.decode.decode)
from .bundle import Bundle, Ensemble, Tokenizer, average  # noqa: F401,E402  (a model file with its tokenizers: text in, text out; ensembles, averaging)
from .language_model import LanguageModel, Perplexity  # noqa: F401,E402  (a language model: generate, perplexity)
from .classifier import Classifier  # noqa: F401,E402  (a text classifier: class probabilities)
