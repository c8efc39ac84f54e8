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

import ctypes
import threading
from typing import Any

import numpy as np

from kiln.runtime.binary import BinaryReader, BinaryWriter
from kiln.runtime.device import Device
from kiln.runtime.device_api import DeviceAPI, register_device_api
from kiln.runtime.dlpack import DLTensor
from kiln.runtime.error import TVMError
from kiln.runtime.module import Module, ModuleProperty
from kiln.runtime.packed_func import KERNEL_PROTOTYPE, PackedFunc, set_last_error
from kiln.runtime.registry import register_func

try:
    import pyopencl as cl
except ImportError as _err:  # the device API registry turns this into a clear TVMError
    raise ImportError(f"OpenCL needs pyopencl (pip install pyopencl "
                      f"pocl-binary-distribution): {_err}") from None

__all__ = ["OpenCLDeviceAPI", "workspace", "OPENCL_DEVICE_TYPE", "OpenCLModule",
           "load_opencl_module"]

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


# ---- kernels ---------------------------------------------------------------------------------


class OpenCLModule(Module):
    """OpenCL C kernels as a Module (TVM's ``"opencl"`` module).

    Parameters
    ----------
    source : str
        The OpenCL C program.
    kernels : sequence of (name, number of tensor arguments, global size, local size)
        How to launch each kernel: it is called with ``DLTensor*`` on an OpenCL device and
        receives each as (buffer, element offset); the sizes are tuples per NDRange
        dimension (an empty local size lets the driver choose).

    Each function is a packed C entry point (a ctypes trampoline), so executors call it like
    any compiled kernel. The program is built for a device the first time a kernel runs
    there; launches are queued in order on the device's queue (copies to the host wait).

    Example
    -------
    >>> src = ("__kernel void twice(__global float* a, ulong at) "
    ...        "{ a[at + get_global_id(0)] *= 2.0f; }")
    >>> m = OpenCLModule(src, [("twice", 1, (4,), ())])
    >>> x = kiln.nd.array(np.ones(4, "float32"), kiln.opencl(0))  # doctest: +SKIP
    >>> m["twice"](x); x.numpy()                                  # doctest: +SKIP
    array([2., 2., 2., 2.], dtype=float32)
    """

    type_key = "opencl"
    _property_mask = ModuleProperty.BINARY_SERIALIZABLE | ModuleProperty.RUNNABLE

    def __init__(self, source: str, kernels: Any) -> None:
        super().__init__()
        self.source = source
        self.kernels = {str(name): (int(num_args), tuple(int(g) for g in global_size),
                                    tuple(int(n) for n in local_size))
                        for name, num_args, global_size, local_size in kernels}
        if not self.kernels:
            raise TVMError("an OpenCL module needs at least one kernel")
        self._programs: dict[int, Any] = {}
        self._kernel_objects: dict[tuple[int, str], Any] = {}  # (device id, name) -> cl.Kernel
        self._functions: dict[str, PackedFunc] = {}

    def get_source(self, fmt: str = "") -> str:
        return self.source

    def _program(self, device_id: int) -> Any:
        if device_id not in self._programs:
            ws = workspace(device_id)
            try:
                self._programs[device_id] = cl.Program(ws.context, self.source).build()
            except cl.Error as err:
                raise TVMError(f"OpenCL program does not build for opencl({device_id}): "
                               f"{err}") from None
        return self._programs[device_id]

    def _kernel(self, device_id: int, name: str) -> Any:
        key = (device_id, name)
        if key not in self._kernel_objects:
            self._kernel_objects[key] = cl.Kernel(self._program(device_id), name)
        return self._kernel_objects[key]

    def _get_function(self, name: str) -> PackedFunc | None:
        if name == self.entry_name:  # tvm.build(..., "opencl")(a, b, c) runs the first kernel
            name = next(iter(self.kernels))
        if name not in self.kernels:
            return None
        if name not in self._functions:
            trampoline = KERNEL_PROTOTYPE(self._launcher(name))
            self._functions[name] = PackedFunc.from_c_address(
                ctypes.cast(trampoline, ctypes.c_void_p).value, owner=(self, trampoline),
                name=name)
        return self._functions[name]

    def _launcher(self, name: str) -> Any:
        num_args, global_size, local_size = self.kernels[name]

        def launch(args: Any, codes: Any, count: int, ret: Any, ret_code: Any,
                   resource: Any) -> int:
            try:
                if count != num_args:
                    raise TVMError(f"expects {num_args} tensor arguments, got {count}")
                values = ctypes.cast(args, ctypes.POINTER(ctypes.c_void_p))
                tensors = [ctypes.cast(values[i], ctypes.POINTER(DLTensor)).contents
                           for i in range(count)]
                device_id = _device_id_of(tensors, name)
                kernel = self._kernel(device_id, name)
                kernel.set_args(*(arg for t in tensors for arg in _kernel_args(t)))
                cl.enqueue_nd_range_kernel(workspace(device_id).queue, kernel,
                                           global_size, local_size or None)
            except Exception as err:  # the caller reads the message as the last error
                set_last_error(f"OpenCL kernel {name}: {err}")
                return -1
            return 0

        return launch

    def save_to_binary(self) -> bytes:
        writer = BinaryWriter()
        writer.string(self.source)
        writer.u64(len(self.kernels))
        for name, (num_args, global_size, local_size) in self.kernels.items():
            writer.string(name)
            writer.u64(num_args)
            writer.u64_vector(global_size)
            writer.u64_vector(local_size)
        return writer.getvalue()


def _device_id_of(tensors: list[Any], name: str) -> int:
    ids = set()
    for i, tensor in enumerate(tensors):
        if tensor.device.device_type != OPENCL_DEVICE_TYPE:
            where = Device(tensor.device.device_type, tensor.device.device_id)
            raise TVMError(f"argument {i} is on {where}, not on an OpenCL device")
        ids.add(tensor.device.device_id)
    if len(ids) > 1:
        raise TVMError(f"arguments are on several OpenCL devices {sorted(ids)}")
    return ids.pop() if ids else 0


def _kernel_args(tensor: Any) -> tuple[Any, np.uint64]:
    """A tensor as the kernel's (buffer, element offset) argument pair."""
    itemsize = max(tensor.dtype.bits * tensor.dtype.lanes // 8, 1)
    if tensor.byte_offset % itemsize:
        raise TVMError(f"byte offset {tensor.byte_offset} is not a multiple of the element "
                       f"size {itemsize}")
    return DEVICE_API.buffer(tensor.data), np.uint64(tensor.byte_offset // itemsize)


def load_opencl_module(data: bytes) -> OpenCLModule:
    """An :class:`OpenCLModule` from :meth:`OpenCLModule.save_to_binary` bytes (checked)."""
    reader = BinaryReader(data, what="OpenCL module blob")
    source = reader.string("OpenCL source")
    kernels = []
    for i in range(reader.count(32, "kernel count")):
        kernels.append((reader.string(f"kernel {i} name"), reader.u64(f"kernel {i} arity"),
                        reader.u64_vector(f"kernel {i} global size"),
                        reader.u64_vector(f"kernel {i} local size")))
    reader.expect_end()
    return OpenCLModule(source, kernels)


register_func("runtime.module.loadbinary_opencl", load_opencl_module, override=True)
