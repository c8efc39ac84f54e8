"""NDArray blobs and params blobs, byte-compatible with TVM's ``SaveDLTensor``/``SaveParams``.

Entry points: :func:`save_ndarray`, :func:`load_ndarray`, :func:`save_param_dict`,
:func:`load_param_dict`, :func:`save_param_dict_to_file`, :func:`load_param_dict_from_file`.

NDArray blob (little-endian)::

    u64 magic 0xDD5E40F096B4A13F | u64 reserved = 0 | i32 device_type = 1 (CPU), i32 device_id
    | i32 ndim | u8 code, u8 bits, u16 lanes | i64 shape[ndim] | i64 data_byte_size | data

``data_byte_size`` is ``((bits + 7) // 8) * prod(shape)``: TVM ignores lanes there, and we
follow it byte for byte (so for a vector dtype only that many leading bytes are stored).

Params blob::

    u64 magic 0xF7E58D4F05049CB7 | u64 reserved = 0 | vector<string> names | u64 count
    | count NDArray blobs

The loaders check every length against the bytes present (via
:class:`~kiln.runtime.binary.BinaryReader`) and raise :class:`~kiln.runtime.error.TVMError`
for a truncated or tampered blob.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from kiln.runtime.binary import BinaryReader, BinaryWriter
from kiln.runtime.device import DeviceType
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.runtime.ndarray import NDArray, array, empty

__all__ = [
    "NDARRAY_MAGIC",
    "NDARRAY_LIST_MAGIC",
    "save_ndarray",
    "write_ndarray",
    "load_ndarray",
    "save_param_dict",
    "load_param_dict",
    "save_param_dict_to_file",
    "load_param_dict_from_file",
]

NDARRAY_MAGIC = 0xDD5E40F096B4A13F  # kTVMNDArrayMagic
NDARRAY_LIST_MAGIC = 0xF7E58D4F05049CB7  # kTVMNDArrayListMagic
_MAX_NDIM = 64
_MAX_VECTOR_BYTES = 1 << 32


def _stored_byte_size(data_type: DataType, shape: tuple[int, ...]) -> int:
    """TVM's ``data_byte_size``: ``(bits + 7) // 8`` per element, lanes ignored."""
    return (data_type.bits + 7) // 8 * int(np.prod(shape, dtype=object))


def write_ndarray(writer: BinaryWriter, arr: NDArray | np.ndarray) -> None:
    """Append the NDArray blob of ``arr`` to ``writer``."""
    if not isinstance(arr, NDArray):
        arr = array(arr)
    data_type = DataType(arr.dtype)
    shape = arr.shape
    writer.u64(NDARRAY_MAGIC)
    writer.u64(0)
    writer.device(DeviceType.kDLCPU, 0)  # TVM always saves as a CPU tensor
    writer.i32(len(shape))
    writer.dtype(*data_type.as_tuple())
    for dim in shape:
        writer.i64(dim)
    size = _stored_byte_size(data_type, shape)
    writer.i64(size)
    writer.raw(np.ascontiguousarray(arr._np).view(np.uint8).reshape(-1)[:size].tobytes())


def save_ndarray(arr: NDArray | np.ndarray) -> bytes:
    """The TVM NDArray blob of ``arr``.

    Example
    -------
    >>> blob = save_ndarray(np.zeros((2,), "float32"))
    >>> len(blob), blob[:8].hex()
    (56, '3fa1b496f0405edd')
    """
    writer = BinaryWriter()
    write_ndarray(writer, arr)
    return writer.getvalue()


def load_ndarray(reader: BinaryReader) -> NDArray:
    """Read one NDArray blob at the reader's position (a CPU NDArray)."""
    magic = reader.u64("NDArray magic")
    if magic != NDARRAY_MAGIC:
        raise TVMError(
            f"{reader.what} is corrupt: bad NDArray magic {magic:#018x}, "
            f"expected {NDARRAY_MAGIC:#018x}"
        )
    reader.u64("NDArray reserved field")
    device_type, _ = reader.device("NDArray device")
    if device_type != DeviceType.kDLCPU:
        raise TVMError(
            f"{reader.what} is corrupt: NDArray saved with device type {device_type}, "
            "only CPU (1) tensors can be stored"
        )
    ndim = reader.i32("NDArray ndim")
    if not 0 <= ndim <= _MAX_NDIM:
        raise TVMError(f"{reader.what} is corrupt: NDArray ndim {ndim} is out of range")
    code, bits, lanes = reader.dtype("NDArray dtype")
    try:
        data_type = DataType.from_fields(code, bits, lanes)
        data_type.numpy_dtype  # noqa: B018 - raises for types arrays cannot hold
    except TVMError as err:
        raise TVMError(f"{reader.what} is corrupt: {err}") from None
    shape = tuple(reader.i64(f"NDArray shape[{i}]") for i in range(ndim))
    if any(d < 0 for d in shape):
        raise TVMError(f"{reader.what} is corrupt: negative dimension in NDArray shape {shape}")
    # NumPy refuses shapes whose nonzero dimensions multiply past the address space, even
    # when another dimension is 0 (and the blob therefore holds no data).
    extent = max(1, (data_type.bits * data_type.lanes + 7) // 8)
    for dim in shape:
        extent *= max(dim, 1)
    if extent >= 1 << 63:
        raise TVMError(f"{reader.what} is corrupt: NDArray shape {shape} of {data_type} "
                       "is too large for any array")
    size = reader.i64("NDArray data_byte_size")
    expected = _stored_byte_size(data_type, shape)
    if size != expected:
        raise TVMError(
            f"{reader.what} is corrupt: NDArray data_byte_size {size} does not match "
            f"{expected} for shape {shape} of {data_type}"
        )
    data = reader.raw(size, "NDArray data")
    if data_type.lanes > 1 and size * data_type.lanes > _MAX_VECTOR_BYTES:
        # The blob stores only size bytes but the array holds lanes times more: refuse a
        # tampered lane count that would allocate far beyond the file.
        raise TVMError(f"{reader.what} is corrupt: {data_type} array of shape {shape} is too big")
    result = empty(shape, data_type)
    result._np.reshape(-1).view(np.uint8)[:size] = np.frombuffer(data, dtype=np.uint8)
    return result


def save_param_dict(params: dict[str, Any]) -> bytes:
    """The TVM params blob of ``params`` (name -> NDArray or NumPy array), in dict order.

    Example
    -------
    >>> blob = save_param_dict({"w": np.ones((2, 2), "float32")})
    >>> load_param_dict(blob)["w"].numpy().sum()
    np.float32(4.0)
    """
    if not isinstance(params, dict):
        raise TVMError(f"save_param_dict expects a dict of arrays, got {type(params).__name__}")
    writer = BinaryWriter()
    writer.u64(NDARRAY_LIST_MAGIC)
    writer.u64(0)
    writer.string_vector(str(name) for name in params)
    writer.u64(len(params))
    for value in params.values():
        write_ndarray(writer, value)
    return writer.getvalue()


def load_param_dict(data: bytes | bytearray | memoryview) -> dict[str, NDArray]:
    """Parse a TVM params blob into ``{name: NDArray}``; TVMError if truncated or tampered."""
    reader = BinaryReader(data, what="params blob")
    magic = reader.u64("params magic")
    if magic != NDARRAY_LIST_MAGIC:
        raise TVMError(
            f"params blob is corrupt: bad magic {magic:#018x}, expected {NDARRAY_LIST_MAGIC:#018x}"
        )
    reader.u64("params reserved field")
    names = reader.string_vector("param names")
    count = reader.u64("param count")
    if count != len(names):
        raise TVMError(f"params blob is corrupt: {len(names)} names but {count} arrays")
    params: dict[str, NDArray] = {}
    for name in names:
        if name in params:
            raise TVMError(f"params blob is corrupt: parameter {name!r} appears twice")
        params[name] = load_ndarray(reader)
    reader.expect_end()
    return params


def save_param_dict_to_file(params: dict[str, Any], path: str | os.PathLike) -> None:
    """Write the params blob of ``params`` to ``path``."""
    with open(path, "wb") as f:
        f.write(save_param_dict(params))


def load_param_dict_from_file(path: str | os.PathLike) -> dict[str, NDArray]:
    """Read a params blob file written by kiln or TVM."""
    with open(path, "rb") as f:
        return load_param_dict(f.read())
