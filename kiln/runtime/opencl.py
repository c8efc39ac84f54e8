"""OpenCL in the runtime: device memory for ``opencl(n)`` and the ``"opencl"`` kernel module.

Entry points: :class:`OpenCLDeviceAPI` (registered as the device API of device type 4),
:func:`workspace` (the OpenCL context and queue of a device), :class:`OpenCLModule` (type key
``"opencl"``: OpenCL C source + kernel launch records, serializable into a module blob) and
its loader ``runtime.module.loadbinary_opencl``.

Needs only ``pyopencl`` (and an OpenCL driver; ``pocl-binary-distribution`` gives one that
runs on the CPU). Device ``opencl(n)`` is the ``n``-th device of the first platform. Buffers
are ``cl_mem`` handles; :class:`~kiln.runtime.device_api.DeviceNDArray` keeps them.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from kiln.runtime.device import Device
from kiln.runtime.device_api import DeviceAPI, register_device_api
from kiln.runtime.error import TVMError

try:
    import pyopencl as cl
except ImportError as _err:  # the device API registry turns this into a clear TVMError
    raise ImportError(f"OpenCL needs pyopencl (pip install pyopencl "
                      f"pocl-binary-distribution): {_err}") from None

__all__ = ["OpenCLDeviceAPI", "workspace", "OPENCL_DEVICE_TYPE"]

OPENCL_DEVICE_TYPE = 4


class _Workspace:
    """The context and in-order queue of one OpenCL device."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context)


_workspaces: dict[int, _Workspace] = {}
_lock = threading.Lock()


def workspace(device_id: int) -> _Workspace:
    """The workspace of ``opencl(device_id)`` (created on first use)."""
    with _lock:
        if device_id not in _workspaces:
            try:
                devices = [d for p in cl.get_platforms() for d in p.get_devices()]
            except cl.Error as err:
                raise TVMError(f"OpenCL is not usable here: {err}") from None
            if not 0 <= device_id < len(devices):
                raise TVMError(f"opencl({device_id}) does not exist: this machine has "
                               f"{len(devices)} OpenCL device(s)")
            _workspaces[device_id] = _Workspace(devices[device_id])
        return _workspaces[device_id]


class OpenCLDeviceAPI(DeviceAPI):
    """cl_mem buffers and copies through an in-order queue (copies to the host block)."""

    def __init__(self) -> None:
        self.buffers: dict[int, Any] = {}  # handle -> cl.Buffer (keeps it alive)

    def buffer(self, handle: int) -> Any:
        """The ``cl.Buffer`` behind a handle from :meth:`alloc`."""
        try:
            return self.buffers[handle]
        except KeyError:
            raise TVMError(f"0x{handle:x} is not an OpenCL buffer allocated by kiln") from None

    def alloc(self, device: Device, nbytes: int) -> int:
        ws = workspace(device.device_id)
        buf = cl.Buffer(ws.context, cl.mem_flags.READ_WRITE, size=nbytes)
        self.buffers[buf.int_ptr] = buf
        return buf.int_ptr

    def free(self, device: Device, handle: int) -> None:
        self.buffers.pop(handle, None)

    def copy_from_host(self, device: Device, handle: int, offset: int,
                       host: np.ndarray) -> None:
        cl.enqueue_copy(workspace(device.device_id).queue, self.buffer(handle),
                        np.ascontiguousarray(host), dst_offset=offset, is_blocking=True)

    def copy_to_host(self, device: Device, handle: int, offset: int, host: np.ndarray) -> None:
        cl.enqueue_copy(workspace(device.device_id).queue, host, self.buffer(handle),
                        src_offset=offset, is_blocking=True)

    def copy_within(self, device: Device, src: int, src_offset: int, dst: int,
                    dst_offset: int, nbytes: int) -> None:
        if nbytes:
            cl.enqueue_copy(workspace(device.device_id).queue, self.buffer(dst),
                            self.buffer(src), byte_count=nbytes, src_offset=src_offset,
                            dst_offset=dst_offset)

    def sync(self, device: Device) -> None:
        workspace(device.device_id).queue.finish()


DEVICE_API = OpenCLDeviceAPI()
register_device_api(OPENCL_DEVICE_TYPE, DEVICE_API)
