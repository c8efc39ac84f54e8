"""The C hot paths of RPC (``kiln/runtime/src/rpc_serve.c``), from Python.

Entry points: :class:`NativeLoop`, :class:`SocketReceiver`, :func:`native_loop_available`,
:func:`testing_nop`.

A :class:`NativeLoop` answers, without running the Python interpreter between packets, the
calls that dominate a session's round trips: ``kCallFunc`` of a bound function handle whose
arguments are plain numbers. Native functions (the kernel ABI) run in C with the GIL released;
a Python function is called through an *answer closure* with the GIL held only for that call.
Every other packet stays in the channel's buffer for :class:`~kiln.rpc.serving.ServingSession`'s
general path, so the loop changes speed, never behaviour. It needs CPython (it calls the
closures through ``ctypes.pythonapi``'s stable-ABI functions) and kiln's runtime library.

A :class:`SocketReceiver` is a channel's receive side in C: every receive first polls the
socket for a few tens of microseconds (``KILN_RPC_SPIN_US``) while the peer answers quickly,
so neither end of a round trip sleeps and waits for an idle CPU to wake up.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import sys
import weakref
from collections.abc import Callable
from typing import Any

from kiln.runtime.error import TVMError
from kiln.runtime.native import load_runtime_lib
from kiln.runtime.packed_func import PackedFunc, TVMValue

__all__ = ["NativeLoop", "SocketReceiver", "native_loop_available", "testing_nop"]

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
        ("answered", ctypes.c_uint64),  # a count that must not wrap (rpc_serve.c)
        *[(name, ctypes.c_void_p) for name in _ADDRESSES],
        ("py_true", ctypes.c_void_p),
        ("py_none", ctypes.c_void_p),
        ("table", ctypes.c_void_p),
        ("table_mask", ctypes.c_int64),
        ("table_count", ctypes.c_int64),
        ("wait", ctypes.c_void_p),
    ]


class _WaitState(ctypes.Structure):
    """``KilnRpcWait`` of rpc_serve.c: how long a receive spins, and when it does."""

    _fields_ = [("spin_ns", ctypes.c_int64), ("skip", ctypes.c_int64),
                ("backoff", ctypes.c_int64)]


class _ExchangeState(ctypes.Structure):
    """``KilnRpcExchangeState`` of rpc_serve.c, field by field."""

    _fields_ = [
        ("fd", ctypes.c_int),
        ("err", ctypes.c_int),
        ("packet", ctypes.c_void_p),
        ("packet_len", ctypes.c_int64),
        ("expected", ctypes.c_void_p),
        ("expected_len", ctypes.c_int64),
        ("buf", ctypes.c_void_p),
        ("cap", ctypes.c_int64),
        ("got", ctypes.c_int64),
        ("wait", ctypes.c_void_p),
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
        lib.KilnRpcRecv.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                    ctypes.c_int64]
        lib.KilnRpcRecv.restype = ctypes.c_int64
        lib.KilnRpcExchange.argtypes = [ctypes.c_void_p]
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

    def __init__(self, receiver: SocketReceiver, null_reply: bytes) -> None:
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
        self._receiver = receiver
        self._null_reply = ctypes.create_string_buffer(null_reply, len(null_reply))
        self._answers: dict[int, Callable[[], bool | None]] = {}
        self.status = self.PYTHON  # what the last serve() returned
        state = self.state = pointer.contents
        state.fd, state.cap, state.buf = receiver.fd, receiver.cap, receiver.address
        state.wait = ctypes.addressof(receiver.wait)
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


class SocketReceiver:
    """Receives on socket ``fd`` into ``buffer`` (a channel's receive buffer, never resized)
    that spin up to ``spin_us`` microseconds before they sleep; shared by the channel's
    Python reads, its :class:`NativeLoop` and its client exchanges (one wait state)."""

    # what KilnRpcExchange returns besides 1 (the expected reply) and 0 (another reply)
    SEND_FAILED, RECV_FAILED, CLOSED = -1, -2, -3

    def __init__(self, fd: int, buffer: bytearray, spin_us: float) -> None:
        lib = _library()
        self.fd, self.cap = fd, len(buffer)
        self._buffer = (ctypes.c_char * len(buffer)).from_buffer(buffer)
        self.address = ctypes.addressof(self._buffer)
        self.wait = _WaitState(int(spin_us * 1000), 0, 1)
        self._wait_address = ctypes.addressof(self.wait)
        self._recv, self._exchange = lib.KilnRpcRecv, lib.KilnRpcExchange

    def recv(self, offset: int) -> int:
        """One receive into ``buffer[offset:]``: the bytes received, 0 at EOF; OSError (a
        TimeoutError-like BlockingIOError when SO_RCVTIMEO passed) when it failed."""
        while True:
            n = self._recv(self._wait_address, self.fd, self.address + offset,
                           self.cap - offset)
            if n >= 0:
                return n
            if n != -errno.EINTR:  # (on EINTR the interpreter runs signal handlers first)
                raise OSError(-n, os.strerror(-n))

    def exchanger(self, packet: bytes, expected: bytes) -> tuple[Callable[[], int], Any]:
        """A zero-argument C call that sends ``packet`` and receives once (see
        KilnRpcExchange), and the state whose ``got``/``err`` explain its result."""
        packet_buf = ctypes.create_string_buffer(packet, len(packet))
        expected_buf = ctypes.create_string_buffer(expected, len(expected))
        state = _ExchangeState(self.fd, 0, ctypes.addressof(packet_buf), len(packet),
                               ctypes.addressof(expected_buf), len(expected), self.address,
                               self.cap, 0, self._wait_address)
        state._keep = (packet_buf, expected_buf, self)  # alive as long as the state is
        return functools.partial(self._exchange, ctypes.addressof(state)), state


def testing_nop() -> PackedFunc:
    """TVM's global ``testing.nop`` as a native function (as TVM's server has it), so an empty
    remote call is answered without Python."""
    lib = _library()
    address = ctypes.cast(lib.KilnRpcTestingNop, ctypes.c_void_p).value
    return PackedFunc.from_c_address(address, owner=lib, name="testing.nop")
