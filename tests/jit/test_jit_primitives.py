"""One check per primitive (the spirit of Myia's per-primitive backend suite): each NumPy
function or operator kiln.jit maps, on arrays through Relay segments (graph executor and the
Relay interpreter) and on Python scalars, against NumPy itself."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.jit import JitError, myia

RNG = np.random.default_rng(3)
A = RNG.uniform(0.5, 2.0, (3, 4)).astype("float32")
B = RNG.uniform(0.5, 2.0, (3, 4)).astype("float32")
ROW = RNG.uniform(0.5, 2.0, (4,)).astype("float32")

ARRAY_OPS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b, "pow": lambda a, b: a ** b,
    "maximum": lambda a, b: np.maximum(a, b), "minimum": lambda a, b: np.minimum(a, b),
    "lt": lambda a, b: a < b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b,
    "neg": lambda a, b: -a, "exp": lambda a, b: np.exp(a), "log": lambda a, b: np.log(a),
    "tanh": lambda a, b: np.tanh(a), "sin": lambda a, b: np.sin(a),
    "cos": lambda a, b: np.cos(a), "sqrt": lambda a, b: np.sqrt(a),
    "abs": lambda a, b: np.abs(a - b), "where": lambda a, b: np.where(a > b, a, b),
    "sum": lambda a, b: a.sum(axis=1), "sum_keepdims": lambda a, b: np.sum(a, 0, keepdims=True),
    "mean": lambda a, b: a.mean(), "max": lambda a, b: np.max(a, axis=0),
    "transpose": lambda a, b: a.T, "reshape": lambda a, b: a.reshape(2, 6),
    "matmul": lambda a, b: a @ b.T, "broadcast": lambda a, b: a + b[0],
    "slice": lambda a, b: a[1:, ::2], "astype": lambda a, b: a.astype(np.float64),
}


@pytest.mark.parametrize("name", sorted(ARRAY_OPS))
def test_array_primitive_on_the_relay_interpreter(name):
    fn = ARRAY_OPS[name]
    np.testing.assert_allclose(myia(fn, linear_impl="debug")(A, B), fn(A, B), rtol=1e-5)


def test_array_primitives_on_the_graph_executor():
    # all of them in one function: one segment, one relay.build
    names = sorted(ARRAY_OPS)

    def all_ops(a, b):
        return (a + b, a - b, a * b, a / b, a ** b, np.maximum(a, b), np.minimum(a, b),
                a < b, a >= b, a == b, -a, np.exp(a), np.log(a), np.tanh(a), np.sin(a),
                np.cos(a), np.sqrt(a), np.abs(a - b), np.where(a > b, a, b), a.sum(axis=1),
                np.sum(a, 0, keepdims=True), a.mean(), np.max(a, axis=0), a.T,
                a.reshape(2, 6), a @ b.T, a + b[0], a[1:, ::2], a.astype(np.float64))

    order = ["add", "sub", "mul", "truediv", "pow", "maximum", "minimum", "lt", "ge", "eq",
             "neg", "exp", "log", "tanh", "sin", "cos", "sqrt", "abs", "where", "sum",
             "sum_keepdims", "mean", "max", "transpose", "reshape", "matmul", "broadcast",
             "slice", "astype"]
    assert sorted(order) == names
    got = myia(all_ops)(A, B)
    for name, value in zip(order, got):
        np.testing.assert_allclose(value, ARRAY_OPS[name](A, B), rtol=1e-5, err_msg=name)


SCALAR_OPS = [lambda x, y: x + y * 2, lambda x, y: x / y, lambda x, y: x // y,
              lambda x, y: x % y, lambda x, y: x ** 2 - y, lambda x, y: max(x, y),
              lambda x, y: min(x, y) - abs(y), lambda x, y: float(x) + int(y),
              lambda x, y: (x < y) + (x == y)]


@pytest.mark.parametrize("k", range(len(SCALAR_OPS)))
@pytest.mark.parametrize("x,y", [(7, 3), (-7.5, 2.0)])
def test_scalar_primitives_follow_python(k, x, y):
    fn = SCALAR_OPS[k]
    assert myia(fn)(x, y) == fn(x, y)


@pytest.mark.parametrize("bad,words", [({"a": 1}, "dict"), ("text", "str"),
                                       (np.array(["a"]), "dtype")])
def test_unsupported_argument_types_raise(bad, words):
    with pytest.raises(JitError, match=words):
        myia(lambda_free)(bad)


def lambda_free(x):
    return x


def test_wrong_argument_count_and_unknown_options_raise():
    with pytest.raises(JitError, match="takes 1 arguments but 2"):
        myia(lambda_free)(1.0, 2.0)
    with pytest.raises(JitError, match="unknown backend"):
        myia(lambda_free, backend="gpu")(1.0)
    with pytest.raises(JitError, match="unknown pipeline steps"):
        kiln.jit.Pipeline(["parse", "nope"])
