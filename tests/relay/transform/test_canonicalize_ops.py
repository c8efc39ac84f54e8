"""CanonicalizeOps: bias_add becomes expand_dims + add, on any axis."""

from __future__ import annotations

import kiln
from kiln import relay
from kiln.ir.structural import assert_structural_equal
from kiln.relay.transform import CanonicalizeOps, InferType


def canon(func):
    return CanonicalizeOps()(kiln.IRModule.from_expr(func))


def typed(func):
    return InferType()(kiln.IRModule.from_expr(func))


def test_bias_add_on_channel_axis_of_nchw():
    x, b = relay.var("x", shape=(1, 3, 4, 4)), relay.var("b", shape=(3,))
    x2, b2 = relay.var("x", shape=(1, 3, 4, 4)), relay.var("b", shape=(3,))
    expected = relay.Function([x2, b2], relay.add(x2, relay.expand_dims(b2, 1, 2)))
    assert_structural_equal(canon(relay.Function([x, b], relay.nn.bias_add(x, b))),
                            typed(expected))


def test_bias_add_on_last_axis_needs_no_expand_dims():
    x, b = relay.var("x", shape=(2, 5)), relay.var("b", shape=(5,))
    x2, b2 = relay.var("x", shape=(2, 5)), relay.var("b", shape=(5,))
    after = canon(relay.Function([x, b], relay.nn.bias_add(x, b, axis=-1)))
    assert_structural_equal(after, typed(relay.Function([x2, b2], relay.add(x2, b2))))


def test_bias_add_inside_a_closure_is_rewritten_too():
    x, b = relay.var("x", shape=(2, 5, 1)), relay.var("b", shape=(5,))
    inner = relay.Function([x], relay.nn.bias_add(x, b))
    y = relay.var("y", shape=(2, 5, 1))
    after = canon(relay.Function([y, b], inner(y)))
    assert after["main"].body.op.body.op.name == "add"
