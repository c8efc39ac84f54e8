"""``qnn.concatenate`` and its lowering (TVM's ``concatenate.cc``).

Entry points: :func:`concatenate`; its lowering joins
:data:`~kiln.relay.qnn.canonicalize.QNN_LOWERINGS`.

Each input whose (scale, zero point) differ from the output's is requantized to them (in its
own dtype); then a plain ``concatenate``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.ir.type import TupleType
from kiln.relay import op as _op
from kiln.relay.expr import Call, Tuple, TupleGetItem
from kiln.relay.op.op import INJECTIVE, call, constant_value, define_op
from kiln.relay.op.op_attrs import ConcatenateAttrs
from kiln.relay.op.type_relations import fail
from kiln.relay.qnn.canonicalize import QNN_LOWERINGS
from kiln.relay.qnn.common import check_scalar_param, make_scale, make_zero_point, reuse_relation
from kiln.relay.qnn.op import requantize
from kiln.relay.transform.pass_util import type_of
from kiln.runtime.error import TVMError

__all__ = ["concatenate", "lower_concatenate"]


def _concatenate_rel(types, attrs, op_name):
    data = types[0]
    if not isinstance(data, TupleType):
        fail(f"{op_name}: data must be a tuple of tensors, got {data}")
    n = len(data.fields)
    for index, name in ((1, "input_scales"), (2, "input_zero_points")):
        if not isinstance(types[index], TupleType):
            fail(f"{op_name}: {name} must be a tuple, got {types[index]}")
        if len(types[index].fields) != n:
            fail(f"{op_name}: {name} has {len(types[index].fields)} values for {n} inputs")
        for field in range(n):
            check_scalar_param(types[index].fields, field, f"{name}[{field}]", op_name)
    check_scalar_param(types, 3, "output_scale", op_name)
    check_scalar_param(types, 4, "output_zero_point", op_name)
    return reuse_relation("concatenate", [data], attrs, op_name)


define_op("qnn.concatenate", _concatenate_rel, INJECTIVE, 5, ConcatenateAttrs,
          "concatenate quantized tensors, requantizing inputs to the output's parameters", 11)


def concatenate(data: Any, input_scales: Any, input_zero_points: Any, output_scale: Any,
                output_zero_point: Any, axis: int) -> Any:
    """Concatenate quantized tensors along ``axis``; each input has its own (scale, zero
    point) and the result has (output_scale, output_zero_point)."""
    if hasattr(data, "tuple_value"):  # a TupleWrapper
        data = data.tuple_value
    if isinstance(data, (list, tuple)):
        data = Tuple(list(data))
    if not isinstance(axis, (int, np.integer)):
        raise TVMError(f"qnn.concatenate: axis must be an integer, got {axis!r}")
    scales = Tuple([make_scale(s, f"qnn.concatenate: input_scales[{i}]")
                    for i, s in enumerate(input_scales)])
    zps = Tuple([make_zero_point(z, f"qnn.concatenate: input_zero_points[{i}]")
                 for i, z in enumerate(input_zero_points)])
    return call("qnn.concatenate", [
        data, scales, zps, make_scale(output_scale, "qnn.concatenate: output_scale"),
        make_zero_point(output_zero_point, "qnn.concatenate: output_zero_point")],
        ConcatenateAttrs(axis=int(axis)))


def _same_scalar(a: Any, b: Any) -> bool:
    va, vb = constant_value(a), constant_value(b)
    return va is not None and vb is not None and float(va.reshape(-1)[0]) == float(
        vb.reshape(-1)[0])


def lower_concatenate(call_: Call, node: Call) -> Any:
    """Requantize the inputs whose parameters differ from the output's, then concatenate."""
    data, scales, zps, out_scale, out_zp = call_.args
    field_types = type_of(node.args[0]).fields
    if isinstance(data, Tuple):
        fields = list(data.fields)
    else:
        fields = [TupleGetItem(data, i) for i in range(len(field_types))]
    if not isinstance(scales, Tuple) or not isinstance(zps, Tuple):
        raise TVMError("qnn.concatenate: input_scales and input_zero_points must be tuples of "
                       "expressions to canonicalize")
    out = []
    for field, ty, scale, zp in zip(fields, field_types, scales.fields, zps.fields):
        if _same_scalar(scale, out_scale) and _same_scalar(zp, out_zp):
            out.append(field)
        else:
            out.append(requantize(field, scale, zp, out_scale, out_zp,
                                  out_dtype=str(ty.dtype)))
    return _op.concatenate(Tuple(out), int(call_.attrs.axis))


QNN_LOWERINGS["qnn.concatenate"] = lower_concatenate
