"""safetensors files through libattn: save() writes one atomically, TensorFile reads one.

    from attn.tensor_file import TensorFile, save
    save("model.safetensors", {"w": w, "step": np.int64(7)}, {"config": json.dumps(config)})
    with TensorFile("model.safetensors") as f:
        w = f.read_f32("w")          # F32, F16, BF16 or F64 in the file, float32 here
        step = f.read("step")        # the stored dtype, unchanged

Tensors are NumPy arrays of bool, (u)int8/16/32/64, float16/32/64; the file keeps the dict's
order in its header. Library failures raise RuntimeError (ValueError for bad arguments) with
the library's message, which names the file and the problem.
"""
import ctypes
import os

import numpy as np

from ._lib import OwnedHandle, check, lib

_MAX_DIMS = 6
# attn_dtype, in the order of include/attn/attn_tensor_file.h.
_DTYPE_NAMES = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32",
                "U32", "F32", "F64", "I64", "U64"]
_NUMPY_OF = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16,
             "U16": np.uint16, "F16": np.float16, "I32": np.int32, "U32": np.uint32,
             "F32": np.float32, "F64": np.float64, "I64": np.int64, "U64": np.uint64}
_CODE_OF = {np.dtype(numpy_type): _DTYPE_NAMES.index(name)
            for name, numpy_type in _NUMPY_OF.items()}


class _NamedTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * _MAX_DIMS), ("data", ctypes.c_void_p)]


class _MetadataEntry(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("value", ctypes.c_char_p)]


class _TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("numel", ctypes.c_int64),
                ("nbytes", ctypes.c_size_t), ("data", ctypes.c_void_p)]


_handle_p = ctypes.POINTER(ctypes.c_void_p)
lib.attn_tensor_file_write.restype = ctypes.c_int
lib.attn_tensor_file_write.argtypes = [ctypes.c_char_p, ctypes.POINTER(_NamedTensor),
                                       ctypes.c_size_t, ctypes.POINTER(_MetadataEntry),
                                       ctypes.c_size_t]
lib.attn_tensor_file_open.restype = ctypes.c_int
lib.attn_tensor_file_open.argtypes = [ctypes.c_char_p, _handle_p]
lib.attn_tensor_file_close.restype = None
lib.attn_tensor_file_close.argtypes = [ctypes.c_void_p]
lib.attn_tensor_file_count.restype = ctypes.c_size_t
lib.attn_tensor_file_count.argtypes = [ctypes.c_void_p]
lib.attn_tensor_file_get.restype = ctypes.c_int
lib.attn_tensor_file_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                     ctypes.POINTER(_TensorInfo)]
lib.attn_tensor_file_find.restype = ctypes.c_int
lib.attn_tensor_file_find.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                      ctypes.POINTER(_TensorInfo)]
lib.attn_tensor_file_metadata_count.restype = ctypes.c_size_t
lib.attn_tensor_file_metadata_count.argtypes = [ctypes.c_void_p]
lib.attn_tensor_file_metadata_at.restype = ctypes.c_int
lib.attn_tensor_file_metadata_at.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                             ctypes.POINTER(ctypes.c_char_p),
                                             ctypes.POINTER(ctypes.c_char_p)]
lib.attn_tensor_file_read_f32.restype = ctypes.c_int
lib.attn_tensor_file_read_f32.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                          ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p]
lib.attn_tensor_file_read_raw.restype = ctypes.c_int
lib.attn_tensor_file_read_raw.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                          ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                          ctypes.c_void_p]


def save(path, tensors, metadata=None):
    """Write tensors (a dict name -> array) and metadata (a dict of strings) to path."""
    arrays = []
    entries = (_NamedTensor * max(1, len(tensors)))()
    for entry, (name, value) in zip(entries, tensors.items()):
        array = np.ascontiguousarray(value)
        if array.dtype not in _CODE_OF:
            raise ValueError(f"{name}: no safetensors dtype for {array.dtype}")
        if array.ndim > _MAX_DIMS:
            raise ValueError(f"{name}: {array.ndim} dimensions, at most {_MAX_DIMS}")
        arrays.append(array)  # keeps the data alive during the call
        entry.name = name.encode("utf-8")
        entry.dtype = _CODE_OF[array.dtype]
        entry.ndim = array.ndim
        for axis, size in enumerate(array.shape):
            entry.shape[axis] = size
        entry.data = array.ctypes.data
    metadata = metadata or {}
    pairs = (_MetadataEntry * max(1, len(metadata)))()
    for pair, (key, value) in zip(pairs, metadata.items()):
        pair.key = key.encode("utf-8")
        pair.value = value.encode("utf-8")
    check(lib.attn_tensor_file_write(os.fsencode(path), entries, len(tensors), pairs,
                                     len(metadata)), "attn_tensor_file_write")


class TensorFile(OwnedHandle):
    """A safetensors file read into memory and validated by libattn."""

    _destroy = "attn_tensor_file_close"

    def __init__(self, path):
        self._open("attn_tensor_file_open", os.fsencode(path))

    def _info(self, name):
        info = _TensorInfo()
        check(lib.attn_tensor_file_find(self._handle, name.encode("utf-8"), ctypes.byref(info)),
              "attn_tensor_file_find")
        return info

    def names(self):
        """Tensor names in the header's order."""
        info = _TensorInfo()
        names = []
        for index in range(lib.attn_tensor_file_count(self._handle)):
            check(lib.attn_tensor_file_get(self._handle, index, ctypes.byref(info)),
                  "attn_tensor_file_get")
            names.append(info.name.decode("utf-8"))
        return names

    def dtype(self, name):
        """The stored dtype's safetensors name ("F32", "BF16", ...)."""
        return _DTYPE_NAMES[self._info(name).dtype]

    def shape(self, name):
        info = self._info(name)
        return tuple(info.shape[d] for d in range(info.ndim))

    @property
    def metadata(self):
        """The "__metadata__" strings, in the header's order."""
        key, value = ctypes.c_char_p(), ctypes.c_char_p()
        entries = {}
        for index in range(lib.attn_tensor_file_metadata_count(self._handle)):
            check(lib.attn_tensor_file_metadata_at(self._handle, index, ctypes.byref(key),
                                                   ctypes.byref(value)),
                  "attn_tensor_file_metadata_at")
            entries[key.value.decode("utf-8")] = value.value.decode("utf-8")
        return entries

    def _request(self, name):
        shape = self.shape(name)
        return shape, (ctypes.c_int64 * max(1, len(shape)))(*shape)

    def read(self, name):
        """A copy of the tensor in its stored dtype (NumPy has no BF16 or F8: use read_f32)."""
        stored = self.dtype(name)
        if stored not in _NUMPY_OF:
            raise ValueError(f"{name}: NumPy has no {stored}; use read_f32")
        shape, c_shape = self._request(name)
        out = np.empty(shape, dtype=_NUMPY_OF[stored])
        check(lib.attn_tensor_file_read_raw(self._handle, name.encode("utf-8"),
                                            _DTYPE_NAMES.index(stored), len(shape), c_shape,
                                            out.ctypes.data), "attn_tensor_file_read_raw")
        return out

    def read_f32(self, name):
        """The tensor as float32, converted by libattn from F16, BF16 or F64."""
        shape, c_shape = self._request(name)
        out = np.empty(shape, dtype=np.float32)
        check(lib.attn_tensor_file_read_f32(self._handle, name.encode("utf-8"), len(shape),
                                            c_shape, out.ctypes.data),
              "attn_tensor_file_read_f32")
        return out
