"""The RPC proxy (TVM's rpc.proxy): servers behind NAT connect out to it, clients connect to
it by key, and it forwards the session both ways; with a tracker, clients find proxied servers
through the tracker. Results come from the NumPy data sent through, checked on return."""

from __future__ import annotations

import socket
import struct
import sys

import numpy as np
import pytest
from rpc_testlib import Process, kiln_server, wait_for

import kiln
from kiln import rpc
from kiln.rpc.protocol import RPC_MAGIC
from kiln.rpc.proxy import Proxy
from kiln.runtime.error import RPCError, TVMError


@pytest.fixture
def proxy():
    with Proxy("127.0.0.1", port=0, port_end=0, timeout_client=1.0) as p:
        yield p


def _roundtrip(remote) -> None:
    x = np.arange(1000, dtype="float32") * 0.5
    remote_x = kiln.nd.array(x, remote.cpu(0))
    np.testing.assert_array_equal(remote_x.numpy(), x)
    remote.upload(b"through the proxy", "note.txt")
    assert remote.download("note.txt") == b"through the proxy"


def test_client_and_server_meet_at_the_proxy_and_sessions_repeat(proxy):
    server = rpc.Server("127.0.0.1", proxy.port, is_proxy=True, key="board")
    try:
        for _ in range(2):  # the server offers itself again after each session
            remote = wait_for(lambda: _try_connect(proxy.port, "board"))
            _roundtrip(remote)
            remote.close()
    finally:
        server.terminate()


def _try_connect(port: int, key: str):
    try:
        return rpc.connect("127.0.0.1", port, key=key)
    except RPCError:
        return None  # the server has not reached the proxy yet


def test_client_without_a_server_gets_a_mismatch_after_its_timeout(proxy):
    with pytest.raises(RPCError, match="cannot find server that matches key='nobody'"):
        rpc.connect("127.0.0.1", proxy.port, key="nobody")


def test_a_second_waiter_with_the_same_key_is_a_duplicate(proxy):
    first = socket.create_connection(("127.0.0.1", proxy.port))
    key = b"client:same"
    first.sendall(struct.pack("<ii", RPC_MAGIC, len(key)) + key)
    try:
        wait_for(lambda: "same" in proxy.waiting()["client"])
        with pytest.raises(RPCError, match="server already have key='same'"):
            rpc.connect("127.0.0.1", proxy.port, key="same")
    finally:
        first.close()


@pytest.mark.parametrize("garbage", [b"GET / HTTP/1.0\r\n\r\n", struct.pack("<ii", RPC_MAGIC, -4),
                                     struct.pack("<ii", RPC_MAGIC, 8) + b"bad:key!"])
def test_garbage_connections_are_dropped_and_the_proxy_keeps_serving(proxy, garbage):
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(garbage)
        sock.settimeout(10)
        reply = sock.recv(16)  # closed (b"") or refused with a code, never left hanging
        assert reply in (b"", struct.pack("<i", RPC_MAGIC + 2))
    server = rpc.Server("127.0.0.1", proxy.port, is_proxy=True, key="after")
    try:
        _roundtrip(wait_for(lambda: _try_connect(proxy.port, "after")))
    finally:
        server.terminate()


def test_web_front_end_is_refused_clearly():
    with pytest.raises(TVMError, match="forwards TCP only"):
        Proxy("127.0.0.1", port=0, port_end=0, web_port=8888)


def test_tracker_hands_out_proxied_servers():
    tracker = rpc.Tracker("127.0.0.1", port=0, port_end=0, silent=True)
    try:
        with Proxy("127.0.0.1", port=0, port_end=0,
                   tracker_addr=("127.0.0.1", tracker.port)) as proxy:
            server = rpc.Server("127.0.0.1", proxy.port, is_proxy=True, key="npu")
            try:
                client = rpc.connect_tracker("127.0.0.1", tracker.port)
                wait_for(lambda: "npu" in client.summary()["queue_info"])
                remote = client.request("npu", session_timeout=30)
                _roundtrip(remote)
                remote.close()
            finally:
                server.terminate()
    finally:
        tracker.terminate()


def test_command_line_proxy_with_a_server_process():
    with Process([sys.executable, "-m", "kiln.exec.rpc_proxy", "--port", "0",
                  "--port-end", "0"]) as proxy:
        server = kiln_server("--through-proxy", "--host", "127.0.0.1", "--port", str(proxy.port),
                             "--key", "cli", expect="serving through the proxy")
        try:
            remote = wait_for(lambda: _try_connect(proxy.port, "cli"))
            assert remote.get_function("rpc_test.add")(40, 2) == 42
            remote.close()
        finally:
            server.kill()
