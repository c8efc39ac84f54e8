"""``qnn.dense`` and ``qnn.batch_matmul`` and their lowering (TVM's ``dense.cc``,
``batch_matmul.cc``).

Entry points: :func:`dense`, :func:`batch_matmul`; their lowerings join
:data:`~kiln.relay.qnn.canonicalize.QNN_LOWERINGS`.

With K the reduction length, ``sum_k (x - zp_x)(w - zp_w)`` is built as
T1 - T2 - T3 + T4: T1 the plain integer product (``nn.dense`` / ``nn.batch_matmul``), T2 =
zp_w * (row sums of x), T3 = zp_x * (row sums of w), T4 = zp_x * zp_w * K; terms whose zero
point is a constant 0 are dropped. ``qnn.dense`` takes a per-unit (vector) kernel scale and
zero point; ``qnn.batch_matmul`` only scalars and ``y`` transposed, as in TVM.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay import op as _op
from kiln.relay.expr import Call, const
from kiln.relay.op import nn as _nn
from kiln.relay.op.nn.dense import dense_op
from kiln.relay.op.op import OUT_ELEMWISE_FUSABLE, call, define_op
from kiln.relay.op.op_attrs import BatchMatmulAttrs, DenseAttrs
from kiln.relay.op.type_relations import tensor_arg
from kiln.relay.qnn.canonicalize import QNN_LOWERINGS, check_zero_point_range
from kiln.relay.qnn.common import (
    channel_vector,
    check_dtype,
    check_scalar_param,
    is_zero,
    kernel_op_rel,
    make_scale,
    make_zero_point,
    reuse_relation,
)
from kiln.relay.qnn.convolution import static_shape
from kiln.runtime.error import TVMError

__all__ = ["dense", "batch_matmul", "lower_dense", "lower_batch_matmul"]

_OUT_DTYPES = ("int32", "int64")


def _dense_rel(types, attrs, op_name):
    return kernel_op_rel(types, attrs, op_name, dense_op,
                         (("int8", "uint8", "int16", "uint16"), ("int8", "uint8"), _OUT_DTYPES),
                         lambda out_dims: out_dims[-1])


def _batch_matmul_rel(types, attrs, op_name):
    x, y = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    check_dtype(x.dtype, ("int8", "uint8"), "x", op_name)
    check_dtype(y.dtype, ("int8", "uint8"), "y", op_name)
    check_dtype(attrs.out_dtype, ("int32",), "out_dtype", op_name)
    for index, name in ((2, "x_zero_point"), (3, "y_zero_point"), (4, "x_scale"),
                        (5, "y_scale")):
        check_scalar_param(types, index, name, op_name)
    return reuse_relation("nn.batch_matmul", types[:2], attrs, op_name)


define_op("qnn.dense", _dense_rel, OUT_ELEMWISE_FUSABLE, 6, DenseAttrs,
          "quantized x @ w.T accumulating in out_dtype", 11)
define_op("qnn.batch_matmul", _batch_matmul_rel, OUT_ELEMWISE_FUSABLE, 6, BatchMatmulAttrs,
          "quantized batched x @ y.T accumulating in int32", 11)


def dense(data: Any, weight: Any, input_zero_point: Any, kernel_zero_point: Any,
          input_scale: Any, kernel_scale: Any, units: Any, out_dtype: str = "int32") -> Any:
    """Quantized ``data @ weight.T`` in ``out_dtype`` (scale ``input_scale * kernel_scale``,
    zero point 0); ``kernel_scale``/``kernel_zero_point`` may hold one value per unit."""
    if out_dtype not in _OUT_DTYPES:
        raise TVMError(f"qnn.dense: out_dtype must be one of {_OUT_DTYPES}, got {out_dtype!r}")
    return call("qnn.dense", [
        data, weight, make_zero_point(input_zero_point, "qnn.dense: input_zero_point"),
        make_zero_point(kernel_zero_point, "qnn.dense: kernel_zero_point"),
        make_scale(input_scale, "qnn.dense: input_scale"),
        make_scale(kernel_scale, "qnn.dense: kernel_scale")],
        DenseAttrs(units=None if units is None else int(units), out_dtype=out_dtype))


def batch_matmul(x: Any, y: Any, x_zero_point: Any, y_zero_point: Any, x_scale: Any,
                 y_scale: Any, out_dtype: str = "int32") -> Any:
    """Quantized ``x[b] @ y[b].T`` in int32 (scale ``x_scale * y_scale``, zero point 0)."""
    if out_dtype != "int32":
        raise TVMError(f"qnn.batch_matmul: out_dtype must be int32, got {out_dtype!r}")
    return call("qnn.batch_matmul", [
        x, y, make_zero_point(x_zero_point, "qnn.batch_matmul: x_zero_point"),
        make_zero_point(y_zero_point, "qnn.batch_matmul: y_zero_point"),
        make_scale(x_scale, "qnn.batch_matmul: x_scale"),
        make_scale(y_scale, "qnn.batch_matmul: y_scale")],
        BatchMatmulAttrs(out_dtype=out_dtype, transpose_a=False, transpose_b=True))


def _zero_point_terms(node: Call, term1: Any, lhs: Any, rhs: Any, zp_l: Any, zp_r: Any,
                      k: int, out_dtype: str, rhs_sums_shape: Any) -> Any:
    """T1 - zp_r * rowsum(lhs) - zp_l * rowsum(rhs) + zp_l * zp_r * K (both reduce the last
    axis; ``rhs_sums_shape`` reshapes rhs's sums to broadcast against the output)."""
    lhs_typed, rhs_typed, op_name = node.args[0], node.args[1], node.op.name
    names = ("input", "kernel") if op_name == "qnn.dense" else ("x", "y")
    check_zero_point_range(zp_l, lhs_typed, op_name, f"{names[0]}_zero_point")
    check_zero_point_range(zp_r, rhs_typed, op_name, f"{names[1]}_zero_point")
    zero_l, zero_r = is_zero(zp_l), is_zero(zp_r)
    zp_l, zp_r = _op.cast(zp_l, out_dtype), _op.cast(zp_r, out_dtype)
    result = term1
    if not zero_r:
        lhs_sums = _op.sum(_op.cast(lhs, out_dtype), axis=[-1], keepdims=True)
        result = _op.subtract(result, _op.multiply(lhs_sums, zp_r))
    if not zero_l:
        rhs_sums = _op.sum(_op.cast(rhs, out_dtype), axis=[-1])
        if rhs_sums_shape is not None:
            rhs_sums = _op.reshape(rhs_sums, rhs_sums_shape)
        term3 = _op.multiply(rhs_sums, zp_l)
        if not zero_r:
            term3 = _op.subtract(term3, _op.multiply(
                _op.multiply(zp_l, zp_r), const(np.asarray(k, out_dtype))))
        result = _op.subtract(result, term3)
    return result


def lower_dense(call_: Call, node: Call) -> Any:
    """``qnn.dense`` as ``nn.dense`` on the integers plus the zero-point terms."""
    data, weight, zp_a, zp_w = call_.args[:4]
    out_dtype = str(call_.attrs.out_dtype)
    k = static_shape(node.args[1], "the weight", "qnn.dense")[1]
    term1 = _nn.dense(data, weight, units=call_.attrs.units, out_dtype=out_dtype)
    ndim = len(static_shape(node, "the output", "qnn.dense"))
    zp_w = channel_vector(zp_w, node.args[3], ndim, ndim - 1)
    return _zero_point_terms(node, term1, data, weight, zp_a, zp_w, k, out_dtype, None)


def lower_batch_matmul(call_: Call, node: Call) -> Any:
    """``qnn.batch_matmul`` as ``nn.batch_matmul`` (y transposed) plus the zero-point terms."""
    x, y, zp_x, zp_y = call_.args[:4]
    attrs = call_.attrs
    if attrs.transpose_a or not attrs.transpose_b:
        raise TVMError("qnn.batch_matmul supports only transpose_a=False, transpose_b=True")
    yshape = static_shape(node.args[1], "y", "qnn.batch_matmul")
    term1 = _nn.batch_matmul(x, y, out_dtype=str(attrs.out_dtype), transpose_a=False,
                             transpose_b=True)
    return _zero_point_terms(node, term1, x, y, zp_x, zp_y, yshape[2], str(attrs.out_dtype),
                             [yshape[0], 1, yshape[1]])


QNN_LOWERINGS.update({"qnn.dense": lower_dense, "qnn.batch_matmul": lower_batch_matmul})
