"""RPC sessions over loopback TCP against kiln's server: calls, remote arrays, files, modules,
timing, LocalSession. Oracles: Python/NumPy computing the same values locally."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import rpc, te
from kiln.runtime.error import RPCError, RPCSessionTimeoutError, TVMError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import remote_funcs  # noqa: E402,F401  (registers rpc_test.*)
from rpc_testlib import wait_for  # noqa: E402


@pytest.fixture(scope="module")
def server():
    srv = rpc.Server(port=0, port_end=0, key="", silent=True, read_timeout=2.0)
    yield srv
    srv.terminate()


@pytest.fixture
def remote(server):
    sess = rpc.connect("127.0.0.1", server.port, timeout=30)
    yield sess
    sess.close()


@pytest.fixture(scope="module")
def affine_library(tmp_path_factory):
    """A C module computing B = 2 * A + 1 over 64 floats, exported as a shared library."""
    a = te.placeholder((64,), name="A")
    b = te.compute((64,), lambda i: a[i] * 2.0 + 1.0, name="B")
    path = tmp_path_factory.mktemp("lib") / "affine.so"
    tvm.build(te.create_schedule(b.op), [a, b], target="c", name="affine").export_library(path)
    return path


@pytest.mark.parametrize("value", [7, -(2**62), 2.5, "héllo", b"\x00\xffbytes", None,
                                   tvm.DataType("float16x4"), tvm.cpu(3)])
def test_global_function_round_trips_every_plain_type(remote, value):
    got = remote.get_function("rpc_test.echo")(value)
    assert got == value and type(got) is type(value)


def test_calls_take_several_arguments(remote):
    assert remote.get_function("rpc_test.add")(40, 2) == 42
    assert remote.get_function("rpc_test.concat")("ab", b"cd") == b"abcd"


def test_missing_function_is_an_attribute_error(remote):
    with pytest.raises(AttributeError, match="no function 'no.such.func'"):
        remote.get_function("no.such.func")


@pytest.mark.parametrize("dtype,shape", [("float32", (3, 5)), ("int8", (17,)),
                                         ("float64", (2, 2, 2)), ("uint16", ()),
                                         ("int64", (0, 4))])
def test_remote_ndarray_round_trip(remote, dtype, shape, rng):
    data = (rng.standard_normal(shape) * 100).astype(dtype)
    arr = tvm.nd.array(data, remote.cpu(0))
    assert arr.device == remote.cpu(0) and arr.device != tvm.cpu(0)
    assert arr.shape == shape and arr.dtype == dtype
    np.testing.assert_array_equal(arr.numpy(), data)


def test_remote_function_writes_into_a_remote_array(remote, rng):
    x = rng.standard_normal((4, 6)).astype("float32")
    rx = tvm.nd.array(x, remote.cpu(0))
    out = tvm.nd.empty((4, 6), "float32", remote.cpu(0))
    remote.get_function("rpc_test.scale_into")(rx, out, 3.0)
    np.testing.assert_allclose(out.numpy(), x * 3.0, rtol=1e-6)
    assert remote.get_function("rpc_test.sum")(rx) == pytest.approx(x.astype("float64").sum())


def test_returned_ndarray_stays_remote_and_can_be_passed_back(remote):
    arr = remote.get_function("rpc_test.arange")(10, "int32")
    assert arr.device == remote.cpu(0)
    np.testing.assert_array_equal(arr.numpy(), np.arange(10, dtype="int32"))
    assert remote.get_function("rpc_test.sum")(arr) == 45.0
    copy = arr.copyto(remote.cpu(0))  # remote -> remote in one session: CopyAmongRemote
    del arr
    np.testing.assert_array_equal(copy.numpy(), np.arange(10, dtype="int32"))


def test_remote_functions_are_values(remote):
    add5 = remote.get_function("rpc_test.make_adder")(5)
    assert add5(1) == 6
    assert remote.get_function("rpc_test.apply")(add5, 10) == 15


def test_local_values_cannot_be_sent(remote):
    with pytest.raises(TVMError, match="not memory of RPC session"):
        remote.get_function("rpc_test.sum")(tvm.nd.array(np.ones(3, "float32")))
    with pytest.raises(TVMError, match="cannot be sent to RPC server"):
        remote.get_function("rpc_test.echo")(object())


def test_remote_exception_carries_the_message_and_session_survives(remote):
    with pytest.raises(RPCError, match="Error caught from RPC call:\n.*remote failure: x1"):
        remote.get_function("rpc_test.fail")("x1")
    assert remote.get_function("rpc_test.add")(1, 1) == 2


def test_files_upload_download_listdir_remove(remote, tmp_path):
    source = tmp_path / "weights.bin"
    source.write_bytes(os.urandom(3000))
    remote.upload(source)
    remote.upload(b"abc", "sub/notes.txt")
    assert remote.listdir(".") == "sub,weights.bin,"
    assert remote.download("weights.bin") == source.read_bytes()
    assert remote.download("sub/notes.txt") == b"abc"
    remote.remove("weights.bin")
    assert remote.listdir(".") == "sub,"


@pytest.mark.parametrize("name", ["../escape.txt", "/tmp/escape.txt", "a/../../x", "a\0b"])
def test_uploads_are_confined_to_the_session_directory(remote, name):
    with pytest.raises(RPCError, match="RPC session directory|invalid file name"):
        remote.upload(b"x", name)
    with pytest.raises(RPCError, match="RPC session directory|invalid file name"):
        remote.download(name)


def test_session_directory_is_removed_after_the_session(server):
    sess = rpc.connect("127.0.0.1", server.port)
    workdir = Path(sess.get_function("tvm.rpc.server.workpath")("x")).parent
    assert workdir.is_dir()
    sess.close()
    wait_for(lambda: not workdir.exists())


def test_dropping_the_last_reference_ends_the_session(server):
    sess = rpc.connect("127.0.0.1", server.port)
    workdir = Path(sess.get_function("tvm.rpc.server.workpath")("x")).parent
    arr = tvm.nd.array(np.arange(5, dtype="int32"), sess.cpu(0))
    del sess
    gc.collect()
    np.testing.assert_array_equal(arr.numpy(), np.arange(5))  # the array keeps it alive
    assert workdir.is_dir()
    del arr
    gc.collect()
    wait_for(lambda: not workdir.exists())


def test_upload_load_module_run_and_time(remote, affine_library, rng):
    remote.upload(affine_library)
    mod = remote.load_module("affine.so")
    assert mod.type_key == "rpc"
    x = rng.standard_normal(64).astype("float32")
    a = tvm.nd.array(x, remote.cpu(0))
    b = tvm.nd.empty((64,), "float32", remote.cpu(0))
    mod["affine"](a, b)
    np.testing.assert_allclose(b.numpy(), 2 * x + 1, rtol=1e-6)
    timer = mod.time_evaluator("affine", remote.cpu(0), number=5, repeat=3)
    result = timer(a, b)
    assert len(result.results) == 3 and all(t > 0 for t in result.results)
    with pytest.raises(AttributeError):
        mod.get_function("no_such_kernel")


def test_time_evaluator_grows_number_to_min_repeat_ms(remote):
    timer = remote.time_evaluator("rpc_test.sleep", remote.cpu(0), number=1, repeat=2,
                                  min_repeat_ms=30)
    result = timer(0.005)
    assert all(0.004 < t < 0.1 for t in result.results)


def test_key_mismatch_is_refused():
    srv = rpc.Server(port=0, port_end=0, key="board", silent=True)
    try:
        with pytest.raises(RPCError, match="cannot find server that matches key"):
            rpc.connect("127.0.0.1", srv.port, key="other")
        rpc.connect("127.0.0.1", srv.port, key="board").close()
    finally:
        srv.terminate()


def test_session_timeout_ends_a_long_call(server):
    sess = rpc.connect("127.0.0.1", server.port, session_timeout=2.0)
    with pytest.raises(RPCSessionTimeoutError, match="Your 2.0s session has expired"):
        sess.get_function("rpc_test.sleep")(10.0)


def test_local_session_has_the_same_api(affine_library, rng):
    sess = rpc.LocalSession()
    assert sess.get_function("rpc_test.add")(2, 3) == 5
    sess.upload(affine_library)
    assert sess.listdir(".") == "affine.so,"
    mod = sess.load_module("affine.so")
    x = rng.standard_normal(64).astype("float32")
    a, b = tvm.nd.array(x, sess.cpu(0)), tvm.nd.empty((64,), "float32", sess.cpu(0))
    mod["affine"](a, b)
    np.testing.assert_allclose(b.numpy(), 2 * x + 1, rtol=1e-6)
    assert len(sess.time_evaluator("rpc_test.add", sess.cpu(0), repeat=2)(1, 2).results) == 2
    with pytest.raises(TVMError, match="leaves the RPC session directory"):
        sess.download("../x")
    sess.close()
