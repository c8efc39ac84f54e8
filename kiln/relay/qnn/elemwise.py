"""``qnn.add``, ``qnn.subtract``, ``qnn.mul`` and their lowering (TVM's ``add.cc``,
``subtract.cc``, ``mul.cc``).

Entry points: :func:`add`, :func:`subtract`, :func:`mul`; their lowerings join
:data:`~kiln.relay.qnn.canonicalize.QNN_LOWERINGS`.

- add / subtract: each input is requantized to the output's (scale, zero point) in int32 (or
  just cast when its parameters already are the output's), then
  ``lhs + rhs - out_zp`` / ``lhs - rhs + out_zp``, clipped and cast to the input dtype;
- mul: ``(lhs - lhs_zp) * (rhs - rhs_zp)`` in int32 has scale ``lhs_scale * rhs_scale`` and
  zero point 0; it is requantized to the output's parameters.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay import op as _op
from kiln.relay.expr import Call, const
from kiln.relay.op.op import BROADCAST, as_expr, call, constant_value, define_op
from kiln.relay.op.op_attrs import declare_attrs
from kiln.relay.op.type_relations import (
    broadcast_shape,
    dims,
    fail,
    normalize_axis,
    tensor_arg,
    tensor_type,
)
from kiln.relay.qnn.canonicalize import QNN_LOWERINGS, along_axis, ndim_of
from kiln.relay.qnn.common import requantize_or_upcast
from kiln.relay.qnn.op import check_qnn_param, dtype_range, requantize
from kiln.runtime.error import TVMError

__all__ = ["add", "subtract", "mul", "BroadcastAttrs"]

BroadcastAttrs = declare_attrs("BroadcastAttrs", "qnn.add/subtract/mul.", lhs_axis=-1, rhs_axis=-1)

_DTYPES = ("int8", "uint8", "int16", "int32")
_PARAMS = ("lhs_scale", "lhs_zero_point", "rhs_scale", "rhs_zero_point", "output_scale",
           "output_zero_point")


def _binary_rel(types, attrs, op_name):
    lhs, rhs = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    if str(lhs.dtype) not in _DTYPES:
        fail(f"{op_name}: lhs must be one of {_DTYPES}, got {lhs.dtype}")
    if str(lhs.dtype) != str(rhs.dtype):
        fail(f"{op_name}: lhs and rhs must have one dtype, got {lhs.dtype} and {rhs.dtype}")
    ld, rd = dims(lhs), dims(rhs)
    lax = normalize_axis(int(attrs.lhs_axis), len(ld), op_name) if ld else 0
    rax = normalize_axis(int(attrs.rhs_axis), len(rd), op_name) if rd else 0
    for index, name in enumerate(_PARAMS, start=2):
        dtype = "float32" if name.endswith("scale") else "int32"
        data_dims, axis = (ld, lax) if name.startswith("lhs") else (rd, rax)
        if name.startswith("output"):
            data_dims, axis = [], 0  # the output's parameters are per-tensor
        check_qnn_param(types, index, name, dtype, data_dims, axis, op_name)
    return tensor_type(broadcast_shape(ld, rd, op_name), lhs.dtype)


for _name in ("add", "subtract", "mul"):
    define_op(f"qnn.{_name}", _binary_rel, BROADCAST, 8, BroadcastAttrs,
              f"quantized {_name} with per-input scales and zero points", 11)


def _make(name: str, lhs: Any, rhs: Any, params: tuple, lhs_axis: int, rhs_axis: int) -> Any:
    args = [lhs, rhs] + [as_expr(p, "float32" if i % 2 == 0 else "int32")
                         for i, p in enumerate(params)]
    return call(f"qnn.{name}", args, BroadcastAttrs(lhs_axis=int(lhs_axis),
                                                    rhs_axis=int(rhs_axis)))


def add(lhs: Any, rhs: Any, lhs_scale: Any, lhs_zero_point: Any, rhs_scale: Any,
        rhs_zero_point: Any, output_scale: Any, output_zero_point: Any, lhs_axis: int = -1,
        rhs_axis: int = -1) -> Any:
    """Quantized ``lhs + rhs``, the result with (output_scale, output_zero_point)."""
    return _make("add", lhs, rhs, (lhs_scale, lhs_zero_point, rhs_scale, rhs_zero_point,
                                   output_scale, output_zero_point), lhs_axis, rhs_axis)


def subtract(lhs: Any, rhs: Any, lhs_scale: Any, lhs_zero_point: Any, rhs_scale: Any,
             rhs_zero_point: Any, output_scale: Any, output_zero_point: Any,
             lhs_axis: int = -1, rhs_axis: int = -1) -> Any:
    """Quantized ``lhs - rhs``, the result with (output_scale, output_zero_point)."""
    return _make("subtract", lhs, rhs, (lhs_scale, lhs_zero_point, rhs_scale, rhs_zero_point,
                                        output_scale, output_zero_point), lhs_axis, rhs_axis)


def mul(lhs: Any, rhs: Any, lhs_scale: Any, lhs_zero_point: Any, rhs_scale: Any,
        rhs_zero_point: Any, output_scale: Any, output_zero_point: Any, lhs_axis: int = -1,
        rhs_axis: int = -1) -> Any:
    """Quantized ``lhs * rhs``, the result with (output_scale, output_zero_point)."""
    return _make("mul", lhs, rhs, (lhs_scale, lhs_zero_point, rhs_scale, rhs_zero_point,
                                   output_scale, output_zero_point), lhs_axis, rhs_axis)


def _axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def _clip_cast(value: Any, dtype: str) -> Any:
    lo, hi = dtype_range(dtype)
    return _op.cast(_op.clip(value, float(lo), float(hi)), dtype)


def _lower_add_sub(call_: Call, node: Call, combine: Any, out_zp_sign: Any) -> Any:
    lhs, rhs, ls, lz, rs, rz, os_, oz = call_.args
    attrs = call_.attrs
    left = requantize_or_upcast(lhs, ls, lz, os_, oz, attrs.lhs_axis)
    right = requantize_or_upcast(rhs, rs, rz, os_, oz, attrs.rhs_axis)
    value = out_zp_sign(combine(left, right), oz)
    return _clip_cast(value, str(node.args[0].checked_type.dtype))


def lower_add(call_: Call, node: Call) -> Any:
    """Q_c = Q_a' + Q_b' - zp_c, with Q' the inputs requantized to the output parameters."""
    return _lower_add_sub(call_, node, _op.add, _op.subtract)


def lower_subtract(call_: Call, node: Call) -> Any:
    """Q_c = Q_a' - Q_b' + zp_c."""
    return _lower_add_sub(call_, node, _op.subtract, _op.add)


def lower_mul(call_: Call, node: Call) -> Any:
    """(Q_a - zp_a)(Q_b - zp_b) in int32 has scale s_a * s_b; requantize it to the output."""
    lhs, rhs, ls, lz, rs, rz, os_, oz = call_.args
    attrs = call_.attrs
    lnd, rnd = ndim_of(node.args[0]), ndim_of(node.args[1])
    lax, rax = _axis(int(attrs.lhs_axis), lnd), _axis(int(attrs.rhs_axis), rnd)
    lsv, rsv = constant_value(ls), constant_value(rs)
    if lsv is None or rsv is None:
        raise TVMError("qnn.mul: lhs_scale and rhs_scale must be constants to canonicalize")
    if lsv.size > 1 and rsv.size > 1 and (lax != rax or lnd != rnd):
        raise TVMError("qnn.mul: per-channel scales on both inputs need lhs_axis == rhs_axis "
                       f"and equal ranks, got axes {lax} and {rax}")
    left = _op.subtract(_op.cast(lhs, "int32"), along_axis(lz, node.args[3], lnd, lax))
    right = _op.subtract(_op.cast(rhs, "int32"), along_axis(rz, node.args[5], rnd, rax))
    scale = np.asarray(lsv, "float32").reshape(-1) * np.asarray(rsv, "float32").reshape(-1)
    axis = lax if lsv.size > 1 else rax + max(lnd - rnd, 0)
    scale_expr = const(scale if scale.size > 1 else np.float32(scale[0]))
    return requantize(_op.multiply(left, right), scale_expr, const(np.int32(0)), os_, oz,
                      axis=axis if scale.size > 1 else -1,
                      out_dtype=str(node.args[0].checked_type.dtype))


QNN_LOWERINGS.update({"qnn.add": lower_add, "qnn.subtract": lower_subtract,
                      "qnn.mul": lower_mul})
