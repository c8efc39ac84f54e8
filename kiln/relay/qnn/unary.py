"""The QNN unary ops (``qnn.sqrt``, ``rsqrt``, ``exp``, ``tanh``, ``erf``, ``sigmoid``,
``log``, ``abs``, ``hardswish``) and ``qnn.leaky_relu`` (TVM's ``op_common.h``,
``leaky_relu.cc`` and ``legalizations.py``).

Entry points: one constructor per op (TVM's signatures), :data:`UNARY_OPS`,
:func:`lookup_table` (the 8-bit table Legalize substitutes); the lowerings join
:data:`~kiln.relay.qnn.canonicalize.QNN_LOWERINGS`.

- unary: canonicalized as ``quantize(f(dequantize(x)))`` in the input's dtype;
  ``relay.qnn.transform.Legalize`` turns 8-bit ones into a 256-entry table lookup whose
  entries are that same expression evaluated on every input value (so both agree exactly);
- leaky_relu: x requantized to the output parameters (Q'), then ``Q'`` where x >= zp_in
  and ``alpha * Q' + (1 - alpha) * zp_out`` (fixed-point multiplies) below it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.relay import op as _op
from kiln.relay.expr import Call, const
from kiln.relay.op.op import ELEMWISE, call, define_op
from kiln.relay.op.op_attrs import LeakyReluAttrs
from kiln.relay.op.type_relations import dims, tensor_arg, tensor_type
from kiln.relay.qnn.canonicalize import (
    QNN_LOWERINGS,
    check_zero_point_range,
    fixed_point_multiply,
)
from kiln.relay.qnn.common import (
    check_dtype,
    check_scalar_param,
    make_scale,
    make_zero_point,
    requantize_or_upcast,
)
from kiln.relay.qnn.op import dequantize, dtype_range, quantize
from kiln.relay.transform.pass_util import type_of
from kiln.runtime.error import TVMError

__all__ = ["sqrt", "rsqrt", "exp", "tanh", "erf", "sigmoid", "log", "abs", "hardswish",
           "leaky_relu", "UNARY_OPS", "lookup_table"]

_DTYPES = ("int8", "uint8", "int16", "uint16")
_PARAMS = ("scale", "zero_point", "output_scale", "output_zero_point")


def _hardswish(x: Any) -> Any:
    """x * clip(x + 3, 0, 6) / 6 in float32."""
    three, six = const(np.float32(3.0)), const(np.float32(6.0))
    return _op.divide(_op.multiply(x, _op.clip(_op.add(x, three), 0.0, 6.0)), six)


# op name -> the float function on a float32 Relay expression
UNARY_OPS: dict[str, Callable[[Any], Any]] = {
    "sqrt": _op.sqrt, "rsqrt": _op.rsqrt, "exp": _op.exp, "tanh": _op.tanh, "erf": _op.erf,
    "sigmoid": _op.sigmoid, "log": _op.log, "abs": _op.abs, "hardswish": _hardswish,
}


def _unary_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    check_dtype(data.dtype, _DTYPES, "data", op_name)
    for index, name in enumerate(_PARAMS, start=1):
        check_scalar_param(types, index, name, op_name)
    return tensor_type(dims(data), data.dtype)


for _name in UNARY_OPS:
    define_op(f"qnn.{_name}", _unary_rel, ELEMWISE, 5, None,
              f"quantized element-wise {_name}", 11)
define_op("qnn.leaky_relu", _unary_rel, ELEMWISE, 5, LeakyReluAttrs,
          "quantized leaky relu", 11)


def _params(op_name: str, scale: Any, zero_point: Any, output_scale: Any,
            output_zero_point: Any) -> list:
    return [make_scale(scale, f"{op_name}: scale"),
            make_zero_point(zero_point, f"{op_name}: zero_point"),
            make_scale(output_scale, f"{op_name}: output_scale"),
            make_zero_point(output_zero_point, f"{op_name}: output_zero_point")]


def _unary_constructor(name: str) -> Callable:
    def construct(x: Any, scale: Any, zero_point: Any, output_scale: Any,
                  output_zero_point: Any) -> Any:
        op_name = f"qnn.{name}"
        return call(op_name, [x, *_params(op_name, scale, zero_point, output_scale,
                                          output_zero_point)])

    construct.__name__ = construct.__qualname__ = name
    construct.__doc__ = (f"Quantized element-wise {name}: the input with (scale, zero_point), "
                         "the result with (output_scale, output_zero_point), same dtype.")
    return construct


sqrt, rsqrt, exp, tanh, erf = (_unary_constructor(n) for n in
                               ("sqrt", "rsqrt", "exp", "tanh", "erf"))
sigmoid, log, abs, hardswish = (_unary_constructor(n) for n in  # noqa: A001 (TVM's name)
                                ("sigmoid", "log", "abs", "hardswish"))


def leaky_relu(x: Any, alpha: float, input_scale: Any, input_zero_point: Any,
               output_scale: Any, output_zero_point: Any) -> Any:
    """Quantized leaky relu with slope ``alpha`` below zero."""
    if not np.isfinite(alpha):
        raise TVMError(f"qnn.leaky_relu: alpha must be finite, got {alpha}")
    return call("qnn.leaky_relu", [x, *_params("qnn.leaky_relu", input_scale, input_zero_point,
                                               output_scale, output_zero_point)],
                LeakyReluAttrs(alpha=float(alpha)))


def _float_form(name: str, data: Any, scale: Any, zp: Any, out_scale: Any, out_zp: Any,
                dtype: str) -> Any:
    return quantize(UNARY_OPS[name](dequantize(data, scale, zp)), out_scale, out_zp,
                    out_dtype=dtype)


def _lower_unary(name: str) -> Callable[[Call, Call], Any]:
    def lower(call_: Call, node: Call) -> Any:
        data, scale, zp, out_scale, out_zp = call_.args
        check_zero_point_range(zp, node.args[0], node.op.name, "zero_point")
        return _float_form(name, data, scale, zp, out_scale, out_zp,
                           str(type_of(node.args[0]).dtype))

    lower.__name__ = f"lower_{name}"
    return lower


def lookup_table(name: str, scale: Any, zp: Any, out_scale: Any, out_zp: Any,
                 dtype: str) -> np.ndarray:
    """The 8-bit table of ``qnn.<name>``: entry i is the canonical form evaluated at
    ``dtype``'s i-th value (from its minimum up)."""
    import kiln
    from kiln.relay.backend.interpreter import Interpreter
    from kiln.relay.qnn.transform import CanonicalizeOps

    lo, hi = dtype_range(dtype)
    values = const(np.arange(lo, hi + 1).astype(dtype))
    mod = CanonicalizeOps()(kiln.IRModule.from_expr(
        _float_form(name, values, scale, zp, out_scale, out_zp, dtype)))
    with np.errstate(all="ignore"):  # sqrt/log of negative values quantize like NumPy's nan
        return Interpreter(mod).evaluate()().numpy()


def lower_leaky_relu(call_: Call, node: Call) -> Any:
    """Q' = requantize(x) to the output parameters; Q' where x >= zp, else
    alpha * Q' + (1 - alpha) * zp_out (fixed-point, as TVM)."""
    data, scale, zp, out_scale, out_zp = call_.args
    dtype = str(type_of(node.args[0]).dtype)
    check_zero_point_range(zp, node.args[0], "qnn.leaky_relu", "input_zero_point")
    alpha = float(call_.attrs.alpha)
    requantized = requantize_or_upcast(data, scale, zp, out_scale, out_zp)
    ndim = len(type_of(node.args[0]).shape)
    prod = fixed_point_multiply(_op.cast(requantized, "int64"), np.array([alpha]), "UPWARD",
                                ndim, 0)
    shifted_zp = fixed_point_multiply(_op.cast(out_zp, "int64"), np.array([1.0 - alpha]),
                                      "UPWARD", 0, 0)
    below = _op.cast(_op.add(prod, shifted_zp), "int32")
    out = _op.where(_op.less(_op.cast(data, "int32"), _op.cast(zp, "int32")), below,
                    requantized)
    lo, hi = dtype_range(dtype)
    return _op.cast(_op.clip(out, float(lo), float(hi)), dtype)


QNN_LOWERINGS.update({f"qnn.{n}": _lower_unary(n) for n in UNARY_OPS})
QNN_LOWERINGS["qnn.leaky_relu"] = lower_leaky_relu
