"""ONNX converters: linear quantization (QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear) and the quantized operators (QLinearConv, QLinearMatMul, MatMulInteger,
ConvInteger, com.microsoft's QLinearAdd/Mul/Sigmoid/LeakyRelu/AveragePool/GlobalAveragePool/
Concat).

Q/DQ with constant float32 scales and 8/16-bit integer types become ``qnn.quantize`` /
``qnn.dequantize``; the QLinear ops are written as dequantize -> float op -> quantize, and
``from_onnx`` then runs ``FakeQuantizationToInteger``, which turns every such region (these
and the QDQ pairs ``onnxruntime.quantization.quantize_static`` writes) into integer QNN ops.
Other cases (float8, int4, blocked, run-time scales) use float arithmetic, rounding and
saturating casts.

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


_QNN_TYPES = ("int8", "uint8", "int16", "uint16")


def qnn_params(scale, zero_point, ctx):
    """(float32 scale constant, int32 zero-point constant) when both are known at import
    time and the scale is float32 (a missing zero point is 0), else None."""
    scale_value = ctx.value(scale)
    zp_value = np.zeros((), "int32") if zero_point is None else ctx.value(zero_point)
    if scale_value is None or zp_value is None or scale_value.dtype != np.float32 or \
            scale_value.ndim > 1 or np.asarray(zp_value).ndim > 1:
        return None
    return (relay.const(scale_value),
            relay.const(np.asarray(zp_value).astype("int64").astype("int32")))


def _qnn_axis(params, x, axis, ctx):
    """ONNX's axis for a per-axis parameter; -1 (TVM's default) for per-tensor ones."""
    if all(np.asarray(p.data.numpy()).size == 1 for p in params):
        return -1
    rank = ctx.rank(x)
    return axis + rank if axis < 0 else axis


def dequantized(x, scale, zero_point, ctx, axis=1):
    """``qnn.dequantize`` of ``x`` when its parameters are constants, else float math."""
    params = qnn_params(scale, zero_point, ctx)
    if params is None or ctx.dtype(x) not in (*_QNN_TYPES, "int32"):
        return _dequantize([x, scale, zero_point], {"axis": axis}, ctx)
    return relay.qnn.op.dequantize(x, *params, axis=_qnn_axis(params, x, axis, ctx))


def quantized(x, scale, zero_point, dtype, ctx, axis=1):
    """``qnn.quantize`` of float32 ``x`` to ``dtype`` when possible, else float math."""
    params = qnn_params(scale, zero_point, ctx)
    if params is None or dtype not in (*_QNN_TYPES, "int32") or ctx.dtype(x) != "float32":
        if zero_point is None:
            return _quantize([x, scale], {"axis": axis}, ctx)
        return _quantize([x, scale, zero_point], {"axis": axis}, ctx)
    return relay.qnn.op.quantize(x, *params, axis=_qnn_axis(params, x, axis, ctx),
                                 out_dtype=dtype)


def _quantize(inputs, attrs, ctx):
    from kiln.relay.frontend.onnx_ops_tensor import onnx_cast

    x, scale = inputs[0], inputs[1]
    zero_point = inputs[2] if len(inputs) > 2 else None
    if attrs.get("block_size", 0):
        raise unsupported("QuantizeLinear", "blocked quantization")
    dtype = attrs.get("output_dtype") or 0
    dtype = ctx.dtype(zero_point) if zero_point is not None else (
        _onnx_dtype(dtype) if dtype else "uint8")
    params = qnn_params(scale, zero_point, ctx)
    if params is not None and dtype in _QNN_TYPES and ctx.dtype(x) == "float32":
        return relay.qnn.op.quantize(x, *params, out_dtype=dtype,
                                     axis=_qnn_axis(params, x, attrs.get("axis", 1), ctx))
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
    params = qnn_params(scale, zero_point, ctx)
    if params is not None and ctx.dtype(x) in (*_QNN_TYPES, "int32"):
        return relay.qnn.op.dequantize(x, *params, axis=_qnn_axis(params, x, axis, ctx))
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
    """QLinearMatMul: dequantize -> matmul -> quantize (FakeQuantizationToInteger makes it
    qnn.dense / qnn.batch_matmul + requantize)."""
    from kiln.relay.frontend.onnx_ops_math import matmul

    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = inputs
    # per-row a parameters lie along a's rows, per-column b parameters along b's columns
    product = matmul(dequantized(a, a_scale, a_zero, ctx, axis=-2),
                     dequantized(b, b_scale, b_zero, ctx, axis=-1), ctx)
    return quantized(product, y_scale, y_zero, ctx.dtype(y_zero), ctx)


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


def _integer_operands(x, zero_point, ctx, per_axis_ok=False):
    """Whether ``x`` (with ``zero_point``) can enter the QNN path: 8-bit with a constant zero
    point that is a scalar (or, with ``per_axis_ok``, a vector)."""
    if ctx.dtype(x) not in ("int8", "uint8"):
        return False
    if zero_point is None:
        return True
    value = ctx.value(zero_point)
    return value is not None and (value.size == 1 or per_axis_ok and value.ndim == 1)


def _unit_dequantized(x, zero_point, ctx, axis):
    """``x - zero_point`` as a dequantize with scale 1 (exact: FakeQuantizationToInteger
    turns the region into integer QNN ops)."""
    one = relay.const(np.float32(1.0))
    return dequantized(x, one, zero_point, ctx, axis=axis)


def _to_int32(value, ctx):
    """A float region's int32 result (scale 1, zero point 0)."""
    return quantized(value, relay.const(np.float32(1.0)), None, "int32", ctx)


def _matmul_integer(inputs, attrs, ctx):
    from kiln.relay.frontend.onnx_ops_math import matmul

    a, b = inputs[0], inputs[1]
    a_zero = inputs[2] if len(inputs) > 2 else None
    b_zero = inputs[3] if len(inputs) > 3 else None
    if _integer_operands(a, a_zero, ctx) and _integer_operands(b, b_zero, ctx, ctx.rank(b) == 2):
        return _to_int32(matmul(_unit_dequantized(a, a_zero, ctx, -2),
                                _unit_dequantized(b, b_zero, ctx, -1), ctx), ctx)
    return matmul(_centered_int32(a, a_zero, ctx, axis=0 if ctx.rank(a) == 1 else ctx.rank(a) - 2),
                  _centered_int32(b, b_zero, ctx), ctx)


def _onnx_conv(inputs, attrs, ctx):
    """ONNX Conv's converter (registered by onnx_ops_nn) on ``inputs``."""
    from kiln.relay.frontend.onnx_registry import get_converter

    return get_converter("Conv", ctx.opset)(inputs, attrs, ctx)


def _conv_integer(inputs, attrs, ctx):
    x, w = inputs[0], inputs[1]
    x_zero = inputs[2] if len(inputs) > 2 else None
    w_zero = inputs[3] if len(inputs) > 3 else None
    if ctx.rank(x) == 4 and _integer_operands(x, x_zero, ctx) and \
            _integer_operands(w, w_zero, ctx, per_axis_ok=True):
        return _to_int32(_onnx_conv([_unit_dequantized(x, x_zero, ctx, 1),
                                     _unit_dequantized(w, w_zero, ctx, 0)], attrs, ctx), ctx)
    return _onnx_conv([_centered_int32(x, x_zero, ctx),
                       _centered_int32(w, w_zero, ctx, axis=0)], attrs, ctx)


def _qlinear_conv(inputs, attrs, ctx):
    """QLinearConv: dequantize -> Conv (+ the int32 bias at scale x_scale * w_scale) ->
    quantize; FakeQuantizationToInteger makes it qnn.conv2d + bias_add + requantize."""
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero = inputs[:8]
    bias = inputs[8] if len(inputs) > 8 else None
    conv_inputs = [dequantized(x, x_scale, x_zero, ctx), dequantized(w, w_scale, w_zero, ctx,
                                                                     axis=0)]
    if bias is not None:
        xs, ws = ctx.value(x_scale), ctx.value(w_scale)
        if xs is not None and ws is not None:
            bias_scale = (np.float32(xs) * np.asarray(ws, "float32")).astype("float32")
            conv_inputs.append(dequantized(bias, relay.const(bias_scale), None, ctx, axis=0))
        else:
            conv_inputs.append(relay.multiply(relay.cast(bias, "float32"), relay.multiply(
                relay.cast(x_scale, "float32"), relay.cast(w_scale, "float32"))))
    return quantized(_onnx_conv(conv_inputs, attrs, ctx), y_scale, y_zero, ctx.dtype(y_zero),
                     ctx)


def _qlinear_binary(fn):
    """com.microsoft QLinearAdd/QLinearMul: (A, A_scale, A_zp, B, B_scale, B_zp, C_scale,
    C_zp) as dequantize -> op -> quantize."""

    def convert(inputs, attrs, ctx):
        a, a_s, a_z, b, b_s, b_z, c_s = inputs[:7]
        c_z = inputs[7] if len(inputs) > 7 else None
        value = fn(dequantized(a, a_s, a_z, ctx), dequantized(b, b_s, b_z, ctx))
        return quantized(value, c_s, c_z, ctx.dtype(a), ctx)

    return convert


def _qlinear_unary(fn):
    """com.microsoft QLinearSigmoid/LeakyRelu/AveragePool/GlobalAveragePool: (X, X_scale,
    X_zp, Y_scale, Y_zp) as dequantize -> op -> quantize."""

    def convert(inputs, attrs, ctx):
        x, x_s, x_z, y_s = inputs[:4]
        y_z = inputs[4] if len(inputs) > 4 else None
        value = fn([dequantized(x, x_s, x_z, ctx)], attrs, ctx)
        return quantized(value, y_s, y_z, ctx.dtype(x), ctx)

    return convert


def _qlinear_concat(inputs, attrs, ctx):
    """com.microsoft QLinearConcat: (Y_scale, Y_zp, then (X, X_scale, X_zp) per input)."""
    y_s, y_z = inputs[0], inputs[1]
    groups = [inputs[i:i + 3] for i in range(2, len(inputs), 3)]
    values = [dequantized(x, s, z, ctx) for x, s, z in groups]
    axis = attrs.get("axis", 0)
    return quantized(relay.concatenate(values, axis), y_s, y_z, ctx.dtype(groups[0][0]), ctx)


register_function("MatMulInteger", _matmul_integer, since=10)
register_function("QLinearConv", _qlinear_conv, since=10)
register_function("com.microsoft.QLinearAdd", _qlinear_binary(relay.add))
register_function("com.microsoft.QLinearMul", _qlinear_binary(relay.multiply))
register_function("com.microsoft.QLinearConcat", _qlinear_concat)


def _register_unary_qlinear_ops() -> None:
    from kiln.relay.frontend.onnx_registry import get_converter

    for name, onnx_name in (("QLinearSigmoid", "Sigmoid"), ("QLinearLeakyRelu", "LeakyRelu"),
                            ("QLinearAveragePool", "AveragePool"),
                            ("QLinearGlobalAveragePool", "GlobalAveragePool")):
        register_function(f"com.microsoft.{name}", _qlinear_unary(
            lambda inputs, attrs, ctx, onnx_name=onnx_name: get_converter(
                onnx_name, ctx.opset)(inputs, attrs, ctx)))


_register_unary_qlinear_ops()
register_function("ConvInteger", _conv_integer, since=10)
register_function("QuantizeLinear", _quantize)
register_function("DequantizeLinear", _dequantize)
register_function("DynamicQuantizeLinear", _dynamic_quantize, since=11)
