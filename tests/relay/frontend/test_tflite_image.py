"""from_tflite: RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR, TRANSPOSE_CONV and GATHER_ND, float32
(within 1e-5) and int8 (equal, or within one step where TFLite's fixed-point rounding differs),
each against LiteRT's reference kernels on the same bytes."""

from __future__ import annotations

import numpy as np
import pytest
from tflite_helpers import check_float, check_quantized, run_litert

from kiln import relay
from kiln.relay.testing.tflite import TFLiteModelBuilder
from kiln.runtime.error import TVMError

RNG = np.random.default_rng(5)
Q = {"scale": 0.05, "zero_point": -3}


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def qrand(*shape):
    return RNG.integers(-128, 128, shape).astype("int8")


def resize_model(op, in_shape, size, dtype, align_corners, half_pixel):
    b = TFLiteModelBuilder()
    quant = Q if dtype == "int8" else {}
    x = b.add_input("x", in_shape, dtype, **quant)
    s = b.add_const("size", np.array(size, "int32"))
    out = b.add_tensor("out", (in_shape[0], *size, in_shape[3]), dtype, **quant)
    options = "ResizeBilinearOptions" if op == "RESIZE_BILINEAR" else \
        "ResizeNearestNeighborOptions"
    b.add_operator(op, [x, s], [out], options, AlignCorners=align_corners,
                   HalfPixelCenters=half_pixel)
    b.add_output(out)
    return b.finish()


MODES = [(False, False), (True, False), (False, True)]


@pytest.mark.parametrize("op", ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"])
@pytest.mark.parametrize("align_corners,half_pixel", MODES)
@pytest.mark.parametrize("size", [(7, 9), (3, 2)])   # up (x 0.5 steps: ties) and down
def test_resize_float(op, align_corners, half_pixel, size):
    model = resize_model(op, (1, 4, 5, 3), size, "float32", align_corners, half_pixel)
    check_float(model, [rand(1, 4, 5, 3)])


@pytest.mark.parametrize("op", ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"])
@pytest.mark.parametrize("align_corners,half_pixel", MODES)
def test_resize_int8(op, align_corners, half_pixel):
    model = resize_model(op, (1, 4, 5, 3), (7, 9), "int8", align_corners, half_pixel)
    steps = check_quantized(model, [qrand(1, 4, 5, 3)])
    if op == "RESIZE_NEAREST_NEIGHBOR":
        assert steps == [0]   # data movement: exact


def test_resize_refuses_both_corner_modes():
    model = resize_model("RESIZE_BILINEAR", (1, 4, 5, 3), (7, 9), "float32", True, True)
    with pytest.raises(TVMError, match="align_corners and half_pixel_centers"):
        relay.frontend.from_tflite(model)


def transpose_conv_model(in_shape, out_shape, kernel, stride, padding, dtype, bias=True,
                         per_channel=False, act=0):
    b = TFLiteModelBuilder()
    channels, cin = out_shape[3], in_shape[3]
    if dtype == "int8":
        x = b.add_input("x", in_shape, "int8", **Q)
        w_scale = RNG.uniform(0.01, 0.03, channels).astype("float32") if per_channel else 0.02
        w = b.add_const("w", qrand(channels, *kernel, cin), scale=w_scale,
                        zero_point=[0] * channels if per_channel else 0)
        acc_scale = (np.float32(Q["scale"]) * np.asarray(w_scale, "float32")).astype("float32")
        bias_i = b.add_const("b", RNG.integers(-500, 500, channels).astype("int32"),
                             scale=acc_scale, zero_point=[0] * channels if per_channel else 0)
        out = b.add_tensor("out", out_shape, "int8", scale=0.4, zero_point=2)
    else:
        x = b.add_input("x", in_shape)
        w = b.add_const("w", rand(channels, *kernel, cin))
        bias_i = b.add_const("b", rand(channels))
        out = b.add_tensor("out", out_shape)
    shape = b.add_const("shape", np.array(out_shape, "int32"))
    inputs = [shape, w, x] + ([bias_i] if bias else [])
    b.add_operator("TRANSPOSE_CONV", inputs, [out], "TransposeConvOptions", Padding=padding,
                   StrideH=stride, StrideW=stride, FusedActivationFunction=act)
    b.add_output(out)
    return b.finish()


TRANSPOSE_CASES = [   # in_shape, out_shape, kernel, stride, padding (0 SAME, 1 VALID)
    ((1, 4, 4, 3), (1, 8, 8, 5), (3, 3), 2, 0),
    ((1, 4, 5, 3), (1, 7, 9, 5), (3, 3), 2, 0),    # odd output: uneven SAME padding
    ((1, 3, 3, 2), (1, 7, 7, 4), (3, 3), 2, 1),
    ((2, 5, 5, 4), (2, 5, 5, 6), (3, 2), 1, 0)]


@pytest.mark.parametrize("in_shape,out_shape,kernel,stride,padding", TRANSPOSE_CASES)
def test_transpose_conv_float(in_shape, out_shape, kernel, stride, padding):
    model = transpose_conv_model(in_shape, out_shape, kernel, stride, padding, "float32")
    check_float(model, [rand(*in_shape)], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("in_shape,out_shape,kernel,stride,padding", TRANSPOSE_CASES[:3])
@pytest.mark.parametrize("per_channel", [False, True])
def test_transpose_conv_int8(in_shape, out_shape, kernel, stride, padding, per_channel):
    model = transpose_conv_model(in_shape, out_shape, kernel, stride, padding, "int8",
                                 per_channel=per_channel)
    check_quantized(model, [qrand(*in_shape)])


def test_transpose_conv_without_bias_and_relu():
    model = transpose_conv_model((1, 4, 4, 3), (1, 8, 8, 5), (3, 3), 2, 0, "float32",
                                 bias=False, act=1)
    check_float(model, [rand(1, 4, 4, 3)], atol=1e-4)


def test_transpose_conv_refuses_an_unreachable_output_shape():
    model = transpose_conv_model((1, 4, 4, 3), (1, 12, 12, 5), (3, 3), 2, 1, "float32")
    with pytest.raises(TVMError, match="cannot come from data"):
        relay.frontend.from_tflite(model)


def gather_nd_model(params_shape, indices, dtype):
    b = TFLiteModelBuilder()
    quant = Q if dtype == "int8" else {}
    x = b.add_input("x", params_shape, dtype, **quant)
    i = b.add_const("i", indices)
    depth = indices.shape[-1]
    out = b.add_tensor("out", indices.shape[:-1] + params_shape[depth:], dtype, **quant)
    b.add_operator("GATHER_ND", [x, i], [out], "GatherNdOptions")
    b.add_output(out)
    return b.finish()


@pytest.mark.parametrize("dtype", ["float32", "int8", "int32"])
@pytest.mark.parametrize("indices", [
    np.array([[1, 2], [0, 0], [2, 3]], "int32"),            # full index: scalars
    np.array([[[2], [0]], [[1], [1]]], "int64"),            # a leading axis: rows
    np.array([[0, 3, 1]], "int32")])
def test_gather_nd(dtype, indices):
    shape = (3, 4, 2)
    x = rand(*shape) if dtype == "float32" else qrand(*shape).astype(dtype)
    model = gather_nd_model(shape, indices, dtype)
    if dtype == "float32":
        check_float(model, [x])
    else:
        assert check_quantized(model, [x], max_step=0) == [0]
        np.testing.assert_array_equal(run_litert(model, [x])[0],
                                      x[tuple(np.moveaxis(indices, -1, 0))])


def test_gather_nd_refuses_out_of_range_indices():
    model = gather_nd_model((3, 4), np.array([[1, 4]], "int32"), "float32")
    with pytest.raises(TVMError, match="out of range"):
        relay.frontend.from_tflite(model)


def test_uint8_resize_and_transpose_conv():
    """TFLite's legacy uint8 quantization (zero point 128) through both converters."""
    q8 = {"scale": 0.05, "zero_point": 128}
    b = TFLiteModelBuilder()
    x = b.add_input("x", (1, 3, 3, 2), "uint8", **q8)
    up = b.add_tensor("up", (1, 6, 6, 2), "uint8", **q8)
    b.add_operator("RESIZE_BILINEAR", [x, b.add_const("size", np.array([6, 6], "int32"))],
                   [up], "ResizeBilinearOptions", AlignCorners=False, HalfPixelCenters=True)
    w = b.add_const("w", RNG.integers(0, 256, (3, 3, 3, 2)).astype("uint8"), scale=0.02,
                    zero_point=120)
    out = b.add_tensor("out", (1, 12, 12, 3), "uint8", scale=0.5, zero_point=100)
    b.add_operator("TRANSPOSE_CONV", [b.add_const("shape", np.array([1, 12, 12, 3], "int32")),
                                      w, up], [out], "TransposeConvOptions", Padding=0,
                   StrideH=2, StrideW=2)
    b.add_output(out)
    check_quantized(b.finish(), [RNG.integers(0, 256, (1, 3, 3, 2)).astype("uint8")])
