"""``qnn.conv2d_transpose`` and its lowering (TVM's ``convolution_transpose.cc`` and its
generic legalization).

Entry points: :func:`conv2d_transpose`; its lowering joins
:data:`~kiln.relay.qnn.canonicalize.QNN_LOWERINGS`.

The zero points are subtracted up front (``int(data) - zp_a``, ``int(kernel) - zp_w`` with a
per-channel zp_w along the kernel's O axis) and ``nn.conv2d_transpose`` accumulates in
``out_dtype``; the result has scale ``input_scale * kernel_scale`` and zero point 0.
"""

from __future__ import annotations

from typing import Any

from kiln.relay import op as _op
from kiln.relay.expr import Call
from kiln.relay.op import nn as _nn
from kiln.relay.op.op import OUT_ELEMWISE_FUSABLE, call, define_op
from kiln.relay.op.op_attrs import Conv2DTransposeAttrs
from kiln.relay.qnn.canonicalize import QNN_LOWERINGS, check_zero_point_range
from kiln.relay.qnn.common import (
    channel_vector,
    is_vector,
    kernel_op_rel,
    make_scale,
    make_zero_point,
    out_channels,
)
from kiln.relay.transform.pass_util import type_of
from kiln.runtime.error import TVMError

__all__ = ["conv2d_transpose", "lower_conv2d_transpose"]

_OUT_DTYPES = ("int16", "int32", "int64")


def _conv2d_transpose_rel(types, attrs, op_name):
    return kernel_op_rel(types, attrs, op_name, "nn.conv2d_transpose",
                         (("int8", "uint8", "int16", "uint16"), ("int8", "uint8"), _OUT_DTYPES),
                         out_channels(attrs))


define_op("qnn.conv2d_transpose", _conv2d_transpose_rel, OUT_ELEMWISE_FUSABLE, 6,
          Conv2DTransposeAttrs, "quantized 2-D transposed convolution", 11)


def conv2d_transpose(data: Any, weight: Any, input_zero_point: Any, kernel_zero_point: Any,
                     input_scale: Any, kernel_scale: Any, strides: Any = (1, 1),
                     padding: Any = (0, 0), dilation: Any = (1, 1), groups: int = 1,
                     channels: Any = None, kernel_size: Any = None, data_layout: str = "NCHW",
                     kernel_layout: str = "IOHW", out_layout: str = "",
                     output_padding: Any = (0, 0), out_dtype: str = "int32") -> Any:
    """Quantized 2-D transposed convolution accumulating in ``out_dtype``."""
    if out_dtype not in _OUT_DTYPES:
        raise TVMError(f"qnn.conv2d_transpose: out_dtype must be one of {_OUT_DTYPES}, "
                       f"got {out_dtype!r}")
    plain = _nn.conv2d_transpose(data, weight, strides=strides, padding=padding,
                                 dilation=dilation, groups=groups, channels=channels,
                                 kernel_size=kernel_size, data_layout=data_layout,
                                 kernel_layout=kernel_layout, out_layout=out_layout,
                                 output_padding=output_padding, out_dtype=out_dtype)
    what = "qnn.conv2d_transpose: "
    return call("qnn.conv2d_transpose", [
        data, weight, make_zero_point(input_zero_point, what + "input_zero_point"),
        make_zero_point(kernel_zero_point, what + "kernel_zero_point"),
        make_scale(input_scale, what + "input_scale"),
        make_scale(kernel_scale, what + "kernel_scale")], plain.attrs)


def lower_conv2d_transpose(call_: Call, node: Call) -> Any:
    """``nn.conv2d_transpose(int(data) - zp_a, int(kernel) - zp_w)`` in out_dtype."""
    data, weight, zp_a, zp_w = call_.args[:4]
    a = call_.attrs
    check_zero_point_range(zp_a, node.args[0], "qnn.conv2d_transpose", "input_zero_point")
    check_zero_point_range(zp_w, node.args[1], "qnn.conv2d_transpose", "kernel_zero_point")
    out_dtype = str(a.out_dtype)
    kl = str(a.kernel_layout)
    if "O" not in kl:
        raise TVMError(f"qnn.conv2d_transpose: kernel layout {kl} has no O axis")
    if int(a.groups) != 1 and is_vector(node.args[3]):
        raise TVMError("qnn.conv2d_transpose: a per-channel kernel_zero_point needs groups=1")
    shifted_data = _op.subtract(_op.cast(data, out_dtype), _op.cast(zp_a, out_dtype))
    ndim = len(type_of(node.args[1]).shape)
    shifted_kernel = _op.subtract(_op.cast(weight, out_dtype), channel_vector(
        _op.cast(zp_w, out_dtype), node.args[3], ndim, kl.index("O")))
    return _nn.conv2d_transpose(
        shifted_data, shifted_kernel, strides=a.strides, padding=a.padding,
        dilation=a.dilation, groups=a.groups, channels=a.channels, kernel_size=a.kernel_size,
        data_layout=a.data_layout, kernel_layout=kl, out_layout=a.out_layout,
        output_padding=a.output_padding, out_dtype=out_dtype)


QNN_LOWERINGS["qnn.conv2d_transpose"] = lower_conv2d_transpose
