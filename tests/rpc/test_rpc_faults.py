"""RPC faults: a server killed mid-call, garbage and truncated frames, bad handshakes, remote
exceptions, dead trackers. Each must end in a clear TVMError quickly (no hang), and a broken
session must not take the server's other sessions down."""

from __future__ import annotations

import socket
import struct
import sys
import threading
import time
from pathlib import Path

import pytest

from kiln import rpc
from kiln.rpc.protocol import PROTOCOL_VERSION, RPC_CODE_SUCCESS, RPC_MAGIC
from kiln.runtime.error import RPCError, TVMError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import remote_funcs  # noqa: E402,F401  (registers rpc_test.*)
from rpc_testlib import kiln_server  # noqa: E402


@pytest.fixture(scope="module")
def server():
    srv = rpc.Server(port=0, port_end=0, silent=True, read_timeout=0.5)
    yield srv
    srv.terminate()


def _raw_session(port: int) -> socket.socket:
    """A socket past the handshake and InitServer, speaking bytes by hand."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    key = b"client:"
    sock.sendall(struct.pack("<ii", RPC_MAGIC, len(key)) + key)
    code, keylen = struct.unpack("<ii", sock.recv(8))
    assert code == RPC_CODE_SUCCESS
    sock.recv(keylen)
    version = PROTOCOL_VERSION.encode()
    body = struct.pack("<iQ", 2, len(version)) + version + struct.pack("<i", 0)
    sock.sendall(struct.pack("<Q", len(body)) + body)
    # the void return: u64 12, kReturn, one value of type kTVMNullptr
    assert sock.recv(20) == struct.pack("<Qiii", 12, 4, 1, 4)
    return sock


def _closed_by_peer(sock: socket.socket, within: float = 5.0) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_server_killed_mid_call_raises_quickly():
    with kiln_server() as proc:
        remote = rpc.connect("127.0.0.1", proc.port, timeout=30)
        assert remote.get_function("rpc_test.add")(1, 2) == 3
        sleep = remote.get_function("rpc_test.sleep")
        threading.Timer(0.3, proc.kill).start()
        start = time.monotonic()
        with pytest.raises(RPCError, match="lost during call to 'rpc_test.sleep'"):
            sleep(20.0)
        assert time.monotonic() - start < 10
        with pytest.raises(RPCError, match="is closed"):
            remote.get_function("rpc_test.add")


def test_silent_server_hits_the_reply_timeout(server):
    remote = rpc.connect("127.0.0.1", server.port, timeout=1.0)
    with pytest.raises(RPCError, match="no data for 1.0s"):
        remote.get_function("rpc_test.sleep")(5.0)


@pytest.mark.parametrize("garbage", [
    b"\xff" * 64,                                          # absurd packet length
    struct.pack("<Qi", 8, 99) + b"\0" * 4,                  # unknown RPC code
    struct.pack("<Qi", 12, 3) + struct.pack("<Q", 0),       # CallFunc without arguments
    struct.pack("<QiQ", 28, 3, 16) + struct.pack("<ii", 1, 77) + b"\0" * 8,  # bad type code
    struct.pack("<Qi", 16, 9) + struct.pack("<iiQ", 1, 11, 1 << 40),  # string past the end
])
def test_garbage_frame_drops_only_that_session(server, garbage):
    healthy = rpc.connect("127.0.0.1", server.port)
    sock = _raw_session(server.port)
    sock.sendall(garbage)
    assert _closed_by_peer(sock)
    assert healthy.get_function("rpc_test.add")(2, 2) == 4
    assert rpc.connect("127.0.0.1", server.port).get_function("rpc_test.add")(1, 1) == 2
    healthy.close()


def test_truncated_frame_is_dropped_after_the_read_timeout(server):
    healthy = rpc.connect("127.0.0.1", server.port)
    sock = _raw_session(server.port)
    sock.sendall(struct.pack("<Qi", 100, 3) + b"\0" * 10)  # 86 bytes never come
    assert _closed_by_peer(sock, within=5.0)
    assert healthy.get_function("rpc_test.add")(3, 4) == 7
    healthy.close()


def test_wrong_magic_and_oversized_key_are_dropped(server):
    for hello in (struct.pack("<ii", 0x1234, 0), struct.pack("<ii", RPC_MAGIC, 1 << 30)):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        sock.sendall(hello)
        assert _closed_by_peer(sock)


def test_client_refuses_a_peer_that_is_not_an_rpc_server():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer():
        conn, _ = listener.accept()
        conn.recv(64)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    with pytest.raises(RPCError, match="is not TVM RPC server"):
        rpc.connect("127.0.0.1", port, timeout=5)
    listener.close()


def test_connect_to_nothing_is_a_clear_error():
    port = socket.create_server(("127.0.0.1", 0))
    dead = port.getsockname()[1]
    port.close()
    with pytest.raises(RPCError, match=f"cannot connect to RPC server 127.0.0.1:{dead}"):
        rpc.connect("127.0.0.1", dead)


def test_remote_exception_message_reaches_the_client(server):
    remote = rpc.connect("127.0.0.1", server.port)
    with pytest.raises(RPCError, match="remote failure: disk on fire"):
        remote.get_function("rpc_test.fail")("disk on fire")
    with pytest.raises(RPCError, match="not a function handle"):
        remote._endpoint.call(0xDEAD0, (), "a call of a stale handle")
    assert remote.get_function("rpc_test.add")(5, 5) == 10


def test_dead_tracker_is_a_clear_error():
    tracker = rpc.Tracker(port=0, port_end=0, silent=True)
    session = rpc.connect_tracker("127.0.0.1", tracker.port)
    waiter: dict = {}

    def request():
        try:
            session.request("nobody", max_retry=2)
        except TVMError as err:
            waiter["error"] = err

    thread = threading.Thread(target=request)
    thread.start()
    time.sleep(0.2)
    tracker.terminate()
    thread.join(timeout=10)
    assert "Cannot request nobody after 2 retry" in str(waiter["error"])
    with pytest.raises(RPCError, match=f"cannot connect to RPC tracker 127.0.0.1:{tracker.port}"):
        rpc.connect_tracker("127.0.0.1", tracker.port)
