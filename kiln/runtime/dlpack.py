"""DLPack: the C structs of ``dlpack.h`` and zero-copy exchange through PyCapsules.

Entry points: :class:`DLDevice`, :class:`DLDataType`, :class:`DLTensor`,
:class:`DLManagedTensor`, :func:`make_capsule`, :func:`consume_capsule`.

Protocol (DLPack / Python array API): a producer returns a PyCapsule named ``"dltensor"``
holding a ``DLManagedTensor*``; the consumer renames it ``"used_dltensor"`` and calls the
tensor's ``deleter`` when it no longer needs the memory. A capsule that dies unconsumed
calls the deleter itself. Versioned capsules (``"dltensor_versioned"``, DLPack 1.x) are
accepted on import. kiln.nd builds :class:`~kiln.runtime.ndarray.NDArray` on top of this.
"""

from __future__ import annotations

import ctypes
from typing import Any

from kiln.runtime.error import TVMError

__all__ = [
    "DLDevice",
    "DLDataType",
    "DLTensor",
    "DLManagedTensor",
    "DLManagedTensorVersioned",
    "DLPACK_BOOL_CODE",
    "make_capsule",
    "consume_capsule",
    "ImportedTensor",
]

DLPACK_BOOL_CODE = 6  # kDLBool: how NumPy and PyTorch exchange bool (8 bits)
_DLPACK_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY of DLManagedTensorVersioned.flags


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """``DLTensor`` exactly as in dlpack.h (strides in elements; NULL means compact)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),  # void (*)(DLManagedTensor*)
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),  # void (*)(DLManagedTensorVersioned*)
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _capi(name: str, restype: Any, *argtypes: Any):
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_capsule_new = _capi(
    "PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)
_capsule_get_pointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object,
                             ctypes.c_char_p)
_capsule_get_name = _capi("PyCapsule_GetName", ctypes.c_char_p, ctypes.py_object)
_capsule_set_name = _capi("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
# The destructor receives a dying capsule: use raw pointers so ctypes does not resurrect it.
_raw_capsule_is_valid = _capi("PyCapsule_IsValid", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
_raw_capsule_get_pointer = _capi(
    "PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p
)

# Capsule names must outlive the capsules: keep them as module constants.
_NAME = b"dltensor"
_USED_NAME = b"used_dltensor"
_VERSIONED_NAME = b"dltensor_versioned"
_USED_VERSIONED_NAME = b"used_dltensor_versioned"

# Managed tensors handed out and not yet released, by address: the struct, its shape and
# strides arrays, and the object whose memory it exposes.
_live_exports: dict[int, tuple[Any, ...]] = {}


@_DELETER
def _release_export(managed_address: int) -> None:
    _live_exports.pop(managed_address, None)


@_CAPSULE_DESTRUCTOR
def _destroy_unconsumed_capsule(capsule_address: int) -> None:
    for name in (_NAME, _VERSIONED_NAME):
        if _raw_capsule_is_valid(capsule_address, name):
            _live_exports.pop(_raw_capsule_get_pointer(capsule_address, name), None)


_RELEASE_EXPORT_ADDRESS = ctypes.cast(_release_export, ctypes.c_void_p).value
_DESTROY_CAPSULE_ADDRESS = ctypes.cast(_destroy_unconsumed_capsule, ctypes.c_void_p).value


def make_capsule(
    data: int,
    device: tuple[int, int],
    dtype: tuple[int, int, int],
    shape: tuple[int, ...],
    strides: tuple[int, ...] | None,
    keepalive: Any,
    versioned: bool = False,
    read_only: bool = False,
) -> Any:
    """A DLPack capsule describing memory at ``data`` that ``keepalive`` owns.

    ``versioned`` gives a DLPack 1.0 ``"dltensor_versioned"`` capsule (with the read-only flag
    if ``read_only``), otherwise a legacy ``"dltensor"`` one, which cannot say read-only: asked
    for read-only memory it raises ``BufferError`` (as NumPy does). ``keepalive`` stays
    referenced until the consumer calls the deleter (or the capsule dies unconsumed).
    """
    if read_only and not versioned:
        raise BufferError("cannot export read-only memory as a legacy DLPack capsule (it has "
                          "no read-only flag); ask for max_version >= (1, 0) or copy=True")
    managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    if versioned:
        managed.version = DLPackVersion(1, 0)
        managed.flags = _DLPACK_READ_ONLY if read_only else 0
    ndim = len(shape)
    shape_array = (ctypes.c_int64 * max(ndim, 1))(*shape)
    tensor = managed.dl_tensor
    tensor.data = data
    tensor.device = DLDevice(*device)
    tensor.ndim = ndim
    tensor.dtype = DLDataType(*dtype)
    tensor.shape = ctypes.cast(shape_array, ctypes.POINTER(ctypes.c_int64))
    strides_array = None
    if strides is not None:
        strides_array = (ctypes.c_int64 * max(ndim, 1))(*strides)
        tensor.strides = ctypes.cast(strides_array, ctypes.POINTER(ctypes.c_int64))
    tensor.byte_offset = 0
    managed.deleter = _RELEASE_EXPORT_ADDRESS
    address = ctypes.addressof(managed)
    _live_exports[address] = (managed, shape_array, strides_array, keepalive)
    name = _VERSIONED_NAME if versioned else _NAME
    return _capsule_new(address, name, _DESTROY_CAPSULE_ADDRESS)


class ImportedTensor:
    """Owns a consumed ``DLManagedTensor``; calls its deleter when garbage-collected."""

    __slots__ = ("managed_address", "deleter_address", "__weakref__")

    def __init__(self, managed_address: int, deleter_address: int | None) -> None:
        self.managed_address = managed_address
        self.deleter_address = deleter_address

    def __del__(self) -> None:
        if self.deleter_address:
            deleter, self.deleter_address = self.deleter_address, None
            _DELETER(deleter)(self.managed_address)


def consume_capsule(capsule: Any) -> tuple[int, ImportedTensor, bool]:
    """Take a DLPack capsule: ``(DLTensor address, owner, read_only)``; renames it used.

    The returned owner must stay alive as long as the memory is used.
    """
    if type(capsule).__name__ != "PyCapsule":
        raise TVMError(f"expected a DLPack PyCapsule, got {type(capsule).__name__}")
    name = _capsule_get_name(capsule)
    if name in (_USED_NAME, _USED_VERSIONED_NAME):
        raise TVMError("this DLPack capsule was already consumed (a capsule can be used once)")
    if name == _NAME:
        address = _capsule_get_pointer(capsule, _NAME)
        managed = DLManagedTensor.from_address(address)
        tensor_address, read_only, used_name = address, False, _USED_NAME
    elif name == _VERSIONED_NAME:
        address = _capsule_get_pointer(capsule, _VERSIONED_NAME)
        managed = DLManagedTensorVersioned.from_address(address)
        if managed.version.major != 1:
            raise TVMError(
                f"unsupported DLPack version {managed.version.major}.{managed.version.minor}"
            )
        tensor_address = address + DLManagedTensorVersioned.dl_tensor.offset
        read_only = bool(managed.flags & _DLPACK_READ_ONLY)
        used_name = _USED_VERSIONED_NAME
    else:
        raise TVMError(f"not a DLPack capsule: its name is {name!r}, expected b'dltensor'")
    _capsule_set_name(capsule, used_name)
    return tensor_address, ImportedTensor(address, managed.deleter), read_only


def live_export_count() -> int:
    """How many exported tensors a consumer still holds (for leak tests)."""
    return len(_live_exports)
