"""The RPC client: sessions with a remote kiln or TVM server, and the in-process LocalSession.

Entry points: :func:`connect`, :class:`RPCSession`, :class:`LocalSession`,
:class:`ClientEndpoint` (the protocol engine, over any :class:`~kiln.rpc.protocol.Channel`).

Remote values are ordinary kiln objects: a remote function is a :class:`PackedFunc`, a remote
module a :class:`~kiln.runtime.module.Module` (type key ``"rpc"``), a remote array a
:class:`~kiln.runtime.device_api.DeviceNDArray` on a device whose type carries the session
(``device_type = local type + 128 * (session index + 1)``, TVM's ``kRPCSessMask``): each
session registers a device API for its devices, so ``kiln.nd.array(x, remote.cpu(0))``,
``.numpy()`` and ``copyto`` work unchanged. Remote handles are released with ``kFreeHandle`` /
``kDevFreeData`` before the session's next request (never from a garbage-collector callback in
the middle of another packet).

Example
-------
>>> sess = LocalSession()
>>> sess.upload(b"hello", "a.txt"); sess.download("a.txt"), sess.cpu(0)
(b'hello', cpu(0))
"""

from __future__ import annotations

import collections
import functools
import itertools
import os
import shutil
import socket
import struct
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from kiln.rpc.protocol import (
    FFI,
    LEGACY,
    PROTOCOL_VERSION,
    RPC_CODE_DUPLICATE,
    RPC_CODE_MISMATCH,
    RPC_CODE_SUCCESS,
    RPC_MAGIC,
    Channel,
    ChannelClosed,
    Handle,
    Lazy,
    Reader,
    RemoteRef,
    RPCCode,
    SocketChannel,
    TensorMeta,
    Writer,
    read_packet,
    recv_handshake_int,
    send_handshake_int,
    write_packet,
)
from kiln.rpc.serving import builtin_global, confined_path, session_globals
from kiln.runtime.device import RPC_SESS_MASK, Device
from kiln.runtime.device_api import DeviceAPI, DeviceBuffer, DeviceNDArray, register_device_api
from kiln.runtime.dtype import DataType
from kiln.runtime.error import RPCError, RPCSessionTimeoutError, TVMError
from kiln.runtime.module import Module, load_module
from kiln.runtime.ndarray import NDArray
from kiln.runtime.packed_func import PackedFunc, TypeCode
from kiln.runtime.profiling import BenchmarkResult, check_timing_args
from kiln.runtime.registry import get_global_func

__all__ = ["connect", "RPCSession", "LocalSession", "ClientEndpoint", "RPCModule",
           "RemoteFunction"]

DEFAULT_REPLY_TIMEOUT = 600.0  # seconds a reply may take unless connect(timeout=...) says
_UINT8 = DataType("uint8")
_HEADER = struct.Struct("<Qi")
_RETURN = int(RPCCode.kReturn)
_SESSION_COUNT = itertools.count()  # session index, for remote device types


class ClientEndpoint:
    """The client half of the protocol over a connected ``channel``: one request at a time."""

    def __init__(self, channel: Channel, name: str) -> None:
        self.channel = channel
        self.name = name
        self._lock = threading.Lock()
        self._pending_frees: collections.deque[tuple[int, int]] = collections.deque()
        self._closed: str | None = None
        self._max_transfer: int | None = None
        self.codec = LEGACY  # until InitServer's reply shows the server's encoding
        self.index = next(_SESSION_COUNT)
        # An endpoint nobody uses any more (no session, module, function or array of it)
        # shuts its session down, as TVM's does when its last reference goes.
        weakref.finalize(self, _shutdown, channel)

    # ---- requests ----------------------------------------------------------------------------

    def _request(self, code: int, writer: Writer | None, what: str) -> list[tuple[int, Any]]:
        with self._lock:
            self._flush_frees()
            return self._exchange(code, writer, what)

    def _exchange(self, code: int, writer: Writer | None, what: str) -> list[tuple[int, Any]]:
        reply, body = self._transact((writer or Writer()).packet(code), what)
        return self._decode_reply(reply, body, what)

    def _transact(self, parts: Any, what: str | Lazy) -> tuple[int, memoryview]:
        """Send one packet and receive the reply (the caller holds the lock; the body is valid
        until the next receive)."""
        if self._closed is not None:
            self._check_open()
        try:
            self.channel.send(*parts)
            return self.channel.recv_packet()
        except RPCError as err:
            raise self._lost_by(err, what) from None

    def _lost_by(self, err: RPCError, what: str | Lazy) -> RPCError:
        """The session-lost error of a request whose channel failed with ``err``."""
        if isinstance(err, ChannelClosed) and err.received == 0:
            return self._lost(what, "the server closed the connection")
        return self._lost(what, err)

    def _decode_reply(self, reply: int, body: memoryview, what: str) -> list[tuple[int, Any]]:
        reader = Reader(body, Lazy("RPC reply to {}", what), self.codec)
        if reply == RPCCode.kReturn:
            values = reader.packed_seq()
            reader.end()
            return values
        if reply == RPCCode.kException:
            values = reader.packed_seq()
            message = str(values[0][1]) if values else "(no message)"
            if message.startswith("RPCSessionTimeoutError: "):
                raise RPCSessionTimeoutError(message)
            raise RPCError(f"Error caught from RPC call:\n{message}")
        if reply == RPCCode.kShutdown:
            raise self._lost(what, "the server shut the session down")
        raise self._lost(what, f"unexpected RPC code {reply} in the reply")

    def _lost(self, what: str, reason: Any) -> RPCError:
        self._closed = f"{reason}"
        self.channel.close()
        return RPCError(f"RPC session {self.name} lost during {what}: {reason}")

    def _check_open(self) -> None:
        if self._closed is not None:
            raise RPCError(f"RPC session {self.name} is closed ({self._closed})")

    def init_server(self) -> None:
        """Send kInitServer; its void reply tells the server's packed-sequence encoding:
        one value of type 4 (kTVMNullptr, TVM <= 0.20) or 0 (kTVMFFINone, >= 0.21)."""
        writer = Writer()
        writer.string(PROTOCOL_VERSION.encode())
        writer.i32(0)  # no session constructor: the same bytes in both encodings
        try:
            write_packet(self.channel, RPCCode.kInitServer, writer)
            packet = read_packet(self.channel)
        except RPCError as err:
            raise self._lost("InitServer", err) from None
        if packet is None:
            raise self._lost("InitServer", "the server closed the connection")
        code, body = packet
        if code == RPCCode.kReturn and bytes(body) == struct.pack("<ii", 1, 0):
            self.codec = FFI
        elif code != RPCCode.kReturn or bytes(body) != struct.pack("<ii", 1, 4):
            for codec in (LEGACY, FFI):  # an exception: report its message
                self.codec = codec
                try:
                    self._decode_reply(code, body, "InitServer")
                except RPCError as err:
                    if isinstance(err, RPCSessionTimeoutError) or "Error caught" in str(err):
                        raise
            raise self._lost("InitServer", f"unexpected reply {bytes(body)[:32].hex()}")

    def call(self, handle: int, args: tuple, name: str | Lazy = "") -> Any:
        """Call the remote function ``handle`` (called ``name``); the decoded return value."""
        return self._call(handle, Lazy("call to {!r}", name), *args)

    def _call(self, handle: int, what: Lazy, *args: Any) -> Any:
        """:meth:`call`, the hot path of RPC: one prebuilt packet out, one packet in, and a
        void reply recognised by its bytes (an empty call costs two syscalls and little else).
        Remote functions bind ``handle`` and ``what`` once."""
        codec = self.codec
        packet = codec.call_packet(handle, [self._encode_arg(arg) for arg in args])
        with self._lock:
            if self._pending_frees:
                self._flush_frees()
            code, body = self._transact((packet,), what)
            if code == _RETURN and body == codec.null_return:
                return None
            values = self._decode_reply(code, body, what)  # decoded before the lock frees
        return self._decode_return(values, what)

    def syscall(self, code: RPCCode, *args: tuple[int, Any]) -> Any:
        writer = Writer(self.codec)
        writer.packed_seq(list(args))
        values = self._request(code, writer, code.name)
        if len(values) != 1:
            raise self._lost(code.name, f"a syscall reply has {len(values)} values, not 1")
        return values[0][1]

    def copy_to_remote(self, meta: TensorMeta, data: memoryview) -> None:
        for offset, chunk in self._chunks(meta, len(data)):
            writer = Writer()
            writer.tensor(TensorMeta(meta.data, meta.device, meta.shape, meta.dtype,
                                     meta.byte_offset + offset))
            writer.u64(chunk)
            writer.raw(data[offset:offset + chunk])
            self._request(RPCCode.kCopyToRemote, writer, "CopyToRemote")

    def copy_from_remote(self, meta: TensorMeta, out: memoryview) -> None:
        """Fill ``out`` from remote memory; the data goes straight into ``out``."""
        for offset, chunk in self._chunks(meta, len(out)):
            writer = Writer()
            writer.tensor(TensorMeta(meta.data, meta.device, meta.shape, meta.dtype,
                                     meta.byte_offset + offset))
            writer.u64(chunk)
            with self._lock:
                self._flush_frees()
                self._check_open()
                self._copy_ack(writer, out[offset:offset + chunk])

    def _copy_ack(self, writer: Writer, out: memoryview) -> None:
        header = bytearray(12)
        try:
            write_packet(self.channel, RPCCode.kCopyFromRemote, writer)
            self.channel.recv_into(memoryview(header))
            nbytes, code = _HEADER.unpack(header)
            if code == RPCCode.kCopyAck and nbytes == 4 + len(out):
                self.channel.recv_into(out)
                return
            if not 4 <= nbytes <= 1 << 30:
                raise RPCError(f"reply length {nbytes} is out of range")
            body = bytearray(nbytes - 4)
            self.channel.recv_into(memoryview(body))
        except RPCError as err:
            raise self._lost("CopyFromRemote", err) from None
        if code == RPCCode.kCopyAck:
            raise self._lost("CopyFromRemote", f"got {nbytes - 4} bytes, asked {len(out)}")
        self._decode_reply(code, memoryview(body), "CopyFromRemote")
        raise self._lost("CopyFromRemote", f"unexpected RPC code {code}")

    def _chunks(self, meta: TensorMeta, nbytes: int) -> list[tuple[int, int]]:
        """``(offset, size)`` blocks that respect the server's packet limit (microTVM)."""
        if self._max_transfer is None:
            self._max_transfer = 0
            limit = self.get_function("tvm.rpc.server.GetCRTMaxPacketSize", allow_missing=True)
            if limit is not None:
                self._max_transfer = int(limit())
        block = nbytes
        if self._max_transfer:
            block = self._max_transfer - (44 + 8 * len(meta.shape))
            if block <= 0:
                raise RPCError(f"the server's packet limit {self._max_transfer} is too small")
        if nbytes == 0:
            return []  # nothing to move: no packet
        return [(o, min(block, nbytes - o)) for o in range(0, nbytes, block)]

    def free_later(self, handle: int, type_code: int) -> None:
        """Queue a kFreeHandle (type codes 8/9/10/13) or a kDevFreeData (type code -1)."""
        if self._closed is None:
            self._pending_frees.append((handle, type_code))

    def _flush_frees(self) -> None:
        while self._pending_frees:
            handle, type_code = self._pending_frees.popleft()
            writer = Writer(self.codec)
            if type_code == -1:
                writer.packed_seq([(TypeCode.DEVICE, Device(1, 0)), (TypeCode.HANDLE, handle)])
                self._exchange(RPCCode.kDevFreeData, writer, "DevFreeData")
            else:
                args = [(TypeCode.HANDLE, handle), (TypeCode.INT, type_code)]
                writer.packed_seq(args if self.codec.free_handle_takes_type_code else args[:1])
                self._exchange(RPCCode.kFreeHandle, writer, "FreeHandle")

    def close(self) -> None:
        """Send kShutdown and drop the channel (idempotent)."""
        with self._lock:
            if self._closed is not None:
                return
            try:
                write_packet(self.channel, RPCCode.kShutdown)
            except RPCError:
                pass
            self._closed = "closed by the client"
            self.channel.close()

    # ---- values ------------------------------------------------------------------------------

    def get_function(self, name: str, allow_missing: bool = False) -> PackedFunc | None:
        handle = self.syscall(RPCCode.kGetGlobalFunc, (TypeCode.STR, name))
        if not handle:
            if allow_missing:
                return None
            raise AttributeError(f"RPC server {self.name} has no function {name!r}")
        return self._remote_function(int(handle), name)

    def _remote_function(self, handle: int, name: str) -> PackedFunc:
        func = RemoteFunction(self, handle, name)
        weakref.finalize(func, self.free_later, handle, TypeCode.PACKED_FUNC_HANDLE)
        _REMOTE_HANDLES[func] = (self, handle, TypeCode.PACKED_FUNC_HANDLE)
        return func

    def strip_device(self, dev: Device) -> Device:
        """The server-side device of a device of this session (mask removed)."""
        if dev.device_type < RPC_SESS_MASK:
            return dev
        if dev.device_type // RPC_SESS_MASK - 1 != self.index:
            raise TVMError(f"{dev} belongs to another RPC session than {self.name}")
        return Device(dev.device_type % RPC_SESS_MASK, dev.device_id)

    def remote_device(self, dev: Device) -> Device:
        masked = Device(dev.device_type + RPC_SESS_MASK * (self.index + 1), dev.device_id)
        register_device_api(masked.device_type, _RemoteDeviceAPI(weakref.ref(self)))
        return masked

    def _encode_arg(self, arg: Any) -> tuple[int, Any]:
        if arg is None:
            return (TypeCode.NULL, None)
        if isinstance(arg, (bool, int, np.integer)):
            if not -(1 << 63) <= arg < 1 << 63:
                raise TVMError(f"integer argument {arg} does not fit in int64")
            return (TypeCode.INT, int(arg))
        if isinstance(arg, (float, np.floating)):
            return (TypeCode.FLOAT, float(arg))
        if isinstance(arg, str):
            return (TypeCode.STR, arg)
        if isinstance(arg, (bytes, bytearray, memoryview)):
            return (TypeCode.BYTES, bytes(arg))
        if isinstance(arg, DataType):
            return (TypeCode.DATATYPE, arg)
        if isinstance(arg, Device):
            return (TypeCode.DEVICE, self.strip_device(arg))
        if isinstance(arg, NDArray):
            return (TypeCode.DLTENSOR_HANDLE, self.tensor_meta(arg))
        remote = _REMOTE_HANDLES.get(arg) if isinstance(arg, (PackedFunc, Module)) else None
        if remote is not None:
            if remote[0] is not self:
                raise TVMError(f"{arg!r} belongs to another RPC session than {self.name}")
            return (remote[2], remote[1])
        if isinstance(arg, RemoteObject):
            return (TypeCode.OBJECT_HANDLE, arg.handle)
        raise TVMError(f"a local {type(arg).__name__} cannot be sent to RPC server "
                       f"{self.name}; only numbers, strings, bytes, dtypes, devices and "
                       "values of this session can")

    def tensor_meta(self, array: NDArray) -> TensorMeta:
        buffer = getattr(array, "_buffer", None)
        api = getattr(buffer, "api", None)
        if not isinstance(api, _RemoteDeviceAPI) or api.endpoint is not self:
            raise TVMError(f"an NDArray on {array.device} is not memory of RPC session "
                           f"{self.name}; copy it there first: kiln.nd.array(x, "
                           "remote.cpu(0))")
        return TensorMeta(buffer.handle, self.strip_device(array.device), array.shape,
                          DataType(array.dtype), array._offset)

    def _decode_return(self, values: list[tuple[int, Any]], what: str) -> Any:
        if not values or values[0][0] != TypeCode.INT:
            raise self._lost(what, "a call reply lacks its return type code")
        type_code = self.codec.return_type_code(values[0][1])
        if type_code == TypeCode.NULL:
            return None
        if type_code == TypeCode.NDARRAY_HANDLE and len(values) == 3:
            meta, container = values[1][1], int(values[2][1])
            if not isinstance(meta, TensorMeta):
                raise self._lost(what, "an NDArray return lacks its DLTensor")
            dev = self.remote_device(meta.device)
            api = _RemoteDeviceAPI(self, container)
            buffer = DeviceBuffer(api, dev, meta.nbytes, handle=meta.data)
            return DeviceNDArray.on(buffer, meta.byte_offset, meta.shape, meta.dtype)
        if len(values) != 2:
            raise self._lost(what, f"a call reply has {len(values)} values")
        value = values[1][1]
        if type_code == TypeCode.PACKED_FUNC_HANDLE:
            return self._remote_function(int(value), str(what))
        if type_code == TypeCode.MODULE_HANDLE:
            return RPCModule(self, int(value))
        if type_code == TypeCode.OBJECT_HANDLE:
            return RemoteObject(self, int(value))
        if isinstance(value, (RemoteRef, Handle)):
            return int(value) if isinstance(value, Handle) else value
        return value


class RemoteFunction(PackedFunc):
    """A function of an RPC server (a PackedFunc whose body is :meth:`ClientEndpoint.call`).

    A call without arguments that returns nothing (an empty call) is the hot path of RPC: one
    prebuilt packet out and one reply recognised by its bytes, in one C call of the channel's
    :meth:`~kiln.rpc.protocol.Channel.exchanger`, with the Python around it kept to this one
    method (a lock and a few attribute loads).
    """

    _extra_slots = ("_endpoint", "_handle", "_what", "_exchange", "_null_return")

    def __init__(self, endpoint: ClientEndpoint, handle: int, name: str) -> None:
        what = Lazy("call to {!r}", name)
        super().__init__(functools.partial(endpoint._call, handle, what), name)
        codec = endpoint.codec  # settled: functions come after InitServer
        null_return = codec.null_return
        exchange = endpoint.channel.exchanger(
            codec.call_packet(handle, []),
            _HEADER.pack(len(null_return) + 4, _RETURN) + null_return)
        for slot, value in (("_endpoint", endpoint), ("_handle", handle), ("_what", what),
                            ("_exchange", exchange), ("_null_return", null_return)):
            self._set(slot, value)

    def __call__(self, *args: Any) -> Any:
        endpoint = self._endpoint
        if args or endpoint._pending_frees:
            return endpoint._call(self._handle, self._what, *args)
        lock = endpoint._lock
        lock.acquire()  # (not `with`: this is the one lock on the path, and cheaper so)
        try:
            if endpoint._closed is not None:
                endpoint._check_open()
            try:
                if self._exchange():
                    return None
                code, body = endpoint.channel.recv_packet()
            except RPCError as err:
                raise endpoint._lost_by(err, self._what) from None
            if code == _RETURN and body == self._null_return:
                return None
            values = endpoint._decode_reply(code, body, self._what)
        finally:
            lock.release()
        return endpoint._decode_return(values, self._what)


# Remote functions and modules of all sessions -> (endpoint, handle, type code).
_REMOTE_HANDLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _RemotePointer(int):
    """A remote data pointer that keeps its session alive while memory uses it."""

    def __new__(cls, value: int, endpoint: ClientEndpoint) -> _RemotePointer:
        pointer = super().__new__(cls, value)
        pointer.endpoint = endpoint
        return pointer


def _shutdown(channel: Channel) -> None:
    """Send kShutdown and close ``channel`` (after an explicit close this does nothing)."""
    try:
        write_packet(channel, RPCCode.kShutdown)
    except (RPCError, OSError):
        pass
    try:
        channel.close()
    except OSError:
        pass


class RemoteObject:
    """An object that stays on the server (TVM's ``RPCObjectRef``)."""

    def __init__(self, endpoint: ClientEndpoint, handle: int) -> None:
        self.endpoint, self.handle = endpoint, handle
        weakref.finalize(self, endpoint.free_later, handle, TypeCode.OBJECT_HANDLE)


class _RemoteDeviceAPI(DeviceAPI):
    """Memory of one RPC session: allocation, copies and frees are RPC requests.

    ``container`` set: the buffer is an NDArray the server returned, freed with kFreeHandle.
    The API registered for a session's device types holds the session weakly (the registry
    lives forever); the memory it allocates holds the session through its handle.
    """

    def __init__(self, endpoint: ClientEndpoint | weakref.ref,
                 container: int | None = None) -> None:
        self._endpoint, self.container = endpoint, container

    @property
    def endpoint(self) -> ClientEndpoint:
        if isinstance(self._endpoint, ClientEndpoint):
            return self._endpoint
        endpoint = self._endpoint()
        if endpoint is None:
            raise TVMError("this RPC session is closed (no session object is left)")
        return endpoint

    def alloc(self, device: Device, nbytes: int) -> int:
        endpoint = self.endpoint
        dev = endpoint.strip_device(device)
        handle = endpoint.syscall(RPCCode.kDevAllocData, (TypeCode.DEVICE, dev),
                                  (TypeCode.INT, nbytes), (TypeCode.INT, 64),
                                  (TypeCode.DATATYPE, _UINT8))
        return _RemotePointer(int(handle), endpoint)

    def free(self, device: Device, handle: int) -> None:
        if self.container is not None:
            self.endpoint.free_later(self.container, TypeCode.NDARRAY_HANDLE)
        else:
            self.endpoint.free_later(handle, -1)

    def _meta(self, device: Device, handle: int, offset: int, nbytes: int) -> TensorMeta:
        dev = self.endpoint.strip_device(device)
        return TensorMeta(handle, dev, (nbytes,), _UINT8, offset)

    def copy_from_host(self, device: Device, handle: int, offset: int,
                       host: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(host).reshape(-1).view(np.uint8))
        self.endpoint.copy_to_remote(self._meta(device, handle, offset, len(data)), data)

    def copy_to_host(self, device: Device, handle: int, offset: int, host: np.ndarray) -> None:
        out = memoryview(host.reshape(-1).view(np.uint8))  # host is contiguous: a view
        self.endpoint.copy_from_remote(self._meta(device, handle, offset, len(out)), out)

    def copy_within(self, device: Device, src: int, src_offset: int, dst: int,
                    dst_offset: int, nbytes: int) -> None:
        self.endpoint.syscall(RPCCode.kCopyAmongRemote,
                              (TypeCode.DLTENSOR_HANDLE, self._meta(device, src, src_offset,
                                                                    nbytes)),
                              (TypeCode.DLTENSOR_HANDLE, self._meta(device, dst, dst_offset,
                                                                    nbytes)),
                              (TypeCode.NULL, None))


class RPCModule(Module):
    """A module living on the RPC server (TVM's ``RPCModuleNode``, type key ``"rpc"``)."""

    type_key = "rpc"

    def __init__(self, endpoint: ClientEndpoint, handle: int) -> None:
        super().__init__()
        self.endpoint, self.handle = endpoint, handle
        _REMOTE_HANDLES[self] = (endpoint, handle, TypeCode.MODULE_HANDLE)
        weakref.finalize(self, endpoint.free_later, handle, TypeCode.MODULE_HANDLE)

    def _get_function(self, name: str) -> PackedFunc | None:
        getter = self.endpoint.get_function("tvm.rpc.server.ModuleGetFunction")
        return getter(self, name, True)

    def import_module(self, module: Module) -> None:
        self.endpoint.get_function("tvm.rpc.server.ImportModule")(self, module)

    def time_evaluator(self, func_name: str, dev: Device, *args: Any, **kwargs: Any) -> Any:
        """Time ``func_name`` on the server (``runtime.RPCTimeEvaluator``); TVM's arguments
        ``number, repeat, min_repeat_ms, limit_zero_time_iterations, cooldown_interval_ms,
        repeats_to_cooldown, cache_flush_bytes, f_preproc``."""
        return remote_time_evaluator(self.endpoint, self, func_name, dev, *args, **kwargs)


def remote_time_evaluator(endpoint: ClientEndpoint | None, module: RPCModule | None,
                          func_name: str, dev: Device, number: int = 10, repeat: int = 1,
                          min_repeat_ms: float = 0, limit_zero_time_iterations: int = 100,
                          cooldown_interval_ms: float = 0, repeats_to_cooldown: int = 1,
                          cache_flush_bytes: int = 0, f_preproc: str = "") -> Any:
    """A local function that runs the time evaluator of ``endpoint``'s server (None: this
    process) and returns a :class:`BenchmarkResult` of ``repeat`` seconds-per-call values."""
    check_timing_args(number, repeat, min_repeat_ms, limit_zero_time_iterations,
                      cooldown_interval_ms, repeats_to_cooldown, cache_flush_bytes)
    if endpoint is None:
        from kiln.rpc.serving import rpc_time_evaluator as make
    else:
        dev = endpoint.strip_device(dev)
        make = endpoint.get_function("runtime.RPCTimeEvaluator")
    feval = make(module, func_name, dev.device_type, dev.device_id, number, repeat,
                 int(min_repeat_ms), limit_zero_time_iterations, int(cooldown_interval_ms),
                 repeats_to_cooldown, cache_flush_bytes, f_preproc)

    def evaluator(*args: Any) -> BenchmarkResult:
        blob = feval(*args)
        if not isinstance(blob, bytes) or len(blob) != 8 * repeat:
            raise RPCError(f"time evaluator returned {len(blob or b'')} bytes, expected "
                           f"{8 * repeat}")
        return BenchmarkResult(struct.unpack(f"@{repeat}d", blob))

    return evaluator


class RPCSession:
    """A session with an RPC server (TVM's ``tvm.rpc.RPCSession``); see :func:`connect`."""

    def __init__(self, endpoint: ClientEndpoint) -> None:
        self._endpoint = endpoint
        self._remote_funcs: dict[str, PackedFunc] = {}

    def get_function(self, name: str) -> PackedFunc:
        """The server's global function ``name`` (AttributeError if it has none)."""
        return self._endpoint.get_function(name)

    def _func(self, name: str) -> PackedFunc:
        if name not in self._remote_funcs:
            self._remote_funcs[name] = self.get_function(name)
        return self._remote_funcs[name]

    def device(self, dev_type: int | str, dev_id: int = 0) -> Device:
        """A device of the server, e.g. ``remote.device("cpu", 0)``."""
        from kiln.runtime.device import device

        return self._endpoint.remote_device(device(dev_type, dev_id))

    def cpu(self, dev_id: int = 0) -> Device:
        return self.device(1, dev_id)

    def upload(self, data: str | os.PathLike | bytes | bytearray,
               target: str | None = None) -> None:
        """Copy a file (a path) or ``data`` (bytes) into the session's directory as
        ``target`` (default: the file's base name)."""
        if isinstance(data, (bytes, bytearray)):
            if not target:
                raise TVMError("target must be present when uploading bytes")
            blob = bytes(data)
        else:
            blob = Path(data).read_bytes()
            target = target or os.path.basename(os.fspath(data))
        self._func("tvm.rpc.server.upload")(target, blob)

    def download(self, path: str) -> bytes:
        """The bytes of file ``path`` of the session's directory."""
        return self._func("tvm.rpc.server.download")(path)

    def remove(self, path: str) -> None:
        self._func("tvm.rpc.server.remove")(path)

    def listdir(self, path: str) -> str:
        """Names in ``path`` of the session's directory, each followed by a comma."""
        return self._func("tvm.rpc.server.listdir")(path)

    def load_module(self, path: str) -> Module:
        """Load ``path`` (uploaded before) on the server; a remote module."""
        return self._func("tvm.rpc.server.load_module")(path)

    def system_lib(self) -> Module:
        return self.get_function("runtime.SystemLib")()

    def time_evaluator(self, func_name: str, dev: Device, *args: Any, **kwargs: Any) -> Any:
        """Time the server's global function ``func_name`` there (kiln convenience; the
        arguments of :meth:`RPCModule.time_evaluator`)."""
        return remote_time_evaluator(self._endpoint, None, func_name, dev, *args, **kwargs)

    def close(self) -> None:
        """End the session (the server removes its directory)."""
        self._endpoint.close()

    def __enter__(self) -> RPCSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LocalSession(RPCSession):
    """The :class:`RPCSession` API served in this process, with no network (TVM's
    ``rpc.LocalSession``): functions, modules and arrays are the local ones, files live in a
    temporary directory removed with the session."""

    def __init__(self) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="kiln-rpc-local-"))
        self._globals = session_globals(self._workdir)
        self._remote_funcs = {}
        weakref.finalize(self, shutil.rmtree, self._workdir, True)

    def get_function(self, name: str) -> PackedFunc:
        func = self._globals.get(name)
        if func is not None:
            return PackedFunc(func, name)
        found = get_global_func(name, allow_missing=True) or builtin_global(name)
        if found is None:
            raise AttributeError(f"LocalSession has no function {name!r}")
        return found

    def device(self, dev_type: int | str, dev_id: int = 0) -> Device:
        from kiln.runtime.device import device

        return device(dev_type, dev_id)

    def load_module(self, path: str) -> Module:
        return load_module(confined_path(self._workdir, path))

    def time_evaluator(self, func_name: str, dev: Device, *args: Any, **kwargs: Any) -> Any:
        return remote_time_evaluator(None, None, func_name, dev, *args, **kwargs)

    def close(self) -> None:
        shutil.rmtree(self._workdir, ignore_errors=True)


def connect(url: str, port: int, key: str = "", session_timeout: float = 0,
            session_constructor_args: list | None = None, enable_logging: bool = False,
            timeout: float | None = DEFAULT_REPLY_TIMEOUT) -> RPCSession:
    """Connect to the RPC server at ``url:port`` (TVM's ``tvm.rpc.connect``).

    ``key`` must match the server's key (a tracker hands out match keys); ``session_timeout``
    asks the server to end the session after that many seconds. ``timeout`` (kiln) bounds
    every wait for the server: a reply that takes longer raises :class:`RPCError`.

    Example
    -------
    >>> connect("127.0.0.1", 1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    kiln.runtime.error.RPCError: cannot connect to RPC server 127.0.0.1:1: ...
    """
    if session_constructor_args:
        raise TVMError("session_constructor_args (proxy chaining) are not supported by kiln")
    full_key = f"client:{key}" + (f" -timeout={session_timeout}" if session_timeout else "")
    name = f"{url}:{port}"
    try:
        sock = socket.create_connection((url, port), timeout=min(timeout or 60.0, 60.0))
    except OSError as err:
        raise RPCError(f"cannot connect to RPC server {name}: {err}") from None
    channel = SocketChannel(sock, timeout, name)
    try:
        send_handshake_int(channel, RPC_MAGIC)
        encoded = full_key.encode()
        channel.send(struct.pack("<i", len(encoded)), encoded)
        answer = recv_handshake_int(channel)
        if answer == RPC_CODE_MISMATCH:
            raise RPCError(f"{name} cannot find server that matches key={key!r}")
        if answer == RPC_CODE_DUPLICATE:
            raise RPCError(f"{name} server already have key={key!r}")
        if answer != RPC_CODE_SUCCESS:
            raise RPCError(f"{name} is not TVM RPC server (handshake answer {answer:#x})")
        keylen = recv_handshake_int(channel)
        if not 0 <= keylen <= 4096:
            raise RPCError(f"{name}: invalid server key length {keylen}")
        channel.recv_into(memoryview(bytearray(keylen)))
    except RPCError:
        channel.close()
        raise
    endpoint = ClientEndpoint(channel, name)
    endpoint.init_server()
    return RPCSession(endpoint)
