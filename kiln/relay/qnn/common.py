"""Helpers shared by the QNN ops with kernels of their own (conv, dense, pooling, unary).

Entry points: :func:`check_scalar_param`, :func:`check_channel_param`, :func:`check_dtype`,
:func:`reuse_relation` (a plain Relay op's relation under the QNN op's name),
:func:`is_zero`, :func:`channel_vector`, :func:`make_scale`, :func:`make_zero_point`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.ir.op import Op
from kiln.relay.op.op import as_expr, constant_value
from kiln.relay.op.type_relations import dim_value, dims, fail, tensor_arg
from kiln.runtime.error import TVMError, TypeInferenceError

__all__ = ["check_scalar_param", "check_channel_param", "check_dtype", "reuse_relation",
           "is_zero", "is_vector", "channel_vector", "make_scale", "make_zero_point",
           "param_dtype", "same_constant", "requantize_or_upcast", "kernel_op_rel",
           "out_channels"]


def param_dtype(name: str) -> str:
    """Scales are float32, zero points int32 (``name`` may carry an index: "scales[1]")."""
    return "float32" if "scale" in name else "int32"


def check_scalar_param(types, index: int, name: str, op_name: str) -> None:
    """Argument ``index`` (a scale or zero point named ``name``) must be a scalar."""
    ty = tensor_arg(types, index, op_name)
    dtype = param_dtype(name)
    if str(ty.dtype) != dtype:
        fail(f"{op_name}: {name} must be {dtype}, got {ty.dtype}")
    if len(dims(ty)) != 0 and not (len(dims(ty)) == 1 and dim_value(dims(ty)[0]) == 1):
        fail(f"{op_name}: {name} must be a scalar, got shape {tuple(dims(ty))}")


def check_channel_param(types, index: int, name: str, channels: Any, op_name: str) -> None:
    """Argument ``index`` must be a scalar or a 1-D vector of ``channels`` values."""
    from kiln.relay.qnn.op import check_qnn_param

    check_qnn_param(types, index, name, param_dtype(name), [channels], 0, op_name)


def check_dtype(dtype: Any, allowed: tuple, what: str, op_name: str) -> None:
    """Fail type inference unless ``dtype`` is one of ``allowed``."""
    if str(dtype) not in allowed:
        fail(f"{op_name}: {what} must be one of {allowed}, got {str(dtype)!r}")


def reuse_relation(plain_op: str | Op, types, attrs, op_name: str) -> Any:
    """The output type from ``plain_op``'s relation (an op or its name), its errors renamed to
    ``op_name``."""
    plain = plain_op if isinstance(plain_op, Op) else Op.get(plain_op)
    try:
        return plain.get_attr("FTVMTypeRelation")(types, attrs)
    except TypeInferenceError as err:
        raise TypeInferenceError(f"{op_name}: {err}".replace(f"{plain.name}: ", "")) from None


def is_zero(expr: Any) -> bool:
    """Whether ``expr`` is a constant whose every value is zero (its term can be dropped)."""
    value = constant_value(expr)
    return value is not None and bool(np.all(value == 0))


def is_vector(typed: Any) -> bool:
    """Whether the typed parameter ``typed`` is a per-channel vector (more than one value)."""
    from kiln.relay.transform.pass_util import type_of

    ty = type_of(typed)
    return ty is not None and len(ty.shape) == 1 and int(ty.shape[0]) != 1


def channel_vector(expr: Any, typed: Any, ndim: int, axis: int) -> Any:
    """``expr`` (typed as ``typed``) laid along ``axis`` of an ``ndim``-D tensor: a per-channel
    vector is reshaped, a scalar (or 1-element vector) becomes a scalar."""
    from kiln.relay import op as _op
    from kiln.relay.transform.pass_util import type_of

    ty = type_of(typed)
    if is_vector(typed):
        shape = [1] * ndim
        shape[axis] = -1
        return _op.reshape(expr, shape)
    if ty is not None and len(ty.shape) == 1:
        return _op.reshape(expr, [])
    return expr


def make_scale(value: Any, what: str) -> Any:
    """A float32 scale expression; a constant one must be finite and not negative."""
    expr = as_expr(value, "float32")
    const = constant_value(expr)
    if const is not None and (not np.all(np.isfinite(const)) or np.any(const < 0)):
        raise TVMError(f"{what} must be finite and not negative, got {const.tolist()}")
    return expr


def make_zero_point(value: Any, what: str, dtype: str | None = None) -> Any:
    """An int32 zero-point expression; a constant one must fit ``dtype`` when given."""
    expr = as_expr(value, "int32")
    const = constant_value(expr)
    if const is not None and const.dtype.kind not in "iu":
        raise TVMError(f"{what} must be an integer, got {const.dtype}")
    if const is not None and dtype in ("int8", "uint8", "int16", "uint16"):
        info = np.iinfo(dtype)
        if np.any(const < info.min) or np.any(const > info.max):
            raise TVMError(f"{what} {const.tolist()} is outside {dtype}'s range "
                           f"[{info.min}, {info.max}]")
    return expr


def same_constant(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are constants with equal values."""
    va, vb = constant_value(a), constant_value(b)
    return va is not None and vb is not None and va.shape == vb.shape and bool(np.all(va == vb))


def requantize_or_upcast(data: Any, scale: Any, zp: Any, out_scale: Any, out_zp: Any,
                         axis: int = -1) -> Any:
    """``data`` requantized to (out_scale, out_zp) in int32, or just cast when the parameters
    already are those (TVM's ``RequantizeOrUpcast``)."""
    from kiln.relay import op as _op
    from kiln.relay.qnn.op import requantize

    if same_constant(scale, out_scale) and same_constant(zp, out_zp):
        return _op.cast(data, "int32")
    return requantize(data, scale, zp, out_scale, out_zp, axis=axis, out_dtype="int32")


def kernel_op_rel(types, attrs, op_name: str, plain_op: str | Op, dtypes: tuple,
                  channel_axis: Any) -> Any:
    """The relation of a (data, kernel, input_zp, kernel_zp, input_scale, kernel_scale) op:
    ``dtypes`` = (data dtypes, kernel dtypes, out dtypes); the input's parameters are scalars,
    the kernel's scalars or one per output channel (``channel_axis(out_dims)``); the output
    type is ``plain_op``'s."""
    data, weight = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    check_dtype(data.dtype, dtypes[0], "data", op_name)
    check_dtype(weight.dtype, dtypes[1], "weight", op_name)
    check_dtype(attrs.out_dtype, dtypes[2], "out_dtype", op_name)
    check_scalar_param(types, 2, "input_zero_point", op_name)
    check_scalar_param(types, 4, "input_scale", op_name)
    out = reuse_relation(plain_op, types[:2], attrs, op_name)
    channels = channel_axis(dims(out))
    check_channel_param(types, 3, "kernel_zero_point", channels, op_name)
    check_channel_param(types, 5, "kernel_scale", channels, op_name)
    return out


def out_channels(attrs: Any) -> Any:
    """For conv attrs: the output's channel extent from its dims (None without a C axis)."""
    layout = str(attrs.out_layout or attrs.data_layout)
    return lambda out_dims: out_dims[layout.index("C")] if "C" in layout else None
