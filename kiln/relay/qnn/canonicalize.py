"""Lowering of the QNN core ops to plain Relay (TVM's ``QnnCanonicalize``).

Entry points: :func:`lower_quantize`, :func:`lower_dequantize`, :func:`lower_requantize`,
:func:`fixed_point_multiplier_shift`, and :data:`QNN_LOWERINGS` (op name -> lowering).

- quantize: ``cast(clip(round(x / scale) + zp, qmin, qmax), out_dtype)``;
- dequantize: ``cast(int32(q) - zp, float32) * scale``;
- requantize: in int64, ``q - in_zp`` times the fixed-point multiplier of
  ``in_scale / out_scale`` (``(x << left) * M + nudge >> right``, the nudge set by the
  rounding mode), ``+ out_zp``, clipped to out_dtype (not for int32, as in TVM); with a float
  compute_dtype it is the float product, rounded. Per-channel parameters broadcast along axis.
  With UPWARD rounding, where it gives the same results (no input zero point, multipliers
  below 1), it is TVM's int32 form: ``fixed_point_multiply[_per_axis]``, clip, ``+ out_zp``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.relay import op as _op
from kiln.relay.expr import Call, const
from kiln.relay.op.op import constant_value
from kiln.relay.qnn.op import dtype_range, get_requantize_config
from kiln.relay.transform.pass_util import type_of
from kiln.relay.transform.simplify_inference import expand_bias_to_match_axis
from kiln.runtime.error import TVMError

__all__ = ["lower_quantize", "lower_dequantize", "lower_requantize", "fixed_point_multiply",
           "fixed_point_multiplier_shift", "QNN_LOWERINGS"]


def fixed_point_multiplier_shift(multiplier: float) -> tuple[int, int]:
    """``(M, shift)`` with ``multiplier ~= M * 2**(shift - 31)`` and M an int32 in
    [2**30, 2**31) (TVM's ``GetFixedPointMultiplierShift``); 0 gives (0, 0)."""
    if multiplier == 0:
        return 0, 0
    significand, exponent = math.frexp(multiplier)
    # round half away from zero, as std::round
    fixed = int(math.floor(abs(significand) * (1 << 31) + 0.5)) * (1 if significand > 0 else -1)
    if abs(fixed) == 1 << 31:
        fixed //= 2
        exponent += 1
    return fixed, exponent


def ndim_of(expr: Any, what: str = "an argument") -> int:
    ty = type_of(expr)
    if ty is None or not hasattr(ty, "shape"):
        raise TVMError(f"qnn canonicalization needs the type of {what}; run InferType first")
    return len(ty.shape)


def along_axis(param: Any, original: Any, ndim: int, axis: int) -> Any:
    """A per-channel (1-D) parameter gets trailing unit axes so it broadcasts along ``axis``."""
    if ndim_of(original, "a scale or zero point") == 1 and ndim > 0:
        return expand_bias_to_match_axis(param, ndim, axis)
    return param


def check_zero_point_range(zp: Any, data: Any, op_name: str, what: str) -> None:
    """A constant zero point must lie in the range of its data's dtype (known only once typed,
    so checked here rather than by the constructor)."""
    value = constant_value(zp)
    dtype = str(type_of(data).dtype)
    if value is None or dtype not in ("int8", "uint8", "int16", "uint16"):
        return
    lo, hi = dtype_range(dtype)
    if np.any(value < lo) or np.any(value > hi):
        raise TVMError(f"{op_name}: {what} {value.tolist()} is outside the input dtype "
                       f"{dtype}'s range [{lo}, {hi}]")


def _axis(call: Call, ndim: int) -> int:
    axis = int(call.attrs.axis)
    return axis + ndim if axis < 0 else axis


def lower_quantize(call: Call, node: Call) -> Any:
    """``qnn.quantize`` as float divide, round, add, clip and cast."""
    data, scale, zp = call.args
    ndim = ndim_of(node.args[0], "qnn.quantize's data")
    axis = _axis(call, ndim)
    scale = along_axis(scale, node.args[1], ndim, axis)
    zp = along_axis(_op.cast(zp, "float32"), node.args[2], ndim, axis)
    lo, hi = dtype_range(call.attrs.out_dtype)
    value = _op.add(_op.round(_op.divide(data, scale)), zp)
    return _op.cast(_op.clip(value, float(lo), float(hi)), call.attrs.out_dtype)


def lower_dequantize(call: Call, node: Call) -> Any:
    """``qnn.dequantize`` as integer subtract, cast and float multiply."""
    data, scale, zp = call.args
    ndim = ndim_of(node.args[0], "qnn.dequantize's data")
    check_zero_point_range(zp, node.args[0], "qnn.dequantize", "input_zero_point")
    axis = _axis(call, ndim)
    scale = along_axis(scale, node.args[1], ndim, axis)
    zp = along_axis(zp, node.args[2], ndim, axis)
    shifted = _op.subtract(_op.cast(data, "int32"), zp)
    return _op.multiply(_op.cast(shifted, call.attrs.out_dtype), scale)


def _constant_scale(expr: Any, what: str) -> np.ndarray:
    value = constant_value(expr)
    if value is None:
        raise TVMError(f"qnn.requantize: {what} must be a constant to canonicalize")
    return np.asarray(value, "float32").reshape(-1)


def _per_channel_const(values: list[int], ndim: int, axis: int, per_channel: bool) -> Any:
    """An int64 constant: a scalar, or a vector laid along ``axis``."""
    if not per_channel:
        return const(np.int64(values[0]))
    shape = [1] * ndim
    shape[axis] = len(values)
    return const(np.asarray(values, "int64").reshape(shape))


def fixed_point_multiply(x: Any, multipliers: np.ndarray, rounding: str, ndim: int,
                          axis: int) -> Any:
    """``x * multiplier`` in int64 with the fixed-point multiplier and ``rounding``."""
    pairs = [fixed_point_multiplier_shift(float(m)) for m in multipliers]
    per_channel = len(pairs) > 1
    lefts = [max(shift, 0) for _, shift in pairs]
    rights = [31 + max(-shift, 0) for _, shift in pairs]
    if any(lefts):
        x = _op.left_shift(x, _per_channel_const(lefts, ndim, axis, per_channel))
    x = _op.multiply(x, _per_channel_const([m for m, _ in pairs], ndim, axis, per_channel))
    nudge = _per_channel_const([1 << (r - 1) for r in rights], ndim, axis, per_channel)
    if rounding == "TONEAREST":  # ties away from zero: one less nudge below zero
        lower = _per_channel_const([(1 << (r - 1)) - 1 for r in rights], ndim, axis,
                                   per_channel)
        nudge = _op.where(_op.greater_equal(x, const(np.int64(0))), nudge, lower)
    x = _op.add(x, nudge)
    return _op.right_shift(x, _per_channel_const(rights, ndim, axis, per_channel))


def _float_multiply(x: Any, multipliers: np.ndarray, rounding: str, dtype: str, ndim: int,
                    axis: int) -> Any:
    """``x * multiplier`` in float ``dtype``, rounded half up or half away from zero."""
    if len(multipliers) > 1:
        shape = [1] * ndim
        shape[axis] = len(multipliers)
        factor = const(multipliers.astype(dtype).reshape(shape))
    else:
        factor = const(np.asarray(multipliers[0], dtype))
    value = _op.multiply(_op.cast(x, dtype), factor)
    half = const(np.asarray(0.5, dtype))
    if rounding == "TONEAREST":
        value = _op.multiply(_op.sign(value), _op.floor(_op.add(_op.abs(value), half)))
    else:
        value = _op.floor(_op.add(value, half))
    return _op.cast(value, "int64")


def _requantize_in_int32(call: Call, node: Call, multipliers: np.ndarray, ndim: int,
                         axis: int) -> Any:
    """UPWARD requantize as TVM lowers it: ``fixed_point_multiply[_per_axis]`` on int32 (an
    int64 product inside), then the clip and the output zero point in int32 — or None where
    that could differ from the int64 form: an input zero point (``q - zp`` may leave int32),
    a multiplier >= 1 (a left shift may), a non-constant or per-channel output zero point,
    input wider than int32. Otherwise the results are equal: ``|x * M| < 2**62`` and the
    right shift is at least 31, so the product rounds into int32, and the clip runs before
    the zero point is added (``clip(y, lo - zp, hi - zp) + zp``), so nothing wraps."""
    data, _, in_zp, _, out_zp = call.args
    in_dtype = str(type_of(node.args[0]).dtype)
    zp_in, zp_out = constant_value(in_zp), constant_value(out_zp)
    if in_dtype not in ("int8", "uint8", "int16", "uint16", "int32") or zp_in is None or \
            np.any(zp_in != 0) or zp_out is None or np.size(zp_out) != 1:
        return None
    pairs = [fixed_point_multiplier_shift(float(m)) for m in multipliers]
    if any(shift > 0 for _, shift in pairs):
        return None
    x = data if in_dtype == "int32" else _op.cast(data, "int32")
    if np.all(multipliers == 1.0):
        pass
    elif len(pairs) == 1:
        x = _op.fixed_point_multiply(x, pairs[0][0], pairs[0][1])
    else:
        ints = [np.asarray(v, "int32") for v in zip(*[(m, 0, -shift) for m, shift in pairs])]
        x = _op.fixed_point_multiply_per_axis(x, const(ints[0]), const(ints[1]), const(ints[2]),
                                              False, True, [axis])
    zp = int(np.asarray(zp_out).reshape(()))
    out_dtype = call.attrs.out_dtype
    if out_dtype != "int32":
        lo, hi = dtype_range(out_dtype)
        x = _op.clip(x, float(lo - zp), float(hi - zp))
    if zp:
        x = _op.add(x, const(np.int32(zp)))
    return x if out_dtype == "int32" else _op.cast(x, out_dtype)


def lower_requantize(call: Call, node: Call) -> Any:
    """``qnn.requantize`` as int64 fixed-point (or float) arithmetic, then clip and cast."""
    data, in_scale, in_zp, out_scale, out_zp = call.args
    attrs = call.attrs
    ndim = ndim_of(node.args[0], "qnn.requantize's data")
    check_zero_point_range(in_zp, node.args[0], "qnn.requantize", "input_zero_point")
    axis = _axis(call, ndim)
    in_values = _constant_scale(in_scale, "input_scale")
    out_values = _constant_scale(out_scale, "output_scale")
    if np.any(out_values == 0):
        raise TVMError("qnn.requantize: output_scale must be nonzero")
    # the ratio in double from the float32 scales, as TVM
    multipliers = in_values.astype("float64") / out_values.astype("float64")
    default_rounding, default_compute = get_requantize_config()
    rounding = default_rounding if attrs.rounding == "None" else attrs.rounding
    compute = default_compute if attrs.compute_dtype == "None" else attrs.compute_dtype
    if compute == "int64" and rounding == "UPWARD":
        int32_form = _requantize_in_int32(call, node, multipliers, ndim, axis)
        if int32_form is not None:
            return int32_form
    x = _op.cast(data, "int64")
    if constant_value(in_zp) is None or np.any(constant_value(in_zp) != 0):
        x = _op.subtract(x, along_axis(_op.cast(in_zp, "int64"), node.args[2], ndim, axis))
    if np.any(multipliers != 1.0):
        if compute == "int64":
            x = fixed_point_multiply(x, multipliers, rounding, ndim, axis)
        else:
            x = _float_multiply(x, multipliers, rounding, compute, ndim, axis)
    if constant_value(out_zp) is None or np.any(constant_value(out_zp) != 0):
        x = _op.add(x, along_axis(_op.cast(out_zp, "int64"), node.args[4], ndim, axis))
    if attrs.out_dtype != "int32":
        lo, hi = dtype_range(attrs.out_dtype)
        x = _op.clip(x, float(lo), float(hi))
    return _op.cast(x, attrs.out_dtype)


# op name -> lowering(rewritten call, original typed call)
QNN_LOWERINGS: dict[str, Callable[[Call, Call], Any]] = {
    "qnn.quantize": lower_quantize,
    "qnn.dequantize": lower_dequantize,
    "qnn.requantize": lower_requantize,
}
