"""Loading libattn and the conversions every wrapper shares.

The library is found at $ATTN_LIBRARY, else in the build/ folder of the source tree this
package sits in. Arrays cross the boundary as C-contiguous float32 (uint8 for masks) and
every failing call raises ValueError (bad arguments) or RuntimeError with the library's
own message.
"""
import ctypes
import os
import warnings
from pathlib import Path

import numpy as np

ATTN_OK = 0
_STATUS_INVALID_ARGUMENT = 1


def _find_library():
    env = os.environ.get("ATTN_LIBRARY")
    if env:
        return env
    root = Path(__file__).resolve().parents[2]
    # build/ only: the sanitizer and valgrind builds (build-sanitize/, ...) cannot be
    # loaded into an uninstrumented Python.
    for candidate in sorted(root.glob("build/libattn.so*")):
        return str(candidate)
    raise OSError("libattn.so not found: build the project (make) or set ATTN_LIBRARY")


lib = ctypes.CDLL(_find_library())
lib.attn_last_error.restype = ctypes.c_char_p
lib.attn_last_error.argtypes = []

lib.attn_check_environment.restype = ctypes.c_int
lib.attn_check_environment.argtypes = []
if lib.attn_check_environment() != ATTN_OK:
    # The library falls back to its defaults; say so rather than run as the user did not ask.
    warnings.warn("attn: " + lib.attn_last_error().decode("utf-8", "replace") +
                  " (using the default)", RuntimeWarning, stacklevel=2)

c_float_p = ctypes.POINTER(ctypes.c_float)
c_uint8_p = ctypes.POINTER(ctypes.c_uint8)
c_int32_p = ctypes.POINTER(ctypes.c_int32)


lib.attn_bundle_model.restype = ctypes.c_void_p
lib.attn_bundle_model.argtypes = [ctypes.c_void_p]
lib.attn_model_set_precision.restype = ctypes.c_int
lib.attn_model_set_precision.argtypes = [ctypes.c_void_p, ctypes.c_int]


def set_bundle_precision(bundle, precision):
    """Runs an open bundle's model at precision as the CLI's --precision does: "auto" (bf16
    where the processor multiplies bf16 natively, else fp32; a quantized file keeps its own),
    "fp32", "bf16" or "int8" (an fp32 model is quantized, a quantized one refuses a higher)."""
    if not isinstance(precision, str):
        raise ValueError(f"precision must be 'auto', 'fp32', 'bf16' or 'int8', not {precision!r}")
    value = ctypes.c_int()
    check(lib.attn_precision_parse(precision.encode("utf-8"), ctypes.byref(value)), "precision")
    check(lib.attn_model_set_precision(lib.attn_bundle_model(bundle), value), "precision")


class OwnedHandle:
    """A library object this Python object owns: opened by `_open(function, *args)` (which
    raises with the library's message), freed once by `close()`, `with` or the collector."""

    _destroy = None  # the library's destroy/close function, set by each subclass

    def _open(self, function, *args):
        self._handle = ctypes.c_void_p()
        check(getattr(lib, function)(*args, ctypes.byref(self._handle)), function)

    def close(self):
        if getattr(self, "_handle", None):
            getattr(lib, self._destroy)(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


def check(status, what):
    """Raise with the library's message when a call failed."""
    if status == ATTN_OK:
        return
    message = lib.attn_last_error().decode("utf-8", "replace")
    if status == _STATUS_INVALID_ARGUMENT:
        raise ValueError(f"{what}: {message}")
    raise RuntimeError(f"{what}: {message}")


INT64_MAX = 2**63 - 1


def as_int64(name, value, lo=-INT64_MAX - 1, hi=INT64_MAX):
    """value as an int in [lo, hi]; ValueError otherwise (ctypes would wrap 2**64 to 0)."""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name}: expected an integer, got {value!r}") from None
    if number != value or not lo <= number <= hi:
        raise ValueError(f"{name}: expected an integer from {lo} to {hi}, got {value!r}")
    return number


def as_float32(name, array, ndim=None):
    """A C-contiguous float32 copy-or-view of array; ValueError on a wrong dtype or rank."""
    a = np.asarray(array)
    if a.dtype != np.float32:
        raise ValueError(f"{name}: expected float32, got {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    return np.ascontiguousarray(a)


def as_mask(name, array, shape):
    """A C-contiguous uint8 mask (True/nonzero = ignore) of exactly the given shape."""
    a = np.asarray(array)
    if a.dtype != np.bool_ and a.dtype != np.uint8:
        raise ValueError(f"{name}: expected bool, got {a.dtype}")
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {a.shape}")
    return np.ascontiguousarray(a.astype(np.uint8))


def ptr(array):
    """Pointer to a float32 / uint8 / int32 array's data, or NULL for None."""
    if array is None:
        return None
    if array.dtype == np.float32:
        return array.ctypes.data_as(c_float_p)
    if array.dtype == np.uint8:
        return array.ctypes.data_as(c_uint8_p)
    if array.dtype == np.int32:
        return array.ctypes.data_as(c_int32_p)
    raise TypeError(f"no pointer type for {array.dtype}")
