"""TFLite image operators: RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR, TRANSPOSE_CONV.

Entry points: the converters registered into :data:`.tflite_ops.CONVERTERS`.

As TVM v0.16's frontend: resizes become ``image.resize2d`` on NHWC data (``align_corners``,
``half_pixel`` or ``asymmetric`` coordinates; nearest neighbour rounds as TFLite's
``GetNearestNeighbor``), a quantized bilinear resize goes dequantize -> resize -> quantize, a
quantized nearest one moves the integers. TRANSPOSE_CONV's OHWI filter becomes IOHW and the
padding comes from the requested output shape (TensorFlow's SAME on that shape); kiln computes
transposed convolutions in NCHW, so the data is transposed around the op.
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import infer_shape
from kiln.relay.frontend.tflite_ops import (
    PAD_SAME,
    PAD_VALID,
    add_bias,
    check_positive,
    dequantize,
    fused_activation,
    inputs_of,
    is_quantized,
    option,
    quantize,
    register,
    requantize_output,
    requantize_to,
    require_quant,
    same_padding,
)
from kiln.runtime.error import OpAttributeInvalid

__all__: list[str] = []


@register("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")
def convert_resize(conv, op):
    """RESIZE_*: inputs (NHWC images, constant int32 size ``[new_h, new_w]``)."""
    inputs_of(op, 2)
    data_i, out_i = op.inputs[0], op.outputs[0]
    data = conv.get_expr(data_i)
    if len(infer_shape(data)) != 4:
        raise OpAttributeInvalid(f"expects 4-D NHWC images, got shape {infer_shape(data)}")
    size = conv.const_value(op.inputs[1], "the size").reshape(-1)
    if size.size != 2 or np.any(size < 1):
        raise OpAttributeInvalid(f"size must be two positive integers, got {size.tolist()}")
    align_corners = bool(option(op, "AlignCorners", False))
    half_pixel = bool(option(op, "HalfPixelCenters", False))
    if align_corners and half_pixel:
        raise OpAttributeInvalid("align_corners and half_pixel_centers cannot both be set")
    bilinear = op.name == "RESIZE_BILINEAR"
    coordinates = "align_corners" if align_corners else \
        "half_pixel" if half_pixel else "asymmetric"
    # TFLite's nearest neighbour: floor((x + 0.5) * scale) with half pixels (the half-pixel
    # coordinate rounded half up), round(x * scale) with aligned corners, else floor
    rounding = "" if bilinear else \
        "round_prefer_ceil" if half_pixel else "round" if align_corners else "floor"
    quantized = is_quantized(conv, op)
    if quantized and bilinear:
        data = dequantize(conv, data, data_i)
    out = relay.image.resize2d(data, [int(s) for s in size], None, "NHWC",
                               "linear" if bilinear else "nearest_neighbor", coordinates,
                               rounding)
    if quantized:
        out = quantize(conv, out, out_i) if bilinear else requantize_to(conv, out, data_i,
                                                                           out_i)
    return out


def _transpose_padding(op, out_size, kernel, strides):
    """(top, left, bottom, right): TensorFlow's padding of the forward convolution whose input
    is the requested output."""
    padding = option(op, "Padding", PAD_SAME)
    if padding == PAD_VALID:
        return (0, 0, 0, 0)
    if padding != PAD_SAME:
        raise OpAttributeInvalid(f"padding {padding} is neither SAME (0) nor VALID (1)")
    top, bottom = same_padding(out_size[0], kernel[0], strides[0], 1)
    left, right = same_padding(out_size[1], kernel[1], strides[1], 1)
    return (top, left, bottom, right)


@register("TRANSPOSE_CONV")
def convert_transpose_conv(conv, op):
    """TRANSPOSE_CONV: inputs (output shape, OHWI filter, NHWC data[, bias])."""
    ins = inputs_of(op, 3, 4)
    shape_i, w_i, data_i = ins[:3]
    bias_i = ins[3] if len(ins) > 3 else -1
    out_i = op.outputs[0]
    data = conv.get_expr(data_i)
    in_shape = infer_shape(data)
    weight = conv.const_value(w_i, "the filter")
    out_shape = [int(d) for d in conv.const_value(shape_i, "the output shape").reshape(-1)]
    if len(in_shape) != 4 or weight.ndim != 4 or len(out_shape) != 4:
        raise OpAttributeInvalid(f"expects 4-D NHWC data, a 4-D filter and a 4-element output "
                                 f"shape, got {in_shape}, {weight.shape} and {out_shape}")
    channels, kh, kw, channels_in = weight.shape
    if channels_in != in_shape[3] or channels != out_shape[3] or out_shape[0] != in_shape[0]:
        raise OpAttributeInvalid(f"filter {weight.shape} does not map data {in_shape} to the "
                                 f"output shape {out_shape}")
    strides = check_positive((option(op, "StrideH", 1), option(op, "StrideW", 1)), "strides")
    padding = _transpose_padding(op, out_shape[1:3], (kh, kw), strides)
    output_padding = []
    for axis, (size, k, s) in enumerate(zip(in_shape[1:3], (kh, kw), strides)):
        full = (size - 1) * s + k - padding[axis] - padding[axis + 2]
        extra = out_shape[1 + axis] - full
        if not 0 <= extra < s:
            raise OpAttributeInvalid(f"output shape {out_shape} cannot come from data "
                                     f"{in_shape} with a {kh}x{kw} filter and strides "
                                     f"{strides}")
        output_padding.append(extra)
    w = conv.new_param(conv.tensor(w_i).name, weight.transpose(3, 0, 1, 2))   # OHWI -> IOHW
    attrs = dict(strides=strides, padding=padding, output_padding=output_padding,
                 channels=int(channels), kernel_size=(int(kh), int(kw)), data_layout="NCHW",
                 kernel_layout="IOHW")
    nchw = relay.transpose(data, (0, 3, 1, 2))
    quantized = is_quantized(conv, op)
    if quantized:
        qi, qw = require_quant(conv, data_i, "input"), require_quant(conv, w_i, "filter")
        if qw.per_channel and qw.axis != 0:
            raise OpAttributeInvalid(f"per-channel filter scales along axis {qw.axis}; TFLite "
                                     "quantizes filters along the output channels")
        out = relay.qnn.op.conv2d_transpose(nchw, w, qi.zero_point_expr(), qw.zero_point_expr(),
                                            qi.scale_expr(), qw.scale_expr(),
                                            out_dtype="int32", **attrs)
    else:
        out = relay.nn.conv2d_transpose(nchw, w, **attrs)
    out = add_bias(conv, relay.transpose(out, (0, 2, 3, 1)), bias_i, 3, quantized)
    if quantized:
        out = requantize_output(conv, out, data_i, w_i, out_i, axis=3)
    return fused_activation(conv, out, option(op, "FusedActivationFunction", 0), out_i)
