"""The C hot loop of an RPC server session (``kiln/runtime/src/rpc_serve.c``), from Python.

Entry points: :class:`NativeLoop`, :func:`native_loop_available`, :func:`testing_nop`.

A :class:`NativeLoop` answers, without running the Python interpreter between packets, the
calls that dominate a session's round trips: ``kCallFunc`` of a bound function handle whose
arguments are plain numbers. Native functions (the kernel ABI) run in C with the GIL released;
a Python function is called through an *answer closure* with the GIL held only for that call.
Every other packet stays in the channel's buffer for :class:`~kiln.rpc.serving.ServingSession`'s
general path, so the loop changes speed, never behaviour. It needs CPython (it calls the
closures through ``ctypes.pythonapi``'s stable-ABI functions) and kiln's runtime library.
"""

from __future__ import annotations

import ctypes
import sys
import weakref
from collections.abc import Callable

from kiln.runtime.error import TVMError
from kiln.runtime.native import load_runtime_lib
from kiln.runtime.packed_func import PackedFunc, TVMValue

__all__ = ["NativeLoop", "native_loop_available", "testing_nop"]

_ADDRESSES = ("gil_ensure", "gil_release", "call_object", "decref", "err_clear")
_PYTHON_API = ("PyGILState_Ensure", "PyGILState_Release", "PyObject_CallObject", "Py_DecRef",
               "PyErr_Clear")


class _LoopState(ctypes.Structure):
    """``KilnRpcLoop`` of rpc_serve.c, field by field."""

    _fields_ = [
        ("fd", ctypes.c_int),
        ("err", ctypes.c_int),
        ("buf", ctypes.c_void_p),
        ("cap", ctypes.c_int64),
        ("start", ctypes.c_int64),
        ("end", ctypes.c_int64),
        ("null_reply", ctypes.c_void_p),
        ("null_reply_len", ctypes.c_int64),
        ("ret", TVMValue),
        ("ret_code", ctypes.c_int),
        ("answered", ctypes.c_int),
        *[(name, ctypes.c_void_p) for name in _ADDRESSES],
        ("py_true", ctypes.c_void_p),
        ("py_none", ctypes.c_void_p),
        ("table", ctypes.c_void_p),
        ("table_mask", ctypes.c_int64),
        ("table_count", ctypes.c_int64),
    ]


def native_loop_available() -> bool:
    """Whether this interpreter can run the C loop (CPython's C API through ctypes)."""
    return sys.implementation.name == "cpython" and hasattr(ctypes, "pythonapi")


_lib: ctypes.CDLL | None = None


def _library() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        lib = load_runtime_lib()
        lib.KilnRpcLoopCreate.restype = ctypes.POINTER(_LoopState)
        lib.KilnRpcLoopFree.argtypes = [ctypes.c_void_p]
        lib.KilnRpcLoopBind.argtypes = [ctypes.POINTER(_LoopState), ctypes.c_uint64,
                                        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.KilnRpcLoopUnbind.argtypes = [ctypes.POINTER(_LoopState), ctypes.c_uint64]
        lib.KilnRpcServe.argtypes = [ctypes.POINTER(_LoopState)]
        _lib = lib
    return _lib


class NativeLoop:
    """One session's C loop over socket ``fd``, receiving into ``buffer`` (the channel's own
    receive buffer, never resized) and answering void results with ``null_reply`` (the whole
    kReturn packet).

    :meth:`serve` returns one of the status codes below; ``state.start``/``state.end`` say
    what is buffered, ``state.err`` the errno (or a native function's return code).
    """

    PYTHON, CLOSED, RECV_ERROR, SEND_ERROR, NATIVE_FAILED, NATIVE_VALUE, PY_STOPPED = range(7)

    def __init__(self, fd: int, buffer: bytearray, null_reply: bytes) -> None:
        lib = _library()
        pointer = lib.KilnRpcLoopCreate()
        if not pointer:
            raise TVMError("cannot create the RPC serve loop: out of memory")
        self._pointer = pointer
        self._finalizer = weakref.finalize(self, lib.KilnRpcLoopFree,
                                           ctypes.cast(pointer, ctypes.c_void_p))
        # not at exit: a daemon serving thread may still be inside KilnRpcServe then
        self._finalizer.atexit = False
        self._serve, self._bind, self._unbind = (lib.KilnRpcServe, lib.KilnRpcLoopBind,
                                                 lib.KilnRpcLoopUnbind)
        # the loop reads these while it runs: they live as long as it does
        self._buffer = (ctypes.c_char * len(buffer)).from_buffer(buffer)
        self._null_reply = ctypes.create_string_buffer(null_reply, len(null_reply))
        self._answers: dict[int, Callable[[], bool | None]] = {}
        self.status = self.PYTHON  # what the last serve() returned
        state = self.state = pointer.contents
        state.fd, state.cap = fd, len(buffer)
        state.buf = ctypes.addressof(self._buffer)
        state.null_reply = ctypes.addressof(self._null_reply)
        state.null_reply_len = len(null_reply)
        for field, name in zip(_ADDRESSES, _PYTHON_API):
            setattr(state, field, ctypes.cast(getattr(ctypes.pythonapi, name),
                                              ctypes.c_void_p).value)
        state.py_true, state.py_none = id(True), id(None)  # CPython: id is the address

    def bind_native(self, handle: int, address: int, resource: int | None) -> None:
        """Answer argument-number calls of ``handle`` by calling the packed C function at
        ``address`` with ``resource`` in C."""
        self._check(self._bind(self._pointer, handle, address, resource, None))

    def bind_python(self, handle: int, answer: Callable[[], bool | None]) -> None:
        """Answer argument-less calls of ``handle`` by calling ``answer()`` with the GIL:
        True asks the loop to send the void reply, None says ``answer`` replied itself,
        False stops the loop (``serve`` returns ``PY_STOPPED``)."""
        self._answers[handle] = answer
        self._check(self._bind(self._pointer, handle, None, None, id(answer)))

    def unbind(self, handle: int) -> None:
        self._unbind(self._pointer, handle)
        self._answers.pop(handle, None)

    def _check(self, status: int) -> None:
        if status != 0:
            raise TVMError("cannot bind a function to the RPC serve loop: out of memory")

    def serve(self, start: int, end: int) -> int:
        """Run the loop over the buffered bytes ``[start, end)`` and the socket (GIL
        released) until a packet needs Python or something else stops it."""
        state = self.state
        state.start, state.end = start, end
        self.status = self._serve(self._pointer)
        return self.status


def testing_nop() -> PackedFunc:
    """TVM's global ``testing.nop`` as a native function (as TVM's server has it), so an empty
    remote call is answered without Python."""
    lib = _library()
    address = ctypes.cast(lib.KilnRpcTestingNop, ctypes.c_void_p).value
    return PackedFunc.from_c_address(address, owner=lib, name="testing.nop")
