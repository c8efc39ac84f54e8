"""The server session's C loop (kiln/runtime/src/rpc_serve.c): it answers calls of bound
functions without Python between packets and leaves everything else to the Python path.

Each test serves one session in a thread over loopback TCP, with the C loop on and (where the
behaviour must not change) off, and checks results against plain Python arithmetic, framing
edge cases against hand-made bytes, and faults (garbage, a peer dying mid-call, a stopped
loop) against clear errors with no hang.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

import kiln
from kiln.rpc.client import ClientEndpoint, RPCSession
from kiln.rpc.protocol import (
    LEGACY,
    Reader,
    RPCCode,
    SocketChannel,
    Writer,
    read_packet,
    write_packet,
)
from kiln.rpc.serving import ServingSession
from kiln.runtime.error import RPCError
from kiln.runtime.packed_func import PackedFunc, TypeCode

# kReturn of a void call: two values, (int) the type code kTVMNullptr, then the null itself
_VOID_REPLY = struct.pack("<QiiiiQ", 24, RPCCode.kReturn, 2, TypeCode.INT, TypeCode.NULL,
                          TypeCode.NULL)


def _native(func) -> PackedFunc:
    """``func`` behind the kernel ABI (a C function pointer), as a loaded library's is."""
    wrapper = PackedFunc(func)  # owns the C trampoline: kept alive by the result
    return PackedFunc.from_c_address(wrapper.c_address, owner=wrapper)


class Served:
    """One ServingSession on a thread, with a raw client socket past nothing (no handshake:
    the session starts at its first packet)."""

    def __init__(self, tmp_path, native: bool = True, timeout: float = 5.0) -> None:
        listener = socket.create_server(("127.0.0.1", 0))
        self.sock = socket.create_connection(listener.getsockname(), timeout=timeout)
        conn, _ = listener.accept()
        listener.close()
        self.channel = SocketChannel(conn, timeout)
        self.raw = SocketChannel(self.sock, 5.0)  # the client side, by hand
        tmp_path.mkdir(exist_ok=True)
        self.session = ServingSession(self.channel, tmp_path, native=native)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            self.session.serve()
        except BaseException as err:  # noqa: BLE001 - inspected by the test
            self.error = err
        finally:
            self.channel.close()

    def client(self) -> RPCSession:
        endpoint = ClientEndpoint(SocketChannel(self.sock, 5.0), "test")
        endpoint.init_server()
        return RPCSession(endpoint)

    def handle(self, name: str) -> int:
        """The handle of global ``name``, asked for with raw bytes."""
        writer = Writer(LEGACY)
        writer.packed_seq([(TypeCode.STR, name)])
        write_packet(self.raw, RPCCode.kGetGlobalFunc, writer)
        return self.reply()[0][1]

    def reply(self) -> list:
        """The next reply's values; an exception as ``[("exception", message)]``."""
        code, body = read_packet(self.raw)
        values = Reader(body).packed_seq()
        return values if code == RPCCode.kReturn else [("exception", values[0][1])]

    def ended(self, within: float = 5.0) -> bool:
        self.thread.join(within)
        return not self.thread.is_alive()


def _call_packet(handle: int, *args: tuple[int, object]) -> bytes:
    return LEGACY.call_packet(handle, list(args))


@pytest.fixture(autouse=True, scope="module")
def functions():
    counter = {"calls": 0}

    def count() -> None:
        counter["calls"] += 1

    def raises_interrupt() -> None:
        raise KeyboardInterrupt("stop serving")

    table = {
        "native_loop.count": count,
        "native_loop.seven": lambda: 7,
        "native_loop.big": lambda: bytes(range(256)) * 400,  # a reply over many reads
        "native_loop.fail": lambda: 1 / 0,
        "native_loop.interrupt": raises_interrupt,
        "native_loop.native_affine": _native(lambda a, b, c: a * b + c),
        "native_loop.native_half": _native(lambda x: x / 2),
        "native_loop.native_fail": _native(lambda: 1 / 0),
        "native_loop.native_text": _native(lambda: "from C"),
    }
    for name, func in table.items():
        kiln.register_func(name, func, override=True)
    yield counter


@pytest.mark.parametrize("native", [True, False])
def test_calls_answer_the_same_with_or_without_the_c_loop(tmp_path, native, functions):
    served = Served(tmp_path, native)
    remote = served.client()
    before = functions["calls"]
    count = remote.get_function("native_loop.count")
    for _ in range(50):
        assert count() is None
    assert functions["calls"] == before + 50
    assert remote.get_function("testing.nop")() is None
    assert remote.get_function("native_loop.seven")() == 7
    assert remote.get_function("native_loop.big")() == bytes(range(256)) * 400
    assert remote.get_function("native_loop.native_affine")(6, 7, -2) == 40
    assert remote.get_function("native_loop.native_affine")(1 << 40, 3, 5) == 3 * (1 << 40) + 5
    assert remote.get_function("native_loop.native_half")(5.0) == 2.5
    assert remote.get_function("native_loop.native_text")() == "from C"
    for name, text in (("native_loop.fail", "ZeroDivisionError"),
                       ("native_loop.native_fail", "division by zero")):
        with pytest.raises(RPCError, match=text):
            remote.get_function(name)()
    assert count() is None  # the session survives remote errors
    remote.close()
    assert served.ended() and served.error is None


def test_the_c_loop_answers_bound_calls_itself(tmp_path):
    served = Served(tmp_path)
    nop = served.handle("testing.nop")
    count = served.handle("native_loop.count")
    for handle in (nop, count):
        for _ in range(20):
            served.sock.sendall(_call_packet(handle))
            assert served.sock.recv(64) == _VOID_REPLY
    assert served.session.native_loop.state.answered >= 39  # the last one may still be counting


def test_pipelined_and_split_packets_are_answered_in_order(tmp_path):
    served = Served(tmp_path)
    nop, affine = served.handle("testing.nop"), served.handle("native_loop.native_affine")
    call = _call_packet(affine, (TypeCode.INT, 2), (TypeCode.INT, 3), (TypeCode.INT, 4))
    # three packets in one segment, a zero length TVM skips, then one packet byte by byte
    served.sock.sendall(_call_packet(nop) + call + bytes(8) + _call_packet(nop))
    assert served.reply() == [(TypeCode.INT, TypeCode.NULL), (TypeCode.NULL, None)]
    assert served.reply() == [(TypeCode.INT, TypeCode.INT), (TypeCode.INT, 10)]
    assert served.reply() == [(TypeCode.INT, TypeCode.NULL), (TypeCode.NULL, None)]
    for byte in call:
        served.sock.sendall(bytes([byte]))
    assert served.reply() == [(TypeCode.INT, TypeCode.INT), (TypeCode.INT, 10)]


def test_calls_the_loop_cannot_answer_go_to_python(tmp_path):
    served = Served(tmp_path)
    affine = served.handle("native_loop.native_affine")
    # an unknown handle, a string argument and trailing bytes: Python's path names each
    served.sock.sendall(_call_packet(0x7770))
    assert "not a function handle" in served.reply()[0][1]
    served.sock.sendall(_call_packet(affine, (TypeCode.STR, "x"), (TypeCode.INT, 1),
                                     (TypeCode.INT, 1)))
    assert "exception" == served.reply()[0][0]
    packet = _call_packet(affine, (TypeCode.INT, 1), (TypeCode.INT, 1), (TypeCode.INT, 1))
    padded = struct.pack("<Q", len(packet) - 8 + 4) + packet[8:] + b"\0\0\0\0"
    served.sock.sendall(padded)
    assert served.ended() and "trailing bytes" in str(served.error)


def test_a_freed_function_is_no_longer_answered(tmp_path):
    served = Served(tmp_path)
    count = served.handle("native_loop.count")
    writer = Writer(LEGACY)
    writer.packed_seq([(TypeCode.HANDLE, count), (TypeCode.INT, TypeCode.PACKED_FUNC_HANDLE)])
    write_packet(served.raw, RPCCode.kFreeHandle, writer)
    served.reply()
    served.sock.sendall(_call_packet(count))
    assert "not a function handle" in served.reply()[0][1]


@pytest.mark.parametrize("garbage", [struct.pack("<Qi", 1 << 60, 3),
                                     struct.pack("<Qi", 2, 3),
                                     struct.pack("<Qi", 16, 99) + bytes(12)])
def test_garbage_after_fast_calls_drops_the_session(tmp_path, garbage):
    served = Served(tmp_path)
    nop = served.handle("testing.nop")
    served.sock.sendall(_call_packet(nop))
    assert served.sock.recv(64) == _VOID_REPLY
    served.sock.sendall(garbage)
    assert served.ended()
    assert isinstance(served.error, RPCError)


def test_truncated_packet_times_out_and_eof_mid_packet_ends(tmp_path):
    served = Served(tmp_path, timeout=0.3)
    nop = served.handle("testing.nop")
    served.sock.sendall(_call_packet(nop)[:10])
    assert served.ended() and "no data" in str(served.error)
    other = Served(tmp_path / "other")
    other.sock.sendall(_call_packet(other.handle("testing.nop"))[:15])
    other.sock.close()
    assert other.ended() and "closed by the peer" in str(other.error)


def test_client_dying_mid_call_ends_only_that_session(tmp_path):
    gate = threading.Event()
    kiln.register_func("native_loop.wait", lambda: gate.wait(5) and None, override=True)
    served = Served(tmp_path)
    served.sock.sendall(_call_packet(served.handle("native_loop.wait")))
    served.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    served.sock.close()  # reset: the reply's send fails
    gate.set()
    assert served.ended()
    other = Served(tmp_path / "other")
    assert other.client().get_function("testing.nop")() is None


def test_an_interrupt_in_a_python_function_stops_the_loop_and_propagates(tmp_path):
    served = Served(tmp_path)
    served.sock.sendall(_call_packet(served.handle("native_loop.interrupt")))
    assert served.ended()
    assert isinstance(served.error, KeyboardInterrupt)


def test_the_answered_count_goes_past_two_to_the_31(tmp_path):
    """The count of calls the C loop answered is 64-bit unsigned in C and in its ctypes
    mirror: past 2**31 it keeps counting (a C int overflowed, undefined, and read negative)."""
    served = Served(tmp_path)
    nop = served.handle("testing.nop")
    served.sock.sendall(_call_packet(nop))
    assert served.sock.recv(64) == _VOID_REPLY
    state = served.session.native_loop.state
    for _ in range(5000):  # its count done, the loop waits in recv: no write races ours
        if state.answered == 1:
            break
        time.sleep(0.001)
    state.answered = 2**31 - 1
    for _ in range(3):
        served.sock.sendall(_call_packet(nop))
        assert served.sock.recv(64) == _VOID_REPLY
    assert 2**31 + 1 <= state.answered <= 2**31 + 2  # the last one may still be counting
