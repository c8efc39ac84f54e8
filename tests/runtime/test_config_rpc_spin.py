"""KILN_RPC_SPIN_US is read defensively: a bad value never breaks or wedges an RPC channel."""

from __future__ import annotations

import socket

import pytest

from kiln.runtime import config


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("50", 50.0), ("0", 0.0), ("-3", 0.0), ("12.5", 12.5), ("abc", 50.0),
     ("nan", 50.0), ("inf", 50.0), ("-inf", 50.0), ("1e30", 10000.0), ("1e12", 10000.0)],
)
def test_rpc_spin_us_is_finite_and_bounded(monkeypatch, raw, expected):
    monkeypatch.setenv("KILN_RPC_SPIN_US", raw)
    assert config.rpc_spin_us() == expected


@pytest.mark.parametrize("raw", ["nan", "inf", "1e30"])
def test_socket_channel_survives_a_bad_spin_budget(monkeypatch, raw):
    # nan/inf used to raise out of SocketChannel(); 1e30 wrapped the C int64 spin budget
    from kiln.rpc.protocol import SocketChannel

    monkeypatch.setenv("KILN_RPC_SPIN_US", raw)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        try:
            channel = SocketChannel(client, 1.0)
            receiver = channel._receiver
            if receiver is not None:
                assert 0 <= receiver.wait.spin_ns <= 10_000_000
            peer.sendall(b"ping")
            assert bytes(channel.recv_view(4)) == b"ping"
        finally:
            peer.close()
            client.close()
