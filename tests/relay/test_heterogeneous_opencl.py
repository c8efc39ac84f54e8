"""A real second device type: OpenCL (pyopencl + pocl, which runs OpenCL on the CPU here).

The seed's ``test_on_device`` (seed 004) runs verbatim, then with its commented-out execution
lines switched on; kernels planned on ``opencl(0)`` are generated as OpenCL C, built by the
OpenCL driver and checked against NumPy and the interpreter.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

# tests/ is on sys.path under pytest (it holds conftest.py).
from seed_documents import seed_text  # seed 004, or its in-repository excerpt

import kiln as tvm
from kiln import relay, te, tir
from kiln.contrib import graph_executor
from kiln.runtime.device_api import DeviceNDArray
from kiln.runtime.dtype import DataType
from kiln.runtime.opencl import OpenCLModule, load_opencl_module
from kiln.target.codegen_opencl import emit_opencl

CL = tvm.opencl(0)
TARGETS = {"cpu": "c", "opencl": "opencl"}
RNG = np.random.default_rng(3)


def _seed_example() -> str:
    """The seed's test_on_device script, from ``import tvm`` to its ``__main__`` call."""
    text = seed_text("004")
    lines = text.splitlines()
    end = next(i for i, line in enumerate(lines) if line.strip() == "test_on_device()")
    start = max(i for i in range(end) if lines[i].strip() == "import tvm")
    code = textwrap.dedent("\n".join(lines[start:end + 1]))
    code = re.sub(r"^(\s*)import tvm$", r"\1import kiln as tvm", code, flags=re.M)
    return re.sub(r"^(\s*)from tvm(\.|\s)", r"\1from kiln\2", code, flags=re.M)


def _seed_printed_graph() -> dict:
    text = seed_text("004")
    after = text[text.index("log(%1) }") + len("log(%1) }"):]
    return json.JSONDecoder().raw_decode(after.strip())[0]


def _exec(code: str) -> dict:
    namespace = {"__name__": "__main__"}
    exec(compile(code, "<seed 004 test_on_device>", "exec"), namespace)
    return namespace


def test_the_seed_example_builds_the_documented_graph(capsys):
    _exec(_seed_example())
    printed = capsys.readouterr().out
    graph = json.loads(printed[printed.index('{\n  "nodes"'):])
    expected = _seed_printed_graph()
    assert [(n["op"], n["inputs"]) for n in graph["nodes"]] == \
        [(n["op"], n["inputs"]) for n in expected["nodes"]]
    assert graph["nodes"][3]["attrs"]["func_name"] == "__copy"
    for key in ("device_index", "storage_id", "shape", "dltype"):
        assert graph["attrs"][key] == expected["attrs"][key], key
    assert expected["attrs"]["device_index"] == ["list_int", [4, 4, 4, 1, 1]]


def test_the_seed_example_runs_when_its_execution_lines_are_enabled(capsys):
    code = re.sub(r"^(\s*)# ", r"\1", _seed_example(), flags=re.M)
    code = code.replace("print(tvm_res)", "result = (tvm_res, x_data, y_data)")
    code = code.replace("        func = get_function()",
                        "        func = get_function()\n        global result")
    code = code.replace("    def get_function():", "    global result\n    def get_function():")
    namespace = _exec(code)
    tvm_res, x_data, y_data = namespace["result"]
    np.testing.assert_allclose(tvm_res, np.log(x_data + y_data), rtol=1e-5)


def _run(func, inputs, opt_level=3):
    with tvm.transform.PassContext(opt_level=opt_level):
        lib = relay.build(tvm.IRModule.from_expr(func), TARGETS)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0), CL))
    for name, value in inputs.items():
        m.set_input(name, value)
    m.run()
    expected = relay.create_executor("debug", tvm.IRModule.from_expr(func)).evaluate()(
        *inputs.values())
    return lib, m.get_output(0).numpy(), expected.numpy()


def _on_cl(expr):
    return relay.annotation.on_device(expr, CL)


@pytest.mark.parametrize("name", ["dense_relu", "softmax", "conv2d", "sum_all", "cumsum"])
def test_kernels_on_opencl_match_the_interpreter(name):
    x = relay.var("x", shape=(4, 16))
    w = relay.var("w", shape=(8, 16))
    d = relay.var("d", shape=(1, 3, 8, 8))
    k = relay.var("k", shape=(4, 3, 3, 3))
    xv, wv = RNG.random((4, 16), dtype="float32"), RNG.random((8, 16), dtype="float32")
    dv, kv = RNG.random((1, 3, 8, 8), dtype="float32"), RNG.random((4, 3, 3, 3), "float32")
    cases = {
        "dense_relu": ([x, w], relay.nn.relu(relay.nn.dense(x, w)), {"x": xv, "w": wv}),
        "softmax": ([x], relay.nn.softmax(x), {"x": xv}),
        "conv2d": ([d, k], relay.nn.conv2d(d, k, padding=(1, 1)), {"d": dv, "k": kv}),
        "sum_all": ([x], relay.sum(x), {"x": xv}),
        "cumsum": ([x], relay.cumsum(x, axis=1), {"x": xv}),
    }
    params, body, inputs = cases[name]
    func = relay.Function(params, relay.exp(_on_cl(body)) if name == "dense_relu"
                          else _on_cl(body))
    lib, out, expected = _run(func, inputs)
    assert lib.get_lib().imports[0].type_key == "opencl"
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_independent_loops_become_the_ndrange_and_scans_stay_serial():
    a = tir.decl_buffer((8,), "float32", name="A")
    b = tir.decl_buffer((8,), "float32", name="B")
    i = tir.Var("i", "int32")
    twice = tir.PrimFunc([a, b], tir.For(i, 0, 8, tir.ForKind.SERIAL,
                                         tir.BufferStore(b, a[i] * 2.0, [i])))
    j = tir.Var("j", "int32")
    scan = tir.PrimFunc([a, b], tir.For(j, 1, 7, tir.ForKind.SERIAL,
                                        tir.BufferStore(b, b[j - 1] + a[j], [j])))
    source, kernels = emit_opencl({"twice": twice, "scan": scan})
    assert {n: (g, local) for n, _, g, local in kernels} == {"twice": ((8,), ()),
                                                               "scan": ((1,), ())}
    assert ("__kernel void twice(__global float* A_base, ulong A_offset, "
            "__global float* B_base, ulong B_offset)") in source


_SET_ONE = "__kernel void f(__global float* a, ulong at) { a[at] = 1.0f; }"


def test_opencl_module_round_trips_through_bytes_and_checks_them():
    module = OpenCLModule(_SET_ONE, [("f", 1, (1,), ())])
    loaded = load_opencl_module(module.save_to_binary())
    assert loaded.get_source() == module.get_source()
    assert loaded.kernels == {"f": (1, (1,), ())}
    with pytest.raises(tvm.TVMError):
        load_opencl_module(module.save_to_binary()[:-3])


def test_a_kernel_given_host_memory_is_a_clear_error():
    module = OpenCLModule(_SET_ONE, [("f", 1, (1,), ())])
    with pytest.raises(tvm.TVMError, match="argument 0 is on cpu"):
        module["f"](tvm.nd.array(np.zeros(1, "float32")))
    on_device = tvm.nd.array(np.zeros(1, "float32"), CL)
    module["f"](on_device)
    np.testing.assert_array_equal(on_device.numpy(), [1.0])


def test_a_program_that_does_not_build_is_a_clear_error():
    module = OpenCLModule("__kernel void f(__global float* a, ulong at) { oops }",
                          [("f", 1, (1,), ())])
    with pytest.raises(tvm.TVMError, match="does not build"):
        module["f"](tvm.nd.array(np.zeros(1, "float32"), CL))


def test_export_then_load_in_a_fresh_process(tmp_path):
    x = relay.var("x", shape=(2, 8))
    func = relay.Function([x], relay.log(_on_cl(relay.exp(x))))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(func), TARGETS)
    path = tmp_path / "hetero_cl.so"
    lib.export_library(str(path))
    xv = RNG.random((2, 8), dtype="float32")
    np.save(tmp_path / "x.npy", xv)
    script = textwrap.dedent(f"""
        import numpy as np, kiln
        from kiln.contrib import graph_executor
        lib = kiln.runtime.load_module({str(path)!r})
        m = graph_executor.GraphModule(lib["default"](kiln.cpu(0), kiln.opencl(0)))
        m.set_input("x", np.load({str(tmp_path / "x.npy")!r}))
        m.run()
        assert m.module.get_input("x").device == kiln.opencl(0)
        np.save({str(tmp_path / "out.npy")!r}, m.get_output(0).numpy())
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), xv, rtol=1e-5)


def test_loops_bound_to_thread_axes_become_work_groups_and_work_items():
    n = 1000
    a = te.placeholder((n,), name="A")
    b = te.placeholder((n,), name="B")
    c = te.compute((n,), lambda i: a[i] * b[i] + 1.0, name="C")
    s = te.create_schedule(c.op)
    bx, tx = s[c].split(c.op.axis[0], factor=64)
    s[c].bind(bx, te.thread_axis("blockIdx.x"))
    s[c].bind(tx, te.thread_axis("threadIdx.x"))
    func = tvm.build(s, [a, b, c], target="opencl", name="mul_add")
    assert func.kernels["mul_add"][1:] == ((16 * 64,), (64,))
    assert "get_group_id(0)" in func.get_source() and "get_local_id(0)" in func.get_source()
    av, bv = RNG.random(n, dtype="float32"), RNG.random(n, dtype="float32")
    out = tvm.nd.empty((n,), "float32", CL)
    func(tvm.nd.array(av, CL), tvm.nd.array(bv, CL), out)
    np.testing.assert_allclose(out.numpy(), av * bv + 1.0, rtol=1e-6)
    on_cpu = tvm.build(s, [a, b, c], target="c")  # CPU targets run bound loops serially
    host_out = tvm.nd.empty((n,), "float32")
    on_cpu(tvm.nd.array(av), tvm.nd.array(bv), host_out)
    np.testing.assert_allclose(host_out.numpy(), av * bv + 1.0, rtol=1e-6)


def test_bind_needs_a_thread_axis():
    a = te.placeholder((8,), name="A")
    c = te.compute((8,), lambda i: a[i] + 1.0, name="C")
    s = te.create_schedule(c.op)
    with pytest.raises(tvm.TVMError, match="not a thread axis"):
        s[c].bind(c.op.axis[0], te.thread_axis("warp.x"))


def test_a_lone_opencl_target_puts_the_whole_graph_on_the_device():
    x = relay.var("x", shape=(3, 4))
    w = relay.var("w", shape=(5, 4))
    func = relay.Function([x, w], relay.nn.softmax(relay.nn.dense(x, w)))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(func), "opencl")
    assert set(json.loads(lib.get_graph_json())["attrs"]["device_index"][1]) == {4}
    m = graph_executor.GraphModule(lib["default"](CL))
    xv, wv = RNG.random((3, 4), dtype="float32"), RNG.random((5, 4), dtype="float32")
    m.set_input("x", xv)
    m.set_input("w", wv)
    m.run()
    out = m.get_output(0)
    assert out.device == CL
    expected = relay.create_executor("debug", tvm.IRModule.from_expr(func)).evaluate()(xv, wv)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_injective_groups_get_the_gpu_schedule():
    x = relay.var("x", shape=(3, 50))
    func = relay.Function([x], relay.log(_on_cl(relay.sigmoid(relay.add(x, x)))))
    lib, out, expected = _run(func, {"x": RNG.random((3, 50), dtype="float32")})
    (launch,) = lib.get_lib().imports[0].kernels.values()
    assert launch[1:] == ((3 * 64,), (64,))  # ceil(150 / 64) work-groups of 64
    assert "get_local_id(0)" in lib.get_lib().imports[0].get_source()
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_zero_copy_input_and_output_in_device_memory():
    x = relay.var("x", shape=(2, 32))
    func = relay.Function([x], relay.exp(x))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(func), "opencl")
    m = graph_executor.GraphModule(lib["default"](CL))
    xv = RNG.random((2, 32), dtype="float32")
    storage = tvm.nd.array(np.concatenate([np.zeros(16, "float32"), xv.ravel()]), CL)
    at_offset = DeviceNDArray.on(storage._buffer, 64, (2, 32), DataType("float32"))
    m.module.set_input_zero_copy("x", at_offset)  # a view 64 bytes into a buffer
    out = tvm.nd.empty((2, 32), "float32", CL)
    m.module.set_output_zero_copy(0, out)
    m.run()
    np.testing.assert_allclose(out.numpy(), np.exp(xv), rtol=1e-6)
    with pytest.raises(tvm.TVMError, match="device"):
        m.module.set_input_zero_copy("x", tvm.nd.array(xv))
