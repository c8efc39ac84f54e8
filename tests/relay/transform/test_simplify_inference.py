"""SimplifyInference: the rewritten programs compute the NumPy definitions of the norms."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.relay.backend.interpreter import evaluate
from kiln.relay.transform import SimplifyInference

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def simplified(body, params):
    mod = SimplifyInference()(kiln.IRModule.from_expr(relay.Function(params, body)))
    return mod["main"]


def ops_in(func):
    names = set()
    relay.analysis.post_order_visit(func, lambda n: isinstance(n, relay.Call) and isinstance(
        n.op, kiln.ir.op.Op) and names.add(n.op.name))
    return names


@pytest.mark.parametrize("axis,center,scale", [(1, True, True), (3, False, True),
                                               (-1, True, False)])
def test_batch_norm_becomes_scale_and_shift(axis, center, scale):
    shape = (2, 3, 4, 5)
    channels = shape[axis]
    x = relay.var("x", shape=shape)
    g, b, m, v = (relay.var(n, shape=(channels,)) for n in "gbmv")
    out = relay.nn.batch_norm(x, g, b, m, v, axis=axis, epsilon=1e-3, center=center,
                              scale=scale)[0]
    func = simplified(out, [x, g, b, m, v])
    assert "nn.batch_norm" not in ops_in(func)
    xv, gv, bv, mv = rand(*shape), rand(channels), rand(channels), rand(channels)
    vv = np.abs(rand(channels)) + 0.5
    bshape = [1] * 4
    bshape[axis] = channels
    expected = (xv - mv.reshape(bshape)) / np.sqrt(vv.reshape(bshape) + 1e-3)
    if scale:
        expected = expected * gv.reshape(bshape)
    if center:
        expected = expected + bv.reshape(bshape)
    np.testing.assert_allclose(evaluate(func)(xv, gv, bv, mv, vv).numpy(), expected,
                               rtol=1e-5, atol=1e-5)


def test_dropout_is_the_identity():
    x = relay.var("x", shape=(3,))
    func = simplified(relay.exp(relay.nn.dropout(x, 0.3)), [x])
    assert ops_in(func) == {"exp"} and func.body.args[0] is func.params[0]


def test_layer_norm():
    x, g, b = relay.var("x", shape=(2, 3, 4)), relay.var("g", shape=(4,)), \
        relay.var("b", shape=(4,))
    func = simplified(relay.nn.layer_norm(x, g, b, axis=-1, epsilon=1e-5), [x, g, b])
    assert "nn.layer_norm" not in ops_in(func)
    xv, gv, bv = rand(2, 3, 4), rand(4), rand(4)
    mean, var = xv.mean(-1, keepdims=True), xv.var(-1, keepdims=True)
    expected = (xv - mean) / np.sqrt(var + 1e-5) * gv + bv
    np.testing.assert_allclose(evaluate(func)(xv, gv, bv).numpy(), expected, rtol=1e-4,
                               atol=1e-5)


def test_instance_norm():
    x, g, b = relay.var("x", shape=(2, 3, 4, 4)), relay.var("g", shape=(3,)), \
        relay.var("b", shape=(3,))
    func = simplified(relay.nn.instance_norm(x, g, b), [x, g, b])
    xv, gv, bv = rand(2, 3, 4, 4), rand(3), rand(3)
    mean, var = xv.mean((2, 3), keepdims=True), xv.var((2, 3), keepdims=True)
    expected = (xv - mean) / np.sqrt(var + 1e-5) * gv[:, None, None] + bv[:, None, None]
    np.testing.assert_allclose(evaluate(func)(xv, gv, bv).numpy(), expected, rtol=1e-4,
                               atol=1e-5)


def test_group_norm():
    x, g, b = relay.var("x", shape=(2, 6, 3, 3)), relay.var("g", shape=(6,)), \
        relay.var("b", shape=(6,))
    func = simplified(relay.nn.group_norm(x, g, b, num_groups=3), [x, g, b])
    xv, gv, bv = rand(2, 6, 3, 3), rand(6), rand(6)
    grouped = xv.reshape(2, 3, 2, 3, 3)
    mean, var = grouped.mean((2, 3, 4), keepdims=True), grouped.var((2, 3, 4), keepdims=True)
    expected = ((grouped - mean) / np.sqrt(var + 1e-5)).reshape(xv.shape)
    expected = expected * gv[:, None, None] + bv[:, None, None]
    np.testing.assert_allclose(evaluate(func)(xv, gv, bv).numpy(), expected, rtol=1e-4,
                               atol=1e-5)


def test_l2_normalize():
    x = relay.var("x", shape=(2, 5))
    func = simplified(relay.nn.l2_normalize(x, eps=1e-6, axis=[1]), [x])
    xv = rand(2, 5)
    expected = xv / np.sqrt(np.maximum((xv * xv).sum(1, keepdims=True), 1e-6))
    np.testing.assert_allclose(evaluate(func)(xv).numpy(), expected, rtol=1e-5)


def test_every_node_is_typed_after_dropouts_in_a_chain():
    # VGG's classifier: two dropouts in a row of dense -> bias_add -> relu. Typing a rebuilt
    # node marked its rebuilt, untyped sub-expressions as typed for incremental InferType;
    # CanonicalizeOps then met an untyped bias_add argument inside relay.build.
    x = relay.var("x", shape=(1, 8))
    ws = [relay.var(f"w{i}", shape=(8, 8)) for i in range(3)]
    bs = [relay.var(f"b{i}", shape=(8,)) for i in range(3)]
    out = x
    for i in range(3):
        out = relay.nn.bias_add(relay.nn.dense(out, ws[i]), bs[i])
        if i < 2:
            out = relay.nn.dropout(relay.nn.relu(out))
    mod = relay.transform.InferType()(kiln.IRModule.from_expr(
        relay.Function([x, *ws, *bs], out)))
    func = SimplifyInference()(mod)["main"]
    untyped = []
    relay.analysis.post_order_visit(func.body, lambda n: isinstance(n, relay.Call | relay.Var)
                                    and n.checked_type_ is None and untyped.append(n))
    assert not untyped
    assert "nn.dropout" not in ops_in(func)
    canonical = relay.transform.CanonicalizeOps()(kiln.IRModule.from_expr(func))
    assert "nn.bias_add" not in ops_in(canonical["main"])
