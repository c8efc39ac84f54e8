"""``fixed_point_multiply`` and ``fixed_point_multiply_per_axis`` (TVM's ops) against the
definition in Python integers, compiled (llvm, c) and on the interpreter, and the UPWARD
``qnn.requantize`` lowering that uses them where they equal the int64 form."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.runtime.error import TVMError

EXTREMES = [2**31 - 1, -2**31, 0, 1, -1, 46341, -46341]


def _definition(x, multiplier, left, right):
    """round((x << left) * multiplier / 2**(31 + right)) half up, wrapped to int32."""
    total = 31 + int(right)
    value = ((int(x) << int(left)) * int(multiplier) + (1 << (total - 1))) >> total
    return (value + 2**31) % 2**32 - 2**31


def _inputs(shape, seed):
    x = np.random.default_rng(seed).integers(-2**31, 2**31, shape).astype("int32")
    x.reshape(-1)[:len(EXTREMES)] = EXTREMES
    return x


def _evaluate(expr_of, x, kind, target):
    v = relay.var("x", shape=x.shape, dtype="int32")
    mod = kiln.IRModule.from_expr(relay.Function([v], expr_of(v)))
    return relay.create_executor(kind, mod=mod, target=target).evaluate()(x).numpy()


RUNS = [("graph", "llvm"), ("graph", "c"), ("debug", "llvm")]


@pytest.mark.parametrize("kind, target", RUNS)
def test_fixed_point_multiply_matches_the_definition(kind, target):
    x = _inputs((4, 9), 0)
    # 0.7071 (shift 0), 0.5 (the power of two), 0.0123 (a right shift), 5.5 (a left shift)
    for multiplier, shift in [(1518500250, 0), (1 << 30, 0), (1690833178, -6),
                              (1476395008, 3)]:
        got = _evaluate(lambda v, m=multiplier, s=shift: relay.fixed_point_multiply(v, m, s), x,
                        kind, target)
        want = [_definition(v, multiplier, max(shift, 0), max(-shift, 0)) for v in x.ravel()]
        np.testing.assert_array_equal(got.ravel(), want)


@pytest.mark.parametrize("kind, target", RUNS)
@pytest.mark.parametrize("lshift_required", [False, True])
def test_fixed_point_multiply_per_axis_matches_the_definition(kind, target, lshift_required):
    x = _inputs((2, 3, 5), 1)
    m = np.array([1518500250, 1 << 30, 2013265920], "int32")
    left = np.array([2, 0, 1], "int32") if lshift_required else np.zeros(3, "int32")
    # without a left shift, a right shift of 33 too (a multiplier below 2**-33: zero)
    right = np.array([0, 7, 3 if lshift_required else 33], "int32")
    got = _evaluate(lambda v: relay.fixed_point_multiply_per_axis(
        v, relay.const(m), relay.const(left), relay.const(right), lshift_required, True, [1]),
        x, kind, target)
    want = np.array([[[_definition(x[n, c, k], m[c], left[c], right[c]) for k in range(5)]
                      for c in range(3)] for n in range(2)])
    np.testing.assert_array_equal(got, want)


def test_fixed_point_multiply_refuses_non_int32_data():
    v = relay.var("x", shape=(3,), dtype="int64")
    mod = kiln.IRModule.from_expr(relay.Function([v], relay.fixed_point_multiply(v, 1, 0)))
    with pytest.raises(TVMError, match="int32"):
        relay.transform.InferType()(mod)


def _canonical_ops(in_zp, scale):
    v = relay.var("x", shape=(1, 4, 3), dtype="int32")
    y = relay.qnn.op.requantize(v, relay.const(scale), relay.const(in_zp, "int32"),
                                relay.const(1.0), relay.const(3, "int32"), axis=1,
                                out_dtype="int8")
    mod = relay.transform.InferType()(kiln.IRModule.from_expr(relay.Function([v], y)))
    mod = relay.qnn.transform.CanonicalizeOps()(mod)
    names = set()
    relay.analysis.post_order_visit(mod["main"], lambda n: names.add(n.op.name) if hasattr(
        n, "op") and hasattr(n.op, "name") else None)
    return names


def test_upward_requantize_lowers_to_int32_fixed_point_multiply_where_exact():
    per_channel = np.array([0.1, 0.2, 0.3, 0.4], "float32")
    assert "fixed_point_multiply" in _canonical_ops(0, 0.25)
    assert "fixed_point_multiply_per_axis" in _canonical_ops(0, per_channel)
    # an input zero point or a multiplier above 1 keep the int64 form
    assert not {"fixed_point_multiply", "fixed_point_multiply_per_axis"} & (
        _canonical_ops(5, 0.25) | _canonical_ops(0, 3.0))


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_fixed_point_multiply_of_minus_one_with_a_right_shift(target):
    # multiplier -2**31 (-1.0 in Q31) times x = -2**31: the product is 2**62, whose p >> 31
    # does not fit int32; the compiled kernel once returned -2**30 here instead of 2**30
    x = _inputs((16,), 5)
    for shift in (-1, -5, -31):
        got = _evaluate(lambda v, s=shift: relay.fixed_point_multiply(v, -2**31, s), x,
                        "graph", target)
        want = [_definition(v, -2**31, 0, -shift) for v in x.ravel()]
        np.testing.assert_array_equal(got.ravel(), want)


def _numpy_int64(x, m, left, right):
    """The oracle in NumPy int64: the product ``(x << left) * m`` wraps as int64 (TVM's
    lowering), then rounds half up exactly (in Python integers) and wraps to int32."""
    # a right shift past 64 rounds an int64 product as 64 does (to 0); Python would build
    # 2**(2**31) for the largest
    left, right = np.clip(left, 0, 63), np.clip(right, 0, 64)
    product = (x.astype("int64") << left.astype("int64")) * m.astype("int64")
    out = [(int(p) + (1 << (30 + int(r)))) >> (31 + int(r))
           for p, r in zip(product.ravel(), np.broadcast_to(right, product.shape).ravel())]
    return np.array(out, "int64").reshape(product.shape).astype("int32")  # wraps to int32


@pytest.mark.parametrize("kind, target", RUNS)
@pytest.mark.parametrize("lshift_required", [False, True])
def test_fixed_point_multiply_per_axis_is_defined_for_any_run_time_parameter(
        kind, target, lshift_required):
    """Run-time multipliers of -2**31 and shifts of -2**31, negative, past 31/63 or 2**31-1
    (undefined shifts in C before): as NumPy int64 computes them."""
    x = np.array([EXTREMES * 2], "int32").repeat(10, axis=0)  # [channels 10, 14]
    m = np.array([-2**31, -2**31, -2**31, 2**31 - 1, -2**31, 1 << 30, -2**31, 7, -2**31, 3],
                 "int32")
    right = np.array([0, 1, 5, 31, 32, 40, -1, -2**31, 2**31 - 1, 2], "int32")
    left = (np.array([0, 0, 1, 0, 3, 62, 63, 2**31 - 1, -2**31, -5], "int32")
            if lshift_required else np.zeros(10, "int32"))
    params = [relay.var(n, shape=(10,), dtype="int32") for n in ("m", "left", "right")]
    v = relay.var("x", shape=x.shape, dtype="int32")
    body = relay.fixed_point_multiply_per_axis(v, *params, lshift_required, True, [0])
    mod = kiln.IRModule.from_expr(relay.Function([v, *params], body))
    got = relay.create_executor(kind, mod=mod, target=target).evaluate()(
        x, m, left, right).numpy()
    want = _numpy_int64(x, m[:, None], left[:, None], right[:, None])
    np.testing.assert_array_equal(got, want)
