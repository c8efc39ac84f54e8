"""qnn.softmax against NumPy: the integer approximation TVM defines (written here on int64
arrays, independently of the Relay lowering) bit for bit, and its distance from a float
softmax; on the interpreter, the graph executor and the VM."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay


def numpy_qnn_softmax(q, scale, zp, out_scale, out_zp, axis=-1):
    """TVM's shift-based softmax on int64 NumPy arrays, then requantize (round half up)."""
    one = int(np.round(np.float32(1.0) / np.float32(scale)))
    x = q.astype(np.int64) - zp
    x = x - x.max(axis=axis, keepdims=True)
    x_p = x + (x >> 1) - (x >> 4)
    k = np.clip(np.trunc(x_p / -one).astype(np.int64), 0, 20)
    r = x_p + k * one
    exps = ((r >> 1) + one) << (k.max(axis=axis, keepdims=True) - k)
    probs = ((1 << 30) // exps.sum(axis=axis, keepdims=True) * exps) >> 23
    real = probs.astype(np.float64) / 128 / out_scale
    return np.clip(np.floor(real + 0.5) + out_zp, -128, 127).astype(np.int8)


def _build(shape, scale, zp, out_scale, out_zp, axis):
    x = relay.var("x", shape=shape, dtype="int8")
    out = relay.qnn.op.softmax(x, relay.const(scale, "float32"), relay.const(zp, "int32"),
                               relay.const(out_scale, "float32"), relay.const(out_zp, "int32"),
                               axis=axis)
    return tvm.IRModule.from_expr(relay.Function([x], out))


@pytest.mark.parametrize("kind", ["debug", "graph", "vm"])
@pytest.mark.parametrize("shape, axis, scale, zp", [((2, 10), -1, 0.08, 3), ((3, 5, 4), 1,
                                                                              0.25, -7)])
def test_integer_softmax_matches_numpy_bit_for_bit(kind, shape, axis, scale, zp):
    out_scale, out_zp = 1.0 / 256, -128
    data = np.random.default_rng(len(shape)).integers(-128, 128, shape).astype("int8")
    mod = _build(shape, scale, zp, out_scale, out_zp, axis)
    got = relay.create_executor(kind, mod=mod, target="llvm").evaluate()(data).numpy()
    want = numpy_qnn_softmax(data, scale, zp, out_scale, out_zp, axis)
    np.testing.assert_array_equal(got, want)
    # and it approximates softmax: probabilities in 2**-7 units from a piecewise-linear
    # exp2 (TVM calls it experimental) stay within 0.04 of the float result
    real = (data.astype(np.float64) - zp) * scale
    soft = np.exp(real - real.max(axis=axis, keepdims=True))
    soft /= soft.sum(axis=axis, keepdims=True)
    assert np.abs((got.astype(np.float64) - out_zp) * out_scale - soft).max() <= 0.04


def test_bad_inputs_are_named():
    x = relay.var("x", shape=(4,), dtype="uint8")
    bad = relay.qnn.op.softmax(x, relay.const(0.1), relay.const(0), relay.const(0.1),
                               relay.const(0))
    with pytest.raises(tvm.TVMError, match="qnn.softmax: data must be int8"):
        relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], bad)))
    mod = _build((4,), 2.0, 0, 1 / 256, -128, -1)
    with pytest.raises(tvm.TVMError, match=r"input scale must be in \(0, 1\]"):
        relay.create_executor("vm", mod=mod, target="llvm").evaluate()(np.zeros(4, "int8"))
    with pytest.raises(tvm.TVMError, match="scale must be finite"):
        relay.qnn.op.softmax(x, relay.const(float("nan")), relay.const(0), relay.const(0.1),
                             relay.const(0))


def numpy_qnn_softmax_long_rows(q, scale, zp, out_scale, out_zp, axis=-1):
    """The same approximation for rows whose int32 sum would wrap: the sum in int64 and the
    reciprocal with 62 bits (documented in kiln/relay/qnn/softmax.py)."""
    one = int(np.round(np.float32(1.0) / np.float32(scale)))
    x = q.astype(np.int64) - zp
    x = x - x.max(axis=axis, keepdims=True)
    x_p = x + (x >> 1) - (x >> 4)
    k = np.clip(np.trunc(x_p / -one).astype(np.int64), 0, 20)
    exps = (((x_p + k * one) >> 1) + one) << (k.max(axis=axis, keepdims=True) - k)
    probs = ((1 << 62) // exps.sum(axis=axis, keepdims=True) * exps) >> 55
    real = probs.astype(np.float64) / 128 / out_scale
    return np.clip(np.floor(real + 0.5) + out_zp, -128, 127).astype(np.int8)


@pytest.mark.parametrize("kind", ["graph", "vm"])
@pytest.mark.parametrize("length", [412, 3000])
def test_long_rows_do_not_wrap_the_sum(kind, length):
    """Rows whose exponentials sum past 2**31 in TVM's int32 form (most values at the
    maximum, one at the minimum: each exponential is 10 * 2**20 at scale 0.1; 411 of them
    wrap to about 2**24 in int32: probabilities of 0.71 instead of 1/411)."""
    scale, zp, out_scale, out_zp = 0.1, 0, 1.0 / 256, -128
    data = np.full((3, length), 127, "int8")
    data[:, 0] = -128
    data[1, : length // 2] = 100  # half the row 2.7 below the maximum
    data[2, 1] = 126
    got = relay.create_executor(kind, mod=_build(data.shape, scale, zp, out_scale, out_zp, -1),
                                target="llvm").evaluate()(data).numpy()
    np.testing.assert_array_equal(got, numpy_qnn_softmax_long_rows(data, scale, zp, out_scale,
                                                                   out_zp))
    real = data.astype(np.float64) * scale
    soft = np.exp(real - real.max(axis=-1, keepdims=True))
    soft /= soft.sum(axis=-1, keepdims=True)
    assert np.abs((got.astype(np.float64) - out_zp) * out_scale - soft).max() <= 0.04
