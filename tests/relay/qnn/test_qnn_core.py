"""qnn.quantize / dequantize / requantize: type relations, errors, and canonicalized
execution on the graph executor and the VM against NumPy and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from qnn_reference import numpy_requantize, run  # beside this file

import kiln
from kiln import relay
from kiln.relay.qnn.canonicalize import fixed_point_multiplier_shift
from kiln.runtime.error import TVMError

EXECUTORS = ("graph", "vm", "debug")


# ---- oracles --------------------------------------------------------------------------------
def ort_run(node_type, x, scale, zp, axis, out_dtype):
    """onnxruntime's QuantizeLinear / DequantizeLinear on ``x``."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    zp_dtype = np.dtype(out_dtype if node_type == "QuantizeLinear" else x.dtype)
    inits = [numpy_helper.from_array(np.asarray(scale, "float32"), "s"),
             numpy_helper.from_array(np.asarray(zp, zp_dtype), "z")]
    out_elem = (helper.np_dtype_to_tensor_dtype(zp_dtype) if node_type == "QuantizeLinear"
                else TensorProto.FLOAT)
    node = helper.make_node(node_type, ["x", "s", "z"], ["y"], axis=axis)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info("y", out_elem, x.shape)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    sess = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


# ---- quantize / dequantize vs onnxruntime -------------------------------------------------------
@pytest.mark.parametrize("kind", EXECUTORS)
@pytest.mark.parametrize("out_dtype", ["uint8", "int8"])
def test_quantize_per_tensor_matches_onnxruntime(kind, out_dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 3, 4)) * 40).astype("float32")
    x[0, 0, :3] = [0.25, -0.75, 1e6]  # ties and saturation
    zp = 7 if out_dtype == "uint8" else -3
    y = relay.qnn.op.quantize(relay.var("x", shape=x.shape), relay.const(0.5),
                              relay.const(zp), out_dtype=out_dtype)
    expected = ort_run("QuantizeLinear", x, 0.5, zp, 1, out_dtype)
    np.testing.assert_array_equal(run(y, {"x": x}, kind), expected)


@pytest.mark.parametrize("kind", EXECUTORS)
@pytest.mark.parametrize("axis", [1, -1, 0])
def test_quantize_per_channel_matches_onnxruntime(kind, axis):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 4, 5)) * 20).astype("float32")
    n = x.shape[axis]
    scale = rng.uniform(0.05, 0.5, n).astype("float32")
    zp = rng.integers(0, 40, n).astype("uint8")
    y = relay.qnn.op.quantize(relay.var("x", shape=x.shape), relay.const(scale),
                              relay.const(zp.astype("int32")), axis=axis, out_dtype="uint8")
    expected = ort_run("QuantizeLinear", x, scale, zp, axis, "uint8")
    np.testing.assert_array_equal(run(y, {"x": x}, kind), expected)


@pytest.mark.parametrize("kind", EXECUTORS)
@pytest.mark.parametrize("dtype,axis", [("uint8", 1), ("int8", 0), ("int8", -1)])
def test_dequantize_matches_onnxruntime(kind, dtype, axis):
    rng = np.random.default_rng(2)
    info = np.iinfo(dtype)
    q = rng.integers(info.min, info.max + 1, (3, 4, 2)).astype(dtype)
    n = q.shape[axis]
    scale = rng.uniform(0.01, 2.0, n).astype("float32")
    zp = rng.integers(-5 if dtype == "int8" else 0, 20, n).astype(dtype)
    y = relay.qnn.op.dequantize(relay.var("q", shape=q.shape, dtype=dtype),
                                relay.const(scale), relay.const(zp.astype("int32")), axis=axis)
    expected = ort_run("DequantizeLinear", q, scale, zp, axis, "float32")
    np.testing.assert_allclose(run(y, {"q": q}, kind), expected, rtol=1e-6)


def test_dequantize_per_tensor_scalar_params():
    q = np.arange(-4, 4, dtype="int8").reshape(2, 4)
    y = relay.qnn.op.dequantize(relay.var("q", shape=(2, 4), dtype="int8"), 0.25, 2)
    np.testing.assert_allclose(run(y, {"q": q}, "graph"),
                               (q.astype("int32") - 2).astype("float32") * 0.25)


# ---- requantize vs NumPy -------------------------------------------------------------------
@pytest.mark.parametrize("kind", EXECUTORS)
@pytest.mark.parametrize("rounding", ["UPWARD", "TONEAREST", "None"])
@pytest.mark.parametrize("scales", [(0.25, 0.6), (0.5, 0.125), (0.3, 0.3), (1.0, 4.0)])
def test_requantize_per_tensor_matches_numpy(kind, rounding, scales):
    in_scale, out_scale = scales
    q = np.arange(-128, 128, dtype="int8").reshape(16, 16)
    y = relay.qnn.op.requantize(relay.var("q", shape=q.shape, dtype="int8"),
                                relay.const(in_scale), relay.const(3), relay.const(out_scale),
                                relay.const(-5), rounding=rounding, out_dtype="int8")
    expected = numpy_requantize(q, in_scale, 3, out_scale, -5, -1,
                                "UPWARD" if rounding == "None" else rounding, "int8")
    np.testing.assert_array_equal(run(y, {"q": q}, kind), expected)


@pytest.mark.parametrize("kind", EXECUTORS)
@pytest.mark.parametrize("rounding", ["UPWARD", "TONEAREST"])
def test_requantize_per_channel_int32_to_uint8_matches_numpy(kind, rounding):
    rng = np.random.default_rng(3)
    q = rng.integers(-3000, 3000, (2, 4, 3)).astype("int32")
    q[0, :, 0] = [-6, -2, 2, 6]  # exact ties with a 0.25 / 0.5-style ratio
    in_scale = np.array([0.5, 0.02, 0.0031, 1.5], "float32")
    y = relay.qnn.op.requantize(relay.var("q", shape=q.shape, dtype="int32"),
                                relay.const(in_scale), relay.const(0), relay.const(0.25),
                                relay.const(128), axis=1, rounding=rounding,
                                out_dtype="uint8")
    expected = numpy_requantize(q, in_scale, 0, 0.25, 128, 1, rounding, "uint8")
    np.testing.assert_array_equal(run(y, {"q": q}, kind), expected)


@pytest.mark.parametrize("compute_dtype", ["float32", "float64"])
def test_requantize_float_compute_matches_numpy(compute_dtype):
    q = np.arange(-128, 128, dtype="int8")
    for rounding in ("UPWARD", "TONEAREST"):
        y = relay.qnn.op.requantize(relay.var("q", shape=q.shape, dtype="int8"), 0.5, 0,
                                    0.25 * 4, 1, rounding=rounding,
                                    compute_dtype=compute_dtype)
        expected = numpy_requantize(q, 0.5, 0, 1.0, 1, -1, rounding, "int8")
        np.testing.assert_array_equal(run(y, {"q": q}, "graph"), expected)


def test_requantize_to_int32_does_not_clip():
    q = np.array([-2**31, -1, 0, 2**31 - 1], "int32")
    y = relay.qnn.op.requantize(relay.var("q", shape=(4,), dtype="int32"), 1.0, 0, 4.0, 0,
                                out_dtype="int32")
    expected = numpy_requantize(q, 1.0, 0, 4.0, 0, -1, "UPWARD", "int32")
    np.testing.assert_array_equal(run(y, {"q": q}, "graph"), expected)


@pytest.mark.parametrize("m", [0.0, 0.1, 0.5, 1.0, 3.7, 1e-6, 1 - 2**-33])
def test_fixed_point_multiplier_represents_the_ratio(m):
    fixed, shift = fixed_point_multiplier_shift(m)
    if m == 0:
        assert (fixed, shift) == (0, 0)
        return
    assert 2**30 <= fixed < 2**31
    assert abs(fixed * 2.0**(shift - 31) - m) <= m * 2**-31


# ---- type relations and errors --------------------------------------------------------------
def infer(expr):
    return relay.transform.InferType()(kiln.IRModule.from_expr(expr))["main"].body.checked_type


def test_types_of_the_three_ops():
    x = relay.var("x", shape=(2, 3))
    q = relay.qnn.op.quantize(x, relay.const([0.1, 0.2, 0.3]), relay.const([0, 1, 2]),
                              out_dtype="uint8")
    assert str(infer(q)) == str(relay.TensorType((2, 3), "uint8"))
    d = relay.qnn.op.dequantize(q, relay.const(0.1), relay.const(0))
    assert str(infer(d)) == str(relay.TensorType((2, 3), "float32"))
    r = relay.qnn.op.requantize(q, 0.1, 0, 0.2, 0, out_dtype="int16")
    assert str(infer(r)) == str(relay.TensorType((2, 3), "int16"))


def test_per_channel_length_mismatch_names_the_parameter():
    x = relay.var("x", shape=(2, 3))
    q = relay.qnn.op.quantize(x, relay.const([0.1, 0.2]), relay.const(0), axis=1)
    with pytest.raises(TVMError, match=r"output_scale has 2 values but data has 3 along axis 1"):
        infer(q)


def test_wrong_parameter_dtype_and_rank_are_rejected():
    x = relay.var("x", shape=(2, 3), dtype="int8")
    zp = relay.var("zp", shape=(), dtype="float32")
    with pytest.raises(TVMError, match="input_zero_point must be int32, got float32"):
        infer(relay.qnn.op.dequantize(x, relay.const(0.1), zp))
    scale = relay.var("s", shape=(1, 3), dtype="float32")
    with pytest.raises(TVMError, match="input_scale must be a scalar or 1-D"):
        infer(relay.qnn.op.dequantize(x, scale, relay.const(0)))


def test_bad_data_dtype_and_axis_are_rejected():
    with pytest.raises(TVMError, match=r"quantize: data must be one of \('float32',\), got 'int8'"):
        infer(relay.qnn.op.quantize(relay.var("x", shape=(2,), dtype="int8"), 0.1, 0))
    with pytest.raises(TVMError, match="qnn.dequantize: data must be one of"):
        infer(relay.qnn.op.dequantize(relay.var("x", shape=(2,)), 0.1, 0))
    with pytest.raises(TVMError, match="axis"):
        infer(relay.qnn.op.quantize(relay.var("x", shape=(2,)), 0.1, 0, axis=3))


def test_constructor_errors_are_clear():
    x = relay.var("x", shape=(2,))
    q = relay.var("q", shape=(2,), dtype="int8")
    with pytest.raises(TVMError, match=r"output_zero_point 300 is outside uint8's range"):
        relay.qnn.op.quantize(x, 0.1, 300, out_dtype="uint8")
    with pytest.raises(TVMError, match="out_dtype must be one of"):
        relay.qnn.op.quantize(x, 0.1, 0, out_dtype="float32")
    with pytest.raises(TVMError, match="rounding must be one of"):
        relay.qnn.op.requantize(q, 0.1, 0, 0.2, 0, rounding="DOWN")
    with pytest.raises(TVMError, match="output_scale must be nonzero"):
        relay.qnn.op.requantize(q, 0.1, 0, 0.0, 0)
    with pytest.raises(TVMError, match=r"output_zero_point -1 is outside uint8's range"):
        relay.qnn.op.requantize(q, 0.1, 0, 0.2, -1, out_dtype="uint8")


def test_requantize_with_non_constant_scale_cannot_canonicalize():
    q = relay.var("q", shape=(2,), dtype="int8")
    s = relay.var("s", shape=(), dtype="float32")
    mod = kiln.IRModule.from_expr(relay.Function([q, s],
                                                 relay.qnn.op.requantize(q, s, 0, 0.5, 0)))
    with pytest.raises(TVMError, match="input_scale must be a constant"):
        relay.qnn.transform.CanonicalizeOps()(mod)


def test_canonicalize_leaves_no_qnn_ops():
    x = relay.var("x", shape=(4,))
    q = relay.qnn.op.quantize(x, 0.5, 1)
    r = relay.qnn.op.requantize(q, 0.5, 1, 0.25, 0, out_dtype="uint8")
    mod = relay.qnn.transform.CanonicalizeOps()(kiln.IRModule.from_expr(
        relay.qnn.op.dequantize(r, 0.25, 0)))
    assert not relay.qnn.transform.has_qnn_ops(mod)
    assert "qnn." not in mod.astext()


# ---- qnn.add / subtract / mul vs NumPy ----------------------------------------------------------
def numpy_binary(name, a, b, sa, za, sb, zb, sc, zc, dtype):
    """The element-wise ops from their definition: inputs requantized (UPWARD) to the output
    parameters for add/subtract; the int32 product requantized from s_a * s_b for mul."""
    if name == "mul":
        prod = (a.astype("int64") - za) * (b.astype("int64") - zb)
        return numpy_requantize(prod, np.float32(sa) * np.float32(sb), 0, sc, zc, -1,
                                "UPWARD", dtype)
    ra = numpy_requantize(a, sa, za, sc, zc, -1, "UPWARD", "int32").astype("int64")
    rb = numpy_requantize(b, sb, zb, sc, zc, -1, "UPWARD", "int32").astype("int64")
    info = np.iinfo(dtype)
    value = ra + rb - zc if name == "add" else ra - rb + zc
    return np.clip(value, info.min, info.max).astype(dtype)


@pytest.mark.parametrize("kind", EXECUTORS)
@pytest.mark.parametrize("name", ["add", "subtract", "mul"])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_elementwise_ops_match_numpy(kind, name, dtype):
    rng = np.random.default_rng(4)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, (4, 6)).astype(dtype)
    b = rng.integers(info.min, info.max + 1, (6,)).astype(dtype)  # broadcast
    zps = (3, 10, 5) if dtype == "uint8" else (-3, 2, 0)
    params = (0.05, zps[0], 0.031, zps[1], 0.08, zps[2])
    op = getattr(relay.qnn.op, name)
    y = op(relay.var("a", shape=a.shape, dtype=dtype), relay.var("b", shape=b.shape,
                                                                 dtype=dtype), *params)
    expected = numpy_binary(name, a[:, :], np.broadcast_to(b, a.shape), *params, dtype)
    np.testing.assert_array_equal(run(y, {"a": a, "b": b}, kind), expected)


def test_add_with_output_params_equal_to_inputs_is_plain_integer_add():
    a = np.array([10, 200, 250], "uint8")
    b = np.array([20, 100, 10], "uint8")
    y = relay.qnn.op.add(relay.var("a", shape=(3,), dtype="uint8"),
                         relay.var("b", shape=(3,), dtype="uint8"), 0.5, 4, 0.5, 4, 0.5, 4)
    np.testing.assert_array_equal(run(y, {"a": a, "b": b}, "graph"),
                                  np.clip(a.astype(int) + b - 4, 0, 255))


def test_elementwise_dtype_mismatch_is_rejected():
    a = relay.var("a", shape=(3,), dtype="uint8")
    b = relay.var("b", shape=(3,), dtype="int8")
    with pytest.raises(TVMError, match="lhs and rhs must have one dtype, got uint8 and int8"):
        infer(relay.qnn.op.add(a, b, 0.5, 0, 0.5, 0, 0.5, 0))


@pytest.mark.parametrize("kind", EXECUTORS)
@pytest.mark.parametrize("name", ["add", "mul"])
def test_elementwise_per_channel_lhs_matches_numpy(kind, name):
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (2, 3, 4)).astype("int8")
    b = rng.integers(-128, 128, (2, 3, 4)).astype("int8")
    sa = np.array([0.02, 0.05, 0.11], "float32")
    za = np.array([1, -2, 0], "int32")
    y = getattr(relay.qnn.op, name)(
        relay.var("a", shape=a.shape, dtype="int8"), relay.var("b", shape=b.shape, dtype="int8"),
        relay.const(sa), relay.const(za), 0.04, 3, 0.09, -1, lhs_axis=1)
    if name == "mul":
        prod = (a.astype("int64") - za.reshape(1, 3, 1)) * (b.astype("int64") - 3)
        expected = numpy_requantize(prod, sa * np.float32(0.04), 0, 0.09, -1, 1, "UPWARD",
                                    "int8")
    else:
        ra = numpy_requantize(a, sa, za, 0.09, -1, 1, "UPWARD", "int32").astype("int64")
        rb = numpy_requantize(b, 0.04, 3, 0.09, -1, -1, "UPWARD", "int32").astype("int64")
        expected = np.clip(ra + rb + 1, -128, 127).astype("int8")
    np.testing.assert_array_equal(run(y, {"a": a, "b": b}, kind), expected)


def test_mul_per_channel_on_different_axes_is_rejected():
    a = relay.var("a", shape=(3, 3), dtype="int8")
    s = relay.const(np.array([0.1, 0.2, 0.3], "float32"))
    z = relay.const(np.zeros(3, "int32"))
    y = relay.qnn.op.mul(a, a, s, z, s, z, 0.5, 0, lhs_axis=0, rhs_axis=1)
    with pytest.raises(TVMError, match="lhs_axis == rhs_axis"):
        relay.qnn.transform.CanonicalizeOps()(kiln.IRModule.from_expr(y))


def test_requantize_config_sets_what_none_means():
    q = np.array([-6, -2, 2, 6], "int8")  # ties at 0.25
    y = relay.qnn.op.requantize(relay.var("q", shape=(4,), dtype="int8"), 0.25, 0, 1.0, 0)
    with relay.qnn.op.requantize_config(rounding="TONEAREST", compute_dtype="float32"):
        got = run(y, {"q": q}, "graph")
    np.testing.assert_array_equal(got, numpy_requantize(q, 0.25, 0, 1.0, 0, -1, "TONEAREST",
                                                        "int8"))
    np.testing.assert_array_equal(run(y, {"q": q}, "graph"),
                                  numpy_requantize(q, 0.25, 0, 1.0, 0, -1, "UPWARD", "int8"))
    with pytest.raises(TVMError, match="rounding must be UPWARD or TONEAREST"):
        relay.qnn.op.requantize_config(rounding="None")


def test_fold_constant_folds_qnn_ops_only_when_asked():
    x = np.array([0.3, -1.2, 40.0], "float32")
    mod = kiln.IRModule.from_expr(relay.qnn.op.quantize(relay.const(x), 0.1, 2))
    kept = relay.transform.FoldConstant()(mod)
    assert kept["main"].body.op.name == "qnn.quantize"
    folded = relay.transform.FoldConstant(fold_qnn=True)(mod)["main"].body
    np.testing.assert_array_equal(folded.data.numpy(),
                                  ort_run("QuantizeLinear", x, 0.1, 2, 0, "int8"))


def test_input_zero_point_outside_the_data_dtype_is_rejected():
    q = relay.var("q", shape=(2,), dtype="uint8")
    for expr in (relay.qnn.op.dequantize(q, 0.5, 300),
                 relay.qnn.op.requantize(q, 0.5, -1, 0.25, 0)):
        with pytest.raises(TVMError, match=r"input_zero_point -?\d+ is outside the input dtype "
                                           r"uint8's range \[0, 255\]"):
            relay.qnn.transform.CanonicalizeOps()(kiln.IRModule.from_expr(expr))
