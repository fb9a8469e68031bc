"""safetensors files between attn and PyTorch 1.13, in both directions.

Debian's python3-torch comes without the safetensors package, so the other side is a small
reader and writer written here from the format's description (json + struct, tensors from and
to torch). The writer lays files out as the safetensors library does (tensors sorted by
descending alignment, then name; the header padded with spaces to 8 bytes, JSON with ASCII
escapes); the reader checks the rules the library enforces (header starts with '{', tensors
tile the data area with no gap, overlap or trailing bytes) and, for files attn writes, that
each tensor is aligned to its element size. attn's side is python/attn/tensor_file.py, a
ctypes wrapper over the C functions, so one test drives both directions.
"""
import json
import struct

import numpy as np
import pytest
import torch

from attn.tensor_file import TensorFile, save

TORCH_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
                "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
                "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}
DTYPE_NAMES = {dtype: name for name, dtype in TORCH_DTYPES.items()}


def torch_bytes(tensor):
    tensor = tensor.contiguous()
    if tensor.dtype == torch.bfloat16:  # NumPy has no bfloat16: take the bits
        tensor = tensor.view(torch.int16)
    return tensor.numpy().tobytes()


def reference_write(path, tensors, metadata=None):
    order = sorted(tensors.items(), key=lambda item: (-item[1].element_size(), item[0]))
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, tensor in order:
        raw = torch_bytes(tensor)
        header[name] = {"dtype": DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def reference_read(path, require_alignment=False):
    """(tensors as torch tensors, metadata, tensor names in header order)."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    raw_header = data[8:8 + length]
    assert raw_header.startswith(b"{"), "header starts with '{'"
    header = json.loads(raw_header.decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    buffer = data[8 + length:]
    covered = 0
    for (begin, end), name in sorted((info["data_offsets"], name) for name, info in header.items()):
        assert begin == covered, f"{name}: gap or overlap at {begin}"
        covered = end
    assert covered == len(buffer), "the tensors end where the file ends"
    tensors = {}
    for name, info in header.items():
        dtype = TORCH_DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        if require_alignment:
            item = torch.empty(0, dtype=dtype).element_size()
            assert (8 + length + begin) % item == 0, f"{name} is aligned in the file"
        if begin == end:
            tensors[name] = torch.empty(info["shape"], dtype=dtype)
        else:
            flat = torch.frombuffer(bytearray(buffer[begin:end]), dtype=dtype)
            tensors[name] = flat.reshape(info["shape"])
    return tensors, metadata, list(header)


METADATA = {"config": json.dumps({"d_model": 8, "heads": 2, "positional": "interleaved"}),
            "vocabulary": json.dumps(["<pad>", "héllo", "世界", "😀"], ensure_ascii=False),
            "empty": ""}


def test_torch_file_loads_in_attn(tmp_path):
    torch.manual_seed(0)
    tensors = {"encoder.weight": torch.randn(3, 4), "encoder.half": torch.randn(5).half(),
               "encoder.bf16": torch.randn(2, 3).bfloat16(),
               "decoder.double": torch.randn(4).double(),
               "step": torch.tensor(123456789012, dtype=torch.int64),
               "counts": torch.tensor([-1, 0, 2**31 - 1], dtype=torch.int32),
               "mask": torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.uint8),
               "empty": torch.zeros(0, 3)}
    path = tmp_path / "from_torch.safetensors"
    reference_write(path, tensors, METADATA)
    with TensorFile(path) as f:
        assert f.names() == sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
        assert f.metadata == METADATA
        for name, tensor in tensors.items():
            assert f.dtype(name) == DTYPE_NAMES[tensor.dtype]
            assert f.shape(name) == tuple(tensor.shape)
            if tensor.is_floating_point():
                # attn's conversion to float32 gives torch's, bit for bit
                expected = tensor.float().numpy()
                assert np.array_equal(f.read_f32(name).view(np.uint32), expected.view(np.uint32))
            else:
                assert np.array_equal(f.read(name), tensor.numpy())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_16_bit_pattern_converts_as_torch_does(tmp_path, dtype):
    patterns = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    path = tmp_path / "patterns.safetensors"
    reference_write(path, {"all": patterns.reshape(256, 256)})
    with TensorFile(path) as f:
        ours = f.read_f32("all").reshape(-1)
    expected = patterns.float().numpy()
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(ours), nan)
    assert np.array_equal(ours[~nan].view(np.uint32), expected[~nan].view(np.uint32))


def test_attn_file_loads_in_torch(tmp_path):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.LayerNorm(7),
                                torch.nn.Linear(7, 3))
    state = {name: value.detach().numpy() for name, value in model.state_dict().items()}
    extras = {"optimizer.step": np.array(42, dtype=np.int64),
              "data.mask": np.array([True, False, True]),
              "data.lengths": np.array([3, 1, 2], dtype=np.int32)}
    path = tmp_path / "from_attn.safetensors"
    save(path, {**state, **extras}, METADATA)

    tensors, metadata, order = reference_read(path, require_alignment=True)
    assert order == list(state) + list(extras), "attn keeps the given order in the header"
    assert metadata == METADATA
    assert tensors["optimizer.step"].item() == 42
    assert tensors["data.mask"].tolist() == [True, False, True]
    assert tensors["data.lengths"].tolist() == [3, 1, 2]
    loaded = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.LayerNorm(7),
                                 torch.nn.Linear(7, 3))
    loaded.load_state_dict({name: tensors[name] for name in state})
    x = torch.randn(4, 5)
    assert torch.equal(loaded(x), model(x)), "the reloaded model computes the same bits"


def test_round_trip_through_both_sides(tmp_path):
    rng = np.random.default_rng(2)
    original = {"w": rng.standard_normal((6, 2)).astype(np.float32),
                "b": rng.standard_normal(2).astype(np.float64),
                "ids": rng.integers(0, 100, size=(2, 2, 2)).astype(np.int64)}
    first, second = tmp_path / "first.safetensors", tmp_path / "second.safetensors"
    save(first, original, {"epoch": "3"})
    tensors, metadata, _ = reference_read(first, require_alignment=True)
    reference_write(second, tensors, metadata)
    with TensorFile(second) as f:
        assert f.metadata == {"epoch": "3"}
        for name, array in original.items():
            back = f.read(name)
            assert back.dtype == array.dtype and np.array_equal(back, array)


def test_damaged_torch_file_is_rejected_with_its_name(tmp_path):
    path = tmp_path / "damaged.safetensors"
    reference_write(path, {"w": torch.randn(4, 4)})
    data = path.read_bytes()
    path.write_bytes(data[:-1])
    with pytest.raises(RuntimeError, match=r"damaged\.safetensors.*truncated"):
        TensorFile(path)
    path.write_bytes(data + b"\0")
    with pytest.raises(RuntimeError, match="extra data"):
        TensorFile(path)
    with pytest.raises(RuntimeError, match="No such file"):
        TensorFile(tmp_path / "missing.safetensors")
    reference_write(path, {"w": torch.randn(4, 4)})
    with TensorFile(path) as f, pytest.raises(RuntimeError, match="no tensor named 'v'"):
        f.read_f32("v")
