"""``qnn.avg_pool2d`` and its lowering (TVM's ``avg_pool2d.cc``).

Entry points: :func:`avg_pool2d`; its lowering joins
:data:`~kiln.relay.qnn.canonicalize.QNN_LOWERINGS`.

The input is requantized to the output's parameters in int32 (or cast when they match),
pooled with the integer ``nn.avg_pool2d`` (the average truncates toward zero, as TVM's), then
clipped and cast back to the input dtype.
"""

from __future__ import annotations

from typing import Any

from kiln.relay import op as _op
from kiln.relay.expr import Call
from kiln.relay.op import nn as _nn
from kiln.relay.op.op import OUT_ELEMWISE_FUSABLE, call, define_op
from kiln.relay.op.op_attrs import AvgPool2DAttrs
from kiln.relay.op.type_relations import tensor_arg
from kiln.relay.qnn.canonicalize import QNN_LOWERINGS, check_zero_point_range
from kiln.relay.qnn.common import (
    check_dtype,
    check_scalar_param,
    make_scale,
    make_zero_point,
    requantize_or_upcast,
    reuse_relation,
)
from kiln.relay.qnn.op import dtype_range
from kiln.relay.transform.pass_util import type_of

__all__ = ["avg_pool2d", "lower_avg_pool2d"]


def _avg_pool2d_rel(types, attrs, op_name):
    check_dtype(tensor_arg(types, 0, op_name).dtype, ("int8", "uint8", "int16", "uint16"),
                "data", op_name)
    for index, name in enumerate(("input_scale", "input_zero_point", "output_scale",
                                  "output_zero_point"), start=1):
        check_scalar_param(types, index, name, op_name)
    return reuse_relation("nn.avg_pool2d", types[:1], attrs, op_name)


define_op("qnn.avg_pool2d", _avg_pool2d_rel, OUT_ELEMWISE_FUSABLE, 5, AvgPool2DAttrs,
          "quantized 2-D average pooling", 11)


def avg_pool2d(data: Any, input_scale: Any, input_zero_point: Any, output_scale: Any,
               output_zero_point: Any, pool_size: Any, strides: Any, padding: Any,
               dilation: Any, ceil_mode: bool = False, count_include_pad: bool = True,
               layout: str = "NHWC", out_layout: str = "") -> Any:
    """Quantized 2-D average pooling (NHWC by default, as in TVM's QNN)."""
    plain = _nn.avg_pool2d(data, pool_size=pool_size, strides=strides, dilation=dilation,
                           padding=padding, layout=layout, out_layout=out_layout,
                           ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    return call("qnn.avg_pool2d", [
        data, make_scale(input_scale, "qnn.avg_pool2d: input_scale"),
        make_zero_point(input_zero_point, "qnn.avg_pool2d: input_zero_point"),
        make_scale(output_scale, "qnn.avg_pool2d: output_scale"),
        make_zero_point(output_zero_point, "qnn.avg_pool2d: output_zero_point")], plain.attrs)


def lower_avg_pool2d(call_: Call, node: Call) -> Any:
    """Requantize (or upcast) to int32, ``nn.avg_pool2d``, clip and cast back."""
    data, scale, zp, out_scale, out_zp = call_.args
    check_zero_point_range(zp, node.args[0], "qnn.avg_pool2d", "input_zero_point")
    a = call_.attrs
    pooled = _nn.avg_pool2d(requantize_or_upcast(data, scale, zp, out_scale, out_zp),
                            pool_size=a.pool_size, strides=a.strides, dilation=a.dilation,
                            padding=a.padding, layout=a.layout, out_layout=a.out_layout,
                            ceil_mode=a.ceil_mode, count_include_pad=a.count_include_pad)
    dtype = str(type_of(node.args[0]).dtype)
    lo, hi = dtype_range(dtype)
    return _op.cast(_op.clip(pooled, float(lo), float(hi)), dtype)


QNN_LOWERINGS["qnn.avg_pool2d"] = lower_avg_pool2d
