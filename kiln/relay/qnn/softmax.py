"""``qnn.softmax``: softmax of an int8 tensor in integer arithmetic (TVM's ``softmax.cc``).

Entry point: :func:`softmax` (TVM's signature ``softmax(x, scale, zero_point, output_scale,
output_zero_point, axis=-1)``); the lowering joins
:data:`~kiln.relay.qnn.canonicalize.QNN_LOWERINGS`.

The canonical form is TVM's shift-based approximation, integers only (no float unit needed,
which is the point on a microcontroller). With ``x = q - max(q)`` (``<= 0``) and ``x0 =
round(1 / scale)`` (the integer that stands for 1.0):

- ``x' = x + (x >> 1) - (x >> 4)`` approximates ``x * log2(e)``;
- ``k = clip(x' / -x0, 0, 20)`` and ``r = x' + k * x0`` split it into an integer power of two
  and a remainder in ``(-x0, 0]``; ``b = (r >> 1) + x0`` approximates ``x0 * 2**(r / x0)``;
- ``e = b << (max(k) - k)`` are the exponentials scaled by ``2**max(k)``, and
  ``(2**30 / sum(e)) * e >> 23`` the probabilities in units of ``2**-7``, requantized (UPWARD)
  from scale ``1/128`` to the output parameters.

A row long enough for TVM's int32 sum of ``e`` to wrap (a few hundred values; every row of
unknown length) sums in int64 and takes ``2**62 / sum`` instead of ``2**30 / sum``.

As TVM says of it: experimental, and coarse (a few output steps off a float softmax); the
input scale must be a constant no larger than 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay import op as _op
from kiln.relay.expr import Call, const
from kiln.relay.op.op import OPAQUE, call, constant_value, define_op
from kiln.relay.op.op_attrs import SoftmaxAttrs
from kiln.relay.op.type_relations import dims, fail, normalize_axis, tensor_arg, tensor_type
from kiln.relay.qnn.canonicalize import QNN_LOWERINGS
from kiln.relay.qnn.common import check_scalar_param, make_scale, make_zero_point
from kiln.relay.qnn.op import requantize
from kiln.relay.transform.pass_util import type_of
from kiln.runtime.error import TVMError

__all__ = ["softmax"]

_PARAMS = ("scale", "zero_point", "output_scale", "output_zero_point")
_M = 30  # 2**30 / sum: the reciprocal's fixed-point bits
_BITS = 8  # output probabilities in units of 2**-(_BITS - 1)
_MAX_SHIFT = 20
_M_WIDE = 62  # the reciprocal's bits in the int64 form: (2**62 // sum) * e <= 2**62
_LOWEST_X_P = 367  # -x' at x = -255, the lowest int8 difference from the row's maximum


def _softmax_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    if str(data.dtype) != "int8":
        fail(f"{op_name}: data must be int8, got {data.dtype}")
    normalize_axis(int(attrs.axis), len(dims(data)), op_name)
    for index, name in enumerate(_PARAMS, start=1):
        check_scalar_param(types, index, name, op_name)
    return tensor_type(dims(data), "int8")


define_op("qnn.softmax", _softmax_rel, OPAQUE, 5, SoftmaxAttrs,
          "softmax of a quantized int8 tensor", 11)


def softmax(x: Any, scale: Any, zero_point: Any, output_scale: Any, output_zero_point: Any,
            axis: int = -1) -> Any:
    """Quantized softmax along ``axis``: int8 ``x`` with (scale, zero_point) in, int8 with
    (output_scale, output_zero_point) out."""
    name = "qnn.softmax"
    return call(name, [x, make_scale(scale, f"{name}: scale"),
                       make_zero_point(zero_point, f"{name}: zero_point"),
                       make_scale(output_scale, f"{name}: output_scale"),
                       make_zero_point(output_zero_point, f"{name}: output_zero_point")],
                SoftmaxAttrs(axis=int(axis)))


def _i32(value: int) -> Any:
    return const(np.int32(value))


def lower_softmax(call_: Call, node: Call) -> Any:  # noqa: ARG001 (lowering signature)
    """TVM's integer approximation (see the module docstring)."""
    data, scale, zero_point, out_scale, out_zero_point = call_.args
    value = constant_value(scale)
    if value is None or value.size != 1:
        raise TVMError("qnn.softmax: the input scale must be a constant scalar")
    input_scale = float(np.asarray(value).reshape(()))
    if not 0.0 < input_scale <= 1.0:
        raise TVMError(f"qnn.softmax: the input scale must be in (0, 1], got {input_scale}")
    axis = [int(call_.attrs.axis)]
    one = int(np.round(np.float32(1.0) / np.float32(input_scale)))  # x0: 1.0 in input steps
    q = _op.subtract(_op.cast(data, "int32"), _op.cast(zero_point, "int32"))
    x = _op.subtract(q, _op.max(q, axis, keepdims=True))
    x_p = _op.subtract(_op.add(x, _op.right_shift(x, _i32(1))), _op.right_shift(x, _i32(4)))
    k = _op.clip(_op.divide(x_p, _i32(-one)), 0.0, float(_MAX_SHIFT))
    r = _op.subtract(x_p, _op.multiply(k, _i32(-one)))
    base = _op.add(_op.right_shift(r, _i32(1)), _i32(one))
    exps = _op.left_shift(base, _op.subtract(_op.max(k, axis, keepdims=True), k))
    if _sum_fits_int32(node, one):  # TVM's algorithm as it is
        total = _op.sum(exps, axis, keepdims=True)
        probs = _op.right_shift(_op.multiply(_op.divide(_i32(1 << _M), total), exps),
                                _i32(_M - (_BITS - 1)))
    else:  # a long row: the sum in int64, and 2**62 / sum keeps its precision
        exps = _op.cast(exps, "int64")
        total = _op.sum(exps, axis, keepdims=True)
        wide = _op.multiply(_op.divide(const(np.int64(1 << _M_WIDE)), total), exps)
        probs = _op.cast(_op.right_shift(wide, const(np.int64(_M_WIDE - (_BITS - 1)))),
                         "int32")
    return requantize(probs, const(np.float32(1.0 / (1 << (_BITS - 1)))), _i32(0), out_scale,
                      out_zero_point, axis=0, rounding="UPWARD", out_dtype="int8")


def _sum_fits_int32(node: Call, one: int) -> bool:
    """Whether a row's sum of exponentials fits int32 whatever the data: each is at most
    ``one * 2**max(k)`` (``r <= 0``), and ``k`` is at most the shift of the lowest ``x'``
    (``x = -255``: ``x' = -367``). A row of unknown length, or one long enough to pass
    2**31 (about 200 values at scale 0.1), takes the int64 form: TVM's int32 sum wraps
    there and the probabilities come out wrong."""
    shape = dims(type_of(node.args[0]))
    extent = shape[normalize_axis(int(node.attrs.axis), len(shape), "qnn.softmax")]
    if not isinstance(extent, int):
        return False
    largest = one << min(_MAX_SHIFT, _LOWEST_X_P // one)
    return extent * largest < 2**31


QNN_LOWERINGS["qnn.softmax"] = lower_softmax
