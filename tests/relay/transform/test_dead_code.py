"""DeadCodeElimination: unused pure bindings go, effects and used bindings stay."""

from __future__ import annotations

import kiln
from kiln import relay
from kiln.ir.structural import assert_structural_equal
from kiln.relay.transform import DeadCodeElimination, InferType


def dce(func, **kwargs):
    return DeadCodeElimination(**kwargs)(kiln.IRModule.from_expr(func))


def typed(func):
    return InferType()(kiln.IRModule.from_expr(func))


def vars_(*names):
    return [relay.var(n, shape=(2,)) for n in names]


def test_unused_binding_and_the_bindings_only_it_used_are_removed():
    x, a, b, c = vars_("x", "a", "b", "c")
    body = relay.Let(a, relay.exp(x), relay.Let(b, relay.negative(a), relay.Let(
        c, relay.add(x, x), relay.multiply(c, c))))
    x2, c2 = vars_("x", "c")
    expected = relay.Function([x2], relay.Let(c2, relay.add(x2, x2), relay.multiply(c2, c2)))
    assert_structural_equal(dce(relay.Function([x], body)), typed(expected))


def test_impure_binding_is_kept_unless_impurity_is_ignored():
    x, r = vars_("x", "r")[0], relay.var("r")
    body = relay.Let(r, relay.RefCreate(x), x)
    func = relay.Function([x], body)
    assert_structural_equal(dce(func), typed(func))
    x2 = relay.var("x", shape=(2,))
    assert_structural_equal(dce(func, ignore_impurity=True), typed(relay.Function([x2], x2)))


def test_inline_once_substitutes_single_use_bindings():
    x, a, b = vars_("x", "a", "b")
    body = relay.Let(a, relay.exp(x), relay.Let(b, relay.negative(x), relay.add(a, relay.add(
        b, b))))
    x2, b2 = vars_("x", "b")
    expected = relay.Function([x2], relay.Let(b2, relay.negative(x2), relay.add(
        relay.exp(x2), relay.add(b2, b2))))
    assert_structural_equal(dce(relay.Function([x], body), inline_once=True), typed(expected))


def test_dead_bindings_inside_if_branches_and_closures_are_removed():
    x, a, b = vars_("x", "a", "b")
    cond = relay.var("c", shape=(), dtype="bool")
    inner = relay.Function([b], relay.Let(a, relay.exp(b), b))
    body = relay.If(cond, relay.Let(a, relay.exp(x), x), inner(x))
    b2, x2 = vars_("b", "x")
    c2 = relay.var("c", shape=(), dtype="bool")
    expected = relay.If(c2, x2, relay.Function([b2], b2)(x2))
    assert_structural_equal(dce(relay.Function([cond, x], body)),
                            typed(relay.Function([c2, x2], expected)))


def test_recursive_let_bound_function_is_kept_when_used():
    n = relay.var("n", shape=(), dtype="int32")
    f = relay.var("f")
    loop = relay.Function([n], relay.If(relay.less(n, relay.const(1)), n,
                                        f(relay.subtract(n, relay.const(1)))))
    func = relay.Function([n], relay.Let(f, loop, f(n)))
    assert_structural_equal(dce(func, inline_once=True), typed(func))


def test_long_dead_chain_is_removed_in_one_pass():
    x = relay.var("x", shape=(2,))
    body = x
    for i in range(3000):
        body = relay.Let(relay.var(f"v{i}"), relay.exp(x), body)
    assert dce(relay.Function([x], body))["main"].body is not None
    assert isinstance(dce(relay.Function([x], body))["main"].body, relay.Var)
