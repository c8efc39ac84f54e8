"""The RPC tracker: TVM's JSON protocol spoken by hand (the oracle is the protocol as TVM
documents it), servers registering, priority scheduling, and the command-line programs."""

from __future__ import annotations

import json
import socket
import struct
import sys
from pathlib import Path

import pytest

from kiln import rpc
from kiln.driver.cli import main as kiln_main
from kiln.rpc.protocol import RPC_TRACKER_MAGIC
from kiln.runtime.error import TVMError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import remote_funcs  # noqa: E402,F401  (registers rpc_test.*)
from rpc_testlib import kiln_server, wait_for  # noqa: E402


@pytest.fixture
def tracker():
    trk = rpc.Tracker(port=0, port_end=0, silent=True)
    yield trk
    trk.terminate()


class RawPeer:
    """A tracker connection speaking TVM's wire format directly."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.sendall(struct.pack("<i", RPC_TRACKER_MAGIC))
        assert struct.unpack("<i", self.sock.recv(4))[0] == RPC_TRACKER_MAGIC

    def send(self, message) -> None:
        data = json.dumps(message).encode()
        self.sock.sendall(struct.pack("<i", len(data)) + data)

    def recv(self):
        size = struct.unpack("<i", self._exact(4))[0]
        return json.loads(self._exact(size))

    def _exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "tracker closed the connection"
            data += chunk
        return data

    def call(self, message):
        self.send(message)
        return self.recv()


def _queue(peer: RawPeer, key: str = "board") -> dict:
    """The tracker's queue entry for ``key`` ({} before it has one)."""
    return peer.call([6])[1]["queue_info"].get(key, {})


def test_ping_put_summary_and_pending_keys(tracker):
    server = RawPeer(tracker.port)
    assert server.call([1]) == 0
    assert server.call([5, {"key": "server:board", "addr": [None, 9999]}]) == 0
    assert server.call([3, "board", [9999, "board:0.5"], None]) == 0
    assert server.call([7]) == ["board:0.5"]
    summary = RawPeer(tracker.port).call([6])
    assert summary[0] == 0
    assert summary[1]["queue_info"] == {"board": {"free": 1, "pending": 0}}
    assert summary[1]["server_info"] == [{"key": "server:board", "addr": ["127.0.0.1", 9999]}]


def test_requests_are_served_by_priority_then_fifo(tracker):
    low, high, high_later = (RawPeer(tracker.port) for _ in range(3))
    observer = RawPeer(tracker.port)
    for count, (peer, priority) in enumerate(((low, 1), (high, 5), (high_later, 5)), 1):
        peer.send([4, "board", "", priority])  # one at a time: arrival order is FIFO order
        wait_for(lambda n=count: _queue(observer).get("pending") == n)
    server = RawPeer(tracker.port)
    for matchkey, peer in (("k:1", high), ("k:2", high_later), ("k:3", low)):
        assert server.call([3, "board", [9000, matchkey], None]) == 0
        assert peer.recv() == [0, ["127.0.0.1", 9000, matchkey]]
    assert server.call([7]) == []  # every match key was handed out


def test_closing_a_server_connection_removes_its_entries(tracker):
    server = RawPeer(tracker.port)
    server.call([3, "board", [9000, "k:1"], None])
    server.sock.close()
    client = RawPeer(tracker.port)
    wait_for(lambda: _queue(client).get("free") == 0)


def test_malformed_messages_close_only_that_connection(tracker):
    bad = RawPeer(tracker.port)
    bad.sock.sendall(struct.pack("<i", 5) + b"{nope")
    assert bad.sock.recv(1) == b""
    assert RawPeer(tracker.port).call([1]) == 0


def test_server_process_registers_and_a_client_gets_it_through_the_tracker(tracker, capsys):
    with kiln_server("--tracker", f"127.0.0.1:{tracker.port}", "--key", "cpu-box", cli=True):
        session = rpc.connect_tracker("127.0.0.1", tracker.port)
        wait_for(lambda: session.summary()["queue_info"].get("cpu-box", {}).get("free") == 1)
        remote = session.request("cpu-box", priority=2, session_timeout=30)
        assert remote.get_function("rpc_test.add")(20, 22) == 42
        remote.close()
        # after the session the server registers a fresh match key
        wait_for(lambda: session.summary()["queue_info"]["cpu-box"]["free"] == 1)
        assert session.request_and_run(
            "cpu-box", lambda s: s.get_function("rpc_test.add")(1, 2)) == 3
        assert kiln_main(["rpc", "queue", "--port", str(tracker.port)]) == 0
        out = capsys.readouterr().out
        assert "Queue Status" in out and "cpu-box" in out and "server:cpu-box" in out


def test_server_needs_a_key_with_a_tracker():
    with pytest.raises(TVMError, match="needs a key"):
        rpc.Server(port=0, port_end=0, tracker_addr=("127.0.0.1", 9))
