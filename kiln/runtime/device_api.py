"""Device memory for device types other than the CPU: a registry of device APIs and the
NDArray kind whose data lives in such memory.

Entry points: :class:`DeviceAPI` (what a device type provides), :func:`register_device_api`,
:func:`get_device_api`, :func:`has_device_api`, :class:`DeviceNDArray`, :func:`device_empty`.

CPU arrays stay what they are (NumPy memory, :mod:`kiln.runtime.ndarray`); nothing here runs
on the CPU path. A device API allocates and frees device buffers (opaque integer handles, e.g.
an OpenCL ``cl_mem``) and copies host↔device and device↔device. A :class:`DeviceNDArray`
holds a buffer, a byte offset, a shape and a dtype; its ``DLTensor`` carries the handle in
``data`` and the offset in ``byte_offset`` (TVM's convention for opaque device pointers), so
device kernels receive it unchanged. ``numpy()``, ``copyfrom`` and ``copyto`` go through the
device API.

Device APIs register themselves when their module is imported; :data:`_PROVIDERS` names the
module for each device type, imported on first use (OpenCL: :mod:`kiln.runtime.opencl`).

Example
-------
>>> import kiln
>>> has_device_api(kiln.cpu(0).device_type)   # the CPU needs none
False
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import numpy as np

from kiln.runtime.device import Device
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.runtime.ndarray import NDArray

__all__ = ["DeviceAPI", "register_device_api", "get_device_api", "has_device_api",
           "DeviceBuffer", "DeviceNDArray", "device_empty"]

# device type -> module whose import registers that type's device API
_PROVIDERS = {4: "kiln.runtime.opencl"}
_APIS: dict[int, DeviceAPI] = {}


class DeviceAPI:
    """What a device type provides (TVM's ``DeviceAPI``); handles are opaque integers."""

    def alloc(self, device: Device, nbytes: int) -> int:
        """A new buffer of ``nbytes`` bytes on ``device``."""
        raise NotImplementedError

    def free(self, device: Device, handle: int) -> None:
        """Release a buffer from :meth:`alloc`."""
        raise NotImplementedError

    def copy_from_host(self, device: Device, handle: int, offset: int,
                       host: np.ndarray) -> None:
        """Copy the bytes of the contiguous ``host`` array to ``handle`` + ``offset``."""
        raise NotImplementedError

    def copy_to_host(self, device: Device, handle: int, offset: int, host: np.ndarray) -> None:
        """Fill the contiguous ``host`` array from ``handle`` + ``offset``."""
        raise NotImplementedError

    def copy_within(self, device: Device, src: int, src_offset: int, dst: int,
                    dst_offset: int, nbytes: int) -> None:
        """Copy ``nbytes`` between two buffers of ``device``."""
        raise NotImplementedError

    def sync(self, device: Device) -> None:
        """Wait until all queued work on ``device`` is done."""


def register_device_api(device_type: int, api: DeviceAPI) -> None:
    """Make ``api`` the memory provider of ``device_type``."""
    _APIS[int(device_type)] = api


def get_device_api(device_type: int, device: Device | None = None) -> DeviceAPI:
    """The device API of ``device_type`` (importing its provider); a clear error naming
    ``device`` (default: id 0 of the type) if there is none."""
    api = _APIS.get(device_type)
    where = device if device is not None else Device(device_type, 0)
    if api is None and device_type in _PROVIDERS:
        try:
            importlib.import_module(_PROVIDERS[device_type])
        except ImportError as err:
            raise TVMError(f"no device API for {where}: {err}") from None
        api = _APIS.get(device_type)
    if api is None:
        raise TVMError(f"no device API for {where} on this machine")
    return api


def has_device_api(device_type: int) -> bool:
    """Whether memory of ``device_type`` can be allocated here (through a device API)."""
    try:
        get_device_api(device_type)
    except TVMError:
        return False
    return True


class DeviceBuffer:
    """One device allocation; freed when the last array using it goes away.

    ``handle`` adopts memory allocated elsewhere (e.g. an array a remote function returned),
    which the API's ``free`` then releases.
    """

    __slots__ = ("api", "device", "handle", "nbytes")

    def __init__(self, api: DeviceAPI, device: Device, nbytes: int,
                 handle: int | None = None) -> None:
        self.api, self.device, self.nbytes = api, device, nbytes
        self.handle = api.alloc(device, max(nbytes, 1)) if handle is None else handle

    def __del__(self) -> None:
        try:
            self.api.free(self.device, self.handle)
        except Exception:  # interpreter shutdown: the device may already be gone
            pass


class DeviceNDArray(NDArray):
    """An NDArray in device memory (a buffer of a :class:`DeviceAPI`, at a byte offset).

    ``_np`` is a zero-stride NumPy stand-in carrying only the shape and dtype; the data is
    reached through ``numpy()``/``copyfrom``/``copyto``.
    """

    _extra_slots = ("_buffer", "_offset")

    @classmethod
    def on(cls, buffer: DeviceBuffer, offset: int, shape: tuple[int, ...],
            dtype: DataType) -> DeviceNDArray:
        np_dtype = dtype.numpy_dtype
        np_shape = shape + ((dtype.lanes,) if dtype.lanes > 1 else ())
        meta = np.lib.stride_tricks.as_strided(np.zeros(1, np_dtype), np_shape,
                                               (0,) * len(np_shape), writeable=False)
        obj = cls._wrap(meta, dtype, buffer.device)
        object.__setattr__(obj, "_buffer", buffer)
        object.__setattr__(obj, "_offset", offset)
        return obj

    @property
    def data_ptr(self) -> int:
        """The device handle (a DLTensor's ``data``; the offset is its ``byte_offset``)."""
        return self._buffer.handle

    def is_contiguous(self) -> bool:
        return True

    def _build_dltensor(self) -> None:
        super()._build_dltensor()
        self._dltensor.byte_offset = self._offset

    def _element_strides(self) -> tuple[int, ...] | None:
        return None

    def numpy(self) -> np.ndarray:
        host = np.empty(self._np.shape, self._np.dtype)
        self._buffer.api.copy_to_host(self.device, self._buffer.handle, self._offset, host)
        return host

    asnumpy = numpy

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        data = self.numpy()
        return data if dtype is None else data.astype(dtype, copy=False)

    def copyfrom(self, source: Any) -> NDArray:
        """Copy ``source`` (an NDArray on any device, NumPy data) into this device array."""
        if isinstance(source, NDArray):
            if source.shape != self.shape or source.dtype != self.dtype:
                raise TVMError(f"copyfrom: source NDArray {source.shape}, {source.dtype} does "
                               f"not match destination {self.shape}, {self.dtype}")
            if isinstance(source, DeviceNDArray) and source.device == self.device:
                self._buffer.api.copy_within(self.device, source._buffer.handle,
                                             source._offset, self._buffer.handle,
                                             self._offset, self.nbytes)
                return self
            if source.device.is_cpu and source.is_contiguous():  # no staging copy
                self._buffer.api.copy_from_host(self.device, self._buffer.handle,
                                                self._offset, source._np)
                return self
            source = source.numpy()
        from kiln.runtime.ndarray import empty

        staged = empty(self.shape, self.dtype).copyfrom(source)  # the CPU conversion rules
        self._buffer.api.copy_from_host(self.device, self._buffer.handle, self._offset,
                                        staged._np)
        return self

    def copyto(self, target: Device | NDArray) -> NDArray:
        """Copy into ``target``: an NDArray, or a new array on a device."""
        if isinstance(target, NDArray) and not isinstance(target, DeviceNDArray):
            if target.shape != self.shape or target.dtype != self.dtype:
                raise TVMError(f"copyto: destination {target.shape}, {target.dtype} does not "
                               f"match {self.shape}, {self.dtype}")
            if target.is_contiguous():
                self._buffer.api.copy_to_host(self.device, self._buffer.handle,
                                              self._offset, target._np)
                return target
            return target.copyfrom(self.numpy())
        return super().copyto(target)

    def _create_view(self, shape: Any, dtype: Any = None) -> NDArray:
        new_dtype = self._dtype if dtype is None else DataType(dtype)
        new_shape = tuple(int(d) for d in shape)
        needed = math.prod(new_shape) * new_dtype.numpy_dtype.itemsize * new_dtype.lanes
        if needed > self.nbytes:
            raise TVMError(f"_create_view: a {new_shape} {new_dtype} view needs {needed} "
                           f"bytes but the NDArray has only {self.nbytes}")
        return DeviceNDArray.on(self._buffer, self._offset, new_shape, new_dtype)

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        raise BufferError(f"a {self.device} NDArray cannot be shared through DLPack here; "
                          "copy it to the CPU first (.copyto(kiln.cpu(0)))")

    def __repr__(self) -> str:
        return f"<kiln.nd.NDArray shape={self.shape}, {self.device}>\n{self.numpy()!r}"


def device_empty(shape: tuple[int, ...], dtype: DataType, device: Device,
                 zero: bool = True) -> DeviceNDArray:
    """A new array of ``shape``/``dtype`` in the memory of ``device`` (zero-filled unless
    ``zero`` is False, for callers that overwrite it at once)."""
    api = get_device_api(device.device_type, device)
    nbytes = math.prod(shape) * dtype.numpy_dtype.itemsize * dtype.lanes
    result = DeviceNDArray.on(DeviceBuffer(api, device, nbytes), 0, tuple(shape), dtype)
    if nbytes and zero:
        api.copy_from_host(device, result._buffer.handle, 0, np.zeros(nbytes, np.uint8))
    return result
