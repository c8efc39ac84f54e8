"""FuseOps: groups match TVM's on hand-written expected modules."""

from __future__ import annotations

import time

import kiln
from kiln import relay
from kiln.ir.structural import assert_structural_equal
from kiln.ir.transform import PassContext
from kiln.relay.transform import FuseOps, InferType, fused_function_name


def run_fuse(func, opt_level=2, config=None):
    mod = kiln.IRModule.from_expr(func)
    with PassContext(opt_level=3, config=config or {}):
        return FuseOps(fuse_opt_level=opt_level)(mod)


def typed(func):
    return InferType()(kiln.IRModule.from_expr(func))


def primitive(params, body):
    return relay.Function(params, body).with_attr("Primitive", 1)


def conv(x, w):
    return relay.nn.conv2d(x, w, padding=(1, 1))


def test_resnet_block_fuses_as_tvm():
    shape, wshape = (1, 16, 8, 8), (16, 16, 3, 3)
    x, w1, b1 = relay.var("x", shape=shape), relay.var("w1", shape=wshape), \
        relay.var("b1", shape=(16,))
    w2, b2 = relay.var("w2", shape=wshape), relay.var("b2", shape=(16,))
    y = relay.nn.relu(relay.nn.bias_add(conv(x, w1), b1))
    y = relay.nn.relu(relay.add(relay.nn.bias_add(conv(y, w2), b2), x))
    after = run_fuse(relay.Function([x, w1, b1, w2, b2], y))

    p0, p1, p2 = relay.var("p0", shape=shape), relay.var("p1", shape=wshape), \
        relay.var("p2", shape=(16,))
    f1 = primitive([p0, p1, p2], relay.nn.relu(relay.nn.bias_add(conv(p0, p1), p2)))
    q0, q1, q2, q3 = relay.var("p0", shape=shape), relay.var("p1", shape=wshape), \
        relay.var("p2", shape=(16,)), relay.var("p3", shape=shape)
    f2 = primitive([q0, q1, q2, q3],
                   relay.nn.relu(relay.add(relay.nn.bias_add(conv(q0, q1), q2), q3)))
    x_, w1_, b1_ = relay.var("x", shape=shape), relay.var("w1", shape=wshape), \
        relay.var("b1", shape=(16,))
    w2_, b2_ = relay.var("w2", shape=wshape), relay.var("b2", shape=(16,))
    expected = relay.Function([x_, w1_, b1_, w2_, b2_], f2(f1(x_, w1_, b1_), w2_, b2_, x_))
    assert_structural_equal(after, typed(expected))
    assert fused_function_name(after["main"].body.op) == \
        "fused_nn_conv2d_nn_bias_add_add_nn_relu"
    assert fused_function_name(after["main"].body.args[0].op) == \
        "fused_nn_conv2d_nn_bias_add_nn_relu"


def test_elementwise_chain_becomes_one_function_with_scalar_constant_inside():
    x = relay.var("x", shape=(4, 4))
    y = relay.sigmoid(relay.exp(relay.add(x, relay.const(1.0))))
    after = run_fuse(relay.Function([x], y))
    p0 = relay.var("p0", shape=(4, 4))
    f = primitive([p0], relay.sigmoid(relay.exp(relay.add(p0, relay.const(1.0)))))
    x_ = relay.var("x", shape=(4, 4))
    assert_structural_equal(after, typed(relay.Function([x_], f(x_))))


def test_reduction_absorbs_preceding_elemwise_and_broadcast_ops():
    x, b = relay.var("x", shape=(2, 3, 4)), relay.var("b", shape=(4,))
    y = relay.sum(relay.add(relay.exp(x), b), axis=[1])
    after = run_fuse(relay.Function([x, b], y))
    p0, p1 = relay.var("p0", shape=(2, 3, 4)), relay.var("p1", shape=(4,))
    f = primitive([p0, p1], relay.sum(relay.add(relay.exp(p0), p1), axis=[1]))
    x_, b_ = relay.var("x", shape=(2, 3, 4)), relay.var("b", shape=(4,))
    assert_structural_equal(after, typed(relay.Function([x_, b_], f(x_, b_))))


def test_injective_op_before_reduction_is_not_absorbed():
    # as TVM: injective ops fuse only along paths that stay injective (the sink included)
    x = relay.var("x", shape=(2, 3, 4))
    y = relay.sum(relay.transpose(relay.exp(x), (0, 2, 1)), axis=[1])
    after = run_fuse(relay.Function([x], y))
    p0 = relay.var("p0", shape=(2, 3, 4))
    f1 = primitive([p0], relay.transpose(relay.exp(p0), (0, 2, 1)))
    q0 = relay.var("p0", shape=(2, 4, 3))
    f2 = primitive([q0], relay.sum(q0, axis=[1]))
    x_ = relay.var("x", shape=(2, 3, 4))
    assert_structural_equal(after, typed(relay.Function([x_], f2(f1(x_)))))


def test_injective_before_conv_stays_out_but_elemwise_after_fuses():
    x, w = relay.var("x", shape=(1, 8, 8, 4)), relay.var("w", shape=(4, 4, 3, 3))
    y = relay.nn.relu(conv(relay.transpose(x, (0, 3, 1, 2)), w))
    after = run_fuse(relay.Function([x, w], y))
    p0 = relay.var("p0", shape=(1, 8, 8, 4))
    f1 = primitive([p0], relay.transpose(p0, (0, 3, 1, 2)))
    q0, q1 = relay.var("p0", shape=(1, 4, 8, 8)), relay.var("p1", shape=(4, 4, 3, 3))
    f2 = primitive([q0, q1], relay.nn.relu(conv(q0, q1)))
    x_, w_ = relay.var("x", shape=(1, 8, 8, 4)), relay.var("w", shape=(4, 4, 3, 3))
    assert_structural_equal(after, typed(relay.Function([x_, w_], f2(f1(x_), w_))))


def test_tuple_output_fuses_its_elemwise_producers():
    x = relay.var("x", shape=(3,))
    y = relay.Tuple([relay.exp(x), relay.negative(x)])
    after = run_fuse(relay.Function([x], relay.concatenate(y, axis=0)))
    p0 = relay.var("p0", shape=(3,))
    f = primitive([p0], relay.concatenate(relay.Tuple([relay.exp(p0), relay.negative(p0)]),
                                          axis=0))
    x_ = relay.var("x", shape=(3,))
    assert_structural_equal(after, typed(relay.Function([x_], f(x_))))


def test_function_returning_a_tuple_keeps_the_tuple_outside():
    x = relay.var("x", shape=(3,))
    after = run_fuse(relay.Function([x], relay.Tuple([relay.exp(relay.exp(x)), x])))
    p0 = relay.var("p0", shape=(3,))
    f = primitive([p0], relay.exp(relay.exp(p0)))
    x_ = relay.var("x", shape=(3,))
    assert_structural_equal(after, typed(relay.Function([x_], relay.Tuple([f(x_), x_]))))


def test_opt_level_zero_fuses_nothing_but_wraps_each_op():
    x = relay.var("x", shape=(3,))
    after = run_fuse(relay.Function([x], relay.exp(relay.negative(x))), opt_level=0)
    p0, q0 = relay.var("p0", shape=(3,)), relay.var("p0", shape=(3,))
    x_ = relay.var("x", shape=(3,))
    expected = relay.Function(
        [x_], primitive([q0], relay.exp(q0))(primitive([p0], relay.negative(p0))(x_)))
    assert_structural_equal(after, typed(expected))


def test_pass_context_opt_level_is_used_by_default():
    x = relay.var("x", shape=(3,))
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.exp(relay.negative(x))))
    with PassContext(opt_level=0):
        after = FuseOps()(mod)
    assert isinstance(after["main"].body.args[0], relay.Call)  # two functions, not one


def chain_of(length):
    x = relay.var("x", shape=(3,))
    y = x
    for _ in range(length):
        y = relay.exp(y)
    return relay.Function([x], y)


def test_max_depth_from_pass_context_splits_long_chains():
    after = run_fuse(chain_of(5), config={"relay.FuseOps.max_depth": 2})
    calls = []
    node = after["main"].body
    while isinstance(node, relay.Call):
        calls.append(node)
        node = node.args[0]
    assert [fused_function_name(c.op) for c in calls] == \
        ["fused_exp", "fused_exp_exp", "fused_exp_exp"]


def test_stop_fusion_blocks_and_is_removed():
    x = relay.var("x", shape=(3,))
    y = relay.exp(relay.annotation.stop_fusion(relay.negative(x)))
    after = run_fuse(relay.Function([x], y))
    p0, q0 = relay.var("p0", shape=(3,)), relay.var("p0", shape=(3,))
    x_ = relay.var("x", shape=(3,))
    expected = relay.Function(
        [x_], primitive([q0], relay.exp(q0))(primitive([p0], relay.negative(p0))(x_)))
    assert_structural_equal(after, typed(expected))


def test_let_bound_values_are_fusion_boundaries():
    x = relay.var("x", shape=(3,))
    v = relay.var("v")
    func = relay.Function([x], relay.Let(v, relay.exp(relay.exp(x)), relay.negative(v)))
    after = run_fuse(func)
    p0, q0 = relay.var("p0", shape=(3,)), relay.var("p0", shape=(3,))
    x_, v_ = relay.var("x", shape=(3,)), relay.var("v")
    expected = relay.Function([x_], relay.Let(
        v_, primitive([p0], relay.exp(relay.exp(p0)))(x_),
        primitive([q0], relay.negative(q0))(v_)))
    assert_structural_equal(after, typed(expected))


def test_fusing_twice_is_a_no_op_and_other_functions_are_fused_too():
    mod = kiln.IRModule.from_expr(chain_of(3))
    mod["helper"] = chain_of(2)
    once = FuseOps(2)(mod)
    assert fused_function_name(once["helper"].body.op) == "fused_exp_exp"
    assert_structural_equal(FuseOps(2)(once), once)


def test_long_names_are_cut_with_a_hash_suffix():
    name = fused_function_name(chain_of(40))
    assert name.startswith("fused_exp_exp") and len(name) <= 80 + 10
    assert name != fused_function_name(chain_of(41))


def test_5000_node_chain_is_fast():
    x = relay.var("x", shape=(3,))
    y = x
    for i in range(5000):
        y = relay.add(y, x) if i % 2 else relay.nn.dense(y, relay.var(f"w{i}", shape=(3, 3)))
    func = relay.Function(relay.analysis.free_vars(y), y)
    start = time.perf_counter()
    after = run_fuse(func)
    assert time.perf_counter() - start < 20
    assert fused_function_name(after["main"].body.op) == "fused_nn_dense_add"
