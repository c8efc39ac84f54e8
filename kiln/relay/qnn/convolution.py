"""``qnn.conv2d`` and its lowering to integer Relay (TVM's ``convolution.cc``).

Entry points: :func:`conv2d`; its lowering joins
:data:`~kiln.relay.qnn.canonicalize.QNN_LOWERINGS`.

With A the data padded by its zero point and W the weight, the int32 result is

    sum W*A - zp_w * sum A - zp_a * sum W + zp_a * zp_w * C * KH * KW

(sums over each output's window), built as four terms so the constant ones fold:
T1 = ``nn.conv2d`` on the raw integers, T2 = the window sums of A (``avg_pool2d`` of the
channel sum times KH*KW, exact), T3 = the weight sums per output channel, T4 a constant.
Terms whose zero point is a constant 0 are dropped. Depthwise convs sum per channel (and
repeat by the channel multiplier); grouped convs, and dilated ones with a nonzero kernel zero
point, subtract the zero points first and convolve in the output dtype (TVM's fallback).
The output has scale ``input_scale * kernel_scale`` and zero point 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay import op as _op
from kiln.relay.expr import Call, const
from kiln.relay.op import nn as _nn
from kiln.relay.op.op import OUT_ELEMWISE_FUSABLE, call, define_op
from kiln.relay.op.op_attrs import Conv2DAttrs
from kiln.relay.qnn.canonicalize import QNN_LOWERINGS, check_zero_point_range
from kiln.relay.qnn.common import (
    channel_vector,
    is_vector,
    is_zero,
    kernel_op_rel,
    make_scale,
    make_zero_point,
    out_channels,
)
from kiln.relay.transform.pass_util import type_of
from kiln.runtime.error import TVMError

__all__ = ["conv2d", "lower_conv2d"]

CONV_INPUT_DTYPES = ("int8", "uint8", "int16")
CONV_OUT_DTYPES = ("int16", "int32", "int64")
DATA_LAYOUTS = ("NCHW", "NHWC")
KERNEL_LAYOUTS = ("OIHW", "HWIO", "HWOI", "OHWI")


def _conv2d_rel(types, attrs, op_name):
    return kernel_op_rel(types, attrs, op_name, "nn.conv2d",
                         (CONV_INPUT_DTYPES, CONV_INPUT_DTYPES, CONV_OUT_DTYPES),
                         out_channels(attrs))


define_op("qnn.conv2d", _conv2d_rel, OUT_ELEMWISE_FUSABLE, 6, Conv2DAttrs,
          "quantized 2-D convolution accumulating in out_dtype", 11)


def _pair(value: Any) -> tuple:
    return (int(value),) * 2 if isinstance(value, int) else tuple(int(v) for v in value)


def _pad4(padding: Any) -> tuple:
    pad = _pair(padding) if isinstance(padding, int) else tuple(int(p) for p in padding)
    if len(pad) == 1:
        return pad * 4
    if len(pad) == 2:
        return pad + pad
    if len(pad) == 4:
        return pad
    raise TVMError(f"qnn.conv2d: padding must have 1, 2 or 4 values, got {padding!r}")


def conv2d(data: Any, kernel: Any, input_zero_point: Any, kernel_zero_point: Any,
           input_scale: Any, kernel_scale: Any, kernel_size: Any, channels: Any,
           strides: Any = (1, 1), padding: Any = (0, 0), dilation: Any = (1, 1),
           groups: int = 1, data_layout: str = "NCHW", kernel_layout: str = "OIHW",
           out_layout: str = "", out_dtype: str = "int32") -> Any:
    """Quantized 2-D convolution: the integer ``sum (data - zp_a) * (kernel - zp_w)``,
    accumulated in ``out_dtype`` (scale ``input_scale * kernel_scale``, zero point 0).
    ``kernel_scale`` and ``kernel_zero_point`` may be per-output-channel vectors."""
    if out_dtype not in CONV_OUT_DTYPES:
        raise TVMError(f"qnn.conv2d: out_dtype must be one of {CONV_OUT_DTYPES}, "
                       f"got {out_dtype!r}")
    args = [data, kernel,
            make_zero_point(input_zero_point, "qnn.conv2d: input_zero_point"),
            make_zero_point(kernel_zero_point, "qnn.conv2d: kernel_zero_point"),
            make_scale(input_scale, "qnn.conv2d: input_scale"),
            make_scale(kernel_scale, "qnn.conv2d: kernel_scale")]
    return call("qnn.conv2d", args, Conv2DAttrs(
        strides=_pair(strides), padding=_pad4(padding), dilation=_pair(dilation),
        groups=int(groups), channels=None if channels is None else int(channels),
        kernel_size=None if kernel_size is None else _pair(kernel_size),
        data_layout=data_layout, kernel_layout=kernel_layout, out_layout=out_layout,
        out_dtype=out_dtype))


# ---- lowering -------------------------------------------------------------------------------
def static_shape(expr: Any, what: str, op_name: str) -> list[int]:
    """The static shape of typed ``expr`` (canonicalization needs concrete extents)."""
    ty = type_of(expr)
    if ty is None or not hasattr(ty, "shape"):
        raise TVMError(f"{op_name} canonicalization needs the type of {what}; run InferType")
    try:
        return [int(d) for d in ty.shape]
    except (TypeError, ValueError):
        raise TVMError(f"{op_name}: {what} must have a static shape to canonicalize, got "
                       f"{ty.shape}") from None


def _padded(data: Any, zp: Any, dtype: str, layout: str, pad: tuple) -> Any:
    """``data`` padded on H and W with the zero point ``zp`` (pad is top, left, bottom, right)."""
    if not any(pad):
        return data
    width = [[0, 0] for _ in layout]
    width[layout.index("H")] = [pad[0], pad[2]]
    width[layout.index("W")] = [pad[1], pad[3]]
    return _nn.pad(data, width, _op.cast(zp, dtype))


def _window_sums(a: Any, kernel: tuple, strides: tuple, layout: str,
                       dtype: str) -> Any:
    """The sum of ``a`` (already padded, of ``dtype``) over each output's KH x KW window: the
    average pool of ``a * KH * KW``, exact because every window is full."""
    if kernel == (1, 1) and strides == (1, 1):
        return a
    scaled = _op.multiply(a, const(np.asarray(kernel[0] * kernel[1], dtype)))
    return _nn.avg_pool2d(scaled, pool_size=kernel, strides=strides, padding=(0, 0),
                          layout=layout, count_include_pad=False)


def _kernel_param(expr: Any, typed: Any, layout: str, wshape: list[int], depthwise: bool) -> Any:
    """A per-output-channel parameter laid out to broadcast against the kernel."""
    if not is_vector(typed):
        return channel_vector(expr, typed, len(layout), 0)
    shape = [1] * len(layout)
    shape[layout.index("O")] = wshape[layout.index("O")]
    if depthwise:
        shape[layout.index("I")] = wshape[layout.index("I")]
    return _op.reshape(expr, shape)


def _fallback(call_: Call, node: Call, out_dtype: str, depthwise: bool) -> Any:
    """conv2d(int(data) - zp_a, int(kernel) - zp_w): exact for every group/dilation."""
    data, weight, zp_a, zp_w = call_.args[:4]
    attrs = call_.attrs
    kl = attrs.kernel_layout
    wshape = static_shape(node.args[1], "the kernel", "qnn.conv2d")
    if depthwise and kl.index("I") < kl.index("O") and wshape[kl.index("I")] > 1 \
            and is_vector(node.args[3]):
        raise TVMError(f"qnn.conv2d: a per-channel kernel_zero_point with kernel layout {kl} "
                       "and a channel multiplier > 1 is not supported")
    a = _op.subtract(_op.cast(data, out_dtype), _op.cast(zp_a, out_dtype))
    w = _op.subtract(_op.cast(weight, out_dtype), _kernel_param(
        _op.cast(zp_w, out_dtype), node.args[3], kl, wshape, depthwise))
    return _nn.conv2d(a, w, strides=attrs.strides, padding=attrs.padding,
                      dilation=attrs.dilation, groups=attrs.groups, channels=attrs.channels,
                      kernel_size=attrs.kernel_size, data_layout=attrs.data_layout,
                      kernel_layout=kl, out_layout=attrs.out_layout, out_dtype=out_dtype)


def _weight_sums(weight: Any, layout: str, wshape: list[int], depthwise: bool,
                 out_dtype: str) -> Any:
    """sum W over (I, KH, KW) per output channel, as a vector in output-channel order."""
    w = _op.cast(weight, out_dtype)
    axes = [layout.index("H"), layout.index("W")]
    if not depthwise:
        return _op.sum(w, axis=axes + [layout.index("I")])
    rest = _op.sum(w, axis=axes)  # (O, I) or (I, O): output channel o * I + i when O leads
    if layout.index("I") < layout.index("O"):
        rest = _op.transpose(rest, [1, 0])
    return _op.reshape(rest, [-1])


def lower_conv2d(call_: Call, node: Call) -> Any:
    """``qnn.conv2d`` as ``nn.conv2d`` on the integers plus the zero-point terms."""
    data, weight, zp_a, zp_w = call_.args[:4]
    attrs = call_.attrs
    dl, kl = str(attrs.data_layout), str(attrs.kernel_layout)
    ol = str(attrs.out_layout) or dl
    if dl not in DATA_LAYOUTS or kl not in KERNEL_LAYOUTS or ol != dl:
        raise TVMError(f"qnn.conv2d: canonicalization supports data layouts {DATA_LAYOUTS} "
                       f"(out_layout the same) and kernel layouts {KERNEL_LAYOUTS}, got "
                       f"{dl}/{kl}/{ol}")
    check_zero_point_range(zp_a, node.args[0], "qnn.conv2d", "input_zero_point")
    check_zero_point_range(zp_w, node.args[1], "qnn.conv2d", "kernel_zero_point")
    out_dtype = str(attrs.out_dtype)
    in_dtype = str(type_of(node.args[0]).dtype)
    dshape = static_shape(node.args[0], "the data", "qnn.conv2d")
    wshape = static_shape(node.args[1], "the kernel", "qnn.conv2d")
    oshape = static_shape(node, "the output", "qnn.conv2d")
    in_c, groups = dshape[dl.index("C")], int(attrs.groups)
    out_c = oshape[ol.index("C")]
    kernel = (wshape[kl.index("H")], wshape[kl.index("W")])
    strides, dilation = _pair(attrs.strides), _pair(attrs.dilation)
    pad = _pad4(attrs.padding)
    depthwise = groups > 1 and groups == in_c
    zero_a, zero_w = is_zero(zp_a), is_zero(zp_w)
    if (groups > 1 and not depthwise) or (dilation != (1, 1) and not zero_w):
        return _fallback(call_, node, out_dtype, depthwise)

    padded = _padded(data, zp_a, in_dtype, dl, pad)
    if zero_a:
        term1 = _nn.conv2d(data, weight, strides=strides, padding=pad, dilation=dilation,
                           groups=groups, channels=attrs.channels,
                           kernel_size=attrs.kernel_size, data_layout=dl, kernel_layout=kl,
                           out_dtype=out_dtype)
    else:
        term1 = _nn.conv2d(padded, weight, strides=strides, padding=(0, 0, 0, 0),
                           dilation=dilation, groups=groups, channels=attrs.channels,
                           kernel_size=attrs.kernel_size, data_layout=dl, kernel_layout=kl,
                           out_dtype=out_dtype)
    c_axis = ol.index("C")
    result = term1
    if not zero_w:
        a = _op.cast(padded, out_dtype)
        if not depthwise:
            a = _op.sum(a, axis=[dl.index("C")], keepdims=True)
        sums = _window_sums(a, kernel, strides, dl, out_dtype)
        if depthwise and out_c != in_c:
            sums = _op.repeat(sums, out_c // in_c, dl.index("C"))
        zp_w_out = channel_vector(_op.cast(zp_w, out_dtype), node.args[3], 4, c_axis)
        result = _op.subtract(result, _op.multiply(sums, zp_w_out))
    if not zero_a:
        wsum = _weight_sums(weight, kl, wshape, depthwise, out_dtype)
        shape = [1, 1, 1, 1]
        shape[c_axis] = -1
        term3 = _op.multiply(_op.reshape(wsum, shape), _op.cast(zp_a, out_dtype))
        if not zero_w:
            reduce_size = kernel[0] * kernel[1] * (1 if depthwise else in_c)
            term4 = _op.multiply(
                _op.multiply(_op.cast(zp_a, out_dtype), channel_vector(
                    _op.cast(zp_w, out_dtype), node.args[3], 4, c_axis)),
                const(np.asarray(reduce_size, out_dtype)))
            term3 = _op.subtract(term3, term4)
        result = _op.subtract(result, term3)
    return result


QNN_LOWERINGS["qnn.conv2d"] = lower_conv2d
