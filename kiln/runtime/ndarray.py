"""NDArray: an n-dimensional array in device memory, viewable from C as a ``DLTensor``.

Entry points (this module is ``kiln.nd``): :class:`NDArray`, :func:`array`, :func:`empty`,
:func:`from_dlpack`, :func:`is_ndarray`, and re-exported :func:`cpu`, :func:`device`,
:class:`Device`.

CPU memory is a NumPy ``uint8`` buffer with slack, offset so the data starts on a 64-byte
boundary (TVM's ``kAllocAlignment``); the NDArray keeps a NumPy view ``_np`` of it, so
``.numpy()`` is one copy and kernels get the address through ``.handle`` (a
``POINTER(DLTensor)``, built on first use and valid while the NDArray lives). A vector dtype
such as ``float32x4`` keeps its lanes as a trailing NumPy axis.

Example
-------
>>> import kiln
>>> a = kiln.nd.array(np.arange(6, dtype="float32").reshape(2, 3))
>>> a.shape, a.dtype, a.device, a.data_ptr % 64
((2, 3), 'float32', cpu(0), 0)
"""

from __future__ import annotations

import ctypes
import math
import operator
from typing import Any

import numpy as np

from kiln.runtime import dlpack
from kiln.runtime.device import Device, cpu, device
from kiln.runtime.dlpack import DLDataType, DLDevice, DLTensor
from kiln.runtime.dtype import BFLOAT16_NUMPY, DataType, DataTypeCode
from kiln.runtime.error import TVMError
from kiln.runtime.object import Object, register_object

__all__ = [
    "DLDevice",
    "DLDataType",
    "DLTensor",
    "NDArray",
    "array",
    "empty",
    "from_dlpack",
    "is_ndarray",
    "cpu",
    "device",
    "Device",
]

ALIGNMENT = 64  # bytes; TVM's kAllocAlignment
_MAX_NDIM = 64  # a DLTensor from C with more dimensions than this is treated as corrupt
_BOOL = DataType("bool")
_CPU0 = cpu(0)
_named_device = device  # empty()/array() take a parameter called ``device``, as in TVM


@register_object("runtime.NDArray")
class NDArray(Object):
    """An n-dimensional array with a shape, a dtype and a device (TVM's ``tvm.nd.NDArray``).

    Build one with :func:`array`, :func:`empty` or :func:`from_dlpack`.

    Example
    -------
    >>> x = empty((2, 2), "int32")
    >>> x.copyfrom([[1, 2], [3, 4]]).numpy().sum()
    np.int64(10)
    """

    _extra_slots = ("_np", "_dtype", "_device", "_dltensor", "_handle", "_c_arrays")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TVMError("build an NDArray with kiln.nd.array, kiln.nd.empty or kiln.nd.from_dlpack")

    @classmethod
    def _wrap(cls, view: np.ndarray, dtype: DataType, dev: Device) -> NDArray:
        """An NDArray over the NumPy ``view`` (shape, plus a lanes axis for vector dtypes)."""
        obj = cls.__new__(cls)
        setter = object.__setattr__
        setter(obj, "_np", view)
        setter(obj, "_dtype", dtype)
        setter(obj, "_device", dev)
        setter(obj, "_dltensor", None)
        setter(obj, "_handle", None)
        setter(obj, "_c_arrays", None)
        return obj

    # -- metadata ---------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        shape = self._np.shape
        return shape[:-1] if self._dtype.lanes > 1 else shape

    @property
    def dtype(self) -> str:
        return str(self._dtype)

    @property
    def device(self) -> Device:
        return self._device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self._np.nbytes

    @property
    def data_ptr(self) -> int:
        """Address of the first element."""
        return self._np.__array_interface__["data"][0]

    def is_contiguous(self) -> bool:
        """Whether elements are stored compactly in row-major order."""
        return bool(self._np.flags.c_contiguous)

    @property
    def handle(self) -> Any:
        """``ctypes.POINTER(DLTensor)`` describing this array; valid while it lives."""
        if self._handle is None:
            self._build_dltensor()
        return self._handle

    def _build_dltensor(self) -> None:
        shape = self.shape
        ndim = len(shape)
        shape_array = (ctypes.c_int64 * max(ndim, 1))(*shape)
        tensor = DLTensor()
        tensor.data = self.data_ptr
        tensor.device = DLDevice(self._device.device_type, self._device.device_id)
        tensor.ndim = ndim
        tensor.dtype = DLDataType(*self._dtype.as_tuple())
        tensor.shape = ctypes.cast(shape_array, ctypes.POINTER(ctypes.c_int64))
        strides = self._element_strides()
        strides_array = None
        if strides is not None:
            strides_array = (ctypes.c_int64 * max(ndim, 1))(*strides)
            tensor.strides = ctypes.cast(strides_array, ctypes.POINTER(ctypes.c_int64))
        tensor.byte_offset = 0
        object.__setattr__(self, "_c_arrays", (shape_array, strides_array))
        object.__setattr__(self, "_dltensor", tensor)
        object.__setattr__(self, "_handle", ctypes.pointer(tensor))

    def _element_strides(self) -> tuple[int, ...] | None:
        """Strides in elements for the DLTensor, or None when compact."""
        if self.is_contiguous():
            return None
        element_bytes = self._np.itemsize * self._dtype.lanes
        return tuple(s // element_bytes for s in self._np.strides[: self.ndim])

    # -- data -------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A NumPy copy of the data (vector lanes as a trailing axis)."""
        return self._np.copy()

    asnumpy = numpy

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        data = self._np if copy is False else self._np.copy()
        return data if dtype is None else data.astype(dtype, copy=False)

    def copyfrom(self, source: Any) -> NDArray:
        """Copy ``source`` (NDArray, NumPy array, list or scalar) into this array.

        Shapes must match exactly. NumPy/list data is converted only within its kind
        (int→float is fine, float→int is refused); an NDArray source must have this dtype.
        """
        if not self._np.flags.writeable:
            raise TVMError("copyfrom: this NDArray views read-only memory (a read-only DLPack "
                           "import); copy it first with .copyto(device)")
        if isinstance(source, NDArray):
            if not source._device.is_cpu:  # device memory: the device API copies
                return source.copyto(self)
            if source.shape != self.shape or source._dtype != self._dtype:
                raise TVMError(
                    f"copyfrom: source NDArray {source.shape}, {source.dtype} does not match "
                    f"destination {self.shape}, {self.dtype}"
                )
            np.copyto(self._np, source._np)
            return self
        data = np.asarray(source)
        if data.shape != self._np.shape:
            raise TVMError(
                f"copyfrom: array shape {data.shape} does not match the shape of the NDArray "
                f"{self._np.shape} ({self.dtype})"
            )
        np.copyto(self._np, _to_storage(data, self._dtype, "same_kind"), casting="no")
        return self

    def copyto(self, target: Device | NDArray) -> NDArray:
        """Copy into ``target``: an NDArray (shape/dtype must match) or a new array on a device."""
        if isinstance(target, NDArray):
            return target.copyfrom(self)
        if isinstance(target, Device):
            return empty(self.shape, self._dtype, target).copyfrom(self)
        raise TVMError(f"copyto: expected a Device or an NDArray, got {type(target).__name__}")

    def __setitem__(self, key: Any, value: Any) -> None:
        if not (isinstance(key, slice) and key == slice(None)):
            raise TVMError("NDArray only supports whole-array assignment: arr[:] = value")
        self.copyfrom(value)

    def _create_view(self, shape: Any, dtype: Any = None) -> NDArray:
        """A view of the same memory with another shape (and dtype); it must fit."""
        new_dtype = self._dtype if dtype is None else DataType(dtype)
        new_shape = _check_shape(shape)
        np_dtype = new_dtype.numpy_dtype
        np_shape = new_shape + ((new_dtype.lanes,) if new_dtype.lanes > 1 else ())
        needed = math.prod(np_shape) * np_dtype.itemsize
        if needed > self.nbytes:
            raise TVMError(
                f"_create_view: a {new_shape} {new_dtype} view needs {needed} bytes but the "
                f"NDArray has only {self.nbytes}"
            )
        if not self.is_contiguous():
            raise TVMError("_create_view needs a contiguous NDArray")
        raw = self._np.reshape(-1).view(np.uint8)[:needed]
        return NDArray._wrap(raw.view(np_dtype).reshape(np_shape), new_dtype, self._device)

    # -- DLPack -----------------------------------------------------------------------------
    def __dlpack__(
        self,
        stream: Any = None,
        max_version: Any = None,
        dl_device: Any = None,
        copy: bool | None = None,
    ) -> Any:
        """Export as a DLPack capsule sharing this memory (``copy=True`` copies).

        The capsule is DLPack 1.0 ``"dltensor_versioned"`` when the consumer passes
        ``max_version >= (1, 0)``, else legacy ``"dltensor"``. bool is exported as DLPack's
        ``kDLBool`` (8 bits), as NumPy and PyTorch expect.
        """
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            wanted = Device(*dl_device)
            raise BufferError(f"cannot export a {self.device} NDArray to {wanted} without a copy")
        source = self.copyto(self._device) if copy else self
        type_code, bits, lanes = source._dtype.as_tuple()
        if source._dtype == _BOOL:
            type_code, bits = dlpack.DLPACK_BOOL_CODE, 8
        return dlpack.make_capsule(
            source.data_ptr,
            self.__dlpack_device__(),
            (type_code, bits, lanes),
            source.shape,
            source._element_strides(),
            source,
            versioned=max_version is not None and tuple(max_version)[0] >= 1,
            read_only=not source._np.flags.writeable,
        )

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self._device.device_type, self._device.device_id)

    @classmethod
    def from_dltensor_ptr(cls, address: int, owner: Any = None) -> NDArray:
        """A non-owning NDArray over the ``DLTensor*`` at ``address`` (e.g. from C).

        ``owner`` (if given) is kept alive as long as the returned array's memory is in use.
        Handles ``strides == NULL`` (compact) and explicit strides.
        """
        return _view_of_dltensor(address, owner, read_only=False)

    # -- Python protocol --------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<kiln.nd.NDArray shape={self.shape}, {self.device}>\n{self.numpy()!r}"

    def __reduce__(self):
        return (array, (self.numpy(), self._device, self.dtype))


def is_ndarray(value: Any) -> bool:
    """Whether ``value`` is a kiln NDArray."""
    return isinstance(value, NDArray)


def _check_shape(shape: Any) -> tuple[int, ...]:
    try:
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        dims = tuple(operator.index(d) for d in dims)
    except TypeError:
        raise TVMError(f"a shape must be a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise TVMError(f"a shape cannot have negative dimensions: {dims}")
    return dims


def _aligned_buffer(nbytes: int) -> np.ndarray:
    """Zeroed uint8 memory of ``nbytes`` starting on an ALIGNMENT-byte boundary."""
    raw = np.zeros(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = (-raw.__array_interface__["data"][0]) % ALIGNMENT
    return raw[offset : offset + nbytes]


def empty(
    shape: Any, dtype: Any = "float32", device: Device = _CPU0, mem_scope: Any = None
) -> NDArray:
    """A new zero-filled NDArray of ``shape`` and ``dtype`` on ``device``.

    Example
    -------
    >>> empty((2, 3), "float32x4").numpy().shape
    (2, 3, 4)
    """
    dims = _check_shape(shape)
    data_type = DataType(dtype)
    dev = _named_device(device)
    if mem_scope not in (None, "global"):
        raise TVMError(f"memory scope {mem_scope!r} does not exist on {dev}; use 'global'")
    if not dev.is_cpu:  # device memory through the device's API (kiln.runtime.device_api)
        from kiln.runtime.device_api import device_empty

        return device_empty(dims, data_type, dev)
    dev._check_allocatable()
    np_dtype = data_type.numpy_dtype
    np_shape = dims + ((data_type.lanes,) if data_type.lanes > 1 else ())
    count = math.prod(np_shape)
    # At least one element, so an empty array still has an aligned address of its own.
    storage = _aligned_buffer(max(count, 1) * np_dtype.itemsize).view(np_dtype)
    return NDArray._wrap(storage[:count].reshape(np_shape), data_type, dev)


def array(obj: Any, device: Device = _CPU0, dtype: Any = None, mem_scope: Any = None) -> NDArray:
    """A new NDArray holding a copy of ``obj`` (NumPy array, list, scalar or NDArray).

    ``dtype`` converts the data (as ``numpy.astype``); by default it is ``obj``'s dtype.

    Example
    -------
    >>> array([[1, 2], [3, 4]], dtype="float32").numpy()
    array([[1., 2.],
           [3., 4.]], dtype=float32)
    """
    if isinstance(obj, NDArray):
        data, data_type = obj._np, obj._dtype
    else:
        data = np.asarray(obj)
        data_type = None
    if dtype is not None:
        data_type = DataType(dtype)
    elif data_type is None:
        data_type = DataType.from_numpy(data.dtype)
    shape = data.shape
    if data_type.lanes > 1:
        if not shape or shape[-1] != data_type.lanes:
            raise TVMError(
                f"data of shape {shape} cannot hold {data_type}: its last axis must have "
                f"{data_type.lanes} lanes"
            )
        shape = shape[:-1]
    if not _named_device(device).is_cpu:  # no zero fill: the copy overwrites it all
        from kiln.runtime.device_api import device_empty

        if mem_scope not in (None, "global"):
            raise TVMError(f"memory scope {mem_scope!r} does not exist on {device}; use "
                           "'global'")
        target = device_empty(shape, data_type, _named_device(device), zero=False)
        return target.copyfrom(array(data, dtype=data_type))
    result = empty(shape, data_type, device, mem_scope)
    np.copyto(result._np, _to_storage(data, data_type, "unsafe"), casting="no")
    return result


def _to_storage(data: np.ndarray, data_type: DataType, casting: str) -> np.ndarray:
    """``data`` converted to the NumPy storage dtype of ``data_type`` under ``casting``."""
    target = data_type.numpy_dtype
    if data.dtype == target:
        return data
    if (
        data_type.type_code == DataTypeCode.BFLOAT
        and BFLOAT16_NUMPY is None
        and data.dtype.kind in "fiub"
    ):
        return _float_to_bfloat16_bits(data)
    if not np.can_cast(data.dtype, target, casting):
        raise TVMError(
            f"cannot store {data.dtype} data in a {data_type} NDArray without losing its kind; "
            f"convert it first (e.g. .astype({str(target)!r}))"
        )
    return data.astype(target)


def _float_to_bfloat16_bits(data: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) of ``data``, rounded to nearest even; NaN stays NaN."""
    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    result = rounded.astype(np.uint16)
    result[np.isnan(data)] = 0x7FC0
    return result


def _dlpack_data_type(code: int, bits: int, lanes: int) -> DataType:
    if code == dlpack.DLPACK_BOOL_CODE and bits == 8 and lanes == 1:
        return _BOOL
    return DataType.from_fields(code, bits, lanes)


def _view_of_dltensor(address: int, owner: Any, read_only: bool) -> NDArray:
    """An NDArray over the memory a ``DLTensor*`` describes; ``owner`` keeps it alive."""
    if not address:
        raise TVMError("DLTensor pointer is NULL")
    tensor = DLTensor.from_address(address)
    ndim = tensor.ndim
    if not 0 <= ndim <= _MAX_NDIM:
        raise TVMError(f"DLTensor has an invalid ndim {ndim}")
    dev = Device(tensor.device.device_type, tensor.device.device_id)
    if not dev.is_cpu:
        raise TVMError(f"no device API for {dev} on this machine: cannot view its memory")
    data_type = _dlpack_data_type(tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
    if ndim and not tensor.shape:
        raise TVMError("DLTensor has ndim > 0 but a NULL shape")
    shape = tuple(tensor.shape[i] for i in range(ndim))
    if any(d < 0 for d in shape):
        raise TVMError(f"DLTensor has a negative dimension in shape {shape}")
    lanes = data_type.lanes
    np_dtype = data_type.numpy_dtype
    element_bytes = np_dtype.itemsize * lanes
    if tensor.strides:
        strides = tuple(tensor.strides[i] for i in range(ndim))
    else:
        strides = tuple(math.prod(shape[i + 1 :]) for i in range(ndim))
    np_shape = shape + ((lanes,) if lanes > 1 else ())
    if math.prod(shape) == 0:
        return NDArray._wrap(np.zeros(np_shape, dtype=np_dtype), data_type, dev)
    if not tensor.data:
        raise TVMError("DLTensor has elements but a NULL data pointer")
    # The element range the strides reach (they may be negative).
    low = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    high = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + 1
    start = tensor.data + tensor.byte_offset + low * element_bytes
    storage = (ctypes.c_uint8 * ((high - low) * element_bytes)).from_address(start)
    storage._kiln_owner = owner  # the NumPy view's base chain keeps the owner alive
    flat = np.frombuffer(storage, dtype=np.uint8).view(np_dtype)
    np_strides = tuple(s * element_bytes for s in strides)
    if lanes > 1:
        np_strides += (np_dtype.itemsize,)
    view = np.lib.stride_tricks.as_strided(
        flat[-low * lanes :], shape=np_shape, strides=np_strides, writeable=not read_only
    )
    return NDArray._wrap(view, data_type, dev)


def from_dlpack(obj: Any) -> NDArray:
    """A zero-copy NDArray over a DLPack tensor (anything with ``__dlpack__``, or a capsule).

    The capsule is renamed ``"used_dltensor"``; the producer's deleter runs when the last
    view of the memory is gone. Only compact (row-major contiguous) CPU tensors are accepted.

    Example
    -------
    >>> x = np.arange(4, dtype="float32")
    >>> y = from_dlpack(x)
    >>> x[0] = 7; float(y.numpy()[0])
    7.0
    """
    if hasattr(obj, "__dlpack__"):
        capsule = obj.__dlpack__()
    elif type(obj).__name__ == "PyCapsule":
        capsule = obj
    else:
        raise TVMError(
            f"from_dlpack needs an object with __dlpack__ or a DLPack capsule, "
            f"got {type(obj).__name__}"
        )
    address, owner, read_only = dlpack.consume_capsule(capsule)
    result = _view_of_dltensor(address, owner, read_only)
    if not result.is_contiguous():
        raise TVMError(
            f"from_dlpack needs a contiguous tensor, got strides for shape {result.shape}; "
            "make it contiguous first (numpy.ascontiguousarray / tensor.contiguous())"
        )
    return result
