"""TVM's RPC wire protocol (v0.16, ``kRPCProtocolVer = "0.8.0"``): constants, channels, packets
and the packed-sequence codec, shared by the client (:mod:`kiln.rpc.client`) and the server
(:mod:`kiln.rpc.serving`).

Entry points: :class:`RPCCode`, :class:`Channel`, :class:`SocketChannel`, :func:`write_packet`,
:func:`read_packet`, :class:`Writer`, :class:`Reader`, :class:`TensorMeta`, :class:`Handle`.

Transport. The protocol engine only needs a :class:`Channel`: ``send(data)`` writes all bytes,
``recv_into(view)`` fills the whole view or raises, both bounded by the channel's timeout. TCP
uses :class:`SocketChannel`; the microTVM serial session provides its own channel over the
framing layer, and nothing else changes.

Every message is ``u64 packet_nbytes`` + ``i32 RPCCode`` + a body (little-endian, no padding).
A packed sequence is ``i32 n``, ``i32 type_codes[n]``, then one payload per argument
(docs/rpc.md lists them). Readers check every length against the bytes of the packet, so a
garbage or truncated packet raises :class:`~kiln.runtime.error.RPCError`, never more.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from enum import IntEnum
from typing import Any

import numpy as np

from kiln.runtime import config
from kiln.runtime.device import Device
from kiln.runtime.dtype import DataType
from kiln.runtime.error import RPCError, TVMError
from kiln.runtime.packed_func import TypeCode

__all__ = [
    "RPC_MAGIC",
    "RPC_TRACKER_MAGIC",
    "RPC_CODE_SUCCESS",
    "RPC_CODE_DUPLICATE",
    "RPC_CODE_MISMATCH",
    "PROTOCOL_VERSION",
    "RPCCode",
    "Channel",
    "SocketChannel",
    "ChannelClosed",
    "ChannelTimeout",
    "Handle",
    "Lazy",
    "TensorMeta",
    "Writer",
    "Reader",
    "write_packet",
    "read_packet",
    "Codec",
    "LEGACY",
    "FFI",
    "CODECS",
    "send_handshake_int",
    "recv_handshake_int",
]

RPC_MAGIC = 0xFF271
RPC_TRACKER_MAGIC = 0x2F271
RPC_CODE_SUCCESS = RPC_MAGIC + 0
RPC_CODE_DUPLICATE = RPC_MAGIC + 1
RPC_CODE_MISMATCH = RPC_MAGIC + 2
PROTOCOL_VERSION = "0.8.0"
RPC_OBJECT_REF_TYPE_INDEX = 9  # kRuntimeRPCObjectRefTypeIndex: the only object sent by value
MAX_PACKET_BYTES = 1 << 34  # larger lengths are garbage, not data (16 GiB)
MAX_NDIM = 64
MAX_ARGS = 1 << 16

_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")
_DEVICE = struct.Struct("<ii")
_DTYPE = struct.Struct("<BBH")
_HEADER = struct.Struct("<Qi")


class RPCCode(IntEnum):
    """``RPCCode`` of ``minrpc/rpc_reference.h``; codes >= 9 are syscalls."""

    kNone = 0
    kShutdown = 1
    kInitServer = 2
    kCallFunc = 3
    kReturn = 4
    kException = 5
    kCopyFromRemote = 6
    kCopyToRemote = 7
    kCopyAck = 8
    kGetGlobalFunc = 9
    kFreeHandle = 10
    kDevSetDevice = 11
    kDevGetAttr = 12
    kDevAllocData = 13
    kDevFreeData = 14
    kDevStreamSync = 15
    kCopyAmongRemote = 16
    kDevAllocDataWithScope = 17
    kDevCreateStream = 18
    kDevFreeStream = 19
    kDevSetStream = 20
    kDevGetCurrentStream = 21


class ChannelClosed(RPCError):
    """The peer closed the channel (EOF) or the channel failed; ``received`` counts the bytes
    of the interrupted read that did arrive."""

    def __init__(self, message: str, received: int = 0) -> None:
        super().__init__(message)
        self.received = received


class ChannelTimeout(RPCError):
    """No data came within the channel's timeout; ``received`` counts the bytes of the
    interrupted read that did arrive."""

    def __init__(self, message: str, received: int = 0) -> None:
        super().__init__(message)
        self.received = received


class Channel:
    """A byte pipe with a timeout: what the protocol engine needs from a transport.

    ``recv_into`` raises :class:`ChannelClosed` on EOF and :class:`ChannelTimeout` when the
    timeout passes; both carry how many bytes of the view did arrive.
    """

    timeout: float | None = None

    def send(self, *parts: bytes | bytearray | memoryview) -> None:
        """Write all of ``parts`` in order, as one message (no other send interleaves)."""
        raise NotImplementedError

    def recv_into(self, view: memoryview) -> None:
        """Fill all of ``view``; raise :class:`ChannelClosed` on EOF, RPCError on timeout."""
        raise NotImplementedError

    def recv_view(self, nbytes: int) -> memoryview:
        """The next ``nbytes`` bytes; the view may be the channel's own buffer, valid only
        until the next receive."""
        if nbytes <= 65536:
            body = bytearray(nbytes)
        else:
            try:  # uninitialized: the pages of a bare huge length are never touched
                body = np.empty(nbytes, np.uint8)
            except MemoryError:
                raise RPCError(f"cannot hold an RPC packet of {nbytes} bytes") from None
        view = memoryview(body).cast("B")
        self.recv_into(view)
        return view

    def recv_packet(self, max_bytes: int = MAX_PACKET_BYTES) -> tuple[int, memoryview]:
        """One packet: ``(code, body after the code)``, the body valid until the next receive.

        Zero lengths are skipped, as TVM does. A timeout or EOF before the packet's first byte
        raises with ``received == 0`` (see :func:`read_packet`).
        """
        while True:
            nbytes = _U64.unpack(self.recv_view(8))[0]
            if nbytes:
                break
        if not 4 <= nbytes <= max_bytes:
            raise RPCError(f"RPC packet length {nbytes} is out of range (4..{max_bytes}): "
                           "garbage on the channel")
        try:
            body = self.recv_view(nbytes)
        except (ChannelClosed, ChannelTimeout) as err:
            err.received += 8
            raise
        return _I32.unpack_from(body)[0], body[4:]

    def exchanger(self, packet: bytes, expected: bytes) -> Callable[[], bool]:
        """A zero-argument function for one request that repeats: it sends ``packet`` and
        returns True when the reply is exactly ``expected`` (consumed), False when a reply
        is left for :meth:`recv_packet`. This generic one always leaves the reply."""

        def exchange() -> bool:
            self.send(packet)
            return False

        return exchange

    def close(self) -> None:
        """Release the transport."""


class SocketChannel(Channel):
    """A :class:`Channel` over a connected stream socket; every read and write has a timeout.

    Receives go through one 64 KiB buffer that is never reallocated: a short packet (length,
    code and body) usually costs one ``recv`` and no allocation, and :meth:`recv_view` hands
    out its body in place. Reads larger than the buffer land directly in the caller's memory.
    """

    _CHUNK = 65536

    def __init__(self, sock: socket.socket, timeout: float | None, peer: str = "") -> None:
        self.sock = sock
        self.peer = peer or _peer_name(sock)
        self.timeout = timeout
        self._send_lock = threading.Lock()
        self._buf = bytearray(self._CHUNK)
        self._view = memoryview(self._buf)
        self._start = self._end = 0  # received, not yet consumed: _buf[_start:_end]
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.set_timeout(timeout)
        self._receiver = _socket_receiver(sock.fileno(), self._buf)

    def set_timeout(self, timeout: float | None) -> None:
        """Bound every send and receive by ``timeout`` seconds (None: no bound).

        The bound is the kernel's (SO_RCVTIMEO/SO_SNDTIMEO) on a blocking socket: Python's
        own socket timeout would add a poll() before every send and receive, which costs a
        third of an empty call's round trip.
        """
        self.timeout = timeout
        self.sock.settimeout(None)
        seconds = 0.0 if timeout is None else max(timeout, 1e-3)
        value = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)

    def send(self, *parts: bytes | bytearray | memoryview) -> None:
        if len(parts) > 1 and sum(len(p) for p in parts) < self._CHUNK:
            parts = (b"".join(parts),)  # one segment for small packets
        try:
            with self._send_lock:
                for part in parts:
                    self.sock.sendall(part)
        except OSError as err:
            raise self._send_error(err) from None

    def _send_error(self, err: OSError) -> RPCError:
        if isinstance(err, (TimeoutError, BlockingIOError)):  # SO_SNDTIMEO passed
            return ChannelTimeout(f"RPC channel to {self.peer}: send timed out after "
                                  f"{self.timeout}s")
        return ChannelClosed(f"RPC channel to {self.peer} failed while sending: {err}")

    def exchanger(self, packet: bytes, expected: bytes) -> Callable[[], bool]:
        """The generic :meth:`Channel.exchanger` as one C call (send, a receive that spins
        before it sleeps, a compare) where the runtime library is available, else two system
        calls and a compare: the round trip of a void remote call carries almost no Python
        besides them. Callers serialize their exchanges (a client sends one request at a
        time).
        """
        receiver = self._receiver
        if receiver is None:
            return self._python_exchanger(packet, expected)
        run, state = receiver.exchanger(packet, expected)

        def exchange() -> bool:
            if self._start != self._end:  # bytes of another packet are buffered
                self.send(packet)
                return False
            status = run()
            if status == 1:
                return True
            if status == 0:  # the general path reads on from the bytes received
                self._start, self._end = 0, state.got
                return False
            if status == receiver.SEND_FAILED:
                raise self._send_error(OSError(state.err, os.strerror(state.err)))
            if status == receiver.CLOSED:
                raise self._recv_error(None, 0, 8)
            if state.err == errno.EINTR:  # sent: recv_packet waits for the reply
                return False
            raise self._recv_error(OSError(state.err, os.strerror(state.err)), 0, 8)

        return exchange

    def _python_exchanger(self, packet: bytes, expected: bytes) -> Callable[[], bool]:
        """:meth:`exchanger` without the runtime library.

        ``os.write``/``os.read`` on the socket's descriptor rather than ``sendall``/
        ``recv_into``: their argument parsing is cheaper (callgrind: 4,700 instead of 5,500
        instructions per round trip), and SO_RCVTIMEO/SO_SNDTIMEO bound them all the same.
        """
        fd, write, read = self.sock.fileno(), os.write, os.read

        def exchange() -> bool:
            if self._start != self._end:  # bytes of another packet are buffered
                self.send(packet)
                return False
            try:
                sent = write(fd, packet)
                if sent != len(packet):
                    self.send(packet[sent:])
            except OSError as err:
                raise self._send_error(err) from None
            try:
                reply = read(fd, 4096)  # a larger reply's rest stays for recv_packet
            except OSError as err:
                raise self._recv_error(err, 0, 8) from None
            if reply == expected:
                return True
            if not reply:
                raise self._recv_error(None, 0, 8)
            self._buf[:len(reply)] = reply  # the general path reads on from here
            self._start, self._end = 0, len(reply)
            return False

        return exchange

    def _recv_some(self, into: memoryview | int, got: int, total: int) -> int:
        """One receive into ``into``, or into ``_buf[into:]`` for an offset (through the C
        receiver, which spins briefly before it sleeps, where there is one); errors name
        ``got`` of ``total`` bytes of the read."""
        try:
            if not isinstance(into, int):
                n = self.sock.recv_into(into)
            elif self._receiver is None:
                n = self.sock.recv_into(self._view[into:])
            else:
                n = self._receiver.recv(into)
        except OSError as err:
            raise self._recv_error(err, got, total) from None
        if n == 0:
            raise self._recv_error(None, got, total)
        return n

    def _recv_error(self, err: OSError | None, got: int, total: int) -> RPCError:
        """The error of a receive that failed (``err``) or met EOF (None)."""
        if isinstance(err, (TimeoutError, BlockingIOError)):  # SO_RCVTIMEO passed: EAGAIN
            return ChannelTimeout(f"RPC channel to {self.peer}: no data for {self.timeout}s "
                                  f"(got {got} of {total} bytes); the peer is stuck or gone",
                                  got)
        if err is not None:
            return ChannelClosed(f"RPC channel to {self.peer} failed: {err}", got)
        return ChannelClosed(f"RPC channel to {self.peer} closed by the peer (got {got} of "
                             f"{total} bytes)", got)

    def _fill(self, count: int) -> None:
        """Make ``count`` (<= the buffer size) bytes available at ``_buf[_start:]``."""
        have = self._end - self._start
        if not have:
            self._start = self._end = 0
        elif self._start + count > self._CHUNK:  # move the partial packet to the front
            self._buf[:have] = bytes(self._view[self._start:self._end])
            self._start, self._end = 0, have
        while have < count:
            self._end += self._recv_some(self._end, have, count)
            have = self._end - self._start

    def recv_into(self, view: memoryview) -> None:
        total = len(view)
        got = min(total, self._end - self._start)
        if got:
            view[:got] = self._view[self._start:self._start + got]
            self._start += got
        if got == total:
            return
        self._start = self._end = 0
        if total - got >= self._CHUNK:  # large: straight into the caller's memory
            while got < total:
                got += self._recv_some(view[got:], got, total)
            return
        try:
            self._fill(total - got)
        except (ChannelClosed, ChannelTimeout) as err:
            err.received += got
            raise
        view[got:] = self._view[:total - got]
        self._start = total - got

    def recv_view(self, nbytes: int) -> memoryview:
        if nbytes > self._CHUNK:
            return super().recv_view(nbytes)
        self._fill(nbytes)
        start = self._start
        self._start += nbytes
        return self._view[start:start + nbytes]

    def recv_packet(self, max_bytes: int = MAX_PACKET_BYTES) -> tuple[int, memoryview]:
        start, end = self._start, self._end
        if start == end:  # the usual case: nothing buffered, one recv brings a whole packet
            start = self._start = self._end = 0
            self._end = end = self._recv_some(0, 0, 8)
        if end - start >= 12:
            nbytes, code = _HEADER.unpack_from(self._buf, start)
            if 4 <= nbytes <= end - start - 8 and nbytes <= max_bytes:
                self._start = stop = start + 8 + nbytes
                return code, self._view[start + 12:stop]
        return super().recv_packet(max_bytes)

    def native_loop(self, null_reply: bytes) -> Any:
        """A :class:`~kiln.rpc.native_serve.NativeLoop` over this channel's socket and receive
        buffer, for :meth:`recv_packet_native`; None where the interpreter cannot run it."""
        from kiln.rpc.native_serve import NativeLoop

        if self._receiver is None:
            return None
        return NativeLoop(self._receiver, null_reply)

    def recv_packet_native(self, loop: Any) -> tuple[int, memoryview] | None:
        """:meth:`recv_packet` after ``loop`` answered in C every packet it could: the next
        packet for Python, or None when ``loop`` stopped on a call it made (its status
        tells the caller what to send). Errors are :meth:`recv_packet`'s."""
        while True:
            status = loop.serve(self._start, self._end)
            state = loop.state
            self._start, self._end = state.start, state.end
            if status == loop.PYTHON:
                return self.recv_packet()
            got = self._end - self._start
            if status == loop.CLOSED:
                raise self._recv_error(None, got, max(got, 8))
            if status == loop.RECV_ERROR:
                if state.err == errno.EINTR:
                    continue
                raise self._recv_error(OSError(state.err, os.strerror(state.err)), got,
                                       max(got, 8))
            if status == loop.SEND_ERROR:
                raise self._send_error(OSError(state.err, os.strerror(state.err)))
            return None

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def shutdown(self) -> None:
        """End the connection from another thread: the serving thread's blocked read sees
        EOF and that thread closes the socket. (Closing it here could let the descriptor's
        number be reused by a new connection while a C loop still reads it.)"""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _socket_receiver(fd: int, buffer: bytearray) -> Any:
    """A :class:`~kiln.rpc.native_serve.SocketReceiver` over ``fd`` and ``buffer``, or None
    where the interpreter or the runtime library cannot run it (Python's receives then)."""
    from kiln.rpc.native_serve import SocketReceiver, native_loop_available

    if not native_loop_available():
        return None
    try:
        return SocketReceiver(fd, buffer, config.rpc_spin_us())
    except (TVMError, OSError):  # no C compiler to build the runtime library
        return None


def _peer_name(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "<unconnected>"


def send_handshake_int(channel: Channel, value: int) -> None:
    channel.send(_I32.pack(value))


def recv_handshake_int(channel: Channel) -> int:
    buf = bytearray(4)
    channel.recv_into(memoryview(buf))
    return _I32.unpack(buf)[0]


# ---- values that only have meaning on the wire ----------------------------------------------


class Lazy:
    """Text formatted only when an error message needs it (``str.format`` of ``args``): keeps
    descriptions of every packet off the hot path."""

    __slots__ = ("fmt", "args")

    def __init__(self, fmt: str, *args: Any) -> None:
        self.fmt, self.args = fmt, args

    def __str__(self) -> str:
        return self.fmt.format(*self.args)


class Handle(int):
    """An opaque remote handle (type code 3): a server-side address, never dereferenced here."""


class TensorMeta:
    """A DLTensor as sent over RPC: remote data pointer, device, shape, dtype, byte offset."""

    __slots__ = ("data", "device", "shape", "dtype", "byte_offset")

    def __init__(self, data: int, device: Device, shape: tuple[int, ...], dtype: DataType,
                 byte_offset: int = 0) -> None:
        self.data, self.device, self.shape = data, device, shape
        self.dtype, self.byte_offset = dtype, byte_offset

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        code, bits, lanes = self.dtype.as_tuple()
        return count * ((bits * lanes + 7) // 8)

    def __repr__(self) -> str:
        return (f"TensorMeta(data=0x{self.data:x}, {self.device}, {self.shape}, {self.dtype}, "
                f"byte_offset={self.byte_offset})")


class RemoteRef:
    """A value the peer holds: a remote handle with its type code (9 Module, 10 PackedFunc,
    8 RPC object reference)."""

    __slots__ = ("type_code", "handle")

    def __init__(self, type_code: int, handle: int) -> None:
        self.type_code, self.handle = type_code, handle


# ---- writing ---------------------------------------------------------------------------------


class Writer:
    """Builds one packet body; :meth:`packet` prepends the length and code. Packed sequences
    are written in ``codec``'s encoding."""

    __slots__ = ("parts", "size", "codec")

    def __init__(self, codec: Codec | None = None) -> None:
        self.parts: list[bytes | bytearray | memoryview] = []
        self.size = 0
        self.codec = codec or LEGACY

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self.parts.append(data)
        self.size += len(data)

    def i32(self, value: int) -> None:
        self.raw(_I32.pack(value))

    def u64(self, value: int) -> None:
        self.raw(_U64.pack(value))

    def string(self, data: bytes) -> None:
        self.raw(_U64.pack(len(data)))
        self.raw(data)

    def device(self, dev: Device) -> None:
        self.raw(_DEVICE.pack(dev.device_type, dev.device_id))

    def tensor(self, meta: TensorMeta) -> None:
        ndim = len(meta.shape)
        self.raw(_U64.pack(meta.data) + _DEVICE.pack(meta.device.device_type,
                                                      meta.device.device_id)
                 + _I32.pack(ndim) + _DTYPE.pack(*meta.dtype.as_tuple())
                 + struct.pack(f"<{ndim}q", *meta.shape) + _U64.pack(meta.byte_offset))

    def packed_seq(self, values: list[tuple[int, Any]]) -> None:
        """Write ``(type_code, value)`` pairs (TVM v0.16 type codes) as a packed sequence."""
        self.codec.write_seq(self, values)

    def packet(self, code: int) -> list[bytes | bytearray | memoryview]:
        return [_HEADER.pack(self.size + 4, code), *self.parts]


def _write_dtype(writer: Writer, value: DataType) -> None:
    writer.raw(_DTYPE.pack(*value.as_tuple()) + b"\0\0\0\0")


_WRITERS = {
    TypeCode.INT: lambda w, v: w.raw(_I64.pack(v)),
    TypeCode.UINT: lambda w, v: w.raw(_U64.pack(v)),
    TypeCode.FLOAT: lambda w, v: w.raw(_F64.pack(v)),
    TypeCode.HANDLE: lambda w, v: w.u64(v),
    TypeCode.NULL: lambda w, v: None,
    TypeCode.DATATYPE: _write_dtype,
    TypeCode.DEVICE: Writer.device,
    TypeCode.DLTENSOR_HANDLE: Writer.tensor,
    TypeCode.OBJECT_HANDLE: lambda w, v: w.raw(_U32.pack(RPC_OBJECT_REF_TYPE_INDEX)
                                                + _U64.pack(v)),
    TypeCode.MODULE_HANDLE: lambda w, v: w.u64(v),
    TypeCode.PACKED_FUNC_HANDLE: lambda w, v: w.u64(v),
    TypeCode.STR: lambda w, v: w.string(v.encode()),
    TypeCode.BYTES: lambda w, v: w.string(bytes(v)),
}


# ---- packed-sequence codecs -----------------------------------------------------------------


class Codec:
    """One encoding of packed sequences; kiln's side always uses TVM v0.16 type codes."""

    name = ""
    free_handle_takes_type_code = True  # kFreeHandle(handle, type code) vs (handle)

    def write_seq(self, writer: Writer, values: list[tuple[int, Any]]) -> None:
        raise NotImplementedError

    def read_seq(self, reader: Reader, count: int) -> list[tuple[int, Any]]:
        raise NotImplementedError

    def return_index(self, type_code: int) -> int:
        """The first value of a call's return (the type of what follows) on the wire."""
        return type_code

    def return_type_code(self, index: int) -> int:
        return index

    def call_packet(self, handle: int, values: list[tuple[int, Any]]) -> bytes:
        """A whole kCallFunc packet calling remote function ``handle`` with ``values``."""
        writer = Writer(self)
        writer.u64(handle)
        writer.packed_seq(values)
        return b"".join(writer.packet(RPCCode.kCallFunc))

    @property
    def null_return(self) -> bytes:
        """The body of the kReturn packet of a call that returned nothing (the usual reply,
        sent and recognised without decoding)."""
        body = self.__dict__.get("_null_return")
        if body is None:
            writer = Writer(self)
            writer.packed_seq([(TypeCode.INT, self.return_index(TypeCode.NULL)),
                               (TypeCode.NULL, None)])
            body = self.__dict__["_null_return"] = b"".join(writer.parts)
        return body


# payloads of one fixed size: a sequence made only of these packs with one Struct
_FIXED_FORMATS = {
    TypeCode.INT: "q", TypeCode.UINT: "Q", TypeCode.FLOAT: "d", TypeCode.HANDLE: "Q",
    TypeCode.NULL: "", TypeCode.MODULE_HANDLE: "Q", TypeCode.PACKED_FUNC_HANDLE: "Q",
}
_FIXED_WRAPPERS = {  # what a fixed payload reads as
    TypeCode.HANDLE: Handle,
    TypeCode.MODULE_HANDLE: lambda v: RemoteRef(TypeCode.MODULE_HANDLE, v),
    TypeCode.PACKED_FUNC_HANDLE: lambda v: RemoteRef(TypeCode.PACKED_FUNC_HANDLE, v),
}
_MAX_CACHED_LAYOUTS = 4096


def _fixed_layout(cache: dict, codes: tuple[int, ...], prefix: str) -> struct.Struct | None:
    """The Struct of ``prefix`` + the payloads of ``codes`` when all have a fixed size
    (cached per type-code tuple: calls repeat the same signatures)."""
    layout = cache.get(codes, False)
    if layout is False:
        formats = [_FIXED_FORMATS.get(code) for code in codes]
        layout = None if None in formats else struct.Struct("<" + prefix + "".join(formats))
        if len(cache) < _MAX_CACHED_LAYOUTS:
            cache[codes] = layout
    return layout


class LegacyCodec(Codec):
    """TVM <= 0.20: ``i32 n``, all ``n`` type codes, then the payloads."""

    name = "v0.16"

    def __init__(self) -> None:
        self._write_layouts: dict[tuple[int, ...], struct.Struct | None] = {}
        self._read_layouts: dict[tuple[int, ...], struct.Struct | None] = {}
        self._call_layouts: dict[tuple[int, ...], struct.Struct | None] = {}

    def call_packet(self, handle: int, values: list[tuple[int, Any]]) -> bytes:
        codes = tuple([code for code, _ in values])
        layout = self._call_layouts.get(codes)
        if layout is None:
            layout = _fixed_layout(self._call_layouts, codes, "QiQ" + "i" * (len(codes) + 1))
        if layout is None:
            return super().call_packet(handle, values)
        return layout.pack(layout.size - 8, RPCCode.kCallFunc, handle, len(codes), *codes,
                           *[value for code, value in values if code != TypeCode.NULL])

    def write_seq(self, writer: Writer, values: list[tuple[int, Any]]) -> None:
        codes = tuple([code for code, _ in values])
        layout = _fixed_layout(self._write_layouts, codes, "i" * (len(codes) + 1))
        if layout is not None:  # count, codes and payloads in one pack
            writer.raw(layout.pack(len(codes), *codes,
                                   *[value for code, value in values if code != TypeCode.NULL]))
            return
        writer.i32(len(values))
        writer.raw(struct.pack(f"<{len(values)}i", *codes))
        for code, value in values:
            _WRITERS[code](writer, value)

    def read_seq(self, reader: Reader, count: int) -> list[tuple[int, Any]]:
        codes = struct.unpack(f"<{count}i", reader.take(4 * count))
        layout = _fixed_layout(self._read_layouts, codes, "")
        if layout is not None:
            payloads = iter(layout.unpack(reader.take(layout.size)))
            fixed = []
            for code in codes:
                if code == TypeCode.NULL:
                    fixed.append((code, None))
                    continue
                wrap = _FIXED_WRAPPERS.get(code)
                fixed.append((code, next(payloads) if wrap is None else wrap(next(payloads))))
            return fixed
        values = []
        for code in codes:
            read = _READERS.get(code)
            if read is None:
                raise RPCError(f"{reader.what}: unknown argument type code {code}")
            values.append((code, read(reader)))
        return values


# tvm-ffi TypeIndex values (apache-tvm >= 0.21) <-> v0.16 type codes.
_FFI_OF_CODE = {
    TypeCode.NULL: 0, TypeCode.INT: 1, TypeCode.UINT: 1, TypeCode.FLOAT: 3,
    TypeCode.HANDLE: 4, TypeCode.DATATYPE: 5, TypeCode.DEVICE: 6,
    TypeCode.DLTENSOR_HANDLE: 7, TypeCode.STR: 8, TypeCode.BYTES: 9,
    TypeCode.PACKED_FUNC_HANDLE: 68, TypeCode.MODULE_HANDLE: 73,
}
_CODE_OF_FFI = {0: TypeCode.NULL, 1: TypeCode.INT, 2: TypeCode.INT, 3: TypeCode.FLOAT,
                4: TypeCode.HANDLE, 5: TypeCode.DATATYPE, 6: TypeCode.DEVICE,
                7: TypeCode.DLTENSOR_HANDLE, 8: TypeCode.STR, 9: TypeCode.BYTES,
                68: TypeCode.PACKED_FUNC_HANDLE, 73: TypeCode.MODULE_HANDLE}
# what a return's first value names: the type of the value, not of its wire form
_FFI_RETURN_OF_CODE = {**_FFI_OF_CODE, TypeCode.STR: 65, TypeCode.BYTES: 66,
                       TypeCode.NDARRAY_HANDLE: 70, TypeCode.OBJECT_HANDLE: 64}
_CODE_OF_FFI_RETURN = {**_CODE_OF_FFI, 11: TypeCode.STR, 65: TypeCode.STR,
                       12: TypeCode.BYTES, 66: TypeCode.BYTES, 70: TypeCode.NDARRAY_HANDLE}
_FFI_STR, _FFI_BYTES, _FFI_OBJECT_BEGIN = 65, 66, 64


class FFICodec(Codec):
    """apache-tvm >= 0.21 (PR #17931): per argument ``i32 type_index`` + payload, tvm-ffi
    type indices; String/Bytes objects as ``u32 index, u64 len, bytes``."""

    name = "ffi"
    free_handle_takes_type_code = False

    def write_seq(self, writer: Writer, values: list[tuple[int, Any]]) -> None:
        writer.i32(len(values))
        for code, value in values:
            index = _FFI_OF_CODE.get(code)
            if index is None:
                raise RPCError(f"type code {code} cannot be sent to an apache-tvm >= 0.21 peer")
            writer.i32(index)
            _WRITERS[code](writer, value)

    def read_seq(self, reader: Reader, count: int) -> list[tuple[int, Any]]:
        values = []
        for _ in range(count):
            index = reader.i32()
            code = _CODE_OF_FFI.get(index)
            if code is not None:
                values.append((code, _READERS[code](reader)))
            elif index in (11, 12) or index >= _FFI_OBJECT_BEGIN:
                inner = reader.unpack(_U32)
                if inner == _FFI_STR:
                    values.append((TypeCode.STR, reader.text()))
                elif inner == _FFI_BYTES:
                    values.append((TypeCode.BYTES, bytes(reader.string())))
                else:
                    raise RPCError(f"{reader.what}: object type index {inner} cannot cross "
                                   "RPC here")
            else:
                raise RPCError(f"{reader.what}: unknown argument type index {index}")
        return values

    def return_index(self, type_code: int) -> int:
        return _FFI_RETURN_OF_CODE[type_code]

    def return_type_code(self, index: int) -> int:
        code = _CODE_OF_FFI_RETURN.get(index)
        if code is None:
            return TypeCode.OBJECT_HANDLE if index >= _FFI_OBJECT_BEGIN else -1
        return code


LEGACY = LegacyCodec()
FFI = FFICodec()
CODECS = {LEGACY.name: LEGACY, FFI.name: FFI}


def write_packet(channel: Channel, code: int, writer: Writer | None = None) -> None:
    """Send one packet (``writer`` holds the body; None for an empty body)."""
    channel.send(*(writer or Writer()).packet(code))


# ---- reading ---------------------------------------------------------------------------------


class Reader:
    """Reads fields from one received packet body; every read is bounds-checked."""

    __slots__ = ("buf", "pos", "what", "codec")

    def __init__(self, buf: bytes | bytearray | memoryview, what: str | Lazy = "RPC packet",
                 codec: Codec | None = None) -> None:
        self.buf, self.pos, self.what = memoryview(buf), 0, what
        self.codec = codec or LEGACY

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise RPCError(f"{self.what} is truncated: needs {n} more bytes at offset "
                           f"{self.pos}, has {len(self.buf) - self.pos}")
        view = self.buf[self.pos:self.pos + n]
        self.pos += n
        return view

    def unpack(self, fmt: struct.Struct) -> Any:
        return fmt.unpack(self.take(fmt.size))[0]

    def i32(self) -> int:
        return self.unpack(_I32)

    def u64(self) -> int:
        return self.unpack(_U64)

    def string(self) -> memoryview:
        return self.take(self.u64())

    def text(self) -> str:
        try:
            return bytes(self.string()).decode()
        except UnicodeDecodeError:
            raise RPCError(f"{self.what}: a string argument is not UTF-8") from None

    def device(self) -> Device:
        return Device(*_DEVICE.unpack(self.take(8)))

    def dtype(self) -> DataType:
        code, bits, lanes = _DTYPE.unpack(self.take(4))
        try:
            return DataType.from_fields(code, bits, lanes)
        except Exception as err:
            raise RPCError(f"{self.what}: invalid DLDataType ({code}, {bits}, {lanes}): "
                           f"{err}") from None

    def tensor(self) -> TensorMeta:
        data = self.u64()
        dev = self.device()
        ndim = self.i32()
        if not 0 <= ndim <= MAX_NDIM:
            raise RPCError(f"{self.what}: DLTensor has an invalid ndim {ndim}")
        dtype = self.dtype()
        shape = struct.unpack(f"<{ndim}q", self.take(8 * ndim))
        if any(d < 0 for d in shape):
            raise RPCError(f"{self.what}: DLTensor has a negative dimension in {shape}")
        return TensorMeta(data, dev, shape, dtype, self.u64())

    def packed_seq(self) -> list[tuple[int, Any]]:
        """``(type_code, value)`` pairs (v0.16 type codes); handles stay integers."""
        count = self.i32()
        if not 0 <= count <= MAX_ARGS or 4 * count > self.remaining():
            raise RPCError(f"{self.what}: invalid argument count {count}")
        return self.codec.read_seq(self, count)

    def end(self) -> None:
        if self.remaining():
            raise RPCError(f"{self.what} has {self.remaining()} unexpected trailing bytes")


def _read_dtype(reader: Reader) -> DataType:
    dtype = reader.dtype()
    reader.take(4)  # padding to 8 bytes
    return dtype


def _read_object(reader: Reader) -> RemoteRef:
    type_index = reader.unpack(_U32)
    if type_index != RPC_OBJECT_REF_TYPE_INDEX:
        raise RPCError(f"{reader.what}: object type index {type_index} cannot cross RPC "
                       "(only RPC object references can)")
    return RemoteRef(TypeCode.OBJECT_HANDLE, reader.unpack(_I64))


_READERS = {
    TypeCode.INT: lambda r: r.unpack(_I64),
    TypeCode.UINT: lambda r: r.unpack(_U64),
    TypeCode.FLOAT: lambda r: r.unpack(_F64),
    TypeCode.HANDLE: lambda r: Handle(r.u64()),
    TypeCode.NULL: lambda r: None,
    TypeCode.DATATYPE: _read_dtype,
    TypeCode.DEVICE: Reader.device,
    TypeCode.DLTENSOR_HANDLE: Reader.tensor,
    TypeCode.OBJECT_HANDLE: _read_object,
    TypeCode.MODULE_HANDLE: lambda r: RemoteRef(TypeCode.MODULE_HANDLE, r.u64()),
    TypeCode.PACKED_FUNC_HANDLE: lambda r: RemoteRef(TypeCode.PACKED_FUNC_HANDLE, r.u64()),
    TypeCode.STR: Reader.text,
    TypeCode.BYTES: lambda r: bytes(r.string()),
}


def read_packet(channel: Channel, max_bytes: int = MAX_PACKET_BYTES,
                idle_timeout: float | None = -1.0) -> tuple[int, memoryview] | None:
    """Receive one packet: ``(code, body after the code)``, or None on a clean EOF between
    packets. The body may live in the channel's buffer: it is valid until the next receive.

    Reads use the channel's timeout. ``idle_timeout`` (when not -1) is how long to wait for a
    packet to begin, in as many channel timeouts as it takes (None: wait forever, as a server
    waits for its client). A zero length is skipped, as TVM does.
    """
    waited_since = time.monotonic() if idle_timeout not in (-1.0, None) else 0.0
    while True:
        try:
            return channel.recv_packet(max_bytes)
        except ChannelClosed as err:
            if err.received == 0:
                return None
            raise
        except ChannelTimeout as err:
            idle = time.monotonic() - waited_since
            if err.received == 0 and idle_timeout != -1.0 and (
                    idle_timeout is None or idle < idle_timeout):
                continue
            raise
