"""Run a TFLite model through LiteRT (the oracle) and through kiln's from_tflite + relay.build."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor

litert = pytest.importorskip("ai_edge_litert.interpreter")
pytest.importorskip("tflite")


def run_litert(model_bytes: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """LiteRT's outputs with its reference kernels (the ones TFLite Micro ports), no XNNPACK."""
    try:
        interp = litert.Interpreter(
            model_content=model_bytes,
            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    except ValueError:   # a few float ops (CEIL, ELU, ROUND) have only optimized kernels
        interp = litert.Interpreter(
            model_content=model_bytes,
            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp.allocate_tensors()
    for detail, value in zip(interp.get_input_details(), inputs):
        interp.set_tensor(detail["index"], value)
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]


def run_kiln(model_bytes: bytes, inputs: list[np.ndarray], executor: str = "graph",
             target: str = "llvm") -> list[np.ndarray]:
    """kiln's outputs: from_tflite, relay.build with the params, graph executor or VM."""
    mod, params = relay.frontend.from_tflite(model_bytes)
    names = [p.name_hint for p in mod["main"].params[:len(inputs)]]
    if executor == "vm":
        from kiln.runtime.vm import VirtualMachine

        with tvm.transform.PassContext(opt_level=3):
            exe = relay.vm.compile(mod, target=target, params=params)
        vm = VirtualMachine(exe, tvm.cpu())
        out = vm.invoke("main", *[tvm.nd.array(x) for x in inputs])
        outs = out if isinstance(out, (list, tuple)) else [out]
        return [o.numpy() for o in outs]
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    for name, value in zip(names, inputs):
        m.set_input(name, value)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def check_float(model_bytes: bytes, inputs: list[np.ndarray], atol: float = 1e-5,
                rtol: float = 1e-5, executor: str = "graph") -> None:
    expected = run_litert(model_bytes, inputs)
    actual = run_kiln(model_bytes, inputs, executor)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(a, e, atol=atol, rtol=rtol)


def check_quantized(model_bytes: bytes, inputs: list[np.ndarray], max_step: int = 1,
                    executor: str = "graph") -> list[int]:
    """Integer outputs equal LiteRT's or within ``max_step`` steps; returns the max steps."""
    expected = run_litert(model_bytes, inputs)
    actual = run_kiln(model_bytes, inputs, executor)
    steps = []
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, a.dtype, e.shape, e.dtype)
        diff = np.abs(a.astype(np.int64) - e.astype(np.int64))
        steps.append(int(diff.max()) if diff.size else 0)
        assert steps[-1] <= max_step, f"max difference {steps[-1]} steps"
    return steps
