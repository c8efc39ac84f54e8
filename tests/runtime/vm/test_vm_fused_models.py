"""Compiled Relay models through the VM with fused segments, against NumPy and the graph
executor: a static MLP and a tail-recursive LSTM-style loop (split tuples, If, recursion)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.runtime.vm import VirtualMachine

STEPS, HIDDEN = 5, 8


def mlp(rng):
    x = relay.var("x", shape=(4, 16))
    w1, w2 = relay.var("w1", shape=(32, 16)), relay.var("w2", shape=(8, 32))
    body = relay.nn.dense(relay.nn.relu(relay.nn.dense(x, w1)), w2)
    params = {"w1": rng.standard_normal((32, 16)).astype("float32"),
              "w2": rng.standard_normal((8, 32)).astype("float32")}
    return kiln.IRModule.from_expr(relay.Function([x, w1, w2], body)), params


def gated_loop(w):
    """step(t, h, xs): gates = dense(xs[t] + h, w) split in two; h' = sigmoid(a) * tanh(b)."""
    mod = kiln.IRModule()
    step = relay.GlobalVar("step")
    t = relay.var("t", shape=(), dtype="int32")
    h = relay.var("h", shape=(1, HIDDEN))
    xs = relay.var("xs", shape=(STEPS, 1, HIDDEN))
    gates = relay.nn.dense(relay.add(relay.take(xs, t, axis=0), h), relay.const(w))
    a, b = (relay.split(gates, 2, axis=1)[k] for k in range(2))
    h_next = relay.multiply(relay.sigmoid(a), relay.tanh(b))
    t_next = relay.add(t, relay.const(1, "int32"))
    done = relay.equal(t_next, relay.const(STEPS, "int32"))
    mod[step] = relay.Function([t, h, xs], relay.If(done, h_next, step(t_next, h_next, xs)))
    x_in = relay.var("x", shape=(STEPS, 1, HIDDEN))
    mod["main"] = relay.Function([x_in], step(relay.const(0, "int32"),
                                              relay.zeros((1, HIDDEN), "float32"), x_in))
    return mod


def gated_loop_reference(w, xs):
    h = np.zeros((1, HIDDEN), "float32")
    for t in range(STEPS):
        gates = (xs[t] + h) @ w.T
        h = 1 / (1 + np.exp(-gates[:, :HIDDEN])) * np.tanh(gates[:, HIDDEN:])
    return h


def fused_count(vm) -> int:
    return sum(handler.__name__ == "_op_fused" for code in vm._code for handler, _ in code)


@pytest.fixture(scope="module")
def compiled_mlp():
    rng = np.random.default_rng(0)
    mod, params = mlp(rng)
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, "llvm", params=params)
        lib = relay.build(mod, "llvm", params=params)
    return exe, lib


def test_mlp_on_the_vm_matches_the_graph_executor_run_after_run(compiled_mlp, rng):
    exe, lib = compiled_mlp
    vm = VirtualMachine(exe, kiln.cpu(0))
    assert fused_count(vm) == 1
    graph = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    inputs = [rng.standard_normal((4, 16)).astype("float32") for _ in range(3)]
    for x in inputs:
        out = vm.run(x)                 # valid until the next run, like the graph's output
        graph.set_input("x", x)
        graph.run()
        np.testing.assert_allclose(out.numpy(), graph.get_output(0).numpy(), rtol=1e-5,
                                   atol=1e-5)


def test_gated_loop_with_split_tuples_matches_numpy(rng):
    w = (rng.standard_normal((2 * HIDDEN, HIDDEN)) / 3).astype("float32")
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(gated_loop(w), "llvm")
    vm = VirtualMachine(exe, kiln.cpu(0))
    assert fused_count(vm) >= 2
    for _ in range(2):
        xs = rng.standard_normal((STEPS, 1, HIDDEN)).astype("float32")
        np.testing.assert_allclose(vm.run(xs).numpy(), gated_loop_reference(w, xs),
                                   rtol=1e-5, atol=1e-6)
    report = vm.profile(xs)
    kernels = [row for row in report.calls if row["Op"] == "InvokePacked"]
    assert kernels and all(row["Count"] == STEPS for row in kernels if "dense" in row["Name"])
