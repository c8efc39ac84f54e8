"""Converters of TFLite builtin operators to Relay, float32 and quantized (QNN).

Entry points: :data:`CONVERTERS` (builtin name -> ``convert(converter, op)``) and
:func:`fused_activation`.

Quantized operators follow TVM v0.16's TFLite frontend: convolutions and fully connected layers
become ``qnn.conv2d``/``qnn.dense`` with int32 accumulation, an int32 ``bias_add`` and a
``qnn.requantize`` to the output's parameters (per-channel when the weights are); ADD/SUB/MUL map
to ``qnn.add/subtract/mul``; transcendental ops go dequantize -> float op -> quantize; a fused
activation on a quantized output is a ``clip`` in the quantized domain. Data stays NHWC; kernels
are rewritten to HWIO at conversion time (depthwise as grouped HWIO with one input channel per
group).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import infer_shape
from kiln.runtime.error import OpAttributeInvalid, OpAttributeUnImplemented

__all__ = ["CONVERTERS", "fused_activation"]

CONVERTERS: dict[str, Any] = {}

# ActivationFunctionType and Padding enums (schema.fbs)
ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6, ACT_TANH, ACT_SIGN_BIT = range(6)
PAD_SAME, PAD_VALID = 0, 1


def register(*names: str):
    def wrap(fn):
        for name in names:
            CONVERTERS[name] = fn
        return fn
    return wrap


def option(op, getter: str, default: Any) -> Any:
    """An option field of ``op`` (its default when the operator has no options table)."""
    return default if op.options is None else getattr(op.options, getter)()


def inputs_of(op, count: int, at_most: int | None = None) -> list[int]:
    """``op``'s input indices, checking there are ``count`` (to ``at_most``) of them."""
    n, hi = len(op.inputs), count if at_most is None else at_most
    if not count <= n <= hi:
        want = count if at_most is None else f"{count} to {at_most}"
        raise OpAttributeInvalid(f"expects {want} inputs, got {n}")
    return op.inputs


def round_half_away(x: float) -> int:
    """TFLite's TfLiteRound: halves go away from zero."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


# -- quantization helpers ---------------------------------------------------------------------
def quant_of(conv, index: int):
    return conv.tensor(index).quant


def is_quantized(conv, op) -> bool:
    """Whether ``op`` works on quantized tensors (its first input or output carries params)."""
    first = [i for i in op.inputs if i >= 0][:1] + op.outputs[:1]
    return any(conv.tensor(i).quant is not None and conv.tensor(i).dtype != "float32"
               for i in first)


def require_quant(conv, index: int, what: str):
    q = conv.tensor(index).quant
    if q is None:
        raise OpAttributeInvalid(f"{what} tensor {conv.tensor(index).name!r} of a quantized "
                                 "operator has no quantization parameters")
    return q


def same_quant(a, b) -> bool:
    return a is not None and b is not None and a.zero_point == b.zero_point and \
        a.scale.shape == b.scale.shape and bool(np.all(a.scale == b.scale))


def dequantize(conv, expr, index: int):
    q = require_quant(conv, index, "input")
    return relay.qnn.op.dequantize(expr, q.scale_expr(), q.zero_point_expr(),
                                   axis=q.axis if q.per_channel else -1)


def quantize(conv, expr, index: int):
    t = conv.tensor(index)
    q = require_quant(conv, index, "output")
    return relay.qnn.op.quantize(expr, q.scale_expr(), q.zero_point_expr(),
                                 axis=q.axis if q.per_channel else -1, out_dtype=t.dtype)


def requantize_to(conv, expr, in_index: int, out_index: int):
    """``expr`` (quantized as tensor ``in_index``) in tensor ``out_index``'s parameters."""
    qi, qo = require_quant(conv, in_index, "input"), require_quant(conv, out_index, "output")
    out_dtype = conv.tensor(out_index).dtype
    if same_quant(qi, qo) and conv.tensor(in_index).dtype == out_dtype:
        return expr
    return relay.qnn.op.requantize(expr, qi.scale_expr(), qi.zero_point_expr(),
                                   qo.scale_expr(), qo.zero_point_expr(), out_dtype=out_dtype)


def fused_activation(conv, expr, act: int, out_index: int):
    """Apply a fused activation; on a quantized output it is a clip in the quantized domain."""
    if act == ACT_NONE:
        return expr
    t = conv.tensor(out_index)
    if t.quant is None or t.dtype.startswith("float"):
        table = {ACT_RELU: lambda e: relay.nn.relu(e),
                 ACT_RELU_N1_TO_1: lambda e: relay.clip(e, -1.0, 1.0),
                 ACT_RELU6: lambda e: relay.clip(e, 0.0, 6.0),
                 ACT_TANH: relay.tanh}
        if act not in table:
            raise OpAttributeUnImplemented(f"fused activation {act} (SIGN_BIT) is not supported")
        return table[act](expr)
    if t.quant.per_channel:
        raise OpAttributeUnImplemented("a fused activation on a per-channel quantized output")
    lo, hi = relay.qnn.op.dtype_range(t.dtype)
    scale, zp = float(t.quant.scale[0]), t.quant.zero_point

    def q(x: float) -> int:
        return round_half_away(x / scale) + zp

    bounds = {ACT_RELU: (q(0.0), hi), ACT_RELU6: (q(0.0), q(6.0)),
              ACT_RELU_N1_TO_1: (q(-1.0), q(1.0))}
    if act not in bounds:
        raise OpAttributeUnImplemented(f"fused activation {act} on a quantized output (TVM "
                                       "supports NONE, RELU, RELU6 and RELU_N1_TO_1 there)")
    a_min, a_max = bounds[act]
    return relay.clip(expr, max(lo, a_min), min(hi, a_max))


# -- convolution, fully connected, pooling ----------------------------------------------------
def same_padding(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's SAME padding (before, after) along one spatial axis."""
    effective = (kernel - 1) * dilation + 1
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


def spatial_padding(op, in_shape, kernel, strides, dilation):
    padding = option(op, "Padding", PAD_VALID)
    if padding == PAD_VALID:
        return (0, 0, 0, 0)
    if padding != PAD_SAME:
        raise OpAttributeInvalid(f"padding {padding} is neither SAME (0) nor VALID (1)")
    top, bottom = same_padding(in_shape[1], kernel[0], strides[0], dilation[0])
    left, right = same_padding(in_shape[2], kernel[1], strides[1], dilation[1])
    return (top, left, bottom, right)


def check_positive(values, what: str):
    if any(int(v) < 1 for v in values):
        raise OpAttributeInvalid(f"{what} must be positive, got {tuple(values)}")
    return tuple(int(v) for v in values)


def add_bias(conv, expr, bias_index: int, axis: int, quantized: bool):
    if bias_index < 0:
        return expr
    bias_t = conv.tensor(bias_index)
    if quantized and bias_t.dtype not in ("int32", "int64"):
        raise OpAttributeInvalid(f"bias of a quantized operator must be int32/int64, got "
                                 f"{bias_t.dtype}")
    return relay.nn.bias_add(expr, conv.get_expr(bias_index), axis=axis)


def accumulate_dtype(conv, in_index: int) -> str:
    return "int64" if conv.tensor(in_index).dtype == "int16" else "int32"


def requantize_output(conv, expr, in_index, w_index, out_index, axis):
    """From the accumulator's scale (input scale x weight scale, zero point 0) to the output's."""
    qi = require_quant(conv, in_index, "input")
    qw = require_quant(conv, w_index, "weight")
    qo = require_quant(conv, out_index, "output")
    acc_scale = (qi.scale[0] * qw.scale).astype("float32")
    scale = relay.const(acc_scale if qw.per_channel else acc_scale.reshape(()), "float32")
    return relay.qnn.op.requantize(expr, scale, relay.const(np.int32(0)), qo.scale_expr(),
                                   qo.zero_point_expr(), axis=axis,
                                   out_dtype=conv.tensor(out_index).dtype)


@register("CONV_2D", "DEPTHWISE_CONV_2D")
def convert_conv2d(conv, op):
    """CONV_2D (OHWI filter) and DEPTHWISE_CONV_2D (1HW(C*M) filter) on NHWC data."""
    ins = inputs_of(op, 2, 3)
    data_i, w_i, bias_i = ins[0], ins[1], ins[2] if len(ins) > 2 else -1
    data = conv.get_expr(data_i)
    in_shape = infer_shape(data)
    weight = conv.const_value(w_i, "the filter")
    if len(in_shape) != 4 or weight.ndim != 4:
        raise OpAttributeInvalid(f"expects 4-D NHWC data and a 4-D filter, got {in_shape} and "
                                 f"{weight.shape}")
    strides = check_positive((option(op, "StrideH", 1), option(op, "StrideW", 1)), "strides")
    dilation = check_positive((option(op, "DilationHFactor", 1),
                               option(op, "DilationWFactor", 1)), "dilations")
    channels_in = int(in_shape[3])
    if op.name == "DEPTHWISE_CONV_2D":
        if weight.shape[0] != 1 or weight.shape[3] % channels_in:
            raise OpAttributeInvalid(f"depthwise filter {weight.shape} does not fit "
                                     f"{channels_in} input channels")
        kernel = weight.shape[1:3]
        channels, groups = weight.shape[3], channels_in
        hwio = weight.reshape(kernel[0], kernel[1], 1, channels)
    else:
        if weight.shape[3] == 0 or channels_in % weight.shape[3]:
            raise OpAttributeInvalid(f"filter {weight.shape} does not fit {channels_in} input "
                                     "channels")
        kernel, channels = weight.shape[1:3], weight.shape[0]
        groups = channels_in // weight.shape[3]
        hwio = weight.transpose(1, 2, 3, 0)
    padding = spatial_padding(op, in_shape, kernel, strides, dilation)
    w = conv.new_param(conv.tensor(w_i).name, hwio)
    attrs = dict(kernel_size=tuple(int(k) for k in kernel), channels=int(channels),
                 strides=strides, padding=padding, dilation=dilation, groups=int(groups),
                 data_layout="NHWC", kernel_layout="HWIO")
    quantized = is_quantized(conv, op)
    if quantized:
        qi, qw = require_quant(conv, data_i, "input"), require_quant(conv, w_i, "filter")
        if qw.per_channel and qw.axis != (0 if op.name == "CONV_2D" else 3):
            raise OpAttributeInvalid(f"per-channel filter scales along axis {qw.axis}; TFLite "
                                     "quantizes filters along the output channels")
        out = relay.qnn.op.conv2d(data, w, qi.zero_point_expr(), qw.zero_point_expr(),
                                  qi.scale_expr(), qw.scale_expr(),
                                  out_dtype=accumulate_dtype(conv, data_i), **attrs)
        out = add_bias(conv, out, bias_i, 3, True)
        out = requantize_output(conv, out, data_i, w_i, op.outputs[0], axis=3)
    else:
        out = add_bias(conv, relay.nn.conv2d(data, w, **attrs), bias_i, 3, False)
    return fused_activation(conv, out, option(op, "FusedActivationFunction", 0), op.outputs[0])


@register("FULLY_CONNECTED")
def convert_fully_connected(conv, op):
    """FULLY_CONNECTED: ``x @ W.T + b`` with W of shape (units, in)."""
    ins = inputs_of(op, 2, 3)
    data_i, w_i, bias_i = ins[0], ins[1], ins[2] if len(ins) > 2 else -1
    if option(op, "WeightsFormat", 0) != 0:
        raise OpAttributeUnImplemented("shuffled FULLY_CONNECTED weights are not supported")
    data, weight = conv.get_expr(data_i), conv.get_expr(w_i)
    in_shape, w_shape = infer_shape(data), infer_shape(weight)
    if len(w_shape) != 2:
        raise OpAttributeInvalid(f"weights must be 2-D (units, in), got {w_shape}")
    units, depth = int(w_shape[0]), int(w_shape[1])
    if int(np.prod(in_shape)) % max(depth, 1):
        raise OpAttributeInvalid(f"input of shape {in_shape} does not split into rows of "
                                 f"{depth}")
    flat = relay.reshape(data, (-1, depth))
    if is_quantized(conv, op):
        qi, qw = require_quant(conv, data_i, "input"), require_quant(conv, w_i, "weights")
        out = relay.qnn.op.dense(flat, weight, qi.zero_point_expr(), qw.zero_point_expr(),
                                 qi.scale_expr(), qw.scale_expr(), units=units,
                                 out_dtype=accumulate_dtype(conv, data_i))
        out = add_bias(conv, out, bias_i, 1, True)
        out = requantize_output(conv, out, data_i, w_i, op.outputs[0], axis=1)
    else:
        out = add_bias(conv, relay.nn.dense(flat, weight, units=units), bias_i, 1, False)
    if option(op, "KeepNumDims", False):
        out = relay.reshape(out, tuple(in_shape[:-1]) + (units,))
    return fused_activation(conv, out, option(op, "FusedActivationFunction", 0), op.outputs[0])


def quantized_average(data, dtype: str, channels: int, attrs: dict):
    """TFLite's integer average: (sum +- count/2) / count, rounded half away from zero."""
    if any(attrs["padding"]):
        # the count varies at the padded edges: average in float, then round the same way
        avg = relay.nn.avg_pool2d(relay.cast(data, "float32"), count_include_pad=False,
                                  **attrs)
        rounded = relay.multiply(relay.sign(avg), relay.floor(relay.add(
            relay.abs(avg), relay.const(0.5, "float32"))))
        return relay.cast(rounded, dtype)
    # one count everywhere: the window sums come from an int8 depthwise convolution with a
    # kernel of ones (int32 accumulation computed in blocks; a cast + sum would materialize an
    # int32 copy of the input, 4x its RAM), then integer rounding
    pool = attrs["pool_size"]
    ones = relay.const(np.ones((pool[0], pool[1], 1, channels), dtype))
    total = relay.nn.conv2d(data, ones, strides=attrs["strides"], groups=channels,
                            channels=channels, kernel_size=pool, data_layout="NHWC",
                            kernel_layout="HWIO", out_dtype="int32")
    count = pool[0] * pool[1]
    half = relay.const(np.int32(count // 2))
    nudged = relay.where(relay.greater_equal(total, relay.const(np.int32(0))),
                         relay.add(total, half), relay.subtract(total, half))
    return relay.cast(relay.trunc_divide(nudged, relay.const(np.int32(count))), dtype)


@register("AVERAGE_POOL_2D", "MAX_POOL_2D")
def convert_pool2d(conv, op):
    """2-D pooling on NHWC data; SAME padding counts only real elements in averages."""
    inputs_of(op, 1)
    data_i, out_i = op.inputs[0], op.outputs[0]
    data = conv.get_expr(data_i)
    in_shape = infer_shape(data)
    if len(in_shape) != 4:
        raise OpAttributeInvalid(f"expects 4-D NHWC data, got {in_shape}")
    pool = check_positive((option(op, "FilterHeight", 1), option(op, "FilterWidth", 1)),
                          "filter size")
    strides = check_positive((option(op, "StrideH", 1), option(op, "StrideW", 1)), "strides")
    padding = spatial_padding(op, in_shape, pool, strides, (1, 1))
    attrs = dict(pool_size=pool, strides=strides, padding=padding, layout="NHWC")
    quantized = is_quantized(conv, op)
    if op.name == "MAX_POOL_2D":
        out = relay.nn.max_pool2d(data, **attrs)
    elif quantized:
        out = quantized_average(data, conv.tensor(data_i).dtype, in_shape[3], attrs)
    else:
        out = relay.nn.avg_pool2d(data, count_include_pad=False, **attrs)
    if quantized:
        out = requantize_to(conv, out, data_i, out_i)
    return fused_activation(conv, out, option(op, "FusedActivationFunction", 0), out_i)
