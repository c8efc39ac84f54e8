"""microTVM session layer: the host (kiln.micro.session_layer) against the C device end
(microtvm_rpc_common/session.c, in tests/micro/crt/session_echo.c) and hand-made packets:
handshake, nonces, logs, chunked messages, retries and a device that resets or dies.
"""

from __future__ import annotations

import logging
import struct

import pytest
from crt_testlib import C_TEST_DIR, build_program

from kiln.micro.framing import Unframer, frame_packet
from kiln.micro.session_layer import (
    MessageType,
    SessionLayer,
    SessionStartError,
    SessionTerminatedError,
    regenerate_nonce,
)
from kiln.micro.transport import IoTimeoutError, SubprocessTransport, TransportTimeouts

FAST = TransportTimeouts(0.3, 5.0, 5.0)


def _rotate_increment(nonce: int) -> int:
    """TVM's RegenerateNonce written out: rotate left 5 in a byte, add one, skip 0."""
    rotated = ((nonce << 5) & 0xFF) | (nonce >> 5)
    nxt = (rotated + 1) % 256
    return 1 if nxt == 0 else nxt


def test_regenerate_nonce_matches_tvm_formula():
    # (n << 5 | n >> 5) keeps only 3 high bits shifted down, as TVM's uint8_t arithmetic does.
    for nonce in range(256):
        assert regenerate_nonce(nonce) == _rotate_increment(nonce)
    assert regenerate_nonce(0xFF) != 0


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    out = tmp_path_factory.mktemp("session")
    return build_program(
        out, "session_echo", [C_TEST_DIR / "session_echo.c"],
        components=("common", "memory", "microtvm_rpc_common"),
    )


def _packets(wire: bytes) -> list[tuple[int, int, bytes]]:
    out = []
    for payload in Unframer().feed(wire):
        session_id, message_type = struct.unpack_from("<HB", payload)
        out.append((session_id, message_type, payload[3:]))
    return out


def _read_until(transport, count: int) -> list[tuple[int, int, bytes]]:
    wire = b""
    while len(_packets(wire)) < count:
        wire += transport.read(4096, 5.0)
    return _packets(wire)


def test_device_handshake_hand_made_bytes(echo):
    nonce = 0x37
    with SubprocessTransport([str(echo), str(nonce)]) as transport:
        # Boot: TerminateSession (id 0, no body), then Log "booted" (id 0).
        assert _read_until(transport, 2) == [(0, 0x02, b""), (0, 0x03, b"booted")]
        transport.write(frame_packet(bytes([0x55, 0x00, 0x00, 0x01])), 5.0)
        responder = _rotate_increment(nonce)
        assert _read_until(transport, 1) == [(0x55 | responder << 8, 0x01, b"\x01")]
        session_id = 0x55 | responder << 8
        # A Normal message with a wrong session id is ignored; the right one is answered.
        transport.write(frame_packet(struct.pack("<HB", session_id ^ 1, 0x10) + b"echo:no",
                                     after_reset=False), 5.0)
        transport.write(frame_packet(struct.pack("<HB", session_id, 0x10) + b"echo:\xffyes",
                                     after_reset=False), 5.0)
        assert _read_until(transport, 1) == [(session_id, 0x10, b"\xffyes")]


def test_host_session_echo_log_and_chunks(echo):
    logs = []
    with SubprocessTransport([str(echo), "200"]) as transport:
        session = SessionLayer(transport, FAST, log_handler=logs.append, nonce=9)
        session.start()
        assert session.established and session.session_id & 0xFF == regenerate_nonce(9)
        assert session.session_id >> 8 == _rotate_increment(200)
        payload = bytes(range(256)) * 3
        session.send(b"echo:" + payload)
        assert session.receive() == payload
        session.send(b"log:hello from the device")
        assert session.receive() == b"logged"
        session.send(b"big:1500")
        assert session.receive() == bytes(i & 0xFF for i in range(1500))
        assert logs == ["booted", "hello from the device"]
        session.terminate()
        assert not session.established


def test_session_start_retries_until_device_listens(echo):
    # The device drops its first two packets (still booting): the third StartSession works.
    with SubprocessTransport([str(echo), "5", "2"]) as transport:
        session = SessionLayer(transport, TransportTimeouts(0.2, 5.0, 5.0), nonce=1)
        session.start()
        # Two attempts are dropped; a loaded host may time out a third and try again.
        assert session.established and session.start_attempts >= 3


def test_session_start_gives_up_with_clear_error(echo):
    with SubprocessTransport([str(echo), "5", "1000"]) as transport:
        session = SessionLayer(transport, TransportTimeouts(0.1, 0.5, 1.0), nonce=1)
        with pytest.raises(SessionStartError, match="did not answer StartSession within 0.5 s"):
            session.start()
        assert session.start_attempts >= 3


def test_device_reset_mid_session_raises_terminated(echo):
    with SubprocessTransport([str(echo), "17"]) as transport:
        session = SessionLayer(transport, FAST)
        session.start()
        session.send(b"reset")
        with pytest.raises(SessionTerminatedError, match="reset or aborted"):
            session.receive()
        with pytest.raises(SessionTerminatedError):
            session.send(b"echo:x")
        # A new handshake on the same link works after the reset.
        session.start()
        session.send(b"echo:again")
        assert session.receive() == b"again"


def test_device_death_raises_terminated_not_hang(echo):
    with SubprocessTransport([str(echo), "17"]) as transport:
        session = SessionLayer(transport, FAST)
        session.start()
        session.send(b"exit")
        with pytest.raises(SessionTerminatedError, match="link closed"):
            session.receive()


def test_receive_timeout_is_clear(echo):
    with SubprocessTransport([str(echo), "17"]) as transport:
        session = SessionLayer(transport, FAST)
        session.start()
        session.send(b"unknown command")
        with pytest.raises(IoTimeoutError, match="no reply from the device within 0.2 s"):
            session.receive(0.2)


def test_host_init_packet_bytes():
    sent = []

    class Recorder(SubprocessTransport):
        def write(self, data, timeout_sec):
            sent.append(data)
            return len(data)

        def read(self, n, timeout_sec):
            raise IoTimeoutError("silent")

    session = SessionLayer(Recorder(["none"]), TransportTimeouts(0.01, 0.03, 0), nonce=0x10)
    with pytest.raises(SessionStartError):
        session.start()
    first = regenerate_nonce(0x10)
    assert sent[0] == frame_packet(bytes([first, 0, MessageType.START_SESSION_INIT, 1]))
    second = regenerate_nonce(first)
    assert sent[1] == frame_packet(bytes([second, 0, 0, 1]), after_reset=False)


def test_device_log_goes_to_logger(echo, caplog):
    with caplog.at_level(logging.INFO, logger="kiln.micro.device"):
        with SubprocessTransport([str(echo), "3"]) as transport:
            SessionLayer(transport, FAST).start()
    assert "booted" in caplog.text
