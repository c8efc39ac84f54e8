"""ONNX converters: linear quantization (QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear), expressed with float arithmetic, rounding and saturating casts.

Entry points: the converters registered in :data:`~.onnx_registry.CONVERTERS` on import.

Example
-------
>>> from kiln.relay.frontend import onnx_ops_quant
>>> from kiln.relay.frontend.onnx_registry import CONVERTERS
>>> "DequantizeLinear" in CONVERTERS
True
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.onnx_registry import register_function, unsupported
from kiln.runtime.dtype import DataType


def _onnx_dtype(elem_type: int) -> str:
    from kiln.relay.frontend.onnx import onnx_dtype

    return onnx_dtype(elem_type)

__all__: list[str] = []


def _const(value, dtype: str):
    return relay.const(np.asarray(value, dtype=dtype), dtype)


def _per_axis(param, x, axis, ctx):
    """Reshape a 1-D per-axis scale/zero point so it broadcasts along ``axis`` of ``x``."""
    rank = ctx.rank(x)
    if ctx.rank(param) != 1 or rank <= 1:
        return param
    axis = axis + rank if axis < 0 else axis
    return relay.reshape(param, [-1] + [1] * (rank - axis - 1))


def _saturate(values, dtype):
    """``values`` clipped to integer ``dtype``'s range (int4/uint4/int2/uint2 included), cast."""
    storage = DataType(dtype).numpy_dtype
    info = np.iinfo(storage) if storage.kind in "iu" else _ml_dtypes().iinfo(storage)
    return relay.cast(relay.clip(values, float(info.min), float(info.max)), dtype)


def _ml_dtypes():
    import ml_dtypes

    return ml_dtypes


def _quantize(inputs, attrs, ctx):
    from kiln.relay.frontend.onnx_ops_tensor import onnx_cast

    x, scale = inputs[0], inputs[1]
    zero_point = inputs[2] if len(inputs) > 2 else None
    if attrs.get("block_size", 0):
        raise unsupported("QuantizeLinear", "blocked quantization")
    dtype = attrs.get("output_dtype") or 0
    dtype = ctx.dtype(zero_point) if zero_point is not None else (
        _onnx_dtype(dtype) if dtype else "uint8")
    float8 = DataType(dtype).is_float8
    if not (float8 or dtype.startswith(("int", "uint"))):
        raise unsupported("QuantizeLinear", f"output type {dtype}")
    axis = attrs.get("axis", 1)
    scale = _per_axis(scale, x, axis, ctx)
    x = relay.cast(x, "float32")
    values = relay.divide(x, relay.cast(scale, "float32"))
    if not float8:  # an 8-bit float rounds to nearest even in the cast itself
        values = relay.round(values)
    if zero_point is not None:
        values = relay.add(values, relay.cast(_per_axis(zero_point, x, axis, ctx), "float32"))
    if float8:
        return onnx_cast(values, dtype, bool(attrs.get("saturate", 1)), ctx)
    return _saturate(values, dtype)


def _dequantize(inputs, attrs, ctx):
    x, scale = inputs[0], inputs[1]
    zero_point = inputs[2] if len(inputs) > 2 else None
    if attrs.get("block_size", 0):
        raise unsupported("DequantizeLinear", "blocked quantization")
    axis = attrs.get("axis", 1)
    out_dtype = ctx.dtype(scale)
    values = relay.cast(x, "float32")
    if zero_point is not None:
        zero = relay.cast(_per_axis(zero_point, x, axis, ctx), "float32")
        values = relay.subtract(values, zero)
    out = relay.multiply(values, relay.cast(_per_axis(scale, x, axis, ctx), "float32"))
    return relay.cast(out, out_dtype) if out_dtype != "float32" else out


def _dynamic_quantize(inputs, attrs, ctx):
    x = inputs[0]
    zero = _const(0, "float32")
    high = relay.maximum(zero, relay.max(x))
    low = relay.minimum(zero, relay.min(x))
    scale = relay.divide(relay.subtract(high, low), _const(255, "float32"))
    zero_point = _saturate(relay.round(relay.divide(relay.negative(low), scale)), "uint8")
    values = relay.add(relay.round(relay.divide(x, scale)), relay.cast(zero_point, "float32"))
    return [_saturate(values, "uint8"), scale, zero_point]


def _qlinear_matmul(inputs, attrs, ctx):
    """QLinearMatMul: dequantize both operands, multiply in float32, requantize."""
    from kiln.relay.frontend.onnx_ops_math import matmul

    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = inputs
    a_real = relay.multiply(relay.subtract(relay.cast(a, "float32"),
                                           relay.cast(a_zero, "float32")),
                            relay.cast(a_scale, "float32"))
    b_real = relay.multiply(relay.subtract(relay.cast(b, "float32"),
                                           relay.cast(b_zero, "float32")),
                            relay.cast(b_scale, "float32"))
    product = matmul(a_real, b_real, ctx)
    values = relay.add(relay.round(relay.divide(product, relay.cast(y_scale, "float32"))),
                       relay.cast(y_zero, "float32"))
    return _saturate(values, ctx.dtype(y_zero))


register_function("QLinearMatMul", _qlinear_matmul, since=10)


def _centered_int32(x, zero_point, ctx, axis=None):
    """``x - zero_point`` in int32 (a 1-D zero point broadcasts along ``axis``)."""
    x = relay.cast(x, "int32")
    if zero_point is None:
        return x
    zero_point = relay.cast(zero_point, "int32")
    if axis is not None and ctx.rank(zero_point) == 1:
        zero_point = relay.reshape(zero_point, [-1] + [1] * (ctx.rank(x) - axis - 1))
    return relay.subtract(x, zero_point)


def _matmul_integer(inputs, attrs, ctx):
    from kiln.relay.frontend.onnx_ops_math import matmul

    a, b = inputs[0], inputs[1]
    a_zero = inputs[2] if len(inputs) > 2 else None
    b_zero = inputs[3] if len(inputs) > 3 else None
    return matmul(_centered_int32(a, a_zero, ctx, axis=0 if ctx.rank(a) == 1 else ctx.rank(a) - 2),
                  _centered_int32(b, b_zero, ctx), ctx)


def _conv_integer(inputs, attrs, ctx):
    from kiln.relay.frontend.onnx_ops_nn import _conv

    x, w = inputs[0], inputs[1]
    x_zero = inputs[2] if len(inputs) > 2 else None
    w_zero = inputs[3] if len(inputs) > 3 else None
    return _conv([_centered_int32(x, x_zero, ctx), _centered_int32(w, w_zero, ctx, axis=0)],
                 attrs, ctx)


register_function("MatMulInteger", _matmul_integer, since=10)
register_function("ConvInteger", _conv_integer, since=10)
register_function("QuantizeLinear", _quantize)
register_function("DequantizeLinear", _dequantize)
register_function("DynamicQuantizeLinear", _dynamic_quantize, since=11)
