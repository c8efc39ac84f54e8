"""The on-device RPC server (microtvm_rpc_server/rpc_server.c, kiln/micro/board rpc_main.c),
spoken to in hand-made TVM RPC packets over kiln's session layer: each reply is checked byte
for byte against TVM v0.16's packet layout (u64 length, i32 code, packed sequence).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.micro.board import StandaloneProject
from kiln.micro.session_layer import SessionLayer
from kiln.micro.transport import SubprocessTransport, TransportTimeouts
from kiln.relay.backend import Executor, Runtime

K_INIT_SERVER, K_CALL_FUNC, K_RETURN, K_EXCEPTION, K_GET_GLOBAL = 2, 3, 4, 5, 9
K_COPY_FROM, K_COPY_TO, K_COPY_ACK, K_ALLOC, K_FREE_DATA = 6, 7, 8, 13, 14
T_INT, T_HANDLE, T_NULL, T_DEVICE, T_DTYPE, T_MODULE, T_STR = 0, 3, 4, 6, 5, 9, 11


def build_host_driven(tmp_path, executor: str = "graph"):
    """A dense+relu model built for host-driven microTVM, its program, and its factory."""
    x = relay.var("x", shape=(1, 8), dtype="float32")
    w = relay.var("w", shape=(4, 8), dtype="float32")
    func = relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w)))
    params = {"w": np.random.default_rng(0).random((4, 8), "float32")}
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        factory = relay.build(tvm.IRModule.from_expr(func), target="c",
                              runtime=Runtime("crt", {"system-lib": True}),
                              executor=Executor(executor), params=params)
    mlf = tmp_path / "model.tar"
    tvm.micro.export_model_library_format(factory, mlf)
    project = StandaloneProject(mlf, "host", build_dir=tmp_path / "build",
                                execution="host-driven")
    return project.build(), factory, params


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_host_driven(tmp_path_factory.mktemp("rpc_server"))[0]


def _packet(code: int, body: bytes) -> bytes:
    return struct.pack("<Qi", len(body) + 4, code) + body


def _string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


class Device:
    """A session to the program with helpers for raw RPC packets."""

    def __init__(self, transport):
        self.session = SessionLayer(transport, TransportTimeouts(1.0, 10.0, 10.0))
        self.session.start()

    def ask(self, code: int, body: bytes) -> tuple[int, bytes]:
        self.session.send(_packet(code, body))
        reply = self.session.receive()
        length, reply_code = struct.unpack_from("<Qi", reply)
        assert length == len(reply) - 8
        return reply_code, reply[12:]


@pytest.fixture
def device(program):
    with SubprocessTransport([str(program)]) as transport:
        yield Device(transport)


def _exception_text(body: bytes) -> str:
    count, code, length = struct.unpack_from("<iiQ", body)
    assert (count, code) == (1, T_STR)
    return body[16:16 + length].decode()


def test_init_server_and_system_lib(device):
    assert device.ask(K_INIT_SERVER, _string(b"0.8.0") + struct.pack("<i", 0)) == (
        K_RETURN, struct.pack("<ii", 1, T_NULL))
    code, body = device.ask(K_GET_GLOBAL, struct.pack("<ii", 1, T_STR) +
                            _string(b"runtime.SystemLib"))
    count, type_code, handle = struct.unpack("<iiQ", body)
    assert (code, count, type_code) == (K_RETURN, 1, T_HANDLE) and handle != 0
    # CallFunc: [(int, 9 = module), (handle, module)] as TVM's EncodeReturn.
    code, body = device.ask(K_CALL_FUNC, struct.pack("<Qi", handle, 0))
    assert code == K_RETURN
    count, c0, c1, ret_type, module = struct.unpack("<iiiqQ", body)
    assert (count, c0, c1, ret_type) == (2, T_INT, T_HANDLE, T_MODULE) and module != 0
    # A missing global is a null handle, not an error.
    assert device.ask(K_GET_GLOBAL, struct.pack("<ii", 1, T_STR) + _string(b"no.such")) == (
        K_RETURN, struct.pack("<ii", 1, T_NULL))


def test_memory_round_trip(device):
    dev = struct.pack("<ii", 1, 0)
    code, body = device.ask(K_ALLOC, struct.pack("<i4i", 4, T_DEVICE, T_INT, T_INT, T_DTYPE)
                            + dev + struct.pack("<qq", 64, 8) + bytes([1, 8, 1, 0, 0, 0, 0, 0]))
    assert code == K_RETURN
    pointer = struct.unpack("<iiQ", body)[2]
    data = bytes(range(200, 256)) + b"\xff\xfd\xfe\x00" * 2
    meta = struct.pack("<Qiii", pointer, 1, 0, 1) + bytes([1, 8, 1, 0]) + struct.pack(
        "<qQ", 64, 0)
    assert device.ask(K_COPY_TO, meta + struct.pack("<Q", 64) + data) == (
        K_RETURN, struct.pack("<ii", 1, T_NULL))
    meta_at_8 = meta[:-8] + struct.pack("<Q", 8)
    assert device.ask(K_COPY_FROM, meta_at_8 + struct.pack("<Q", 56)) == (K_COPY_ACK, data[8:])
    assert device.ask(K_FREE_DATA, struct.pack("<iii", 2, T_DEVICE, T_HANDLE) + dev +
                      struct.pack("<Q", pointer)) == (K_RETURN, struct.pack("<ii", 1, T_NULL))


@pytest.mark.parametrize(
    "code, body, message",
    [
        (K_INIT_SERVER, _string(b"0.7.0") + struct.pack("<i", 0), "protocol version mismatch"),
        (K_INIT_SERVER, _string(b"0.8.0"), "malformed InitServer"),
        (K_CALL_FUNC, struct.pack("<Qi", 0x12345, 0), "device error"),
        (K_CALL_FUNC, struct.pack("<Qii", 1, 1, 99), "malformed CallFunc"),
        (K_GET_GLOBAL, struct.pack("<ii", 1, T_STR) + struct.pack("<Q", 1 << 40),
         "malformed RPC syscall"),
        (K_GET_GLOBAL, struct.pack("<ii", 1, T_INT) + struct.pack("<q", 3), "wrong arguments"),
        (77, b"", "unknown RPC code"),
    ],
    ids=["version", "truncated", "bad-handle", "bad-type", "long-string", "arg-type",
         "unknown"],
)
def test_bad_requests_get_exceptions_and_the_server_lives(device, code, body, message):
    reply_code, reply = device.ask(code, body)
    assert reply_code == K_EXCEPTION and message in _exception_text(reply)
    assert device.ask(K_INIT_SERVER, _string(b"0.8.0") + struct.pack("<i", 0))[0] == K_RETURN


def test_device_tvmlogf_reaches_the_host_log(program, caplog):
    import logging

    from kiln.micro import Session

    with caplog.at_level(logging.INFO, logger="kiln.micro.device"):
        with Session(SubprocessTransport([str(program)])) as session:
            session.get_function("kiln.testing.log")("hello 42")
            with pytest.raises(tvm.TVMError, match="takes one string"):
                session.get_function("kiln.testing.log")(7)
    lines = [r.getMessage() for r in caplog.records if r.name == "kiln.micro.device"]
    assert "kiln.testing.log: hello 42" in lines  # the trailing newline is dropped, as TVM


def test_each_boot_answers_with_its_own_nonce(program):
    # The responder nonce (the session id's high byte) was the same fixed value on every boot
    # before; now it is drawn when the session's first bytes arrive.
    nonces = set()
    for _ in range(4):
        with SubprocessTransport([str(program)]) as transport:
            layer = SessionLayer(transport, TransportTimeouts(1.0, 10.0, 10.0))
            layer.start()
            nonces.add(layer.session_id >> 8)
    assert 0 not in nonces and len(nonces) > 1  # 4 equal draws: a 1 in 255**3 chance
