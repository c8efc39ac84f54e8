"""SimplifyExpr: each rule against a hand-built expected program, and what must not change."""

from __future__ import annotations

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
