"""qnn.conv2d / dense / batch_matmul / concatenate: type relations, errors, and the
canonicalized integer graphs on the graph executor and the VM against NumPy int64 math."""

from __future__ import annotations

import numpy as np
import pytest
from qnn_reference import batch_matmul, conv2d_nchw, dense, numpy_requantize, run

import kiln
from kiln import relay
from kiln.runtime.error import TVMError

EXECUTORS = ("graph", "vm")


def _ints(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _conv_case(rng, dshape, wshape, dtypes, zps, **attrs):
    data = _ints(rng, dtypes[0], dshape)
    weight = _ints(rng, dtypes[1], wshape)
    zp_w = zps[1]
    kernel_scale = (np.full(len(zp_w), 0.1, "float32") if isinstance(zp_w, np.ndarray)
                    else 0.1)
    zp_w_expr = relay.const(zp_w.astype("int32")) if isinstance(zp_w, np.ndarray) else zp_w
    y = relay.qnn.op.conv2d(
        relay.var("d", shape=dshape, dtype=dtypes[0]), relay.const(weight),
        input_zero_point=zps[0], kernel_zero_point=zp_w_expr, input_scale=0.5,
        kernel_scale=relay.const(kernel_scale), kernel_size=None, channels=None, **attrs)
    return y, data, weight


CONV_CASES = {
    # name: (data shape, weight shape, dtypes, (zp_a, zp_w), attrs)
    "u8s8_both_zps_pad": ((1, 3, 7, 6), (4, 3, 3, 3), ("uint8", "int8"), (7, -3),
                          dict(padding=(1, 1))),
    "s8s8_stride2_asym_pad": ((2, 4, 9, 8), (5, 4, 3, 2), ("int8", "int8"), (-5, 2),
                              dict(strides=(2, 2), padding=(1, 0, 2, 1))),
    "u8u8_input_zp_only": ((1, 2, 5, 5), (3, 2, 3, 3), ("uint8", "uint8"), (128, 0),
                           dict(padding=1)),
    "s8s8_kernel_zp_only_1x1": ((1, 6, 4, 4), (8, 6, 1, 1), ("int8", "int8"), (0, 4), {}),
    "s8s8_no_zps": ((1, 3, 5, 5), (2, 3, 3, 3), ("int8", "int8"), (0, 0), dict(padding=1)),
    "dilated_fallback": ((1, 3, 9, 9), (4, 3, 3, 3), ("uint8", "int8"), (3, 5),
                         dict(dilation=(2, 2), padding=2)),
    "grouped_fallback": ((1, 4, 6, 6), (6, 2, 3, 3), ("int8", "int8"), (1, -1),
                         dict(groups=2, padding=1)),
    "depthwise_multiplier2": ((1, 3, 6, 6), (6, 1, 3, 3), ("uint8", "int8"), (9, 2),
                              dict(groups=3, padding=1, strides=(2, 2))),
    "int16_data": ((1, 2, 5, 5), (3, 2, 3, 3), ("int16", "int8"), (300, 1), dict(padding=1)),
}


@pytest.mark.parametrize("kind", EXECUTORS)
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv2d_nchw_matches_numpy(kind, case):
    dshape, wshape, dtypes, zps, attrs = CONV_CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    y, data, weight = _conv_case(rng, dshape, wshape, dtypes, zps, **attrs)
    ref_attrs = dict(attrs)
    pad = ref_attrs.pop("padding", 0)
    pad = (pad,) * 4 if isinstance(pad, int) else (pad * 2 if len(pad) == 2 else pad)
    expected = conv2d_nchw(data, weight, zps[0], zps[1], padding=pad, **ref_attrs)
    out = run(y, {"d": data}, kind)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("kind", EXECUTORS)
def test_conv2d_per_channel_kernel_zero_point(kind):
    rng = np.random.default_rng(4)
    zp_w = np.array([0, 3, -7, 12], "int64")
    y, data, weight = _conv_case(rng, (1, 3, 6, 5), (4, 3, 3, 3), ("uint8", "int8"),
                                 (11, zp_w), padding=(1, 1), strides=(1, 2))
    expected = conv2d_nchw(data, weight, 11, zp_w, strides=(1, 2), padding=(1, 1, 1, 1))
    np.testing.assert_array_equal(run(y, {"d": data}, kind), expected)


@pytest.mark.parametrize("kind", EXECUTORS)
@pytest.mark.parametrize("kernel_layout", ["HWIO", "OHWI"])
def test_conv2d_nhwc_layouts(kind, kernel_layout):
    rng = np.random.default_rng(5)
    data = _ints(rng, "int8", (1, 6, 5, 3))
    weight_oihw = _ints(rng, "int8", (4, 3, 3, 3))
    perm = {"HWIO": (2, 3, 1, 0), "OHWI": (0, 2, 3, 1)}[kernel_layout]
    y = relay.qnn.op.conv2d(
        relay.var("d", shape=data.shape, dtype="int8"),
        relay.const(weight_oihw.transpose(perm).copy()), -4, 6, 0.5, 0.25, (3, 3), 4,
        padding=(1, 1), data_layout="NHWC", kernel_layout=kernel_layout)
    expected = conv2d_nchw(data.transpose(0, 3, 1, 2), weight_oihw, -4, 6,
                           padding=(1, 1, 1, 1)).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(run(y, {"d": data}, kind), expected)


@pytest.mark.parametrize("kind", EXECUTORS)
def test_conv2d_nhwc_depthwise_hwoi(kind):
    """TFLite's depthwise layout: NHWC data, HWOI kernel (O = channels, I = multiplier 1)."""
    rng = np.random.default_rng(6)
    data = _ints(rng, "uint8", (1, 5, 5, 4))
    weight_oihw = _ints(rng, "uint8", (4, 1, 3, 3))
    y = relay.qnn.op.conv2d(
        relay.var("d", shape=data.shape, dtype="uint8"),
        relay.const(weight_oihw.transpose(2, 3, 0, 1).copy()), 100, 120, 0.5, 0.25, (3, 3), 4,
        padding=(1, 1), groups=4, data_layout="NHWC", kernel_layout="HWOI")
    expected = conv2d_nchw(data.transpose(0, 3, 1, 2), weight_oihw, 100, 120,
                           padding=(1, 1, 1, 1), groups=4).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(run(y, {"d": data}, kind), expected)


def test_conv2d_requantized_to_uint8_matches_numpy():
    """The frontends' pattern: int32 conv, then requantize from in_scale * kernel_scale."""
    rng = np.random.default_rng(7)
    y, data, weight = _conv_case(rng, (1, 3, 6, 6), (4, 3, 3, 3), ("uint8", "int8"), (5, 0),
                                 padding=(1, 1))
    out = relay.qnn.op.requantize(y, relay.const(0.05), relay.const(0), relay.const(0.8),
                                  relay.const(128), out_dtype="uint8")
    acc = conv2d_nchw(data, weight, 5, 0, padding=(1, 1, 1, 1))
    expected = numpy_requantize(acc, np.float32(0.5) * np.float32(0.1), 0, 0.8, 128, -1,
                                "UPWARD", "uint8")
    np.testing.assert_array_equal(run(out, {"d": data}, "graph"), expected)


@pytest.mark.parametrize("kind", EXECUTORS)
@pytest.mark.parametrize("dtypes,zps", [(("uint8", "int8"), (3, -2)),
                                        (("int8", "int8"), (0, 0)),
                                        (("uint8", "uint8"), (128, 0)),
                                        (("int16", "int8"), (-1000, 5))])
def test_dense_matches_numpy(kind, dtypes, zps):
    rng = np.random.default_rng(8)
    data, weight = _ints(rng, dtypes[0], (3, 17)), _ints(rng, dtypes[1], (5, 17))
    y = relay.qnn.op.dense(relay.var("x", shape=data.shape, dtype=dtypes[0]),
                           relay.const(weight), zps[0], zps[1], 0.5, 0.25, 5)
    np.testing.assert_array_equal(run(y, {"x": data}, kind), dense(data, weight, *zps))


@pytest.mark.parametrize("kind", EXECUTORS)
def test_dense_per_unit_kernel_params_and_weight_input(kind):
    rng = np.random.default_rng(9)
    data, weight = _ints(rng, "uint8", (2, 8)), _ints(rng, "int8", (4, 8))
    zp_w = np.array([1, -2, 0, 9])
    y = relay.qnn.op.dense(relay.var("x", shape=data.shape, dtype="uint8"),
                           relay.var("w", shape=weight.shape, dtype="int8"), 77,
                           relay.const(zp_w.astype("int32")), 0.5,
                           relay.const(np.full(4, 0.2, "float32")), 4)
    np.testing.assert_array_equal(run(y, {"x": data, "w": weight}, kind),
                                  dense(data, weight, 77, zp_w))


@pytest.mark.parametrize("kind", EXECUTORS)
@pytest.mark.parametrize("zps", [(0, 0), (4, -3), (0, 6)])
def test_batch_matmul_matches_numpy(kind, zps):
    rng = np.random.default_rng(10)
    x, y = _ints(rng, "int8", (2, 3, 7)), _ints(rng, "int8", (2, 4, 7))
    out = relay.qnn.op.batch_matmul(relay.var("x", shape=x.shape, dtype="int8"),
                                    relay.var("y", shape=y.shape, dtype="int8"), *zps, 0.5, 0.5)
    np.testing.assert_array_equal(run(out, {"x": x, "y": y}, kind), batch_matmul(x, y, *zps))


@pytest.mark.parametrize("kind", EXECUTORS + ("debug",))
def test_concatenate_requantizes_inputs_to_output_params(kind):
    rng = np.random.default_rng(11)
    a, b, c = (_ints(rng, "uint8", (2, n)) for n in (3, 4, 2))
    out = relay.qnn.op.concatenate(
        [relay.var(n, shape=v.shape, dtype="uint8") for n, v in zip("abc", (a, b, c))],
        input_scales=[0.5, 0.25, 0.3], input_zero_points=[10, 0, 3], output_scale=0.3,
        output_zero_point=3, axis=1)
    expected = np.concatenate([
        numpy_requantize(a, 0.5, 10, 0.3, 3, -1, "UPWARD", "uint8"),
        numpy_requantize(b, 0.25, 0, 0.3, 3, -1, "UPWARD", "uint8"), c], axis=1)
    np.testing.assert_array_equal(run(out, {"a": a, "b": b, "c": c}, kind), expected)


def test_qnn_conv_and_dense_run_on_the_interpreter():
    rng = np.random.default_rng(12)
    y, data, weight = _conv_case(rng, (1, 2, 4, 4), (3, 2, 3, 3), ("uint8", "int8"), (3, 1),
                                 padding=(1, 1))
    np.testing.assert_array_equal(run(y, {"d": data}, "debug"),
                                  conv2d_nchw(data, weight, 3, 1, padding=(1, 1, 1, 1)))


# ---- types and errors ---------------------------------------------------------------------
def infer(expr):
    return relay.transform.InferType()(kiln.IRModule.from_expr(expr))["main"].body.checked_type


def test_types_of_the_new_ops():
    d = relay.var("d", shape=(1, 3, 8, 8), dtype="uint8")
    w = relay.var("w", shape=(16, 3, 3, 3), dtype="int8")
    conv = relay.qnn.op.conv2d(d, w, 0, 0, 1.0, 1.0, (3, 3), 16, padding=(1, 1))
    assert str(infer(conv)) == str(relay.TensorType((1, 16, 8, 8), "int32"))
    x = relay.var("x", shape=(4, 10), dtype="int8")
    dn = relay.qnn.op.dense(x, relay.var("k", shape=(6, 10), dtype="int8"), 0, 0, 1.0, 1.0, 6,
                            out_dtype="int64")
    assert str(infer(dn)) == str(relay.TensorType((4, 6), "int64"))
    bm = relay.qnn.op.batch_matmul(relay.var("a", shape=(2, 3, 5), dtype="int8"),
                                   relay.var("b", shape=(2, 4, 5), dtype="int8"), 0, 0, 1.0, 1.0)
    assert str(infer(bm)) == str(relay.TensorType((2, 3, 4), "int32"))


@pytest.mark.parametrize("build,message", [
    (lambda: relay.qnn.op.conv2d(relay.var("d", shape=(1, 3, 4, 4), dtype="float32"),
                                 relay.var("w", shape=(2, 3, 3, 3), dtype="int8"), 0, 0, 1.0,
                                 1.0, (3, 3), 2), "data must be one of"),
    (lambda: relay.qnn.op.conv2d(relay.var("d", shape=(1, 3, 4, 4), dtype="int8"),
                                 relay.var("w", shape=(2, 3, 3, 3), dtype="int8"), 0,
                                 relay.const(np.zeros(3, "int32")), 1.0, 1.0, (3, 3), 2),
     "kernel_zero_point has 3 values but data has 2"),
    (lambda: relay.qnn.op.conv2d(relay.var("d", shape=(1, 3, 4, 4), dtype="int8"),
                                 relay.var("w", shape=(2, 3, 3, 3), dtype="int8"),
                                 relay.const(np.zeros(2, "int32")), 0, 1.0, 1.0, (3, 3), 2),
     "input_zero_point must be a scalar"),
    (lambda: relay.qnn.op.conv2d(relay.var("d", shape=(1, 3, 4, 4), dtype="int8"),
                                 relay.var("w", shape=(2, 4, 3, 3), dtype="int8"), 0, 0, 1.0,
                                 1.0, (3, 3), 2), "input channels"),
    (lambda: relay.qnn.op.dense(relay.var("x", shape=(2, 5), dtype="int8"),
                                relay.var("w", shape=(3, 5), dtype="int8"), 0, 0,
                                relay.const(1, "int32"), 1.0, 3), "input_scale must be float32"),
    (lambda: relay.qnn.op.dense(relay.var("x", shape=(2, 5), dtype="int8"),
                                relay.var("w", shape=(3, 5), dtype="int16"), 0, 0, 1.0, 1.0,
                                3), "weight must be one of"),
    (lambda: relay.qnn.op.dense(relay.var("x", shape=(2, 5), dtype="int8"),
                                relay.var("w", shape=(3, 5), dtype="int8"), 0,
                                relay.const(np.zeros(4, "int32")), 1.0, 1.0, 3),
     "kernel_zero_point has 4 values"),
    (lambda: relay.qnn.op.batch_matmul(relay.var("a", shape=(2, 3, 5), dtype="int8"),
                                       relay.var("b", shape=(2, 4, 5), dtype="int8"),
                                       relay.const(np.zeros(2, "int32")), 0, 1.0, 1.0),
     "x_zero_point must be a scalar"),
    (lambda: relay.qnn.op.concatenate([relay.var("a", shape=(2,), dtype="int8")], [0.5, 0.5],
                                      [0, 0], 0.5, 0, 0), "input_scales has 2 values for 1"),
    (lambda: relay.qnn.op.concatenate(
        [relay.var("a", shape=(2,), dtype="int8")], [0.5], [relay.var("z", shape=())], 0.5, 0, 0),
     "input_zero_points[0] must be int32"),
])
def test_ill_typed_calls_raise(build, message):
    with pytest.raises(TVMError, match=None) as info:
        infer(build())
    assert message in str(info.value)


@pytest.mark.parametrize("build,message", [
    (lambda: relay.qnn.op.conv2d(relay.var("d", shape=(1, 3, 4, 4), dtype="int8"),
                                 relay.var("w", shape=(2, 3, 3, 3), dtype="int8"), 0, 0, 1.0,
                                 1.0, (3, 3), 2, out_dtype="int8"), "out_dtype must be one of"),
    (lambda: relay.qnn.op.dense(relay.var("x", shape=(2, 5), dtype="int8"),
                                relay.var("w", shape=(3, 5), dtype="int8"), 0, 0, float("nan"),
                                1.0, 3), "input_scale must be finite"),
    (lambda: relay.qnn.op.dense(relay.var("x", shape=(2, 5), dtype="int8"),
                                relay.var("w", shape=(3, 5), dtype="int8"), 0, 0, 1.0, -1.0,
                                3), "kernel_scale must be finite and not negative"),
    (lambda: relay.qnn.op.batch_matmul(relay.var("a", shape=(2, 3, 5), dtype="int8"),
                                       relay.var("b", shape=(2, 4, 5), dtype="int8"), 0, 0, 1.0,
                                       1.0, out_dtype="int64"), "out_dtype must be int32"),
    (lambda: relay.qnn.op.concatenate([relay.var("a", shape=(2,), dtype="int8")], [0.5], [0],
                                      0.5, 0, axis="x"), "axis must be an integer"),
])
def test_bad_constructor_arguments_raise(build, message):
    with pytest.raises(TVMError) as info:
        build()
    assert message in str(info.value)


def test_zero_point_outside_the_data_dtype_is_refused_when_lowering():
    y = relay.qnn.op.conv2d(relay.var("d", shape=(1, 1, 3, 3), dtype="int8"),
                            relay.var("w", shape=(1, 1, 1, 1), dtype="int8"), 200, 0, 1.0, 1.0,
                            (1, 1), 1)
    with pytest.raises(TVMError, match="input_zero_point 200 is outside the input dtype int8"):
        run(y, {"d": np.zeros((1, 1, 3, 3), "int8"), "w": np.ones((1, 1, 1, 1), "int8")},
            "graph")
