"""from_tflite on int8/uint8 models vs LiteRT's reference kernels on the same bytes.

Integer outputs must be equal or within one quantization step. Where a step can differ: kiln
requantizes with TVM's single rounding (UPWARD: fixed-point multiply, round half up) while
TFLite's reference kernels round twice (SaturatingRoundingDoublingHighMul, then
RoundingDivideByPOT), and dequantize -> float op -> quantize ops (softmax, logistic, tanh)
compute in float where LiteRT uses fixed-point or table approximations.
"""

from __future__ import annotations

import numpy as np
import pytest
from tflite_helpers import check_quantized

from kiln.relay.testing.tflite import TFLiteModelBuilder, quantize_array

RNG = np.random.default_rng(0)
QIN = {"scale": 0.05, "zero_point": -3}
QOUT = {"scale": 0.08, "zero_point": 5}


def qrand(*shape, dtype="int8"):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def single_op(op, in_shapes, out_shape, options=None, consts=(), qin=QIN, qout=QOUT,
              dtype="int8", **fields):
    b = TFLiteModelBuilder()
    ins = [b.add_input(f"in{i}", s, dtype, **qin) for i, s in enumerate(in_shapes)]
    ins += [b.add_const(f"c{i}", c) for i, c in enumerate(consts)]
    out = b.add_tensor("out", out_shape, dtype, **qout)
    b.add_operator(op, ins, [out], options, **fields)
    b.add_output(out)
    return b.finish()


def test_quantize_dequantize_roundtrip():
    b = TFLiteModelBuilder()
    x = b.add_input("x", (3, 7))
    q = b.add_tensor("q", (3, 7), "int8", **QIN)
    b.add_operator("QUANTIZE", [x], [q])
    r = b.add_tensor("r", (3, 7), "int8", **QOUT)
    b.add_operator("QUANTIZE", [q], [r])    # int8 -> int8 with new parameters: requantize
    y = b.add_tensor("y", (3, 7))
    b.add_operator("DEQUANTIZE", [r], [y])
    b.add_output(r)
    b.add_output(y)
    from tflite_helpers import run_kiln, run_litert

    value = [RNG.uniform(-8, 8, (3, 7)).astype("float32")]
    (kr, ky), (er, ey) = run_kiln(b.finish(), value), run_litert(b.finish(), value)
    assert np.abs(kr.astype(int) - er).max() <= 1
    same = kr == er   # where the integers agree, both dequantize to the same floats
    np.testing.assert_allclose(ky[same], ey[same], rtol=1e-6)
    np.testing.assert_allclose(ky, (kr.astype("float32") - 5) * np.float32(0.08), rtol=1e-6)


@pytest.mark.parametrize("op,options", [("ADD", "AddOptions"), ("SUB", "SubOptions"),
                                        ("MUL", "MulOptions")])
@pytest.mark.parametrize("act", [0, 1, 3])
def test_binary(op, options, act):
    b = TFLiteModelBuilder()
    x = b.add_input("x", (2, 3, 4), "int8", **QIN)
    y = b.add_input("y", (2, 3, 4), "int8", scale=0.03, zero_point=7)
    out = b.add_tensor("out", (2, 3, 4), "int8", **QOUT)
    b.add_operator(op, [x, y], [out], options, FusedActivationFunction=act)
    b.add_output(out)
    check_quantized(b.finish(), [qrand(2, 3, 4), qrand(2, 3, 4)])


def test_add_broadcast_constant():
    b = TFLiteModelBuilder()
    x = b.add_input("x", (1, 4, 4, 3), "int8", **QIN)
    c = b.add_const("c", qrand(1, 1, 1, 3), "int8", scale=0.02, zero_point=1)
    out = b.add_tensor("out", (1, 4, 4, 3), "int8", **QOUT)
    b.add_operator("ADD", [x, c], [out], "AddOptions", FusedActivationFunction=0)
    b.add_output(out)
    check_quantized(b.finish(), [qrand(1, 4, 4, 3)])


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
@pytest.mark.parametrize("padding", [0, 1])
def test_pool2d_exact(op, padding):
    """TFLite requires equal in/out parameters here; the integer average rounds half away."""
    out_h = 4 if padding == 0 else 3
    model = single_op(op, [(1, 7, 7, 3)], (1, out_h, out_h, 3), "Pool2DOptions", qout=QIN,
                      Padding=padding, StrideH=2, StrideW=2, FilterHeight=2, FilterWidth=2,
                      FusedActivationFunction=1)
    assert check_quantized(model, [qrand(1, 7, 7, 3)], max_step=0) == [0]


@pytest.mark.parametrize("op,qout", [("SOFTMAX", {"scale": 1 / 256, "zero_point": -128}),
                                     ("LOGISTIC", {"scale": 1 / 256, "zero_point": -128}),
                                     ("TANH", {"scale": 1 / 128, "zero_point": 0})])
def test_transcendental(op, qout):
    options = {"Beta": 1.0} if op == "SOFTMAX" else {}
    model = single_op(op, [(2, 10)], (2, 10), "SoftmaxOptions" if options else None,
                      qout=qout, **options)
    check_quantized(model, [qrand(2, 10)])


@pytest.mark.parametrize("op", ["RELU", "RELU6", "RELU_N1_TO_1"])
def test_relu_family_requantizes_then_clips(op):
    check_quantized(single_op(op, [(4, 16)], (4, 16)), [qrand(4, 16)])


def test_relu_uint8():
    q = {"scale": 0.05, "zero_point": 128}
    model = single_op("RELU", [(4, 16)], (4, 16), qin=q, qout=q, dtype="uint8")
    assert check_quantized(model, [qrand(4, 16, dtype="uint8")], max_step=0) == [0]


def test_pad_uses_the_zero_point():
    pads = np.array([[0, 0], [1, 2], [2, 1], [0, 0]], "int32")
    model = single_op("PAD", [(1, 3, 3, 2)], (1, 6, 6, 2), consts=[pads], qout=QIN)
    assert check_quantized(model, [qrand(1, 3, 3, 2)], max_step=0) == [0]


@pytest.mark.parametrize("keep", [True, False])
def test_mean(keep):
    model = single_op("MEAN", [(1, 5, 5, 8)], (1, 1, 1, 8) if keep else (1, 8),
                      "ReducerOptions", consts=[np.array([1, 2], "int32")], KeepDims=keep)
    check_quantized(model, [qrand(1, 5, 5, 8)])


@pytest.mark.parametrize("op", ["MAXIMUM", "MINIMUM"])
def test_maximum_minimum(op):
    model = single_op(op, [(3, 5), (3, 5)], (3, 5), qout=QIN)
    assert check_quantized(model, [qrand(3, 5), qrand(3, 5)], max_step=0) == [0]


def test_reshape_squeeze_transpose_keep_integers():
    b = TFLiteModelBuilder()
    x = b.add_input("x", (1, 2, 3, 4), "int8", **QIN)
    r = b.add_tensor("r", (1, 6, 4), "int8", **QIN)
    b.add_operator("RESHAPE", [x, b.add_const("s", np.array([1, 6, 4], "int32"))], [r])
    t = b.add_tensor("t", (4, 6, 1), "int8", **QIN)
    b.add_operator("TRANSPOSE", [r, b.add_const("p", np.array([2, 1, 0], "int32"))], [t])
    s = b.add_tensor("s2", (4, 6), "int8", **QIN)
    b.add_operator("SQUEEZE", [t], [s], "SqueezeOptions", SqueezeDims=[2])
    b.add_output(s)
    assert check_quantized(b.finish(), [qrand(1, 2, 3, 4)], max_step=0) == [0]


def test_quantize_array_matches_litert_quantize():
    x = RNG.uniform(-3, 3, (50,)).astype("float32")
    b = TFLiteModelBuilder()
    i = b.add_input("x", (50,))
    o = b.add_tensor("y", (50,), "int8", **QIN)
    b.add_operator("QUANTIZE", [i], [o])
    b.add_output(o)
    from tflite_helpers import run_litert

    np.testing.assert_array_equal(run_litert(b.finish(), [x])[0], quantize_array(x, 0.05, -3))


def conv_model(op, c_in, c_out, kernel, stride, padding, act, per_channel, multiplier=1,
               h=9, dtype="int8"):
    """A quantized CONV_2D / DEPTHWISE_CONV_2D with int32 bias, as TFLite's converter writes
    them (symmetric int8 weights, per-channel along the output channels when asked)."""
    b = TFLiteModelBuilder()
    x = b.add_input("x", (1, h, h, c_in), dtype, **QIN)
    n_out = c_in * multiplier if op == "DEPTHWISE_CONV_2D" else c_out
    w_scale = RNG.uniform(0.005, 0.02, n_out if per_channel else 1).astype("float32")
    if op == "DEPTHWISE_CONV_2D":
        shape, qdim = (1, kernel, kernel, n_out), 3
    else:
        shape, qdim = (n_out, kernel, kernel, c_in), 0
    w = b.add_const("w", qrand(*shape), "int8", scale=w_scale, zero_point=[0] * w_scale.size,
                    quantized_dimension=qdim)
    bias_scale = (QIN["scale"] * w_scale).astype("float32")
    bias = b.add_const("b", RNG.integers(-2000, 2000, n_out), "int32", scale=bias_scale,
                       zero_point=[0] * bias_scale.size)
    out_h = (h + stride - 1) // stride if padding == 0 else (h - kernel) // stride + 1
    y = b.add_tensor("y", (1, out_h, out_h, n_out), dtype, scale=0.5, zero_point=-10)
    fields = dict(Padding=padding, StrideH=stride, StrideW=stride, FusedActivationFunction=act,
                  DilationHFactor=1, DilationWFactor=1)
    if op == "DEPTHWISE_CONV_2D":
        b.add_operator(op, [x, w, bias], [y], "DepthwiseConv2DOptions",
                       DepthMultiplier=multiplier, **fields)
    else:
        b.add_operator(op, [x, w, bias], [y], "Conv2DOptions", **fields)
    b.add_output(y)
    return b.finish()


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("kernel,stride,padding,act", [(3, 1, 0, 0), (3, 2, 1, 1), (1, 1, 1, 3),
                                                        (5, 2, 0, 2)])
def test_conv2d(per_channel, kernel, stride, padding, act):
    model = conv_model("CONV_2D", 3, 6, kernel, stride, padding, act, per_channel)
    check_quantized(model, [qrand(1, 9, 9, 3)])


@pytest.mark.parametrize("per_channel,multiplier,stride,padding", [
    (True, 1, 1, 0), (True, 2, 2, 1), (False, 1, 2, 0)])
def test_depthwise_conv2d(per_channel, multiplier, stride, padding):
    model = conv_model("DEPTHWISE_CONV_2D", 4, 0, 3, stride, padding, 3, per_channel,
                       multiplier=multiplier)
    check_quantized(model, [qrand(1, 9, 9, 4)])


@pytest.mark.parametrize("bias", [True, False])
def test_fully_connected(bias):
    b = TFLiteModelBuilder()
    x = b.add_input("x", (2, 16), "int8", **QIN)
    w = b.add_const("w", qrand(5, 16), "int8", scale=0.01, zero_point=0)
    inputs = [x, w]
    if bias:
        inputs.append(b.add_const("b", RNG.integers(-500, 500, 5), "int32",
                                  scale=QIN["scale"] * 0.01, zero_point=0))
    y = b.add_tensor("y", (2, 5), "int8", scale=0.2, zero_point=3)
    b.add_operator("FULLY_CONNECTED", inputs, [y], "FullyConnectedOptions",
                   FusedActivationFunction=1)
    b.add_output(y)
    check_quantized(b.finish(), [qrand(2, 16)])


@pytest.mark.parametrize("dtype,qy,qz", [
    ("int8", QIN, QIN),   # LiteRT's int8 kernel needs equal parameters
    ("uint8", {"scale": 0.1, "zero_point": 130}, {"scale": 0.08, "zero_point": 120})])
def test_concatenation(dtype, qy, qz):
    b = TFLiteModelBuilder()
    qx = QIN if dtype == "int8" else {"scale": 0.05, "zero_point": 128}
    x = b.add_input("x", (1, 4, 4, 2), dtype, **qx)
    y = b.add_input("y", (1, 4, 4, 3), dtype, **qy)
    z = b.add_tensor("z", (1, 4, 4, 5), dtype, **qz)
    b.add_operator("CONCATENATION", [x, y], [z], "ConcatenationOptions", Axis=3)
    b.add_output(z)
    check_quantized(b.finish(), [qrand(1, 4, 4, 2, dtype=dtype), qrand(1, 4, 4, 3, dtype=dtype)])


def test_uint8_conv_with_weight_zero_point():
    """TFLite 1.x style: uint8 activations and weights with non-zero zero points."""
    b = TFLiteModelBuilder()
    qx = {"scale": 0.03, "zero_point": 120}
    x = b.add_input("x", (1, 6, 6, 2), "uint8", **qx)
    w = b.add_const("w", qrand(3, 3, 3, 2, dtype="uint8"), "uint8", scale=0.01,
                    zero_point=130)
    bias = b.add_const("b", RNG.integers(-300, 300, 3), "int32", scale=0.0003, zero_point=0)
    y = b.add_tensor("y", (1, 6, 6, 3), "uint8", scale=0.15, zero_point=100)
    b.add_operator("CONV_2D", [x, w, bias], [y], "Conv2DOptions", Padding=0, StrideH=1,
                   StrideW=1, FusedActivationFunction=1)
    b.add_output(y)
    check_quantized(b.finish(), [qrand(1, 6, 6, 2, dtype="uint8")])


@pytest.mark.parametrize("op,options", [("LEAKY_RELU", "LeakyReluOptions"),
                                        ("HARD_SWISH", None)])
def test_dequantize_float_quantize_ops(op, options):
    fields = {"Alpha": 0.2} if options else {}
    check_quantized(single_op(op, [(3, 11)], (3, 11), options, **fields), [qrand(3, 11)])


def test_strided_slice_and_slice_keep_integers():
    consts = [np.array(v, "int32") for v in ([0, 1, 0], [2, 3, 4], [1, 1, 2])]
    model = single_op("STRIDED_SLICE", [(2, 3, 4)], (2, 2, 2), "StridedSliceOptions",
                      consts=consts, qout=QIN)
    assert check_quantized(model, [qrand(2, 3, 4)], max_step=0) == [0]
    model = single_op("SLICE", [(3, 5)], (2, 3), consts=[np.array([1, 2], "int32"),
                                                        np.array([2, -1], "int32")], qout=QIN)
    assert check_quantized(model, [qrand(3, 5)], max_step=0) == [0]


def test_quantized_sub_with_a_constant_on_the_vm():
    b = TFLiteModelBuilder()
    x = b.add_input("x", (2, 6), "int8", **QIN)
    c = b.add_const("c", qrand(1, 6), "int8", scale=0.04, zero_point=-2)
    y = b.add_tensor("y", (2, 6), "int8", **QOUT)
    b.add_operator("SUB", [c, x], [y], "SubOptions", FusedActivationFunction=0)
    b.add_output(y)
    check_quantized(b.finish(), [qrand(2, 6)], executor="vm")


def test_per_channel_fused_activation_is_refused():
    from kiln import relay
    from kiln.runtime.error import OpAttributeUnImplemented

    b = TFLiteModelBuilder()
    x = b.add_input("x", (1, 4, 4, 2), "int8", **QIN)
    w = b.add_const("w", qrand(2, 1, 1, 2), "int8", scale=[0.01, 0.02], zero_point=[0, 0])
    y = b.add_tensor("y", (1, 4, 4, 2), "int8", scale=[0.1, 0.2], zero_point=[0, 0],
                     quantized_dimension=3)
    b.add_operator("CONV_2D", [x, w, -1], [y], "Conv2DOptions", Padding=1, StrideH=1,
                   StrideW=1, FusedActivationFunction=1)
    b.add_output(y)
    with pytest.raises(OpAttributeUnImplemented, match="per-channel quantized output"):
        relay.frontend.from_tflite(b.finish())


def test_global_average_pool_is_exact():
    """A window over the whole map (the KWS head): integer sums, rounded as TFLite."""
    model = single_op("AVERAGE_POOL_2D", [(1, 5, 3, 8)], (1, 1, 1, 8), "Pool2DOptions",
                      qout=QIN, Padding=1, StrideH=5, StrideW=3, FilterHeight=5, FilterWidth=3)
    assert check_quantized(model, [qrand(1, 5, 3, 8)], max_step=0) == [0]


def test_quantized_split_keeps_integers_and_comparisons_are_refused():
    from kiln import relay
    from kiln.runtime.error import OpNotImplemented

    b = TFLiteModelBuilder()
    axis = b.add_const("axis", np.array(1, "int32"))
    x = b.add_input("x", (2, 6), "int8", **QIN)
    outs = [b.add_tensor(f"o{i}", (2, 3), "int8", **QIN) for i in range(2)]
    b.add_operator("SPLIT", [axis, x], outs, "SplitOptions", NumSplits=2)
    for o in outs:
        b.add_output(o)
    assert check_quantized(b.finish(), [qrand(2, 6)], max_step=0) == [0, 0]
    model = single_op("LESS", [(2, 3), (2, 3)], (2, 3), qout={})
    with pytest.raises(OpNotImplemented, match="quantized LESS"):
        relay.frontend.from_tflite(model)
