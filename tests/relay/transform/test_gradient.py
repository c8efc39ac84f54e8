"""Gradient: every registered rule against central finite differences of the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import relay
from kiln.relay.backend.interpreter import evaluate
from kiln.relay.transform import Gradient, gradient
from kiln.runtime.error import TVMError

RNG = np.random.default_rng(7)
DT = "float64"


def weighted_sum(y, shape):
    """A scalar from y with fixed random weights, so every output element matters."""
    weights = relay.const(RNG.uniform(0.5, 1.5, shape).astype(DT))
    return relay.sum(relay.multiply(y, weights))


def numeric_grads(func, inputs, eps=1e-6):
    run = evaluate(func)
    grads = []
    for index, value in enumerate(inputs):
        grad = np.zeros_like(value)
        for pos in np.ndindex(value.shape):
            plus = [v.copy() for v in inputs]
            minus = [v.copy() for v in inputs]
            plus[index][pos] += eps
            minus[index][pos] -= eps
            grad[pos] = (float(run(*plus).numpy()) - float(run(*minus).numpy())) / (2 * eps)
        grads.append(grad)
    return grads


def check(build, shapes, out_shape, low=-1.0, high=1.0):
    params = [relay.var(f"p{i}", shape=s, dtype=DT) for i, s in enumerate(shapes)]
    func = relay.Function(params, weighted_sum(build(*params), out_shape))
    inputs = [RNG.uniform(low, high, s).astype(DT) for s in shapes]
    value, grads = evaluate(gradient(func))(*inputs)
    expected_value = evaluate(func)(*inputs).numpy()
    np.testing.assert_allclose(value.numpy(), expected_value, rtol=1e-10)
    for got, want in zip(grads, numeric_grads(func, inputs)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


CASES = {
    "add_broadcast": (lambda x, y: relay.add(x, y), [(2, 3), (3,)], (2, 3)),
    "subtract_broadcast": (lambda x, y: relay.subtract(x, y), [(2, 1), (2, 3)], (2, 3)),
    "multiply_broadcast": (lambda x, y: relay.multiply(x, y), [(2, 3), (1, 3)], (2, 3)),
    "divide": (lambda x, y: relay.divide(x, relay.add(y, relay.const(3.0, DT))),
               [(2, 3), (2, 3)], (2, 3)),
    "negative": (lambda x: relay.negative(x), [(4,)], (4,)),
    "exp": (lambda x: relay.exp(x), [(4,)], (4,)),
    "log": (lambda x: relay.log(relay.add(x, relay.const(2.0, DT))), [(4,)], (4,)),
    "tanh": (lambda x: relay.tanh(x), [(4,)], (4,)),
    "sigmoid": (lambda x: relay.sigmoid(x), [(4,)], (4,)),
    "relu": (lambda x: relay.nn.relu(x), [(6,)], (6,)),
    "sum_axis": (lambda x: relay.sum(x, axis=[1]), [(2, 3, 2)], (2, 2)),
    "sum_keepdims": (lambda x: relay.sum(x, axis=[0, 2], keepdims=True), [(2, 3, 2)],
                     (1, 3, 1)),
    "mean": (lambda x: relay.mean(x, axis=[1]), [(2, 4)], (2,)),
    "dense": (lambda x, w: relay.nn.dense(x, w), [(2, 3), (4, 3)], (2, 4)),
    "matmul_transposed": (lambda a, b: relay.nn.matmul(a, b, transpose_a=True,
                                                       transpose_b=True),
                          [(3, 2), (4, 3)], (2, 4)),
    "batch_matmul": (lambda a, b: relay.nn.batch_matmul(a, b), [(2, 2, 3), (2, 4, 3)],
                     (2, 2, 4)),
    "reshape": (lambda x: relay.exp(relay.reshape(x, (3, 2))), [(2, 3)], (3, 2)),
    "transpose": (lambda x: relay.transpose(x, (2, 0, 1)), [(2, 3, 4)], (4, 2, 3)),
    "broadcast_to": (lambda x: relay.broadcast_to(x, (2, 3)), [(1, 3)], (2, 3)),
    "softmax": (lambda x: relay.nn.softmax(x), [(2, 4)], (2, 4)),
    "log_softmax": (lambda x: relay.nn.log_softmax(x, axis=0), [(3, 2)], (3, 2)),
    "conv2d": (lambda x, w: relay.nn.conv2d(x, w, padding=(1, 1)), [(1, 2, 4, 4), (3, 2, 3, 3)],
               (1, 3, 4, 4)),
    "conv2d_strided": (lambda x, w: relay.nn.conv2d(x, w, strides=(2, 2), padding=(1, 0)),
                       [(2, 2, 5, 6), (3, 2, 3, 2)], (2, 3, 3, 3)),
    "shared_node_and_tuple": (
        lambda x, y: relay.TupleGetItem(relay.Tuple([relay.multiply(relay.exp(x), y),
                                                     relay.exp(x)]), 0),
        [(3,), (3,)], (3,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name):
    build, shapes, out_shape = CASES[name]
    check(build, shapes, out_shape)


def test_let_bound_program_and_unused_parameter():
    x, y = relay.var("x", shape=(3,), dtype=DT), relay.var("y", shape=(3,), dtype=DT)
    t = relay.var("t")
    func = relay.Function([x, y], relay.Let(t, relay.tanh(x), relay.sum(relay.multiply(t, t))))
    xv, yv = RNG.uniform(-1, 1, 3), RNG.uniform(-1, 1, 3)
    value, (dx, dy) = evaluate(Gradient(func))(xv, yv)
    np.testing.assert_allclose(dx.numpy(), 2 * np.tanh(xv) * (1 - np.tanh(xv) ** 2))
    np.testing.assert_array_equal(dy.numpy(), np.zeros(3))


def test_tuple_output_seeds_every_field_with_ones():
    x = relay.var("x", shape=(2,), dtype=DT)
    func = relay.Function([x], relay.Tuple([relay.multiply(x, x), relay.exp(x)]))
    xv = np.array([0.5, -1.0])
    (_, _), (dx,) = evaluate(gradient(func, mode="first_order"))(xv)
    np.testing.assert_allclose(dx.numpy(), 2 * xv + np.exp(xv))


def test_unsupported_programs_raise_clear_errors():
    x = relay.var("x", shape=(2,))
    c = relay.var("c", shape=(), dtype="bool")
    with pytest.raises(TVMError, match="If"):
        gradient(relay.Function([c, x], relay.If(c, x, relay.exp(x))))
    with pytest.raises(TVMError, match="no registered gradient"):
        gradient(relay.Function([x], relay.sum(relay.round(x))))
    data, weight = relay.var("d", shape=(1, 4, 4, 4)), relay.var("w", shape=(4, 2, 3, 3))
    grouped = relay.sum(relay.nn.conv2d(data, weight, groups=2))
    with pytest.raises(TVMError, match="groups=1"):
        gradient(relay.Function([data, weight], grouped))
    with pytest.raises(TVMError, match="mode"):
        gradient(relay.Function([x], x), mode="sideways")
    with pytest.raises(TVMError, match="Function"):
        gradient(x)
