"""EliminateCommonSubexpr: repeated calls merge; attrs, effects, fskip and scopes matter."""

from __future__ import annotations

import kiln
from kiln import relay
from kiln.ir.structural import assert_structural_equal
from kiln.relay.transform import EliminateCommonSubexpr, InferType


def cse(func, fskip=None):
    return EliminateCommonSubexpr(fskip)(kiln.IRModule.from_expr(func))


def typed(func):
    return InferType()(kiln.IRModule.from_expr(func))


def test_repeated_subgraphs_merge():
    x = relay.var("x", shape=(2, 2))
    a = relay.add(relay.exp(x), relay.const(1.0))
    b = relay.add(relay.exp(x), relay.const(1.0))
    after = cse(relay.Function([x], relay.multiply(a, b)))
    x2 = relay.var("x", shape=(2, 2))
    shared = relay.add(relay.exp(x2), relay.const(1.0))
    assert_structural_equal(after, typed(relay.Function([x2], relay.multiply(shared, shared))))
    body = after["main"].body
    assert body.args[0] is body.args[1]


def test_different_attrs_do_not_merge():
    x = relay.var("x", shape=(2, 3))
    after = cse(relay.Function([x], relay.Tuple([relay.sum(x, axis=[0]),
                                                 relay.sum(x, axis=[1])])))
    fields = after["main"].body.fields
    assert fields[0] is not fields[1]


def test_fskip_keeps_calls_apart():
    x = relay.var("x", shape=(2,))
    func = relay.Function([x], relay.add(relay.exp(x), relay.exp(x)))
    after = cse(func, fskip=lambda call: call.op.name == "exp")
    body = after["main"].body
    assert body.args[0] is not body.args[1]


def test_calls_in_a_branch_are_not_reused_outside_it():
    x = relay.var("x", shape=(2,))
    c = relay.var("c", shape=(), dtype="bool")
    func = relay.Function([c, x], relay.Tuple([relay.If(c, relay.exp(x), x), relay.exp(x)]))
    after = cse(func)["main"].body
    assert after.fields[0].true_branch is not after.fields[1]


def test_tuple_getitems_merge():
    x = relay.var("x", shape=(4,))
    parts = relay.split(x, 2).astuple()
    after = cse(relay.Function([x], relay.add(relay.TupleGetItem(parts, 0),
                                              relay.TupleGetItem(parts, 0))))
    body = after["main"].body
    assert body.args[0] is body.args[1]
