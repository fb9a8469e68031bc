"""attn: Python view of libattn through ctypes (no compile step).

Each submodule wraps one part of the C library; this package re-exports them.
"""
from ._lib import lib as _lib  # noqa: F401  (fails early with a clear message if missing)
from . import kernels  # noqa: F401,E402
