"""The serving side of an RPC session: answers one peer's packets with kiln.runtime.

Entry points: :class:`ServingSession` (``serve()`` runs the loop), :func:`encode_return`.

A session owns a handle table (functions, modules, objects and NDArrays it handed out) and an
allocation table (data pointers it handed out). A DLTensor argument names memory by its data
pointer; it is accepted only if that pointer is one this session allocated or returned and
``byte_offset + nbytes`` fits, so a garbage or hostile packet can never make the server read
or write memory it does not own. Malformed packets raise :class:`RPCError` out of ``serve()``
(the server drops the session); errors while running a request go back as ``kException``.

The session-local globals ``tvm.rpc.server.*`` (upload, download, remove, listdir, workpath,
load_module, ModuleGetFunction, ImportModule) work inside the session's own directory; paths
are confined to it. ``runtime.RPCTimeEvaluator`` times functions on this side.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kiln.rpc.native_serve import testing_nop
from kiln.rpc.protocol import (
    LEGACY,
    PROTOCOL_VERSION,
    Channel,
    ChannelClosed,
    ChannelTimeout,
    Codec,
    Handle,
    Lazy,
    Reader,
    RemoteRef,
    RPCCode,
    TensorMeta,
    Writer,
    write_packet,
)
from kiln.runtime.device import Device
from kiln.runtime.dtype import DataType
from kiln.runtime.error import RPCError, TVMError
from kiln.runtime.module import Module, load_module
from kiln.runtime.ndarray import NDArray, from_dlpack
from kiln.runtime.packed_func import (
    PackedFunc,
    TypeCode,
    get_last_error,
    set_last_error,
    value_from_c,
)
from kiln.runtime.profiling import check_timing_args, time_repeats
from kiln.runtime.registry import get_global_func

__all__ = ["ServingSession", "encode_return", "confined_path", "session_globals",
           "builtin_global", "rpc_time_evaluator"]

_ALIGNMENT = 64
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_CALL_FUNC = int(RPCCode.kCallFunc)
_HEADER = struct.Struct("<Qi")  # packet length, RPC code
_CALL0 = struct.Struct("<Qi")  # a kCallFunc body: function handle, argument count
_KIND_CODES = ((Module, TypeCode.MODULE_HANDLE), (PackedFunc, TypeCode.PACKED_FUNC_HANDLE))


def confined_path(workdir: Path, name: str) -> Path:
    """``workdir / name``, refusing names that leave ``workdir`` (absolute, ``..``, links)."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise TVMError(f"invalid file name {name!r} for the RPC session directory")
    if os.path.isabs(name) or ".." in Path(name).parts:
        raise TVMError(f"file name {name!r} leaves the RPC session directory "
                       "(absolute or '..' paths are refused)")
    path = workdir / name
    root = workdir.resolve()
    if not path.resolve().is_relative_to(root):
        raise TVMError(f"file name {name!r} resolves outside the RPC session directory")
    return path


def encode_return(value: Any, register: Callable[[Any], int]) -> list[tuple[int, Any]]:
    """TVM's ``LocalSession::EncodeReturn``: ``[type code as int, value...]``; handles for
    functions, modules, objects and NDArrays come from ``register``."""
    if value is None:
        return [(TypeCode.INT, TypeCode.NULL), (TypeCode.NULL, None)]
    if isinstance(value, (bool, int, np.integer)):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise TVMError(f"return value {value} does not fit in int64")
        return [(TypeCode.INT, TypeCode.INT), (TypeCode.INT, int(value))]
    if isinstance(value, (float, np.floating)):
        return [(TypeCode.INT, TypeCode.FLOAT), (TypeCode.FLOAT, float(value))]
    if isinstance(value, str):
        return [(TypeCode.INT, TypeCode.STR), (TypeCode.STR, value)]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return [(TypeCode.INT, TypeCode.BYTES), (TypeCode.BYTES, bytes(value))]
    if isinstance(value, DataType):
        return [(TypeCode.INT, TypeCode.DATATYPE), (TypeCode.DATATYPE, value)]
    if isinstance(value, Device):
        return [(TypeCode.INT, TypeCode.DEVICE), (TypeCode.DEVICE, value)]
    if isinstance(value, NDArray):
        handle = register(value)
        meta = TensorMeta(value.data_ptr, value.device, value.shape, DataType(value.dtype))
        return [(TypeCode.INT, TypeCode.NDARRAY_HANDLE), (TypeCode.DLTENSOR_HANDLE, meta),
                (TypeCode.HANDLE, handle)]
    for kind, code in _KIND_CODES:
        if isinstance(value, kind):
            return [(TypeCode.INT, code), (TypeCode.HANDLE, register(value))]
    if callable(value):
        return [(TypeCode.INT, TypeCode.PACKED_FUNC_HANDLE),
                (TypeCode.HANDLE, register(PackedFunc(value)))]
    raise TVMError(f"a {type(value).__name__} return value cannot cross RPC")


class ServingSession:
    """Serves one RPC peer over ``channel`` with files in ``workdir``.

    ``idle_timeout`` bounds the wait between requests (None: wait for the peer forever, as
    TVM does); reads inside a packet use the channel's own timeout. ``codec`` is the peer's
    packed-sequence encoding (TVM v0.16's, or apache-tvm >= 0.21's ``FFI``).
    """

    def __init__(self, channel: Channel, workdir: str | os.PathLike,
                 idle_timeout: float | None = None, codec: Codec = LEGACY,
                 native: bool = True) -> None:
        self.channel = channel
        self.codec = codec
        self.workdir = Path(workdir)
        self.idle_timeout = idle_timeout
        self.handles: dict[int, Any] = {}
        self.allocations: dict[int, np.ndarray] = {}  # data pointer -> uint8 memory
        self._returned_memory: dict[int, int] = {}  # NDArray handle -> its data pointer
        self._next_handle = 0x10
        self.globals = session_globals(self.workdir)
        null = codec.null_return
        self._null_reply = _HEADER.pack(len(null) + 4, RPCCode.kReturn) + null
        # the C loop answering calls (rpc_serve.c speaks TVM v0.16's encoding); None: Python
        make_loop = getattr(channel, "native_loop", None)
        self.native_loop = (make_loop(self._null_reply) if native and codec is LEGACY
                            and make_loop is not None else None)
        self._stopped_by: BaseException | None = None  # what stopped the loop in a closure
        self._handlers = {
            RPCCode.kInitServer: self._init_server,
            RPCCode.kCopyFromRemote: self._copy_from_remote,
            RPCCode.kCopyToRemote: self._copy_to_remote,
        }
        self._syscalls: dict[int, Callable[..., Any]] = {
            RPCCode.kGetGlobalFunc: self._get_global_func,
            RPCCode.kFreeHandle: self._free_handle,
            RPCCode.kDevSetDevice: lambda dev: _check_cpu(dev),
            RPCCode.kDevGetAttr: _device_attr,
            RPCCode.kDevAllocData: lambda dev, nbytes, align, dtype: self._alloc(dev, nbytes),
            RPCCode.kDevAllocDataWithScope: self._alloc_with_scope,
            RPCCode.kDevFreeData: self._free_data,
            RPCCode.kDevStreamSync: lambda dev, stream: _check_cpu(dev),
            RPCCode.kCopyAmongRemote: self._copy_among_remote,
            RPCCode.kDevCreateStream: lambda dev: _check_cpu(dev),  # CPU: the null stream
            RPCCode.kDevFreeStream: lambda dev, stream: _check_cpu(dev),
            RPCCode.kDevSetStream: lambda dev, stream: _check_cpu(dev),
            RPCCode.kDevGetCurrentStream: lambda dev: _check_cpu(dev),
        }

    # ---- the loop ----------------------------------------------------------------------------

    def serve(self) -> None:
        """Answer packets until the peer shuts down or closes; RPCError on a broken packet.

        An argument-less call of a function handle is answered inline (no decoder, and a
        void result as the codec's prebuilt reply): the loop then costs one receive, one
        send and a few lookups, which is what bounds the latency of an empty remote call.
        """
        channel, handles, null_reply = self.channel, self.handles, self._null_reply
        recv_packet, send = channel.recv_packet, channel.send
        loop = self.native_loop
        idle_since = None  # when the current wait for a request began (after a timeout)
        while True:
            try:
                packet = recv_packet() if loop is None else channel.recv_packet_native(loop)
            except ChannelClosed as err:
                if err.received == 0:
                    return
                raise
            except ChannelTimeout as err:
                now = time.monotonic()
                if idle_since is None:
                    idle_since = now - (channel.timeout or 0.0)
                if err.received == 0 and (self.idle_timeout is None
                                          or now - idle_since < self.idle_timeout):
                    continue
                raise
            idle_since = None
            if packet is None:  # the C loop made a call it could not answer
                self._after_loop_call(loop.status)
                continue
            code, body = packet
            if code == _CALL_FUNC and len(body) == 12:
                handle, nargs = _CALL0.unpack_from(body)
                func = handles.get(handle)
                if nargs == 0 and isinstance(func, PackedFunc):
                    try:
                        result = func()
                    except Exception as err:  # the remote caller gets the message
                        self._exception(_error_message(err))
                        continue
                    if result is None:
                        send(null_reply)
                    else:
                        self._return(result)
                    continue
            if code == RPCCode.kShutdown:
                return
            self._dispatch(code, body)

    def _after_loop_call(self, status: int) -> None:
        """Finish a call the C loop made but could not answer itself (``status``)."""
        loop = self.native_loop
        if status == loop.NATIVE_FAILED:
            message = get_last_error() or f"native function returned {loop.state.err}"
            set_last_error("")
            self._exception(message)
        elif status == loop.NATIVE_VALUE:
            try:
                value = value_from_c(loop.state.ret, loop.state.ret_code)
            except TVMError as err:
                self._exception(str(err))
            else:
                self._return(value)
        else:  # PY_STOPPED: an answer closure met what must end the session
            stopped, self._stopped_by = self._stopped_by, None
            raise stopped or RPCError("the RPC serve loop stopped without a cause")

    def _answer(self, func: PackedFunc) -> Callable[[], bool | None]:
        """The C loop's answer closure for argument-less calls of Python function ``func``."""

        def answer() -> bool | None:
            try:
                try:
                    result = func()
                except Exception as err:  # the remote caller gets the message
                    self._exception(_error_message(err))
                    return None
                if result is None:
                    return True
                self._return(result)
                return None
            except BaseException as err:  # noqa: BLE001 - re-raised by serve(), not lost
                self._stopped_by = err
                return False

        return answer

    def _dispatch(self, code: int, body: memoryview) -> None:
        """Answer one packet of any kind but kShutdown (which ends the session)."""
        if code == _CALL_FUNC:
            self._call_func(body)
            return
        reader = Reader(body, Lazy("RPC packet (code {})", code), self.codec)
        handler = self._handlers.get(code)
        if handler is not None:
            handler(reader)
        elif code in self._syscalls:
            self._syscall(code, reader)
        else:
            raise RPCError(f"unexpected RPC code {code} from the client")

    def _respond(self, run: Callable[[], list[tuple[int, Any]]]) -> None:
        """Run a request; send its return values, or its error as kException."""
        try:
            writer = Writer(self.codec)
            writer.packed_seq(run())
        except Exception as err:  # the remote caller gets the message, the session lives
            self._exception(_error_message(err))
            return
        write_packet(self.channel, RPCCode.kReturn, writer)

    def _exception(self, message: str) -> None:
        writer = Writer(self.codec)
        writer.packed_seq([(TypeCode.STR, message)])
        write_packet(self.channel, RPCCode.kException, writer)

    # ---- requests ----------------------------------------------------------------------------

    def _init_server(self, reader: Reader) -> None:
        version = bytes(reader.string()).decode(errors="replace")
        args = reader.packed_seq()
        reader.end()

        def run() -> list[tuple[int, Any]]:
            if version != PROTOCOL_VERSION:
                raise RPCError(f"RPC protocol version mismatch: client {version!r}, server "
                               f"{PROTOCOL_VERSION!r}")
            if args:
                raise RPCError("session constructor arguments (proxy chaining) are not "
                               f"supported by kiln's server: {[v for _, v in args]!r}")
            return [(TypeCode.NULL, None)]

        self._respond(run)

    def _call_func(self, body: memoryview) -> None:
        """kCallFunc (the arguments decoded; argument-less calls are answered by
        :meth:`serve` itself)."""
        reader = Reader(body, Lazy("RPC packet (code {})", _CALL_FUNC), self.codec)
        handle = reader.u64()
        args = reader.packed_seq()
        reader.end()
        try:
            func = self.handles.get(handle)
            if not isinstance(func, PackedFunc):
                func = self._lookup(handle, PackedFunc, "function")  # raises, naming it
            result = func(*[self._decode_arg(code, value) for code, value in args])
        except Exception as err:  # the remote caller gets the message, the session lives
            self._exception(_error_message(err))
            return
        if result is None:
            self.channel.send(self._null_reply)
        else:
            self._return(result)

    def _return(self, result: Any) -> None:
        """Send a call's non-void ``result`` as kReturn (or kException if it cannot cross)."""

        def encode() -> list[tuple[int, Any]]:
            values = encode_return(result, self._register)
            values[0] = (TypeCode.INT, self.codec.return_index(values[0][1]))
            return values

        self._respond(encode)

    def _copy_from_remote(self, reader: Reader) -> None:
        meta = reader.tensor()
        nbytes = reader.u64()
        reader.end()
        try:
            data = self._memory(meta, nbytes)
        except TVMError as err:
            self._exception(str(err))
            return
        writer = Writer()
        writer.raw(data.data)
        write_packet(self.channel, RPCCode.kCopyAck, writer)

    def _copy_to_remote(self, reader: Reader) -> None:
        meta = reader.tensor()
        nbytes = reader.u64()
        payload = reader.take(nbytes)
        reader.end()

        def run() -> list[tuple[int, Any]]:
            self._memory(meta, nbytes)[:] = np.frombuffer(payload, np.uint8)
            return [(TypeCode.NULL, None)]

        self._respond(run)

    def _syscall(self, code: int, reader: Reader) -> None:
        args = reader.packed_seq()
        reader.end()

        def run() -> list[tuple[int, Any]]:
            result = self._syscalls[code](*[value for _, value in args])
            return [_plain_value(result)]

        self._respond(run)

    # ---- syscalls ----------------------------------------------------------------------------

    def _get_global_func(self, name: str) -> Handle | None:
        func = self.globals.get(name)
        if func is None:
            func = get_global_func(name, allow_missing=True) or builtin_global(name)
        else:
            func = PackedFunc(func, name)
        return None if func is None else Handle(self._register(func))

    def _free_handle(self, handle: int, type_code: int | None = None) -> None:
        value = self.handles.pop(handle, None)
        if value is None:
            raise TVMError(f"FreeHandle: unknown handle 0x{handle:x}")
        if self.native_loop is not None:
            self.native_loop.unbind(handle)
        pointer = self._returned_memory.pop(handle, None)
        if pointer is not None and pointer not in self._returned_memory.values():
            self.allocations.pop(pointer, None)

    def _alloc(self, dev: Device, nbytes: int) -> Handle:
        _check_cpu(dev)
        if not 0 <= nbytes <= 1 << 40:
            raise TVMError(f"DevAllocData: invalid size {nbytes}")
        raw = np.zeros(nbytes + _ALIGNMENT, np.uint8)
        offset = (-raw.ctypes.data) % _ALIGNMENT
        memory = raw[offset:offset + nbytes]
        self.allocations[memory.ctypes.data] = memory
        return Handle(memory.ctypes.data)

    def _alloc_with_scope(self, meta: TensorMeta, scope: str | None) -> Handle:
        if scope not in (None, "global"):
            raise TVMError(f"memory scope {scope!r} does not exist on {meta.device}")
        return self._alloc(meta.device, meta.nbytes)

    def _free_data(self, dev: Device, handle: int) -> None:
        if self.allocations.pop(int(handle), None) is None:
            raise TVMError(f"DevFreeData: 0x{int(handle):x} is not memory of this session")

    def _copy_among_remote(self, source: TensorMeta, target: TensorMeta, stream: Any) -> None:
        if source.nbytes != target.nbytes:
            raise TVMError(f"CopyAmongRemote: {source.nbytes} bytes into {target.nbytes}")
        self._memory(target, target.nbytes)[:] = self._memory(source, source.nbytes)

    # ---- handles and memory ------------------------------------------------------------------

    def _register(self, value: Any) -> int:
        self._next_handle += 16  # look like aligned pointers; never 0 (the null handle)
        self.handles[self._next_handle] = value
        if self.native_loop is not None and isinstance(value, PackedFunc):
            if value.is_native:
                self.native_loop.bind_native(self._next_handle, value.c_address,
                                       value.resource_handle)
            else:
                self.native_loop.bind_python(self._next_handle, self._answer(value))
        if isinstance(value, NDArray):
            pointer = value.data_ptr
            if pointer not in self.allocations or pointer in self._returned_memory.values():
                # memory the server made (not a view of a client allocation): it lives as
                # long as some returned handle to it does
                self.allocations[pointer] = _bytes_of(value)
                self._returned_memory[self._next_handle] = pointer
        return self._next_handle

    def _lookup(self, handle: int, kind: type, what: str) -> Any:
        value = self.handles.get(handle)
        if not isinstance(value, kind):
            raise TVMError(f"0x{handle:x} is not a {what} handle of this RPC session")
        return value

    def _memory(self, meta: TensorMeta, nbytes: int) -> np.ndarray:
        """The bytes of this session's memory that ``meta`` names (bounds-checked)."""
        _check_cpu(meta.device)
        memory = self.allocations.get(meta.data)
        if memory is None:
            raise TVMError(f"data pointer 0x{meta.data:x} is not memory of this RPC session")
        end = meta.byte_offset + nbytes
        if nbytes > meta.nbytes or end > memory.nbytes:
            raise TVMError(f"{nbytes} bytes at byte_offset {meta.byte_offset} do not fit "
                           f"the tensor {meta.shape} {meta.dtype} in {memory.nbytes} bytes")
        return memory[meta.byte_offset:end]

    def _decode_arg(self, code: int, value: Any) -> Any:
        if code == TypeCode.DLTENSOR_HANDLE:
            return from_dlpack(self._memory(value, value.nbytes))._create_view(value.shape,
                                                                               value.dtype)
        if isinstance(value, RemoteRef):
            kinds = {TypeCode.MODULE_HANDLE: (Module, "module"),
                     TypeCode.PACKED_FUNC_HANDLE: (PackedFunc, "function"),
                     TypeCode.OBJECT_HANDLE: (object, "object")}
            return self._lookup(value.handle, *kinds[value.type_code])
        return value


def session_globals(workdir: Path) -> dict[str, Callable[..., Any]]:
    """The functions a session adds to the global registry: ``tvm.rpc.server.*`` over files in
    ``workdir`` and ``runtime.RPCTimeEvaluator``."""

    def upload(name: str, data: bytes) -> None:
        path = confined_path(workdir, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        with os.fdopen(os.open(path, flags, 0o600), "wb") as out:
            out.write(data)

    def listdir(name: str) -> str:  # the C++ server's format: "a,b,"
        path = confined_path(workdir, name) if name not in ("", ".") else workdir
        return "".join(f"{entry}," for entry in sorted(os.listdir(path)))

    return {
        "tvm.rpc.server.workpath": lambda name: str(confined_path(workdir, name)),
        "tvm.rpc.server.upload": upload,
        "tvm.rpc.server.download": lambda name: confined_path(workdir, name).read_bytes(),
        "tvm.rpc.server.remove": lambda name: confined_path(workdir, name).unlink(),
        "tvm.rpc.server.listdir": listdir,
        "tvm.rpc.server.load_module": lambda name: load_module(confined_path(workdir, name)),
        "tvm.rpc.server.ModuleGetFunction": _module_get_function,
        "tvm.rpc.server.ImportModule": lambda parent, child: parent.import_module(child),
        "runtime.RPCTimeEvaluator": rpc_time_evaluator,
    }


def builtin_global(name: str) -> PackedFunc | None:
    """A global TVM's RPC server answers that kiln's registry does not hold: ``testing.nop``
    (native, as TVM's), or None."""
    return testing_nop() if name == "testing.nop" else None


def _error_message(err: Exception) -> str:
    """What the remote caller reads: TVM errors as they are, others with their class."""
    return str(err) if isinstance(err, TVMError) else f"{type(err).__name__}: {err}"


def _plain_value(value: Any) -> tuple[int, Any]:
    """A syscall's single return value."""
    if value is None:
        return (TypeCode.NULL, None)
    if isinstance(value, Handle):
        return (TypeCode.HANDLE, int(value))
    return (TypeCode.INT, int(value))


def _check_cpu(dev: Device) -> None:
    if not isinstance(dev, Device) or dev.device_type != 1:
        raise TVMError(f"kiln's RPC server serves CPU memory only, not {dev}")


def _device_attr(dev: Device, kind: int) -> int:
    if kind == 0:  # kExist
        return int(isinstance(dev, Device) and dev.device_type == 1)
    _check_cpu(dev)
    return (os.cpu_count() or 1) if kind == 1 else 0  # kMaxThreadsPerBlock ~ threads


def _bytes_of(array: NDArray) -> np.ndarray:
    """The uint8 memory of a contiguous CPU NDArray (shared, not copied)."""
    if not array.device.is_cpu or not array.is_contiguous():
        raise TVMError(f"only contiguous CPU NDArrays can be returned over RPC, got "
                       f"{array.device} array of shape {array.shape}")
    host = np.from_dlpack(array)
    return host.reshape(-1).view(np.uint8) if host.size else np.zeros(0, np.uint8)


def _module_get_function(module: Module, name: str, query_imports: bool = True) -> Any:
    try:
        return module.get_function(name, bool(query_imports))
    except AttributeError:
        return None


def rpc_time_evaluator(module: Module | None, name: str, device_type: int, device_id: int,
                       number: int, repeat: int, min_repeat_ms: int,
                       limit_zero_time_iterations: int, cooldown_interval_ms: int,
                       repeats_to_cooldown: int, cache_flush_bytes: int,
                       f_preproc: str) -> PackedFunc:
    """TVM's ``runtime.RPCTimeEvaluator``: a function returning ``repeat`` float64 seconds
    per call (native byte order), timed here on the serving side."""
    _check_cpu(Device(device_type, device_id))
    if module is not None:
        func = module.get_function(name, query_imports=True)
    else:
        func = get_global_func(name)
    preproc = get_global_func(f_preproc) if f_preproc else None
    check_timing_args(number, repeat, min_repeat_ms, limit_zero_time_iterations,
                      cooldown_interval_ms, repeats_to_cooldown, cache_flush_bytes)
    flush = [np.zeros(cache_flush_bytes // 4, np.int32) for _ in range(2)]

    def evaluate(*args: Any) -> bytes:
        call = func.prepare(*args)

        def run(times: int) -> None:
            for _ in range(times):
                call()

        def before_repeat() -> None:
            if cache_flush_bytes:
                np.copyto(flush[1], flush[0])  # evicts the cache as TVM's copy does
            if preproc is not None:
                preproc(*args)

        result = time_repeats(run, repeat=repeat, number=number, min_repeat_ms=min_repeat_ms,
                              limit_zero_time_iterations=limit_zero_time_iterations,
                              cooldown_interval_ms=cooldown_interval_ms,
                              repeats_to_cooldown=repeats_to_cooldown,
                              before_repeat=before_repeat)
        return struct.pack(f"@{len(result.results)}d", *result.results)

    return PackedFunc(evaluate, "RPCTimeEvaluator")
