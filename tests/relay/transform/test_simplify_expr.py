"""SimplifyExpr: each rule against a hand-built expected program, and what must not change."""

from __future__ import annotations

import pytest

import kiln
from kiln import relay
from kiln.ir.structural import assert_structural_equal
from kiln.relay.transform import InferType, SimplifyExpr


def simplify(func):
    return SimplifyExpr()(kiln.IRModule.from_expr(func))


def typed(func):
    return InferType()(kiln.IRModule.from_expr(func))


def check(build, build_expected, shape=(2, 3, 4), dtype="float32"):
    x = relay.var("x", shape=shape, dtype=dtype)
    x2 = relay.var("x", shape=shape, dtype=dtype)
    assert_structural_equal(simplify(relay.Function([x], build(x))),
                            typed(relay.Function([x2], build_expected(x2))))


def test_reshape_chain_becomes_one_reshape():
    check(lambda x: relay.reshape(relay.expand_dims(relay.reshape(x, (6, 4)), 0), (4, 6)),
          lambda x: relay.reshape(x, (4, 6)))


def test_squeeze_expand_dims_pair_vanishes():
    check(lambda x: relay.exp(relay.squeeze(relay.expand_dims(x, 1), axis=[1])),
          lambda x: relay.exp(x))


def test_single_reshape_to_the_same_shape_vanishes():
    check(lambda x: relay.reshape(x, (2, 3, 4)), lambda x: x)


def test_transposes_compose():
    check(lambda x: relay.transpose(relay.transpose(x, (1, 0, 2)), (0, 2, 1)),
          lambda x: relay.transpose(x, (1, 2, 0)))


def test_inverse_transposes_vanish():
    check(lambda x: relay.transpose(relay.transpose(x, (2, 0, 1)), (1, 2, 0)), lambda x: x)
    check(lambda x: relay.transpose(relay.transpose(x)), lambda x: x)


def test_redundant_casts():
    check(lambda x: relay.cast(x, "float32"), lambda x: x)
    check(lambda x: relay.cast(relay.cast(x, "float64"), "int32"),
          lambda x: relay.cast(x, "int32"))


def test_lossy_middle_cast_is_kept():
    check(lambda x: relay.cast(relay.cast(x, "int8"), "float32"),
          lambda x: relay.cast(relay.cast(x, "int8"), "float32"))


def test_identity_arithmetic():
    check(lambda x: relay.add(relay.multiply(relay.const(1.0), x), relay.const(0.0)),
          lambda x: x)
    check(lambda x: relay.divide(relay.subtract(x, relay.const(0.0)), relay.const(1.0)),
          lambda x: x)


def test_broadcasting_identity_and_left_subtract_are_kept():
    ones = relay.const([[[1.0]] * 3] * 2)  # (2, 3, 1): broadcasting x (1, 3, 1) up
    check(lambda x: relay.multiply(x, ones), lambda x: relay.multiply(x, ones), shape=(1, 3, 1))
    check(lambda x: relay.subtract(relay.const(0.0), x),
          lambda x: relay.subtract(relay.const(0.0), x))


@pytest.mark.parametrize("inner,outer,combine", [
    (relay.add, relay.add, relay.add), (relay.add, relay.subtract, relay.subtract),
    (relay.subtract, relay.add, relay.subtract), (relay.subtract, relay.subtract, relay.add)])
def test_consecutive_integer_constant_adds_become_one(inner, outer, combine):
    """A quantized layer's bias and zero-point term: one constant, computed the same."""
    import numpy as np

    c1 = relay.const(np.arange(4, dtype="int32"))
    c2 = relay.const(np.array([[7], [-3], [2]], "int32").reshape(1, 3, 1))
    check(lambda x: outer(inner(x, c1), c2), lambda x: inner(x, combine(c1, c2)),
          dtype="int32")
    x = relay.var("x", shape=(2, 3, 4), dtype="int32")
    mod = kiln.IRModule.from_expr(relay.Function([x], outer(inner(x, c1), c2)))
    xv = np.random.default_rng(0).integers(-2**31, 2**31, (2, 3, 4)).astype("int32")
    run = relay.create_executor("debug", mod=mod).evaluate()
    want = run(xv).numpy()
    got = relay.create_executor("debug", mod=SimplifyExpr()(mod)).evaluate()(xv).numpy()
    np.testing.assert_array_equal(got, want)   # wrapping int32 arithmetic, any order


def test_consecutive_float_adds_are_kept():
    """Reassociating float adds would change the rounding."""
    c1, c2 = relay.const(0.1), relay.const(0.2)
    check(lambda x: relay.add(relay.add(x, c1), c2), lambda x: relay.add(relay.add(x, c1), c2))


def test_zero_point_term_and_bias_add_become_one_add():
    """``nn.bias_add(x - c, b)`` (a canonicalized quantized conv and its int32 bias)."""
    import numpy as np

    c = relay.const(np.arange(3, dtype="int32").reshape(1, 3, 1))
    b = relay.const(np.array([5, -1, 9], "int32"))
    check(lambda x: relay.nn.bias_add(relay.subtract(x, c), b, axis=1),
          lambda x: relay.subtract(x, relay.subtract(c, relay.reshape(b, [1, -1, 1]))),
          dtype="int32")
