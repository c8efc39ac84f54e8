"""``relay.qnn.op``: the QNN dialect's quantize, dequantize and requantize (TVM v0.16).

Entry points: :func:`quantize`, :func:`dequantize`, :func:`requantize` (and ``add``,
``subtract``, ``mul`` from :mod:`kiln.relay.qnn.elemwise`).

Scales are float32 and zero points int32 Relay expressions: scalars (per-tensor) or 1-D
vectors with one value per slice of ``data`` along ``axis`` (per-channel). The ops have no
kernels: ``relay.qnn.transform.CanonicalizeOps`` lowers them to plain Relay first (``relay.build``
and the VM compiler run it).

Example
-------
>>> from kiln import relay
>>> x = relay.var("x", shape=(2, 3))
>>> q = relay.qnn.op.quantize(x, relay.const(0.5), relay.const(3), out_dtype="uint8")
>>> q.op.name
'qnn.quantize'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op.op import INJECTIVE, OPAQUE, as_expr, call, constant_value, define_op
from kiln.relay.op.op_attrs import declare_attrs
from kiln.relay.op.type_relations import (
    dim_value,
    dims,
    fail,
    normalize_axis,
    tensor_arg,
    tensor_type,
)
from kiln.runtime.error import TVMError

__all__ = ["quantize", "dequantize", "requantize", "add", "subtract", "mul", "conv2d", "dense",
           "batch_matmul", "concatenate", "conv2d_transpose", "avg_pool2d", "leaky_relu",
           "sqrt", "rsqrt", "exp", "tanh", "erf", "sigmoid", "log", "abs", "hardswish",
           "softmax", "requantize_config",
           "get_requantize_config", "QuantizeAttrs",
           "DequantizeAttrs", "RequantizeAttrs", "QUANTIZED_DTYPES", "ROUNDING_MODES",
           "dtype_range"]

QuantizeAttrs = declare_attrs("QuantizeAttrs", "qnn.quantize.", out_dtype="int8", axis=-1)
DequantizeAttrs = declare_attrs("DequantizeAttrs", "qnn.dequantize.", out_dtype="float32", axis=-1)
RequantizeAttrs = declare_attrs("RequantizeAttrs", "qnn.requantize.", axis=-1, rounding="None",
                         compute_dtype="None", out_dtype="int8")

QUANTIZED_DTYPES = ("int8", "uint8", "int16", "uint16", "int32")
ROUNDING_MODES = ("None", "UPWARD", "TONEAREST")
COMPUTE_DTYPES = ("None", "int64", "float32", "float64")


def dtype_range(dtype: str) -> tuple[int, int]:
    """The smallest and largest value of the integer ``dtype``."""
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def check_qnn_param(types, index, what, dtype, data_dims, axis, op_name):
    """A scale or zero point: a ``dtype`` scalar, or a 1-D vector of data.shape[axis] values
    (a 1-element vector counts as per-tensor, as in TVM)."""
    ty = tensor_arg(types, index, op_name)
    if str(ty.dtype) != dtype:
        fail(f"{op_name}: {what} must be {dtype}, got {ty.dtype}")
    shape = dims(ty)
    if len(shape) == 0:
        return
    if len(shape) != 1:
        fail(f"{op_name}: {what} must be a scalar or 1-D, got shape {tuple(shape)}")
    n = dim_value(shape[0])
    channels = dim_value(data_dims[axis]) if data_dims else None
    if isinstance(n, int) and n != 1 and isinstance(channels, int) and n != channels:
        fail(f"{op_name}: {what} has {n} values but data has {channels} along axis {axis}")


def _check_dtype_in(dtype, allowed, what, op_name):
    if str(dtype) not in allowed:
        fail(f"{op_name}: {what} must be one of {allowed}, got {str(dtype)!r}")


def _params_rel(types, attrs, op_name, names, out_dtype):
    """Check the (scale, zero point) pairs named ``names`` (arguments 1, 2, ...) against the
    data's shape along ``attrs.axis``; the output has the data's shape and ``out_dtype``."""
    d = dims(tensor_arg(types, 0, op_name))
    # a scalar input has no axis: only per-tensor parameters fit it
    axis = normalize_axis(int(attrs.axis), len(d), op_name) if d else 0
    for index, name in enumerate(names, start=1):
        dtype = "float32" if name.endswith("scale") else "int32"
        check_qnn_param(types, index, name, dtype, d, axis, op_name)
    return tensor_type(d, out_dtype)


def _quantize_rel(types, attrs, op_name):
    _check_dtype_in(tensor_arg(types, 0, op_name).dtype, ("float32",), "data", op_name)
    _check_dtype_in(attrs.out_dtype, QUANTIZED_DTYPES, "out_dtype", op_name)
    return _params_rel(types, attrs, op_name, ("output_scale", "output_zero_point"),
                       attrs.out_dtype)


def _dequantize_rel(types, attrs, op_name):
    _check_dtype_in(tensor_arg(types, 0, op_name).dtype, QUANTIZED_DTYPES, "data", op_name)
    return _params_rel(types, attrs, op_name, ("input_scale", "input_zero_point"),
                       attrs.out_dtype)


def _requantize_rel(types, attrs, op_name):
    _check_dtype_in(tensor_arg(types, 0, op_name).dtype, QUANTIZED_DTYPES, "data", op_name)
    _check_dtype_in(attrs.out_dtype, QUANTIZED_DTYPES, "out_dtype", op_name)
    _check_dtype_in(attrs.rounding, ROUNDING_MODES, "rounding", op_name)
    _check_dtype_in(attrs.compute_dtype, COMPUTE_DTYPES, "compute_dtype", op_name)
    return _params_rel(types, attrs, op_name, ("input_scale", "input_zero_point",
                                               "output_scale", "output_zero_point"),
                       attrs.out_dtype)


define_op("qnn.quantize", _quantize_rel, OPAQUE, 3, QuantizeAttrs,
          "float -> integer: clip(round(x / scale) + zero_point)", 11)
define_op("qnn.dequantize", _dequantize_rel, OPAQUE, 3, DequantizeAttrs,
          "integer -> float: (q - zero_point) * scale", 11)
define_op("qnn.requantize", _requantize_rel, INJECTIVE, 5, RequantizeAttrs,
          "integer -> integer with new scale and zero point", 11)


class requantize_config:  # noqa: N801 (TVM's name)
    """A ``with`` scope choosing what requantize's "None" rounding and compute_dtype mean
    while canonicalizing (defaults: "UPWARD" and "int64")."""

    _stack: list[tuple[str, str]] = [("UPWARD", "int64")]

    def __init__(self, rounding: str = "UPWARD", compute_dtype: str = "int64") -> None:
        if rounding not in ROUNDING_MODES[1:]:
            raise TVMError(f"requantize_config: rounding must be UPWARD or TONEAREST, "
                           f"got {rounding!r}")
        if compute_dtype not in COMPUTE_DTYPES[1:]:
            raise TVMError(f"requantize_config: compute_dtype must be one of "
                           f"{COMPUTE_DTYPES[1:]}, got {compute_dtype!r}")
        self.rounding, self.compute_dtype = rounding, compute_dtype

    def __enter__(self) -> requantize_config:
        requantize_config._stack.append((self.rounding, self.compute_dtype))
        return self

    def __exit__(self, *exc: Any) -> None:
        requantize_config._stack.pop()


def get_requantize_config() -> tuple[str, str]:
    """The (rounding, compute_dtype) of the innermost :class:`requantize_config` scope."""
    return requantize_config._stack[-1]


def _scale(value: Any, what: str) -> Any:
    expr = as_expr(value, "float32")
    const = constant_value(expr)
    if const is not None and not np.all(np.isfinite(const)):
        raise TVMError(f"{what} must be finite, got {const}")
    return expr


def _zero_point(value: Any, what: str, dtype: str, op_name: str) -> Any:
    """``value`` as an int32 expression; a constant must lie in ``dtype``'s range."""
    expr = as_expr(value, "int32")
    const = constant_value(expr)
    if const is not None:
        lo, hi = dtype_range(dtype)
        if np.any(const < lo) or np.any(const > hi):
            raise TVMError(f"{op_name}: {what} {const.tolist()} is outside {dtype}'s range "
                           f"[{lo}, {hi}]")
    return expr


def _check_dtype(dtype: str, what: str, op_name: str) -> None:
    if dtype not in QUANTIZED_DTYPES:
        raise TVMError(f"{op_name}: {what} must be one of {QUANTIZED_DTYPES}, got {dtype!r}")


def quantize(data: Any, output_scale: Any, output_zero_point: Any, axis: int = -1,
             out_dtype: str = "int8") -> Any:
    """Quantize float ``data``: ``clip(round(data / scale) + zero_point)`` as ``out_dtype``."""
    _check_dtype(out_dtype, "out_dtype", "qnn.quantize")
    return call("qnn.quantize", [
        data, _scale(output_scale, "qnn.quantize: output_scale"),
        _zero_point(output_zero_point, "output_zero_point", out_dtype, "qnn.quantize")],
        QuantizeAttrs(out_dtype=out_dtype, axis=int(axis)))


def dequantize(data: Any, input_scale: Any, input_zero_point: Any, axis: int = -1,
               out_dtype: str = "float32") -> Any:
    """Dequantize integer ``data``: ``(data - zero_point) * scale`` as ``out_dtype``."""
    if out_dtype not in ("float32", "float16"):
        raise TVMError(f"qnn.dequantize: out_dtype must be float32 or float16, got {out_dtype!r}")
    return call("qnn.dequantize", [
        data, _scale(input_scale, "qnn.dequantize: input_scale"),
        as_expr(input_zero_point, "int32")],
        DequantizeAttrs(axis=int(axis), out_dtype=out_dtype))


def requantize(data: Any, input_scale: Any, input_zero_point: Any, output_scale: Any,
               output_zero_point: Any, axis: int = -1, rounding: str = "None",
               compute_dtype: str = "None", out_dtype: str = "int8") -> Any:
    """Requantize integer ``data`` from (input_scale, input_zero_point) to (output_scale,
    output_zero_point); ``rounding`` "UPWARD" (the "None" default) or "TONEAREST"."""
    _check_dtype(out_dtype, "out_dtype", "qnn.requantize")
    if rounding not in ROUNDING_MODES:
        raise TVMError(f"qnn.requantize: rounding must be one of {ROUNDING_MODES}, "
                       f"got {rounding!r}")
    if compute_dtype not in COMPUTE_DTYPES:
        raise TVMError(f"qnn.requantize: compute_dtype must be one of {COMPUTE_DTYPES}, "
                       f"got {compute_dtype!r}")
    out_scale = _scale(output_scale, "qnn.requantize: output_scale")
    const = constant_value(out_scale)
    if const is not None and np.any(const == 0):
        raise TVMError("qnn.requantize: output_scale must be nonzero")
    return call("qnn.requantize", [
        data, _scale(input_scale, "qnn.requantize: input_scale"),
        as_expr(input_zero_point, "int32"), out_scale,
        _zero_point(output_zero_point, "output_zero_point", out_dtype, "qnn.requantize")],
        RequantizeAttrs(axis=int(axis), rounding=rounding, compute_dtype=compute_dtype,
                        out_dtype=out_dtype))


# TVM's relay.qnn.op also holds the ops below (imported last: they build on the above)
from kiln.relay.qnn.concat import concatenate  # noqa: E402
from kiln.relay.qnn.conv_transpose import conv2d_transpose  # noqa: E402
from kiln.relay.qnn.convolution import conv2d  # noqa: E402
from kiln.relay.qnn.elemwise import add, mul, subtract  # noqa: E402
from kiln.relay.qnn.matmul import batch_matmul, dense  # noqa: E402
from kiln.relay.qnn.pool import avg_pool2d  # noqa: E402
from kiln.relay.qnn.softmax import softmax  # noqa: E402
from kiln.relay.qnn.unary import (  # noqa: E402
    abs,  # noqa: A004 (TVM's name)
    erf,
    exp,
    hardswish,
    leaky_relu,
    log,
    rsqrt,
    sigmoid,
    sqrt,
    tanh,
)
