"""PackedFunc: type-erased functions that cross the Python/C boundary, and the C ABI bridge.

Entry points: :class:`PackedFunc`, :func:`convert`, :func:`convert_to_tvm_func`,
:class:`TVMValue`, :func:`pack_args`, :func:`value_from_c`, :func:`get_last_error`,
:func:`set_last_error`, :func:`install_runtime_hooks`.

A call passes ``n`` arguments as two arrays: ``TVMValue values[n]`` (a union of int64, double,
pointer, string, dtype, device) and ``int type_codes[n]`` (TVM's codes, §3.1 of the reference).
Every native function — generated kernel, C function registered from C — has TVM's packed
kernel signature::

    int f(TVMValue* args, int* type_codes, int num_args,
          TVMValue* out_ret_value, int* out_ret_tcode, void* resource_handle)

and returns 0 on success, or nonzero after ``TVMAPISetLastError(msg)``. A PackedFunc either
wraps such a pointer (``PackedFunc.from_c_address``) or a Python callable (``convert``). Both
kinds have ``c_address`` (for a Python function, the address of a ctypes trampoline of that
same signature, so C can call it) and ``handle`` (the address of a ``KilnFunction`` record,
the ``TVMFunctionHandle`` that ``TVMFuncCall`` takes).

Errors cross in both directions as :class:`TVMError` with the message intact: a failing native
call raises ``TVMError(TVMGetLastError())``; a Python exception inside a callback is stored as
the thread's last error and the trampoline returns -1 to C (the original exception is chained
as ``__cause__`` when the error comes back out to Python on the same thread).

Fast path for executors: ``f.c_address`` is the raw function pointer, and
:meth:`PackedFunc.prepare` packs arguments once and returns a zero-argument callable, so a
repeated kernel call costs one ctypes call.
"""

from __future__ import annotations

import ctypes
import numbers
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.runtime.error import TVMError
from kiln.runtime.object import Object, register_object

__all__ = [
    "KERNEL_PROTOTYPE",
    "KilnFunction",
    "PackedFunc",
    "TVMByteArray",
    "TVMValue",
    "TypeCode",
    "convert",
    "convert_to_tvm_func",
    "get_last_error",
    "install_runtime_hooks",
    "object_from_handle",
    "object_handle",
    "pack_args",
    "set_last_error",
    "value_from_c",
]


class TypeCode:
    """TVM's argument type codes (``TVMArgTypeCode``)."""

    INT = 0
    UINT = 1
    FLOAT = 2
    HANDLE = 3
    NULL = 4
    DATATYPE = 5
    DEVICE = 6
    DLTENSOR_HANDLE = 7
    OBJECT_HANDLE = 8
    MODULE_HANDLE = 9
    PACKED_FUNC_HANDLE = 10
    STR = 11
    BYTES = 12
    NDARRAY_HANDLE = 13


class TVMValue(ctypes.Union):
    """The 8-byte argument union. ``DLDataType``/``DLDevice`` members are read from ``v_int64``
    (little-endian bit fields), which keeps this union independent of the DLPack structs."""

    _fields_ = [
        ("v_int64", ctypes.c_int64),
        ("v_float64", ctypes.c_double),
        ("v_handle", ctypes.c_void_p),
        ("v_str", ctypes.c_char_p),
    ]


class TVMByteArray(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class KilnFunction(ctypes.Structure):
    """What a ``TVMFunctionHandle`` points at (``KilnFunction`` in kiln_runtime.c)."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("resource_handle", ctypes.c_void_p),
        ("finalizer", ctypes.c_void_p),
    ]


KERNEL_PROTOTYPE = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
)

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


# ---- the support library and the last error ------------------------------------------------

_lib: ctypes.CDLL | None = None
_thread_state = threading.local()


def runtime_library() -> ctypes.CDLL:
    """The kiln runtime support library (TVMAPISetLastError & co.), loaded once."""
    if _lib is None:
        from kiln.runtime import native

        native.load_runtime_lib()  # calls install_runtime_hooks
    return _lib


def get_last_error() -> str:
    """This thread's last error message from the C side (``TVMGetLastError``)."""
    return runtime_library().TVMGetLastError().decode("utf-8", errors="replace")


def set_last_error(message: str) -> None:
    """Store ``message`` as this thread's last error (``TVMAPISetLastError``)."""
    runtime_library().TVMAPISetLastError(message.encode("utf-8", errors="replace"))


def _raise_last_error(rc: int, what: str) -> None:
    # Clearing after reading (not before every call) keeps the call path to one ctypes call
    # while a later failure that sets no message cannot show this one's again.
    message = get_last_error() or f"{what} returned {rc} without setting an error message"
    _lib.TVMAPISetLastError(None)
    cause = getattr(_thread_state, "exception", None)
    _thread_state.exception = None
    if cause is not None and str(cause) in message:
        raise TVMError(message) from cause
    raise TVMError(message)


# ---- handles for objects and modules passed to C -------------------------------------------


class _HandleTable:
    """Stable addresses standing for Python objects inside C, mapped back on return.

    Each object gets a small ctypes cell whose address is its handle; the table holds the
    object weakly, so C code holding a handle never keeps an object alive.
    """

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[ctypes.c_void_p, weakref.ref]] = {}
        self._by_handle: dict[int, weakref.ref] = {}

    def handle_of(self, obj: Any) -> int:
        entry = self._by_id.get(id(obj))
        if entry is not None and entry[1]() is obj:
            return ctypes.addressof(entry[0])
        cell = ctypes.c_void_p()
        handle = ctypes.addressof(cell)
        key = id(obj)

        def forget(_ref, key=key, handle=handle) -> None:
            self._by_id.pop(key, None)
            self._by_handle.pop(handle, None)

        ref = weakref.ref(obj, forget)
        self._by_id[key] = (cell, ref)
        self._by_handle[handle] = ref
        return handle

    def lookup(self, handle: int | None, kind: str) -> Any:
        ref = self._by_handle.get(handle or 0)
        obj = ref() if ref is not None else None
        if obj is None:
            raise TVMError(f"unknown or expired {kind} handle 0x{handle or 0:x} received from C")
        return obj


_handles = _HandleTable()
_functions_by_record: weakref.WeakValueDictionary[int, PackedFunc] = (
    weakref.WeakValueDictionary()
)


def object_handle(obj: Any) -> int:
    """The C handle standing for a Python object (Module or Object) while it lives."""
    return _handles.handle_of(obj)


def object_from_handle(handle: int, kind: str = "object") -> Any:
    """The Python object behind a handle made by :func:`object_handle`."""
    return _handles.lookup(handle, kind)


# ---- PackedFunc ----------------------------------------------------------------------------


@register_object("runtime.PackedFunc")
class PackedFunc(Object):
    """A function callable from Python and C with TVM's packed calling convention.

    Build one from a Python callable with :func:`convert` (or ``PackedFunc(f)``), or from a
    native function pointer with :meth:`from_c_address`; modules and the registry hand them
    out.

    Example
    -------
    >>> add = PackedFunc(lambda a, b: a + b)
    >>> add(1, 2)
    3
    >>> add.c_address != 0       # a C-callable trampoline of the packed kernel signature
    True
    """

    _extra_slots = (
        "_pyfunc",
        "_address",
        "_resource",
        "_owner",
        "_kernel",
        "_record",
        "_trampoline",
        "name",
    )

    def __init__(self, func: Callable[..., Any], name: str = "") -> None:
        if not callable(func):
            raise TypeError(f"PackedFunc needs a callable, got {type(func).__name__}")
        for slot, value in (
            ("_pyfunc", func),
            ("_address", None),
            ("_resource", None),
            ("_owner", None),
            ("_kernel", None),
            ("_record", None),
            ("_trampoline", None),
            ("name", name or getattr(func, "__name__", "")),
        ):
            self._set(slot, value)

    @classmethod
    def from_c_address(
        cls,
        address: int,
        resource_handle: int | None = None,
        owner: Any = None,
        name: str = "",
    ) -> PackedFunc:
        """Wrap a native function of the packed kernel signature.

        ``owner`` is kept alive as long as the PackedFunc (e.g. the loaded library).
        """
        if not address:
            raise TVMError(f"cannot wrap a NULL function pointer as PackedFunc {name!r}")
        func = cls.__new__(cls)
        for slot, value in (
            ("_pyfunc", None),
            ("_address", int(address)),
            ("_resource", resource_handle or None),
            ("_owner", owner),
            ("_kernel", KERNEL_PROTOTYPE(int(address))),
            ("_record", None),
            ("_trampoline", None),
            ("name", name),
        ):
            func._set(slot, value)
        return func

    @classmethod
    def from_handle(cls, handle: int, name: str = "") -> PackedFunc:
        """The PackedFunc behind a ``TVMFunctionHandle`` received from C."""
        known = _functions_by_record.get(handle)
        if known is not None:
            return known
        if not handle:
            raise TVMError("received a NULL function handle from C")
        record = KilnFunction.from_address(handle)
        return cls.from_c_address(record.func, record.resource_handle, name=name)

    @property
    def is_native(self) -> bool:
        """Whether this wraps a C function (rather than a Python callable)."""
        return self._pyfunc is None

    @property
    def c_address(self) -> int:
        """The packed-signature function pointer (a ctypes trampoline for Python functions)."""
        if self._address is None:
            trampoline = KERNEL_PROTOTYPE(_make_trampoline(self._pyfunc))
            self._set("_trampoline", trampoline)
            self._set("_address", ctypes.cast(trampoline, ctypes.c_void_p).value)
        return self._address

    @property
    def resource_handle(self) -> int | None:
        """The ``resource_handle`` passed as the kernel's last argument."""
        return self._resource

    @property
    def handle(self) -> int:
        """The ``TVMFunctionHandle`` for C (``TVMFuncCall``, ``TVMFuncRegisterGlobal``)."""
        if self._record is None:
            record = KilnFunction(self.c_address, self._resource, None)
            self._set("_record", record)
            _functions_by_record[ctypes.addressof(record)] = self
        return ctypes.addressof(self._record)

    def __call__(self, *args: Any) -> Any:
        if self._pyfunc is not None:
            return self._pyfunc(*args)
        values, codes, _keepalive = pack_args(args)
        ret, ret_code = TVMValue(), ctypes.c_int(TypeCode.NULL)
        rc = self._kernel(values, codes, len(args), ctypes.byref(ret), ctypes.byref(ret_code),
                          self._resource)
        if rc != 0:
            _raise_last_error(rc, self.name or f"native function 0x{self._address:x}")
        return value_from_c(ret, ret_code.value)

    def prepare(self, *args: Any) -> Callable[[], Any]:
        """Pack ``args`` once; return a zero-argument callable that calls this function.

        The packed arguments keep references to what they point at (NDArrays, strings), so
        the returned callable stays valid as long as it lives. It reuses one return slot, so
        one prepared call must not run on two threads at once.

        Example
        -------
        >>> call = PackedFunc(lambda x: x * 2).prepare(21)
        >>> call()
        42
        """
        if self._pyfunc is not None:
            pyfunc = self._pyfunc
            return lambda: pyfunc(*args)
        values, codes, keepalive = pack_args(args)
        ret, ret_code = TVMValue(), ctypes.c_int(TypeCode.NULL)
        kernel, resource, num_args = self._kernel, self._resource, len(args)
        addresses = (
            ctypes.addressof(values),
            ctypes.addressof(codes),
            num_args,
            ctypes.addressof(ret),
            ctypes.addressof(ret_code),
            resource,
        )
        name = self.name or f"native function 0x{self._address:x}"

        def call() -> Any:
            ret_code.value = TypeCode.NULL
            rc = kernel(*addresses)
            if rc != 0:
                _raise_last_error(rc, name)
            return value_from_c(ret, ret_code.value)

        call.keepalive = (values, codes, keepalive)
        return call

    def __repr__(self) -> str:
        kind = "python" if self._pyfunc is not None else f"native 0x{self._address:x}"
        return f"PackedFunc({self.name or '<anonymous>'}, {kind})"

    def __reduce__(self):
        raise TypeError("PackedFunc cannot be pickled")


# ---- Python values -> TVMValue -------------------------------------------------------------


def _pack_int(value: Any, slot: TVMValue, keep: list) -> int:
    value = int(value)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise TVMError(f"integer argument {value} does not fit in int64")
    slot.v_int64 = value
    return TypeCode.INT


def _pack_float(value: Any, slot: TVMValue, keep: list) -> int:
    slot.v_float64 = float(value)
    return TypeCode.FLOAT


def _pack_none(value: Any, slot: TVMValue, keep: list) -> int:
    slot.v_handle = None
    return TypeCode.NULL


def _pack_str(value: Any, slot: TVMValue, keep: list) -> int:
    buffer = ctypes.create_string_buffer(str(value).encode("utf-8"))
    keep.append(buffer)
    slot.v_handle = ctypes.addressof(buffer)
    return TypeCode.STR


def _pack_bytes(value: Any, slot: TVMValue, keep: list) -> int:
    data = bytes(value)
    buffer = ctypes.create_string_buffer(data, len(data) or 1)
    array = TVMByteArray(ctypes.addressof(buffer), len(data))
    keep.extend((buffer, array))
    slot.v_handle = ctypes.addressof(array)
    return TypeCode.BYTES


def _pack_dtype(value: Any, slot: TVMValue, keep: list) -> int:
    code, bits, lanes = value.as_tuple()
    slot.v_int64 = code | (bits << 8) | (lanes << 16)
    return TypeCode.DATATYPE


def _pack_device(value: Any, slot: TVMValue, keep: list) -> int:
    slot.v_int64 = (value.device_type & 0xFFFFFFFF) | ((value.device_id & 0xFFFFFFFF) << 32)
    return TypeCode.DEVICE


def _pack_ndarray(value: Any, slot: TVMValue, keep: list) -> int:
    keep.append(value)
    slot.v_handle = ctypes.addressof(value.handle.contents)  # 4x cheaper than ctypes.cast
    return TypeCode.NDARRAY_HANDLE


def _pack_module(value: Any, slot: TVMValue, keep: list) -> int:
    keep.append(value)
    slot.v_handle = object_handle(value)
    return TypeCode.MODULE_HANDLE


def _pack_func(value: Any, slot: TVMValue, keep: list) -> int:
    func = value if isinstance(value, PackedFunc) else PackedFunc(value)
    keep.append(func)
    slot.v_handle = func.handle
    return TypeCode.PACKED_FUNC_HANDLE


def _pack_object(value: Any, slot: TVMValue, keep: list) -> int:
    keep.append(value)
    slot.v_handle = object_handle(value)
    return TypeCode.OBJECT_HANDLE


def _pack_opaque(value: Any, slot: TVMValue, keep: list) -> int:
    keep.append(value)
    slot.v_handle = value.value
    return TypeCode.HANDLE


def _pack_container(value: Any, slot: TVMValue, keep: list) -> int:
    return _pack_object(convert(value), slot, keep)


def _packer_table() -> list[tuple[type, Callable]]:
    """(class, packer) pairs in priority order; the first isinstance match wins."""
    from kiln.runtime.device import Device
    from kiln.runtime.dtype import DataType
    from kiln.runtime.module import Module
    from kiln.runtime.ndarray import NDArray

    return [
        ((bool, np.bool_), _pack_int),
        (numbers.Integral, _pack_int),
        (numbers.Real, _pack_float),
        (type(None), _pack_none),
        (DataType, _pack_dtype),
        (str, _pack_str),
        ((bytes, bytearray, memoryview), _pack_bytes),
        (Device, _pack_device),
        (NDArray, _pack_ndarray),
        (Module, _pack_module),
        (PackedFunc, _pack_func),
        (Object, _pack_object),
        (ctypes.c_void_p, _pack_opaque),
        ((list, tuple, dict), _pack_container),
    ]


_packer_by_type: dict[type, Callable] = {}
_packer_order: list[tuple[type, Callable]] = []


def _packer_for(cls: type) -> Callable:
    packer = _packer_by_type.get(cls)
    if packer is not None:
        return packer
    if not _packer_order:
        _packer_order.extend(_packer_table())
    for base, candidate in _packer_order:
        if issubclass(cls, base):
            packer = candidate
            break
    else:
        if any("__call__" in vars(klass) for klass in cls.__mro__[:-1]):
            packer = _pack_func
        else:
            raise TypeError(
                f"cannot convert a value of type {cls.__module__}.{cls.__qualname__} "
                "to a TVM packed-call argument"
            )
    _packer_by_type[cls] = packer
    return packer


def pack_args(args: tuple | list) -> tuple[ctypes.Array, ctypes.Array, list]:
    """Pack Python values into ``(TVMValue[n], int[n], keepalive)`` for a packed call."""
    num_args = len(args)
    values = (TVMValue * num_args)()
    codes = (ctypes.c_int * num_args)()
    keep: list = []
    for index, arg in enumerate(args):
        codes[index] = _packer_for(type(arg))(arg, values[index], keep)
    return values, codes, keep


# ---- TVMValue -> Python values -------------------------------------------------------------


def _unpack_dtype(value: TVMValue) -> Any:
    from kiln.runtime.dtype import DataType

    bits64 = value.v_int64
    return DataType.from_fields(bits64 & 0xFF, (bits64 >> 8) & 0xFF, (bits64 >> 16) & 0xFFFF)


def _unpack_device(value: TVMValue) -> Any:
    from kiln.runtime.device import Device

    bits64 = value.v_int64 & 0xFFFFFFFFFFFFFFFF
    device_id = (bits64 >> 32) & 0xFFFFFFFF
    if device_id >= 1 << 31:
        device_id -= 1 << 32
    return Device(bits64 & 0xFFFFFFFF, device_id)


def _unpack_tensor(value: TVMValue) -> Any:
    from kiln.runtime.ndarray import NDArray

    if not value.v_handle:
        return None
    return NDArray.from_dltensor_ptr(value.v_handle)


def _unpack_bytes(value: TVMValue) -> bytes:
    array = TVMByteArray.from_address(value.v_handle)
    return ctypes.string_at(array.data, array.size) if array.size else b""


def _unpack_str(value: TVMValue) -> str:
    return (value.v_str or b"").decode("utf-8", errors="replace")


def _unpack_func(value: TVMValue) -> PackedFunc | None:
    return PackedFunc.from_handle(value.v_handle) if value.v_handle else None


_UNPACKERS: dict[int, Callable[[TVMValue], Any]] = {
    TypeCode.INT: lambda v: v.v_int64,
    TypeCode.UINT: lambda v: v.v_int64 & 0xFFFFFFFFFFFFFFFF,
    TypeCode.FLOAT: lambda v: v.v_float64,
    TypeCode.HANDLE: lambda v: ctypes.c_void_p(v.v_handle),
    TypeCode.NULL: lambda v: None,
    TypeCode.DATATYPE: _unpack_dtype,
    TypeCode.DEVICE: _unpack_device,
    TypeCode.DLTENSOR_HANDLE: _unpack_tensor,
    TypeCode.OBJECT_HANDLE: lambda v: object_from_handle(v.v_handle, "object"),
    TypeCode.MODULE_HANDLE: lambda v: object_from_handle(v.v_handle, "module"),
    TypeCode.PACKED_FUNC_HANDLE: _unpack_func,
    TypeCode.STR: _unpack_str,
    TypeCode.BYTES: _unpack_bytes,
    TypeCode.NDARRAY_HANDLE: _unpack_tensor,
}


def value_from_c(value: TVMValue, type_code: int) -> Any:
    """Convert one TVMValue with its type code to a Python value."""
    unpack = _UNPACKERS.get(type_code)
    if unpack is None:
        raise TVMError(f"unsupported TVM type code {type_code} received from C")
    return unpack(value)


# ---- Python function -> C trampoline -------------------------------------------------------


def _error_message(err: BaseException) -> str:
    return str(err) if isinstance(err, TVMError) else f"{type(err).__name__}: {err}"


def _make_trampoline(pyfunc: Callable[..., Any]) -> Callable[..., int]:
    """A Python function of the packed kernel signature that calls ``pyfunc``."""

    def trampoline(args, type_codes, num_args, out_ret, out_ret_code, _resource) -> int:
        try:
            values = (TVMValue * num_args).from_address(args) if num_args else ()
            codes = (ctypes.c_int * num_args).from_address(type_codes) if num_args else ()
            result = pyfunc(*(value_from_c(values[i], codes[i]) for i in range(num_args)))
            if out_ret and out_ret_code:
                keep: list = []
                slot = TVMValue.from_address(out_ret)
                code = _packer_for(type(result))(result, slot, keep)
                ctypes.c_int.from_address(out_ret_code).value = code
                # A returned string/object must outlive this call: keep it until the
                # thread's next callback return, as TVM's thread-local return store does.
                _thread_state.returned = keep
            return 0
        except BaseException as err:  # noqa: BLE001 - every error must become a C error code
            _thread_state.exception = err
            set_last_error(_error_message(err))
            return -1

    return trampoline


# ---- conversion --------------------------------------------------------------------------


def convert_to_tvm_func(pyfunc: Callable[..., Any]) -> PackedFunc:
    """Wrap a Python callable as a :class:`PackedFunc` (unchanged if it already is one)."""
    return pyfunc if isinstance(pyfunc, PackedFunc) else PackedFunc(pyfunc)


def convert(value: Any) -> Any:
    """Convert a Python value to its kiln runtime form (TVM's ``tvm.runtime.convert``).

    Callables become :class:`PackedFunc`, lists/tuples ``Array``, dicts ``Map``, ``str``
    ``String``; every other value is returned unchanged.

    Example
    -------
    >>> f = convert(lambda msg: msg.upper())
    >>> f("hi")
    'HI'
    """
    from kiln.runtime import container

    if isinstance(value, (Object, numbers.Number)) or value is None:
        return value
    if isinstance(value, str):
        return container.String(value)
    if isinstance(value, (list, tuple)):
        return container.Array([convert(item) for item in value])
    if isinstance(value, dict):
        return container.Map({convert(k): convert(v) for k, v in value.items()})
    if callable(value) and not isinstance(value, type):
        return PackedFunc(value)
    return value


# ---- hooks that let C reach the Python registry ------------------------------------------

_REGISTER_GLOBAL_HOOK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int
)
_GET_GLOBAL_HOOK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_FUNC_FROM_ENV_HOOK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)


def _reporting_errors(body: Callable[..., None]) -> Callable[..., int]:
    def hook(*args: Any) -> int:
        try:
            body(*args)
            return 0
        except BaseException as err:  # noqa: BLE001 - must not unwind through C
            _thread_state.exception = err
            set_last_error(_error_message(err))
            return -1

    return hook


def _register_global_from_c(name: bytes, handle: int, override: int) -> None:
    from kiln.runtime import registry

    func_name = name.decode()
    registry.register_func(func_name, PackedFunc.from_handle(handle, func_name), bool(override))


def _get_global_from_c(name: bytes, out: int) -> None:
    from kiln.runtime import registry

    func = registry.get_global_func(name.decode(), allow_missing=True)
    ctypes.c_void_p.from_address(out).value = func.handle if func is not None else None


def _func_from_env_from_c(module_handle: int | None, name: bytes, out: int) -> None:
    from kiln.runtime import registry

    func_name = name.decode()
    if module_handle:
        func = object_from_handle(module_handle, "module").get_function_from_env(func_name)
    else:
        func = registry.get_global_func(func_name, allow_missing=True)
        if func is None:
            raise TVMError(f"Cannot find function {func_name!r} in the global registry")
    ctypes.c_void_p.from_address(out).value = func.handle


_hooks: tuple | None = None


def install_runtime_hooks(lib: ctypes.CDLL) -> None:
    """Set up ctypes signatures on the support library and point its registry hooks here.

    Called once by :func:`kiln.runtime.native.load_runtime_lib`.
    """
    global _lib, _hooks
    lib.TVMGetLastError.restype = ctypes.c_char_p
    lib.TVMGetLastError.argtypes = []
    lib.TVMAPISetLastError.argtypes = [ctypes.c_char_p]
    lib.TVMAPISetLastError.restype = None
    lib.KilnSystemLibLookup.restype = ctypes.c_void_p
    lib.KilnSystemLibLookup.argtypes = [ctypes.c_char_p]
    lib.TVMFuncCall.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] + [ctypes.c_void_p] * 2
    _hooks = (
        _REGISTER_GLOBAL_HOOK(_reporting_errors(_register_global_from_c)),
        _GET_GLOBAL_HOOK(_reporting_errors(_get_global_from_c)),
        _FUNC_FROM_ENV_HOOK(_reporting_errors(_func_from_env_from_c)),
    )
    lib.KilnRuntimeSetHooks(*_hooks)
    _lib = lib
