"""Devices: DLPack's ``DLDevice`` (device type code, device id) with TVM's names.

Entry points: :class:`Device`, :class:`DeviceType`, :func:`device`, :func:`cpu`, :func:`cuda`,
:func:`opencl`, :func:`vulkan`, :func:`metal`, :func:`ext_dev`.

Only CPU memory exists on this machine: any ``cpu(k)`` is host memory (several CPU ids model
heterogeneous execution); other device types can be named, printed and compared, but
allocating on them raises :class:`~kiln.runtime.error.TVMError`. RPC devices follow TVM:
``device_type = real_type + 128 * (session_index + 1)``.
"""

from __future__ import annotations

import operator
from enum import IntEnum
from typing import Any

from kiln.runtime.error import TVMError

__all__ = [
    "DeviceType",
    "Device",
    "RPC_SESS_MASK",
    "device",
    "cpu",
    "cuda",
    "opencl",
    "vulkan",
    "metal",
    "ext_dev",
]

RPC_SESS_MASK = 128


class DeviceType(IntEnum):
    """DLPack device type codes (``DLDeviceType``) plus TVM's ``kDLMicroDev``."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLExtDev = 12
    kDLHexagon = 16
    kDLMicroDev = 35


class Device:
    """A device: ``device_type`` (a :class:`DeviceType` code) and ``device_id``.

    Example
    -------
    >>> dev = Device(1, 0)
    >>> dev, dev == cpu(0), dev.exist, Device(4, 1)
    (cpu(0), True, True, opencl(1))
    """

    __slots__ = ("device_type", "device_id")

    STR2MASK = {
        "cpu": 1,
        "llvm": 1,
        "c": 1,
        "stackvm": 1,
        "cuda": 2,
        "gpu": 2,
        "nvptx": 2,
        "cuda_host": 3,
        "opencl": 4,
        "cl": 4,
        "vulkan": 7,
        "metal": 8,
        "vpi": 9,
        "rocm": 10,
        "ext_dev": 12,
        "hexagon": 16,
        "microdev": 35,
    }
    MASK2STR = {
        1: "cpu",
        2: "cuda",
        3: "cuda_host",
        4: "opencl",
        7: "vulkan",
        8: "metal",
        9: "vpi",
        10: "rocm",
        12: "ext_dev",
        16: "hexagon",
        35: "microdev",
    }

    def __init__(self, device_type: int, device_id: int = 0) -> None:
        object.__setattr__(self, "device_type", int(device_type))
        object.__setattr__(self, "device_id", int(device_id))

    @property
    def exist(self) -> bool:
        """Whether memory on this device can be allocated here (the CPU, or a device type
        with a device API in :mod:`kiln.runtime.device_api`, e.g. OpenCL with pyopencl)."""
        from kiln.runtime.device_api import has_device_api

        return self.device_type == DeviceType.kDLCPU or has_device_api(self.device_type)

    @property
    def is_cpu(self) -> bool:
        return self.device_type == DeviceType.kDLCPU

    def sync(self) -> None:
        """Wait for the device to finish its work (CPU work is synchronous; a device with a
        device API, e.g. OpenCL, drains its queue)."""
        if not self.is_cpu:
            from kiln.runtime.device_api import get_device_api, has_device_api

            if has_device_api(self.device_type):
                get_device_api(self.device_type, self).sync(self)

    def _check_allocatable(self) -> None:
        """Raise unless host memory may stand for this device's memory (CPU devices)."""
        if not self.is_cpu:
            from kiln.runtime.device_api import has_device_api

            if has_device_api(self.device_type):
                raise TVMError(f"{self} memory lives behind its device API; this allocator "
                               "hands out host memory only (the Relay VM allocates on CPU "
                               "devices; NDArrays and the graph executor use the device API)")
            raise TVMError(f"no device API for {self} on this machine")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Device is immutable")

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Device):
            return NotImplemented
        return self.device_type == other.device_type and self.device_id == other.device_id

    def __hash__(self) -> int:
        return hash((self.device_type, self.device_id))

    def __repr__(self) -> str:
        if self.device_type >= RPC_SESS_MASK:
            session = self.device_type // RPC_SESS_MASK - 1
            local = Device(self.device_type % RPC_SESS_MASK, self.device_id)
            return f"remote[{session}]:{local}"
        name = self.MASK2STR.get(self.device_type, f"device_type{self.device_type}")
        return f"{name}({self.device_id})"

    __str__ = __repr__

    def __reduce__(self):
        return (Device, (self.device_type, self.device_id))


def device(dev_type: str | int | Device, dev_id: int = 0) -> Device:
    """The device named ``dev_type`` (a name from ``Device.STR2MASK`` or a type code).

    A target string such as ``"llvm -mcpu=znver3"`` names the device of its first word.

    Example
    -------
    >>> device("cpu"), device("cuda", 1), device(1, 2), device("llvm -mcpu=znver3")
    (cpu(0), cuda(1), cpu(2), cpu(0))
    """
    if isinstance(dev_type, Device):
        return dev_type
    if isinstance(dev_type, str):
        words = dev_type.split()
        name = words[0] if words else ""
        if name not in Device.STR2MASK:
            raise TVMError(
                f"unknown device type {dev_type!r}; expected one of {sorted(Device.STR2MASK)}"
            )
        return Device(Device.STR2MASK[name], dev_id)
    if isinstance(dev_type, bool):
        raise TVMError("device type must be a name or an int, got bool")
    try:
        return Device(operator.index(dev_type), operator.index(dev_id))
    except TypeError:
        raise TVMError(
            f"device type must be a name or an int, got {type(dev_type).__name__}"
        ) from None


def cpu(dev_id: int = 0) -> Device:
    """The CPU device ``dev_id`` (all CPU ids share host memory)."""
    return Device(DeviceType.kDLCPU, dev_id)


def cuda(dev_id: int = 0) -> Device:
    """CUDA GPU ``dev_id`` (nameable; no memory on this machine)."""
    return Device(DeviceType.kDLCUDA, dev_id)


def opencl(dev_id: int = 0) -> Device:
    """OpenCL device ``dev_id`` (nameable; no memory on this machine)."""
    return Device(DeviceType.kDLOpenCL, dev_id)


def vulkan(dev_id: int = 0) -> Device:
    """Vulkan device ``dev_id`` (nameable; no memory on this machine)."""
    return Device(DeviceType.kDLVulkan, dev_id)


def metal(dev_id: int = 0) -> Device:
    """Metal device ``dev_id`` (nameable; no memory on this machine)."""
    return Device(DeviceType.kDLMetal, dev_id)


def ext_dev(dev_id: int = 0) -> Device:
    """External accelerator ``dev_id`` (TVM's ``ext_dev``, used by VTA-like targets)."""
    return Device(DeviceType.kDLExtDev, dev_id)
