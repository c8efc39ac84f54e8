"""The AOT executor: host AOT against NumPy and the graph executor, and the C the C runtime
gets (interface-api c) compiled on the host with a test-local main."""

import subprocess

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.backend import Executor, Runtime
from kiln.runtime import cc
from kiln.runtime.executor import AotModule


def _model():
    """Constants, fused groups, an intermediate (softmax), a reshape-only group, two outputs
    (one a plain reshape of a kernel's result)."""
    a = relay.var("a", shape=(2, 6), dtype="float32")
    b = relay.var("input.1", shape=(2, 6), dtype="float32")
    w = relay.const(np.linspace(-1, 1, 12, dtype="float32").reshape(2, 6))
    x = relay.nn.relu(relay.multiply(relay.add(a, b), w))
    y = relay.reshape(x, (3, 4))
    z = relay.exp(relay.reshape(relay.add(relay.nn.softmax(x), a), (12,)))
    func = relay.Function([a, b], relay.Tuple([z, y]))
    return tvm.IRModule.from_expr(func)


def _reference(a, b):
    w = np.linspace(-1, 1, 12, dtype="float32").reshape(2, 6)
    x = np.maximum((a + b) * w, 0)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return [np.exp((e / e.sum(axis=-1, keepdims=True) + a).reshape(12)), x.reshape(3, 4)]


def _inputs(rng):
    return (rng.standard_normal((2, 6)).astype("float32"),
            rng.standard_normal((2, 6)).astype("float32"))


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_host_aot_matches_numpy_and_graph_executor(target, rng):
    # llvmlite is a test dependency: without it the llvm case fails rather than skips.
    an, bn = _inputs(rng)
    with tvm.transform.PassContext(opt_level=3):
        aot_lib = relay.build(_model(), target, executor=Executor("aot"))
        graph_lib = relay.build(_model(), target)
    m = AotModule(aot_lib["default"](tvm.cpu(0)))
    assert m.get_num_inputs() == 2 and m.get_num_outputs() == 2
    assert m.get_input_index("input.1") == 1 and m.get_input_name(0) == "a"
    m.set_input("a", an)
    m.run(**{"input.1": bn})
    g = graph_executor.GraphModule(graph_lib["default"](tvm.cpu(0)))
    g.set_input("a", an)
    g.set_input("input.1", bn)
    g.run()
    for i, ref in enumerate(_reference(an, bn)):
        np.testing.assert_allclose(m.get_output(i).numpy(), ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(m.get_output(i).numpy(), g.get_output(i).numpy(),
                                   rtol=1e-6, atol=0)


def test_host_aot_without_usmp_and_unlinked_params(rng):
    an, bn = _inputs(rng)
    config = {"tir.usmp.enable": False}
    with tvm.transform.PassContext(opt_level=3, config=config):
        lib = relay.build(_model(), "c", executor=Executor("aot", {"link-params": False}))
    assert "TVMBackendAllocWorkspace" in lib.aot.lib0 and "global_const_workspace" not in \
        lib.aot.lib0
    assert list(lib.params) == ["p0"]
    m = AotModule(lib["default"](tvm.cpu(0)))
    assert m.get_num_inputs() == 3  # the unlinked constant is an input, set from params
    m.run(a=an, **{"input.1": bn})
    for i, ref in enumerate(_reference(an, bn)):
        np.testing.assert_allclose(m.get_output(i).numpy(), ref, rtol=1e-5, atol=1e-6)


def test_aot_module_errors_name_what_is_wrong():
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(_model(), "c", executor=Executor("aot"))
    m = AotModule(lib["default"](tvm.cpu(0)))
    with pytest.raises(tvm.TVMError, match="cannot find 'nope' among input"):
        m.set_input("nope", np.zeros((2, 6), "float32"))
    with pytest.raises(tvm.TVMError, match="expected shape"):
        m.set_input("a", np.zeros((3, 6), "float32"))
    with pytest.raises(tvm.TVMError, match="output index 5 is out of range"):
        m.get_output(5)
    assert m.get_input_index("nope") == -1


MAIN_C = r"""
#include <stdio.h>
#include <string.h>
#include "tvmgen_default.h"
void TVMAPISetLastError(const char* msg) { fprintf(stderr, "error: %s\n", msg); }
static float in_a[12], in_b[12], out0[12], out1[12];
int main(void) {
  if (fread(in_a, 1, TVMGEN_DEFAULT_A_SIZE, stdin) != TVMGEN_DEFAULT_A_SIZE) return 2;
  if (fread(in_b, 1, TVMGEN_DEFAULT_INPUT_1_SIZE, stdin) != TVMGEN_DEFAULT_INPUT_1_SIZE) return 2;
  struct tvmgen_default_inputs inputs = {.a = in_a, .input_1 = in_b};
  struct tvmgen_default_outputs outputs = {.output0 = out0, .output1 = out1};
  if (tvmgen_default_run(&inputs, &outputs) != 0) return 1;
  fwrite(out0, 1, TVMGEN_DEFAULT_OUTPUT0_SIZE, stdout);
  fwrite(out1, 1, TVMGEN_DEFAULT_OUTPUT1_SIZE, stdout);
  return 0;
}
"""


def _compile_crt_sources(lib, tmp_path, main_c):
    """Compile the crt build's C (lib0 + kernels) with a test main, warnings as errors."""
    (tmp_path / "tvmgen_default.h").write_text(lib.header)
    files = lib.lib.export_objects(str(tmp_path))
    files += [p for m in lib.lib.imports for p in m.export_objects(str(tmp_path))]
    (tmp_path / "main.c").write_text(main_c)
    exe = tmp_path / "model"
    includes = [f"-I{d}" for d in cc.include_dirs()] + [f"-I{tmp_path}"]
    cc.run_compiler([cc.find_compiler(), "-std=gnu11", "-O2", "-Wall", "-Werror",
                     "-Wno-unused-function", *includes, *files, str(tmp_path / "main.c"), "-lm",
                     "-o", str(exe)], "Compiling the AOT test program")
    return exe


@pytest.mark.parametrize("algorithm", ["greedy_by_size", "greedy_by_conflicts", "hill_climb"])
def test_crt_c_interface_runs_on_the_host(algorithm, tmp_path, rng):
    target = tvm.target.Target("c -keys=arm_cpu -mcpu=cortex-m4")
    config = {"tir.disable_vectorize": True, "tir.usmp.algorithm": algorithm}
    with tvm.transform.PassContext(opt_level=3, config=config):
        lib = relay.build(_model(), target=target, runtime=Runtime("crt", {"system-lib": True}),
                          executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))
    lib0 = lib.lib.get_source()
    assert "static uint8_t global_workspace[" in lib0 and ".bss.noinit.tvm" in lib0
    assert "int32_t tvmgen_default_run(struct tvmgen_default_inputs* inputs," in lib0
    kernels = lib.lib.imports[0].get_source()
    assert "-mcpu=cortex-m4" in kernels.splitlines()[0]
    assert "#pragma omp" not in kernels and "TVMBackendAllocWorkspace" not in kernels
    assert "vector_size" not in kernels  # tir.disable_vectorize: scalar C for the M4
    assert lib.stats["workspace_pool_bytes"] >= lib.stats["workspace_lower_bound_bytes"] > 0
    an, bn = _inputs(rng)
    # the system-lib registry needs the CRT's module.h: compile without it here
    lib.lib.source = lib0[: lib0.index("#include <tvm/runtime/crt/module.h>")]
    exe = _compile_crt_sources(lib, tmp_path, MAIN_C)
    out = subprocess.run([str(exe)], input=an.tobytes() + bn.tobytes(), capture_output=True,
                         check=True, timeout=120).stdout
    got = np.frombuffer(out, dtype="float32")
    for part, ref in zip(np.split(got, [12]), _reference(an, bn)):
        np.testing.assert_allclose(part.reshape(ref.shape), ref, rtol=1e-5, atol=1e-6)


def _run_host_aot(func, inputs):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(func), "c", executor=Executor("aot"))
    m = AotModule(lib["default"](tvm.cpu(0)))
    m.run(**inputs)
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def test_outputs_that_are_inputs_constants_or_repeated_are_copied(rng):
    a = relay.var("a", shape=(3, 4), dtype="int32")
    c = np.arange(12, dtype="int32").reshape(3, 4)
    s = relay.add(a, relay.const(c))
    func = relay.Function([a], relay.Tuple([a, relay.const(c), s, s,
                                            relay.reshape(s, (12,))]))
    an = rng.integers(-50, 50, (3, 4)).astype("int32")
    got = _run_host_aot(func, {"a": an})
    for g, want in zip(got, [an, c, an + c, an + c, (an + c).reshape(12)]):
        np.testing.assert_array_equal(g, want)


def test_multi_output_kernel_and_intermediates_kept_apart(rng):
    x = relay.var("x", shape=(4, 6))
    parts = relay.split(relay.exp(x), 3, axis=1)
    y = relay.add(relay.TupleGetItem(parts.astuple(), 0), relay.TupleGetItem(parts.astuple(), 2))
    z = relay.nn.softmax(relay.multiply(y, relay.TupleGetItem(parts.astuple(), 1)))
    func = relay.Function([x], relay.Tuple([z, y]))
    xn = rng.standard_normal((4, 6)).astype("float32")
    e = np.exp(xn)
    y_ref = e[:, 0:2] + e[:, 4:6]
    t = y_ref * e[:, 2:4]
    z_ref = np.exp(t - t.max(1, keepdims=True))
    z_ref /= z_ref.sum(1, keepdims=True)
    got = _run_host_aot(func, {"x": xn})
    np.testing.assert_allclose(got[0], z_ref, rtol=1e-5)
    np.testing.assert_allclose(got[1], y_ref, rtol=1e-5)


def test_exported_aot_library_loads_back(tmp_path, rng):
    x = relay.var("x", shape=(2, 3))
    func = relay.Function([x], relay.nn.softmax(relay.exp(x)))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(func), "c", executor=Executor("aot"),
                          mod_name="net")
    path = str(tmp_path / "net.so")
    lib.export_library(path)
    loaded = tvm.runtime.load_module(path)
    m = AotModule(loaded["net"](tvm.cpu(0)))
    xn = rng.standard_normal((2, 3)).astype("float32")
    m.run(x=xn)
    e = np.exp(np.exp(xn) - np.exp(xn).max(1, keepdims=True))
    np.testing.assert_allclose(m.get_output(0).numpy(), e / e.sum(1, keepdims=True), rtol=1e-5)
    with pytest.raises(AttributeError, match="no function 'default'"):
        loaded["default"]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "uint16", "int64",
                                   "bool"])
def test_linked_constants_keep_their_bits(dtype):
    if dtype.startswith("float"):
        info = np.finfo(dtype)
        values = np.array([0.0, -0.0, 1 / 3, -2.5, info.max, info.min, info.tiny,
                           info.smallest_subnormal, np.inf, -np.inf, np.nan], dtype=dtype)
    elif dtype == "bool":
        values = np.array([True, False, True])
    else:
        info = np.iinfo(dtype)
        values = np.array([0, 1, -1 if info.min else 2, info.min, info.max], dtype=dtype)
    func = relay.Function([], relay.const(values))
    got = _run_host_aot(func, {})[0]
    assert got.dtype == values.dtype and got.tobytes() == values.tobytes()


def test_an_input_named_like_a_constant_stays_an_input(rng):
    p0 = relay.var("p0", shape=(4,))
    func = relay.Function([p0], relay.multiply(p0, relay.const(np.full(4, 3, "float32"))))
    xn = rng.standard_normal(4).astype("float32")
    np.testing.assert_allclose(_run_host_aot(func, {"p0": xn})[0], xn * 3, rtol=1e-6)


def test_executors_of_one_library_have_their_own_pools(rng):
    import threading

    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(_model(), "c", executor=Executor("aot"))
    runs = [(AotModule(lib["default"](tvm.cpu(0))), *_inputs(rng)) for _ in range(3)]
    errors = []

    def work(m, an, bn):
        try:
            for _ in range(20):
                m.run(a=an, **{"input.1": bn})
                for i, ref in enumerate(_reference(an, bn)):
                    np.testing.assert_allclose(m.get_output(i).numpy(), ref, rtol=1e-5,
                                               atol=1e-6)
        except AssertionError as err:  # reported after join
            errors.append(err)

    threads = [threading.Thread(target=work, args=r) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
