"""The one compile pipeline: passes, TE compilers and kernel assembly shared by every executor."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.backend.pipeline import build_kernels, make_compilers, pass_pipeline
from kiln.relay.backend.te_compiler import TECompiler
from kiln.runtime.vm import VirtualMachine


def _primitive(shape):
    x = relay.var("x", shape=shape)
    func = relay.Function([x], relay.nn.relu(relay.add(x, relay.const(1.0))))
    func = func.with_attr("Primitive", 1)
    return relay.transform.InferType()(kiln.IRModule.from_expr(func))["main"]


def test_graph_and_vm_lower_the_same_fused_kernels():
    x = relay.var("x", shape=(2, 3))
    w = relay.var("w", shape=(4, 3))
    body = relay.nn.relu(relay.nn.dense(relay.exp(x), w) + relay.const(0.5))
    mod = kiln.IRModule.from_expr(relay.Function([x, w], body))
    data = np.random.default_rng(0).standard_normal((2, 3)).astype("float32")
    weight = np.random.default_rng(1).standard_normal((4, 3)).astype("float32")
    expected = np.maximum(np.exp(data) @ weight.T + 0.5, 0)
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="c")
        exe = relay.vm.compile(mod, target="c")
    graph = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    graph.run(x=data, w=weight)
    np.testing.assert_allclose(graph.get_output(0).numpy(), expected, rtol=1e-5)
    vm = VirtualMachine(exe, kiln.cpu(0))
    np.testing.assert_allclose(vm.run(data, weight).numpy(), expected, rtol=1e-5)
    graph_kernels = {name.removeprefix("tvmgen_default_") for name in lib.lowered}
    vm_kernels = {name.removeprefix("tvmgen_vm_mod_") for name in exe.primitive_names}
    assert graph_kernels == vm_kernels and graph_kernels


def test_each_kind_of_kernel_is_lowered_once_per_equal_function():
    compiler = TECompiler("c")
    dynamic = _primitive((relay.Any(), 3))
    kernel = compiler.lower(dynamic, symbolic=True)
    assert compiler.lower(_primitive((relay.Any(), 3)), symbolic=True) is kernel
    shape_func = compiler.lower_shape_func(dynamic)
    assert compiler.lower_shape_func(_primitive((relay.Any(), 3))) is shape_func
    static = compiler.lower(_primitive((2, 3)))
    assert [k.name for k in compiler.lowered] == [kernel.name, shape_func.name, static.name]
    assert kernel.name.endswith("_dyn") and shape_func.name.endswith("_shape_func")
    assert shape_func.dynamic == [True] and shape_func.inputs == [0]


def test_a_symbolic_kernel_runs_on_any_extent():
    compiler = TECompiler("c")
    kernel = compiler.lower(_primitive((relay.Any(), 3)), symbolic=True)
    lib = build_kernels({1: compiler})
    for rows in (1, 5):
        data = np.linspace(-3, 3, rows * 3, dtype="float32").reshape(rows, 3)
        out = kiln.nd.empty((rows, 3), "float32")
        lib[kernel.name](kiln.nd.array(data), out)
        np.testing.assert_allclose(out.numpy(), np.maximum(data + 1, 0))


def test_a_static_lowering_of_an_any_shaped_function_is_refused():
    with pytest.raises(kiln.TVMError, match="dynamic shape"):
        TECompiler("c").lower(_primitive((relay.Any(), 3)))


def test_compilers_of_one_build_draw_from_one_set_of_kernel_names():
    compilers = make_compilers({1: "c", 4: "opencl"}, kiln.target.Target("c"))
    names = {compilers[device].lower(_primitive((2, 3))).name for device in (1, 4)}
    assert len(names) == 2


def test_an_unknown_executor_has_no_pipeline():
    mod = kiln.IRModule.from_expr(_primitive((2,)))
    with pytest.raises(kiln.TVMError, match="no compile pipeline for executor 'interp'"):
        pass_pipeline(mod, kiln.cpu(0), "interp")
