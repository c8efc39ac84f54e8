"""Interoperability with the apache-tvm wheel (>= 0.21, tvm-ffi encoding) over loopback TCP.

A TVM server (``python -m tvm.exec.rpc_server``) registers with kiln's tracker and serves a
kiln client; a TVM client talks to kiln's server. Only calls that do not depend on module
formats: global functions, files, tensor copies, errors, the time evaluator. The oracle is
NumPy (and the data sent). Skipped only when apache-tvm is not installed (``interop`` extra).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import rpc
from kiln.runtime.error import RPCError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rpc_testlib import ROOT, kiln_server, wait_for  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _without_the_tvm_alias():
    """The real apache-tvm for this module, even in a process where tests/compat made
    ``import tvm`` resolve to kiln (its conftest installs the alias at collection); the alias
    comes back afterwards, with the real tvm's modules forgotten again."""
    from kiln import compat

    aliased = compat.tvm_alias_installed()
    compat.uninstall_tvm_alias()
    yield
    if aliased:
        compat.install_tvm_alias(shadow=True)  # also forgets the real tvm's modules


def _apache_tvm():
    spec = importlib.util.find_spec("tvm")
    kiln_dir = Path(kiln.__file__).resolve().parent
    # the alias resolves into kiln's own package; a checkout directory named "kiln" is fine
    if spec is None or spec.origin is None or \
            Path(spec.origin).resolve().is_relative_to(kiln_dir):
        pytest.skip("apache-tvm is not installed (pip install 'kiln[interop]')")
    import tvm
    import tvm.rpc

    return tvm


@pytest.fixture(scope="module")
def tvm_server_on_kiln_tracker():
    """A TVM RPC server process registered under key 'tvm-box' with a kiln tracker."""
    _apache_tvm()
    tracker = rpc.Tracker(port=0, port_end=0, silent=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", "9530",
         "--port-end", "9630", "--tracker", f"127.0.0.1:{tracker.port}", "--key", "tvm-box"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)  # its own process group: TVM runs the server in a child
    try:
        session = rpc.connect_tracker("127.0.0.1", tracker.port)
        wait_for(lambda: session.summary()["queue_info"].get("tvm-box", {}).get("free"),
                 timeout=120, interval=0.2)
        yield tracker, session
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        tracker.terminate()


def test_tvm_server_registers_with_kiln_tracker(tvm_server_on_kiln_tracker):
    _, session = tvm_server_on_kiln_tracker
    summary = session.summary()
    assert summary["queue_info"]["tvm-box"] == {"free": 1, "pending": 0}
    (info,) = [s for s in summary["server_info"] if s["key"] == "server:tvm-box"]
    assert info["addr"][0] == "127.0.0.1" and 9530 <= info["addr"][1] < 9630


def test_kiln_client_uses_a_tvm_server(tvm_server_on_kiln_tracker, rng):
    _, session = tvm_server_on_kiln_tracker
    remote = session.request("tvm-box", session_timeout=60)
    assert remote._endpoint.codec.name == "ffi"  # detected from InitServer's reply
    remote.upload(b"\x00kiln\xff", "blob.bin")
    assert remote.download("blob.bin") == b"\x00kiln\xff"
    data = rng.standard_normal((3, 5)).astype("float32")
    arr = kiln.nd.array(data, remote.cpu(0))
    np.testing.assert_array_equal(arr.numpy(), data)
    np.testing.assert_array_equal(arr.copyto(remote.cpu(0)).numpy(), data)
    workpath = remote.get_function("tvm.rpc.server.workpath")("x")
    assert isinstance(workpath, str) and workpath.endswith("/x")
    with pytest.raises(AttributeError):
        remote.get_function("no.such.function")
    with pytest.raises(RPCError, match="Cannot open .*missing.bin"):
        remote.download("missing.bin")
    timer = remote.time_evaluator("tvm.rpc.server.workpath", remote.cpu(0), number=3, repeat=2)
    assert len(timer("x").results) == 2
    remote.close()


def test_tvm_client_uses_a_kiln_server(rng):
    tvm = _apache_tvm()
    with kiln_server("--codec", "ffi") as server:
        remote = tvm.rpc.connect("127.0.0.1", server.port)
        assert remote.get_function("rpc_test.add")(40, 2) == 42
        assert remote.get_function("rpc_test.echo")("héllo") == "héllo"
        assert remote.get_function("rpc_test.concat")("a", bytearray(b"b")) == b"ab"
        remote.upload(bytearray(b"weights"), "w.bin")
        assert bytes(remote.download("w.bin")) == b"weights"
        data = rng.standard_normal(6).astype("float32")
        x = tvm.runtime.tensor(data, remote.cpu(0))
        out = tvm.runtime.tensor(np.zeros(6, "float32"), remote.cpu(0))
        remote.get_function("rpc_test.scale_into")(x, out, 2.0)
        np.testing.assert_allclose(out.numpy(), data * 2.0, rtol=1e-6)
        made = remote.get_function("rpc_test.arange")(5, "int32")
        np.testing.assert_array_equal(made.numpy(), np.arange(5, dtype="int32"))
        with pytest.raises(Exception, match="remote failure: zz"):
            remote.get_function("rpc_test.fail")("zz")
        assert remote.get_function("rpc_test.make_adder")(5)(1) == 6
        del x, out, made
        remote._sess.get_function("CloseRPCConnection")()


def test_tvm_client_reaches_a_kiln_server_through_kiln_proxy():
    from kiln.rpc.proxy import Proxy

    tvm = _apache_tvm()
    with Proxy("127.0.0.1", port=0, port_end=0) as proxy:
        server = rpc.Server("127.0.0.1", proxy.port, is_proxy=True, key="nat-box",
                            codec="ffi")
        try:
            wait_for(lambda: "nat-box" in proxy.waiting()["server"])
            remote = tvm.rpc.connect("127.0.0.1", proxy.port, key="nat-box")
            remote.upload(bytearray(b"via proxy"), "p.bin")
            assert bytes(remote.download("p.bin")) == b"via proxy"
            remote._sess.get_function("CloseRPCConnection")()
        finally:
            server.terminate()


def test_protocol_versions_are_told_apart_by_the_init_reply():
    """The same kiln client talks to a v0.16 server (kiln's default) and learns its codec."""
    with kiln_server() as server:
        remote = rpc.connect("127.0.0.1", server.port)
        assert remote._endpoint.codec.name == "v0.16"
        assert remote.get_function("rpc_test.add")(1, 2) == 3
        remote.close()
