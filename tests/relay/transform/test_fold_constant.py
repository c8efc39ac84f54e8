"""FoldConstant: folded programs compute what NumPy computes, and keep what must stay."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import relay
from kiln.ir.structural import assert_structural_equal
from kiln.relay.backend.interpreter import evaluate
from kiln.relay.transform import FoldConstant, InferType


def fold(func):
    return FoldConstant()(kiln.IRModule.from_expr(func))


def typed(func):
    return InferType()(kiln.IRModule.from_expr(func))


def test_constant_subgraph_becomes_its_numpy_value():
    a = np.arange(6, dtype="float32").reshape(2, 3)
    b = np.linspace(-1, 1, 3).astype("float32")
    x = relay.var("x", shape=(2, 3))
    c = relay.nn.relu(relay.add(relay.const(a), relay.exp(relay.const(b))))
    after = fold(relay.Function([x], relay.multiply(x, c)))
    body = after["main"].body
    assert isinstance(body.args[1], relay.Constant)
    np.testing.assert_allclose(body.args[1].data.numpy(), np.maximum(a + np.exp(b), 0),
                               rtol=1e-6)
    xv = np.ones((2, 3), "float32") * 2
    np.testing.assert_allclose(evaluate(after["main"])(xv).numpy(),
                               xv * np.maximum(a + np.exp(b), 0), rtol=1e-6)


def test_expression_with_a_variable_is_kept():
    x = relay.var("x", shape=(2,))
    func = relay.Function([x], relay.add(x, relay.const([1.0, 2.0])))
    assert_structural_equal(fold(func), typed(func))


def test_let_bound_constant_is_inlined_and_tuple_fields_fold():
    x, v = relay.var("x", shape=(2,)), relay.var("v")
    tup = relay.Tuple([relay.const([1.0, 2.0]), relay.const(3.0)])
    body = relay.Let(v, relay.add(relay.const([1.0, 1.0]), relay.TupleGetItem(tup, 0)),
                     relay.add(x, v))
    after = fold(relay.Function([x], body))["main"].body
    assert isinstance(after, relay.Call) and after.args[0] is not None
    np.testing.assert_array_equal(after.args[1].data.numpy(), [2.0, 3.0])


def test_tuple_results_fold_to_tuples_of_constants():
    x = relay.var("x", shape=(4,))
    parts = relay.split(relay.const(np.arange(4, dtype="float32")), 2)
    after = fold(relay.Function([x], relay.add(x, relay.concatenate(
        [parts[1], parts[0]], axis=0))))
    np.testing.assert_array_equal(after["main"].body.args[1].data.numpy(), [2, 3, 0, 1])


def test_if_on_a_constant_condition_picks_the_branch():
    x = relay.var("x", shape=(2,))
    func = relay.Function([x], relay.If(relay.less(relay.const(1), relay.const(2)),
                                        relay.exp(x), relay.negative(x)))
    x2 = relay.var("x", shape=(2,))
    assert_structural_equal(fold(func), typed(relay.Function([x2], relay.exp(x2))))


def test_shape_of_a_static_tensor_folds():
    x = relay.var("x", shape=(2, 5))
    after = fold(relay.Function([x], relay.shape_of(x)))
    np.testing.assert_array_equal(after["main"].body.data.numpy(), [2, 5])
    assert after["main"].body.data.dtype == "int32"


def test_primitive_functions_and_annotations_are_not_folded():
    p = relay.var("p", shape=(2,))
    prim = relay.Function([p], relay.add(p, relay.exp(relay.const([0.0, 0.0])))) \
        .with_attr("Primitive", 1)
    x = relay.var("x", shape=(2,))
    func = relay.Function([x], relay.add(prim(x), relay.annotation.stop_fusion(
        relay.const([1.0, 1.0]))))
    assert_structural_equal(fold(func), typed(func))


def test_long_chain_folds_to_one_constant():
    y = relay.const(np.zeros(3, "float32"))
    for _ in range(3000):
        y = relay.add(y, relay.const(1.0))
    x = relay.var("x", shape=(3,))
    after = fold(relay.Function([x], relay.add(x, y)))
    np.testing.assert_array_equal(after["main"].body.args[1].data.numpy(), [3000.0] * 3)
