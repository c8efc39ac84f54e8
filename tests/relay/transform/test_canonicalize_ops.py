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


def test_2d_matmul_becomes_dense_when_its_weight_is_constant_or_transposed():
    import numpy as np

    from kiln.relay.backend.interpreter import Interpreter

    rng = np.random.default_rng(0)
    av, bv, cv, wv = (rng.standard_normal(s).astype("float32")
                      for s in ((3, 5), (5, 4), (4, 5), (5, 2)))
    a = relay.var("a", shape=(3, 5))
    b = relay.var("b", shape=(5, 4))
    c = relay.var("c", shape=(4, 5))
    mod = kiln.IRModule.from_expr(relay.Function([a, b, c], relay.Tuple([
        relay.nn.matmul(a, b), relay.nn.matmul(a, c, transpose_b=True),
        relay.nn.matmul(a, relay.const(wv)), relay.nn.matmul(b, b, transpose_a=True)])))
    out = CanonicalizeOps()(InferType()(mod))
    runtime, transposed, constant, lhs_t = out["main"].body.fields
    # a run-time [K, N] operand stays a matmul: matmul_pack.x86 reads it without a transpose
    assert runtime.op.name == "nn.matmul" and runtime.args[1] is out["main"].params[1]
    assert transposed.op.name == "nn.dense" and transposed.args[1] is out["main"].params[2]
    assert constant.op.name == "nn.dense" and constant.args[1].op.name == "transpose"
    assert lhs_t.op.name == "nn.matmul"
    got = Interpreter(out).evaluate()(av, bv, cv)
    np.testing.assert_allclose(got[0].numpy(), av @ bv, rtol=1e-5)
    np.testing.assert_allclose(got[1].numpy(), av @ cv.T, rtol=1e-5)
    np.testing.assert_allclose(got[2].numpy(), av @ wv, rtol=1e-5)
    np.testing.assert_allclose(got[3].numpy(), bv.T @ bv, rtol=1e-5, atol=1e-6)
