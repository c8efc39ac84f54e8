"""The matrix-product family: ``nn.dense``, ``nn.matmul``, ``nn.batch_matmul``,
``nn.contrib_dense_pack`` — everything kiln knows about them, in one place.

Entry points (TVM's signatures): :func:`dense`, :func:`matmul`, :func:`batch_matmul`,
:func:`contrib_dense_pack`. Per op this module registers its attrs type, type relation
(+ ``FInferArgTypes`` of an unannotated weight), pattern kind (``OUT_ELEMWISE_FUSABLE``),
TE compute and schedule kind (the ``<op>.generic`` strategy), reference NumPy rule, VM shape
function, gradient, MAC count and FoldScaleAxis rules. The op objects (``dense_op``,
``matmul_op``, ``dense_pack_op``, ``batch_matmul_op``) are what other packages (QNN, quantize)
compare calls with; the tiled x86 and Cortex-M implementations are registered by
``strategy/x86.py`` and ``strategy/arm_cpu.py`` on :data:`dense_strategy`,
:data:`dense_pack_strategy` and :data:`batch_matmul_strategy` (TVM's generic strategy
functions), beside each target's other schedules.

Example
-------
>>> from kiln import relay
>>> y = relay.nn.dense(relay.var("x", shape=(4, 8)), relay.var("w", shape=(16, 8)))
>>> relay.analysis.get_total_mac_number(y)
512
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.op import (
    OUT_ELEMWISE_FUSABLE,
    StrategyFunction,
    call,
    define_op,
    register_arg_types,
    register_compute,
    register_fold_scale_axis,
    register_gradient,
    register_mac_count,
    register_opaque_schedule,
    register_reference,
    register_shape_func,
)
from kiln.relay.op.reshape import transpose
from kiln.relay.op.rule_util import (
    broadcast_dims,
    out_dtype,
    out_shape,
    reference_dtype,
    static_or_symbolic,
    wide_dtype,
)
from kiln.relay.op.type_relations import (
    Any as DynDim,
)
from kiln.relay.op.type_relations import (
    dim_op,
    dims,
    dims_equal,
    fail,
    is_any,
    is_static,
    shape_str,
    tensor_arg,
    tensor_type,
)

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.
__all__ = ["dense", "matmul", "contrib_dense_pack", "batch_matmul"]


# ---- type relations -------------------------------------------------------------------------
def _check_reduction(a, b, op_name, lhs, rhs):
    if is_static(a) and is_static(b) and a != b:
        fail(f"{op_name}: reduction dims differ: {a} in {shape_str(lhs)} vs {b} in "
             f"{shape_str(rhs)}")


def _matmul_rel(types, attrs, op_name):
    a, b = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    x, w = dims(a), dims(b)
    transpose_a = bool(getattr(attrs, "transpose_a", False))
    transpose_b = bool(getattr(attrs, "transpose_b", True))  # dense: weight is (units, K)
    if len(x) < 1 or len(w) != 2 or (transpose_a and len(x) < 2):
        fail(f"{op_name}: expects data of rank >= 1 and a rank-2 weight, got "
             f"{shape_str(x)} and {shape_str(w)}")
    if transpose_a:
        x = x[:-2] + [x[-1], x[-2]]
    n, k = (w[0], w[1]) if transpose_b else (w[1], w[0])
    _check_reduction(x[-1], k, op_name, dims(a), w)
    if attrs.units is not None:
        if is_static(n) and n != int(attrs.units):
            fail(f"{op_name}: units={attrs.units} but the weight gives {n} outputs")
        n = int(attrs.units)
    return tensor_type(x[:-1] + [n], attrs.out_dtype or a.dtype)


def _matmul_weight(types, attrs, op_name):
    """``FInferArgTypes`` of dense/matmul: an unannotated weight from the data and ``units``."""
    if types[0] is None or types[1] is not None or attrs.units is None:
        return {}
    a = tensor_arg(types, 0, op_name)
    x = dims(a)
    transpose_a = bool(getattr(attrs, "transpose_a", False))
    if len(x) < (2 if transpose_a else 1):
        return {}  # the relation reports the bad rank
    k, units = (x[-2] if transpose_a else x[-1]), int(attrs.units)
    transpose_b = bool(getattr(attrs, "transpose_b", True))
    return {1: tensor_type([units, k] if transpose_b else [k, units], a.dtype)}


def _dense_pack_rel(types, attrs, op_name):
    a, b = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    x, w = dims(a), dims(b)
    if len(w) != 3:
        fail(f"{op_name}: expects a packed (N/n, K, n) weight, got {shape_str(w)}")
    _check_reduction(x[-1], w[1], op_name, x, w)
    return tensor_type(x[:-1] + [dim_op(lambda p, q: p * q, w[0], w[2])],
                       attrs.out_dtype or a.dtype)


def _batch_matmul_rel(types, attrs, op_name):
    a, b = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    x, y = dims(a), dims(b)
    if len(x) != 3 or len(y) != 3:
        fail(f"{op_name}: expects rank-3 operands, got {shape_str(x)} and {shape_str(y)}")
    m, k1 = (x[2], x[1]) if attrs.transpose_a else (x[1], x[2])
    n, k2 = (y[1], y[2]) if attrs.transpose_b else (y[2], y[1])
    _check_reduction(k1, k2, op_name, x, y)
    if is_any(x[0]) or is_any(y[0]):
        batch = DynDim()
    elif dims_equal(x[0], y[0]) or y[0] == 1:
        batch = x[0]
    elif x[0] == 1:
        batch = y[0]
    else:
        fail(f"{op_name}: batch dims {x[0]} and {y[0]} do not broadcast")
    return tensor_type([batch, m, n], attrs.out_dtype or a.dtype)


dense_op = define_op("nn.dense", _matmul_rel, OUT_ELEMWISE_FUSABLE, 2, A.DenseAttrs, "x @ w.T",
                     1)
matmul_op = define_op("nn.matmul", _matmul_rel, OUT_ELEMWISE_FUSABLE, 2, A.MatmulAttrs, "a @ b",
                      1)
dense_pack_op = define_op("nn.contrib_dense_pack", _dense_pack_rel, OUT_ELEMWISE_FUSABLE, 2,
                          A.DensePackAttrs, "dense on a packed weight", 10)
batch_matmul_op = define_op("nn.batch_matmul", _batch_matmul_rel, OUT_ELEMWISE_FUSABLE, 2,
                            A.BatchMatmulAttrs, "batched matrix product", 10)
# TVM's strategy generic functions: the target strategy modules (strategy/x86.py,
# strategy/arm_cpu.py …) register their implementations on these
dense_strategy = StrategyFunction(dense_op)
dense_pack_strategy = StrategyFunction(dense_pack_op)
batch_matmul_strategy = StrategyFunction(batch_matmul_op)
# nn.batch_matmul has no ``units``: an unannotated operand's extent N cannot be determined.
register_arg_types("nn.dense", _matmul_weight)
register_arg_types("nn.matmul", _matmul_weight)


# ---- constructors ---------------------------------------------------------------------------
def dense(data: Any, weight: Any, units: int | None = None, out_dtype: str = "") -> Any:
    """``data @ weight.T`` with weight ``(units, K)``.

    Example
    -------
    >>> from kiln import relay
    >>> y = relay.nn.dense(relay.var("x", shape=(4, 8)), relay.var("w", shape=(16, 8)))
    """
    return call("nn.dense", [data, weight], A.DenseAttrs(units=units, out_dtype=out_dtype))


def matmul(tensor_a: Any, tensor_b: Any, units: int | None = None, out_dtype: str = "",
           transpose_a: bool = False, transpose_b: bool = False) -> Any:
    """``op(a) @ op(b)`` with optional transposes of the last two axes."""
    return call("nn.matmul", [tensor_a, tensor_b], A.MatmulAttrs(
        units=units, out_dtype=out_dtype, transpose_a=bool(transpose_a),
        transpose_b=bool(transpose_b)))


def contrib_dense_pack(data: Any, weight: Any, weight_layout: str = "NC",
                       units: int | None = None, out_dtype: str = "") -> Any:
    """Dense with a weight packed as ``(N/n, K, n)``."""
    return call("nn.contrib_dense_pack", [data, weight], A.DensePackAttrs(
        units=units, out_dtype=out_dtype, weight_layout=weight_layout))


def batch_matmul(tensor_a: Any, tensor_b: Any, out_dtype: str = "", transpose_a: bool = False,
                 transpose_b: bool = True) -> Any:
    """Batched ``a @ b`` (``b`` given as ``(B, N, K)`` when ``transpose_b``, the default)."""
    return call("nn.batch_matmul", [tensor_a, tensor_b], A.BatchMatmulAttrs(
        out_dtype=out_dtype, transpose_a=bool(transpose_a), transpose_b=bool(transpose_b)))


# ---- computes (TOPI) and schedule kind ------------------------------------------------------
@register_compute("nn.dense")
def compute_dense(attrs, inputs, out_type):
    """``topi.nn.dense``; the x86 strategy adds the packed ``dense_pack.x86``."""
    from kiln.topi import nn as topi_nn

    return [topi_nn.dense(inputs[0], inputs[1], None, out_dtype(out_type))]


@register_compute("nn.matmul")
def compute_matmul(attrs, inputs, out_type):
    """``topi.nn.matmul`` with the transposes of the attrs."""
    from kiln.topi import nn as topi_nn

    return [topi_nn.matmul(inputs[0], inputs[1], None, out_dtype(out_type), attrs.transpose_a,
                           attrs.transpose_b)]


@register_compute("nn.contrib_dense_pack")
def compute_dense_pack(attrs, inputs, out_type):
    """``topi.nn.dense_pack`` over the ``(N/n, K, n)`` weight."""
    from kiln.topi import nn as topi_nn

    return [topi_nn.dense_pack(inputs[0], inputs[1], None, out_dtype(out_type))]


def _batch_matmul_static(attrs, inputs, out_type):
    """``topi.nn.batch_matmul`` (``topi.dynamic.batch_matmul`` when a dim is ``Any``)."""
    from kiln.topi import nn as topi_nn

    return [topi_nn.batch_matmul(inputs[0], inputs[1], out_dtype(out_type), attrs.transpose_a,
                                 attrs.transpose_b)]


def _batch_matmul_symbolic(attrs, inputs, out_type):
    from kiln.topi import dynamic

    return [dynamic.batch_matmul(inputs[0], inputs[1], out_shape(out_type), out_dtype(out_type),
                                 attrs.transpose_a, attrs.transpose_b)]


compute_batch_matmul = static_or_symbolic(_batch_matmul_static, _batch_matmul_symbolic)
register_compute("nn.batch_matmul", compute_batch_matmul)
for _name in ("nn.dense", "nn.matmul", "nn.contrib_dense_pack", "nn.batch_matmul"):
    register_opaque_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
def _accumulate(a: np.ndarray, b: np.ndarray, out_type: Any) -> np.ndarray:
    """``a @ b`` accumulated in float64 (int64 for integers), cast to the result dtype."""
    dtype = reference_dtype(out_type)
    wide = wide_dtype(dtype)
    return np.matmul(a.astype(wide), b.astype(wide)).astype(dtype)


@register_reference("nn.dense")
def reference_dense(attrs, args, out_type):
    """``x @ w.T``."""
    x, w = args
    return _accumulate(x, w.T, out_type)


@register_reference("nn.contrib_dense_pack")
def reference_dense_pack(attrs, args, out_type):
    """Dense after unpacking the ``(N/n, K, n)`` weight to ``(N, K)``."""
    x, w = args
    unpacked = np.transpose(w, (0, 2, 1)).reshape(-1, w.shape[1])
    return _accumulate(x, unpacked.T, out_type)


@register_reference("nn.matmul")
def reference_matmul(attrs, args, out_type):
    """``op(a) @ op(b)``."""
    a, b = args
    return _accumulate(a.T if attrs.transpose_a else a, b.T if attrs.transpose_b else b,
                       out_type)


@register_reference("nn.batch_matmul")
def reference_batch_matmul(attrs, args, out_type):
    """Batched ``op(a) @ op(b)`` with NumPy broadcasting of the batch."""
    a, b = args
    a = np.swapaxes(a, -1, -2) if attrs.transpose_a else a
    b = np.swapaxes(b, -1, -2) if attrs.transpose_b else b
    return _accumulate(a, b, out_type)


# ---- VM shape functions ---------------------------------------------------------------------
@register_shape_func("nn.dense", False)
def shape_func_dense(attrs, in_dims, out_types):
    """``data.shape[:-1] + [units]``."""
    return [in_dims[0][:-1] + [in_dims[1][0]]]


@register_shape_func("nn.contrib_dense_pack", False)
def shape_func_dense_pack(attrs, in_dims, out_types):
    """``data.shape[:-1] + [N/n * n]``."""
    return [in_dims[0][:-1] + [in_dims[1][0] * in_dims[1][2]]]


@register_shape_func("nn.matmul", False)
def shape_func_matmul(attrs, in_dims, out_types):
    """Broadcast batch dims, then rows of ``op(a)`` and columns of ``op(b)``."""
    a, b = in_dims
    rows = a[-1] if attrs.transpose_a else a[-2]
    cols = b[-2] if attrs.transpose_b else b[-1]
    return [broadcast_dims([a[:-2], b[:-2]]) + [rows, cols]]


@register_shape_func("nn.batch_matmul", False)
def shape_func_batch_matmul(attrs, in_dims, out_types):
    """``[broadcast batch, M, N]``."""
    a, b = in_dims
    rows = a[-1] if attrs.transpose_a else a[-2]
    cols = b[-2] if attrs.transpose_b else b[-1]
    return [broadcast_dims([a[:1], b[:1]]) + [rows, cols]]


# ---- gradients ------------------------------------------------------------------------------
def _swap_last_two(expr: Any) -> Any:
    ndim = len(expr.checked_type.shape)
    axes = list(range(ndim))
    axes[-2], axes[-1] = axes[-1], axes[-2]
    return transpose(expr, axes)


@register_gradient("nn.dense")
def gradient_dense(orig, grad):
    """``dx = g @ w``, ``dw = g.T @ x``."""
    data, weight = orig.args
    return [dense(grad, transpose(weight, (1, 0))),
            dense(transpose(grad, (1, 0)), transpose(data, (1, 0)))]


@register_gradient("nn.matmul")
def gradient_matmul(orig, grad):
    """``da = g @ op(b).T``, ``db = op(a).T @ g``, transposed back where the attrs say."""
    a, b = orig.args
    lhs = _swap_last_two(a) if orig.attrs.transpose_a else a
    rhs = _swap_last_two(b) if orig.attrs.transpose_b else b
    da = matmul(grad, rhs, transpose_b=True)
    db = matmul(lhs, grad, transpose_a=True)
    da = transpose(da, (1, 0)) if orig.attrs.transpose_a else da
    db = transpose(db, (1, 0)) if orig.attrs.transpose_b else db
    return [da, db]


@register_gradient("nn.batch_matmul")
def gradient_batch_matmul(orig, grad):
    """The matmul gradient per batch."""
    a, b = orig.args
    lhs = transpose(a, (0, 2, 1)) if orig.attrs.transpose_a else a
    rhs = transpose(b, (0, 2, 1)) if orig.attrs.transpose_b else b
    da = batch_matmul(grad, rhs, transpose_b=True)  # grad @ rhs^T
    db = batch_matmul(transpose(lhs, (0, 2, 1)), grad, transpose_b=False)
    da = transpose(da, (0, 2, 1)) if orig.attrs.transpose_a else da
    db = transpose(db, (0, 2, 1)) if orig.attrs.transpose_b else db
    return [da, db]


# ---- work counted by relay.analysis.get_total_mac_number ----------------------------------
def mac_count_matmul(call_node: Any) -> int:
    """One multiply-accumulate per output element and reduction step."""
    data = call_node.args[0].checked_type.concrete_shape
    transpose_a = bool(getattr(call_node.attrs, "transpose_a", False))
    reduce_extent = data[-2] if transpose_a else data[-1]
    return math.prod(call_node.checked_type.concrete_shape) * reduce_extent


for _name in ("nn.dense", "nn.matmul", "nn.batch_matmul"):
    register_mac_count(_name, mac_count_matmul)


# ---- FoldScaleAxis: a per-channel scale moves into the (units, K) weight ---------------------
def scale_axis_output_dense(call_node: Any) -> tuple[int, int, int]:
    """A scale on the last (units) axis of the result scales the weight's rows."""
    return len(call_node.checked_type.shape) - 1, 0, 2


def scale_axis_input_dense(call_node: Any) -> tuple[int, int, int]:
    """A scale on the last (K) axis of the data scales the weight's columns."""
    return len(call_node.args[0].checked_type.shape) - 1, 1, 2


register_fold_scale_axis("nn.dense", scale_axis_output_dense, scale_axis_input_dense)
