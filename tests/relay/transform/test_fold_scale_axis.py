"""FoldScaleAxis: scales move into weights; results equal NumPy's on the original program."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import relay
from kiln.relay.backend.interpreter import evaluate
from kiln.relay.transform import (
    BackwardFoldScaleAxis,
    FoldScaleAxis,
    ForwardFoldScaleAxis,
)

RNG = np.random.default_rng(3)


def rand(*shape, positive=False):
    value = RNG.uniform(0.5, 1.5, shape) if positive else RNG.uniform(-1, 1, shape)
    return value.astype("float32")


def ops_of(func):
    names = []
    relay.analysis.post_order_visit(func, lambda n: isinstance(n, relay.Call) and isinstance(
        n.op, kiln.ir.op.Op) and names.append(n.op.name))
    return names


def run_both(body, params, inputs, fold=FoldScaleAxis):
    func = relay.Function(params, body)
    before = evaluate(func)(*inputs).numpy()
    after_mod = fold()(kiln.IRModule.from_expr(func))
    after = evaluate(after_mod["main"])(*inputs).numpy()
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)
    return after_mod["main"]


def conv(x, w):
    return relay.nn.conv2d(x, w, padding=(1, 1))


def test_backward_conv_bias_relu_scale_folds_into_constant_weights():
    x = relay.var("x", shape=(1, 3, 5, 5))
    w = relay.const(rand(4, 3, 3, 3))
    b = relay.const(rand(4, 1, 1))
    scale = relay.const(rand(4, 1, 1, positive=True))
    body = relay.multiply(relay.nn.relu(relay.add(conv(x, w), b)), scale)
    func = run_both(body, [x], [rand(1, 3, 5, 5)])
    assert ops_of(func) == ["nn.conv2d", "add", "nn.relu"]


def test_backward_bias_first_add_and_shared_input():
    x = relay.var("x", shape=(1, 3, 5, 5))
    w = relay.var("w", shape=(4, 3, 3, 3))
    body = relay.multiply(relay.add(relay.const(rand(4, 1, 1)), conv(x, w)),
                          relay.const(rand(4, 1, 1)))
    func = run_both(relay.add(body, relay.sum(x)), [x, w], [rand(1, 3, 5, 5),
                                                          rand(4, 3, 3, 3)])
    assert "multiply" in ops_of(func.body.args[0].args[0].args[1])  # the weight is scaled


def test_backward_negative_scale_does_not_cross_relu():
    x = relay.var("x", shape=(1, 3, 5, 5))
    w = relay.var("w", shape=(4, 3, 3, 3))
    body = relay.multiply(relay.nn.relu(conv(x, w)), relay.const(-np.abs(rand(4, 1, 1))))
    func = run_both(body, [x, w], [rand(1, 3, 5, 5), rand(4, 3, 3, 3)])
    assert ops_of(func)[-1] == "multiply"


def test_backward_dense_scale_and_nhwc_conv():
    x, w = relay.var("x", shape=(2, 3)), relay.var("w", shape=(4, 3))
    func = run_both(relay.multiply(relay.nn.dense(x, w), relay.const(rand(4))), [x, w],
                    [rand(2, 3), rand(4, 3)], fold=BackwardFoldScaleAxis)
    assert ops_of(func)[-1] == "nn.dense"
    xh, wh = relay.var("x", shape=(1, 5, 5, 3)), relay.var("w", shape=(3, 3, 3, 4))
    y = relay.nn.conv2d(xh, wh, padding=(1, 1), data_layout="NHWC", kernel_layout="HWIO")
    func = run_both(relay.multiply(y, relay.const(rand(4))), [xh, wh],
                    [rand(1, 5, 5, 3), rand(3, 3, 3, 4)])
    assert ops_of(func)[-1] == "nn.conv2d"


def test_forward_scale_on_conv_and_dense_inputs():
    x, w = relay.var("x", shape=(1, 3, 5, 5)), relay.var("w", shape=(4, 3, 3, 3))
    scaled = relay.nn.relu(relay.multiply(x, relay.const(rand(3, 1, 1, positive=True))))
    func = run_both(conv(scaled, w), [x, w], [rand(1, 3, 5, 5), rand(4, 3, 3, 3)],
                    fold=ForwardFoldScaleAxis)
    assert func.body.args[0].op.name == "nn.relu" and func.body.args[0].args[0] is \
        func.params[0]
    xd, wd = relay.var("x", shape=(2, 3)), relay.var("w", shape=(4, 3))
    func = run_both(relay.nn.dense(relay.multiply(xd, relay.const(rand(3))), wd), [xd, wd],
                    [rand(2, 3), rand(4, 3)])
    assert func.body.args[0] is func.params[0]


def test_scales_that_are_not_per_channel_or_shared_are_left_alone():
    x, w = relay.var("x", shape=(1, 3, 5, 5)), relay.var("w", shape=(4, 3, 3, 3))
    y = conv(x, w)
    spatial = relay.multiply(y, relay.const(rand(1, 1, 5, 5)))
    func = run_both(spatial, [x, w], [rand(1, 3, 5, 5), rand(4, 3, 3, 3)])
    assert ops_of(func)[-1] == "multiply"
    shared = relay.Tuple([relay.multiply(y, relay.const(rand(4, 1, 1))), y])
    func = FoldScaleAxis()(kiln.IRModule.from_expr(relay.Function([x, w], shared)))["main"]
    assert ops_of(func)[-1] == "multiply"


def test_an_op_folds_through_the_role_its_family_registers():
    # the pass names no op: a new op with the positive-homogeneous role (here a relu twin)
    # passes a positive scale to the conv below it, exactly as nn.relu does
    import pytest

    from kiln.relay.op import op as op_registry
    from kiln.relay.op.type_relations import identity_rel

    op_registry.define_op("test.fold_relu_twin", identity_rel, op_registry.ELEMWISE, 1)
    op_registry.register_reference("test.fold_relu_twin",
                                   lambda attrs, args, out_type: np.maximum(args[0], 0))
    op_registry.register_scale_axis_role("test.fold_relu_twin", "positive_homogeneous")
    x, w = relay.var("x", shape=(1, 3, 5, 5)), relay.var("w", shape=(4, 3, 3, 3))
    twin = op_registry.call("test.fold_relu_twin", [conv(x, w)])
    func = run_both(relay.multiply(twin, relay.const(rand(4, 1, 1, positive=True))), [x, w],
                    [rand(1, 3, 5, 5), rand(4, 3, 3, 3)], fold=BackwardFoldScaleAxis)
    assert ops_of(func) == ["multiply", "nn.conv2d", "test.fold_relu_twin"]
    with pytest.raises(kiln.TVMError, match="test.fold_relu_twin: role must be one of"):
        op_registry.register_scale_axis_role("test.fold_relu_twin", "linear")
