"""A-normal, graph-normal and basic-block normal forms: shape of the result and semantics."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import relay
from kiln.ir.structural import assert_structural_equal
from kiln.relay.backend.interpreter import evaluate
from kiln.relay.transform import (
    InferType,
    ToANormalForm,
    ToBasicBlockNormalForm,
    ToGraphNormalForm,
)
from kiln.relay.transform.normal_forms import to_a_normal_form


def typed(func):
    return InferType()(kiln.IRModule.from_expr(func))


def is_anf(expr):
    """Every call/tuple argument is atomic (a var, global, op, constructor)."""
    atoms = (relay.Var, relay.GlobalVar, kiln.ir.op.Op, relay.Constructor)
    bad = []

    def check(node):
        if isinstance(node, relay.Call):
            prim = isinstance(node.op, relay.Function) and node.op.attrs is not None and \
                node.op.get_attr("Primitive")
            operands = list(node.args) + ([] if prim else [node.op])
            bad.extend(a for a in operands if not isinstance(a, atoms))
        elif isinstance(node, relay.Tuple):
            bad.extend(f for f in node.fields if not isinstance(f, atoms))
        elif isinstance(node, relay.If):
            bad.extend([node.cond] if not isinstance(node.cond, atoms) else [])
    relay.analysis.post_order_visit(expr, check)
    return not bad


def test_anf_of_a_diamond_binds_the_shared_node_once():
    x = relay.var("x", shape=(2,))
    e = relay.exp(x)
    after = ToANormalForm()(kiln.IRModule.from_expr(relay.Function([x], relay.add(e, e))))
    x2, a, b = relay.var("x", shape=(2,)), relay.var("a"), relay.var("b")
    expected = relay.Function([x2], relay.Let(a, relay.exp(x2), relay.Let(
        b, relay.add(a, a), b)))
    assert_structural_equal(after, typed(expected))


def test_anf_keeps_branch_work_inside_branches_and_semantics():
    x = relay.var("x", shape=(2,))
    c = relay.var("c", shape=(), dtype="bool")
    shared = relay.exp(x)
    body = relay.If(c, relay.add(shared, relay.const(1.0)), relay.multiply(shared, shared))
    func = relay.Function([c, x], relay.Tuple([body, relay.negative(x)]))
    after = ToANormalForm()(kiln.IRModule.from_expr(func))["main"]
    assert is_anf(after)
    xv = np.array([0.5, -1.0], "float32")
    for cv in (True, False):
        got = evaluate(after)(np.array(cv), xv)
        want = np.exp(xv) + 1 if cv else np.exp(xv) ** 2
        np.testing.assert_allclose(got[0].numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(got[1].numpy(), -xv)


def test_anf_handles_closures_and_recursion():
    n = relay.var("n", shape=(), dtype="int32")
    acc = relay.var("acc", shape=(), dtype="int32")
    loop = relay.GlobalVar("loop")
    mod = kiln.IRModule()
    mod[loop] = relay.Function([n, acc], relay.If(
        relay.less(n, relay.const(1)), acc,
        loop(relay.subtract(n, relay.const(1)), relay.add(acc, n))))
    m = relay.var("m", shape=(), dtype="int32")
    k = relay.var("k", shape=(), dtype="int32")
    add_m = relay.Function([k], relay.add(k, m))  # a closure capturing m
    mod["main"] = relay.Function([m], add_m(loop(m, relay.const(0))))
    after = ToANormalForm()(mod)
    assert is_anf(after["main"]) and is_anf(after["loop"])
    main = after["main"]
    assert int(evaluate(main, after)(np.array(10, "int32")).numpy()) == 65


def test_anf_of_a_5000_node_chain():
    x = relay.var("x", shape=(2,))
    y = x
    for _ in range(5000):
        y = relay.add(y, x)
    anf = to_a_normal_form(relay.Function([x], y))
    assert is_anf(anf)


def test_graph_normal_form_inlines_lets_but_keeps_recursive_ones():
    x, v = relay.var("x", shape=(2,)), relay.var("v")
    func = relay.Function([x], relay.Let(v, relay.exp(x), relay.add(v, v)))
    after = ToGraphNormalForm()(kiln.IRModule.from_expr(func))
    x2 = relay.var("x", shape=(2,))
    e = relay.exp(x2)
    assert_structural_equal(after, typed(relay.Function([x2], relay.add(e, e))))
    n, f = relay.var("n", shape=(), dtype="int32"), relay.var("f")
    loop = relay.Function([n], relay.If(relay.less(n, relay.const(1)), n,
                                        f(relay.subtract(n, relay.const(1)))))
    rec = relay.Function([n], relay.Let(f, loop, f(n)))
    assert isinstance(ToGraphNormalForm()(kiln.IRModule.from_expr(rec))["main"].body,
                      relay.Let)


def test_anf_then_gnf_round_trips():
    x = relay.var("x", shape=(2,))
    e = relay.exp(x)
    func = relay.Function([x], relay.Tuple([relay.add(e, x), e]))
    mod = kiln.IRModule.from_expr(func)
    back = ToGraphNormalForm()(ToANormalForm()(mod))
    assert_structural_equal(back, InferType()(mod))


def test_basic_block_normal_form_leaves_dataflow_alone_and_binds_around_branches():
    x = relay.var("x", shape=(2,))
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.exp(relay.exp(x))))
    assert_structural_equal(ToBasicBlockNormalForm()(mod), InferType()(mod))
    c = relay.var("c", shape=(), dtype="bool")
    branchy = relay.Function([c, x], relay.If(c, relay.exp(x), x))
    after = ToBasicBlockNormalForm()(kiln.IRModule.from_expr(branchy))["main"]
    assert is_anf(after)
    np.testing.assert_allclose(evaluate(after)(np.array(True), np.ones(2, "float32"))
                               .numpy(), np.exp(np.ones(2)), rtol=1e-6)
