"""Loading libattn and the conversions every wrapper shares.

The library is found at $ATTN_LIBRARY, else in the build/ folder of the source tree this
package sits in. Arrays cross the boundary as C-contiguous float32 (uint8 for masks) and
every failing call raises ValueError (bad arguments) or RuntimeError with the library's
own message.
"""
import ctypes
import os
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

c_float_p = ctypes.POINTER(ctypes.c_float)
c_uint8_p = ctypes.POINTER(ctypes.c_uint8)
c_int32_p = ctypes.POINTER(ctypes.c_int32)


def check(status, what):
    """Raise with the library's message when a call failed."""
    if status == ATTN_OK:
        return
    message = lib.attn_last_error().decode("utf-8", "replace")
    if status == _STATUS_INVALID_ARGUMENT:
        raise ValueError(f"{what}: {message}")
    raise RuntimeError(f"{what}: {message}")


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
