"""Deep programs compile and run on every executor without hitting Python's recursion limit.

Shapes that used to raise ``RecursionError`` (sizes kept just past Python's default limit of
1,000 frames so the suite stays fast): a chain of 1,500 unfused operators (graph codegen, the
VM compiler at opt_level 0), one fused kernel of 400 operators (TE lowering, the TIR
simplifier, C codegen), 2,000 nested let-bindings and tuples nested 500 deep. Each
result is compared against the same computation in NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor

CHAIN_OPS = 1500
FUSED_OPS = 400
LETS = 2000
TUPLE_DEPTH = 500
SHAPE = (4,)
X = np.arange(4, dtype="float32") / 8


def _alternating_chain(x, length: int):
    """``x`` through ``length`` ops alternating ``+ 0.5`` and ``* 0.999`` (stays small)."""
    for i in range(length):
        if i % 2 == 0:
            x = relay.add(x, relay.const(np.float32(0.5)))
        else:
            x = relay.multiply(x, relay.const(np.float32(0.999)))
    return x


def _alternating_chain_numpy(x: np.ndarray, length: int) -> np.ndarray:
    for i in range(length):
        x = (x + np.float32(0.5)) if i % 2 == 0 else (x * np.float32(0.999))
    return x


def _module(body_of):
    x = relay.var("x", shape=SHAPE, dtype="float32")
    return kiln.IRModule.from_expr(relay.Function([x], body_of(x)))


def _run_graph(mod, opt_level: int, config: dict | None = None) -> np.ndarray:
    with kiln.transform.PassContext(opt_level=opt_level, config=config or {}):
        lib = relay.build(mod, target="c")
    module = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    module.set_input("x", X)
    module.run()
    return module.get_output(0).numpy()


def _run_vm(mod, opt_level: int) -> np.ndarray:
    with kiln.transform.PassContext(opt_level=opt_level):
        exe = relay.vm.compile(mod, target="c")
    vm = kiln.runtime.vm.VirtualMachine(exe, kiln.cpu(0))
    return vm.invoke("main", X).numpy()


def _run_interpreter(mod) -> np.ndarray:
    run = relay.create_executor("debug", mod=mod, device=kiln.cpu(0), target="c").evaluate()
    return run(X).numpy()


EXECUTORS = {
    "graph-O0": lambda mod: _run_graph(mod, 0),
    "graph-O3": lambda mod: _run_graph(mod, 3),
    "vm-O0": lambda mod: _run_vm(mod, 0),
    "vm-O3": lambda mod: _run_vm(mod, 3),
    "debug": _run_interpreter,
}


# every executor path that once recursed per op; vm-O3 runs the same chain as a let chain
@pytest.mark.parametrize("executor", ["graph-O0", "graph-O3", "vm-O0", "vm-O3", "debug"])
def test_chain_longer_than_the_recursion_limit(executor):
    mod = _module(lambda x: _alternating_chain(x, CHAIN_OPS))
    got = EXECUTORS[executor](mod)
    np.testing.assert_allclose(got, _alternating_chain_numpy(X, CHAIN_OPS), rtol=1e-4)


def test_default_fusion_splits_a_long_chain_into_groups_of_at_most_256_ops():
    from kiln.relay.transform.fuse_ops import FuseOps

    mod = relay.transform.InferType()(_module(lambda x: _alternating_chain(x, 600)))
    with kiln.transform.PassContext(opt_level=3):
        fused = FuseOps()(mod)
    sizes = []

    def count_calls(node):
        if isinstance(node, relay.Call) and isinstance(node.op, relay.Function):
            calls = []
            relay.analysis.post_order_visit(
                node.op.body, lambda n: calls.append(n) if isinstance(n, relay.Call) else None)
            sizes.append(len(calls))

    relay.analysis.post_order_visit(fused["main"].body, count_calls)
    assert sum(sizes) == 600
    assert max(sizes) <= 256 and len(sizes) >= 3


def _exp_log_chain(x, length: int):
    """``length`` ops alternating exp and log: one injective group when fused whole."""
    for i in range(length):
        x = relay.exp(x) if i % 2 == 0 else relay.log(x)
    return x


def test_fused_group_deeper_than_the_default_cap():
    mod = _module(lambda x: _exp_log_chain(x, FUSED_OPS))
    got = _run_graph(mod, 3, {"relay.FuseOps.max_depth": FUSED_OPS})
    expected = X.copy()
    for i in range(FUSED_OPS):
        expected = np.exp(expected) if i % 2 == 0 else np.log(expected)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def _let_chain(x, count: int):
    """``let %v1 = x + 1; let %v2 = %v1 + 1; ... %v<count>`` built as nested Let nodes."""
    names = [relay.var(f"v{i}", shape=SHAPE, dtype="float32") for i in range(count)]
    body = names[-1]
    for i in reversed(range(count)):
        previous = x if i == 0 else names[i - 1]
        body = relay.Let(names[i], relay.add(previous, relay.const(np.float32(1.0))), body)
    return body


# the VM runs its let handling in test_chain_longer_than_the_recursion_limit[vm-O3] (ANF chain)
@pytest.mark.parametrize("executor", ["graph-O0", "debug"])
def test_nested_lets(executor):
    got = EXECUTORS[executor](_module(lambda x: _let_chain(x, LETS)))
    np.testing.assert_allclose(got, X + np.float32(LETS), rtol=1e-6)


def _tuple_nest(x, depth: int):
    """Wrap ``x`` in ``depth`` nested tuples ``(.., x * 2)``, then dig it out again."""
    nest = x
    for _ in range(depth):
        nest = relay.Tuple([nest, relay.multiply(x, relay.const(np.float32(2.0)))])
    for _ in range(depth):
        nest = relay.TupleGetItem(nest, 0)
    return relay.add(nest, relay.TupleGetItem(relay.Tuple([x, x]), 1))


@pytest.mark.parametrize("executor", ["graph-O3", "vm-O3", "debug"])
def test_tuples_nested_deep(executor):
    got = EXECUTORS[executor](_module(lambda x: _tuple_nest(x, TUPLE_DEPTH)))
    np.testing.assert_allclose(got, X + X, rtol=1e-6)
