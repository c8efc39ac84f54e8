"""Broadcasting and its inverse: ``broadcast_to``, ``broadcast_to_like``,
``collapse_sum_like``, ``collapse_sum_to``, ``tile``, ``repeat``.

Entry points (TVM's names and signatures, re-exported by :mod:`kiln.relay.op.transform`):
:func:`broadcast_to`, :func:`broadcast_to_like`, :func:`collapse_sum_like`,
:func:`collapse_sum_to`, :func:`tile`, :func:`repeat`. Per op this module registers its type
relation and pattern kind, TE compute and schedule, reference NumPy rule, VM shape function and
gradient (broadcasting and collapsing are each other's adjoints).

Example
-------
>>> from kiln import relay
>>> relay.broadcast_to(relay.var("x", shape=(3, 1)), (2, 3, 4)).op.name
'broadcast_to'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.op import (
    BROADCAST,
    COMM_REDUCE,
    as_expr,
    call,
    define_op,
    is_expr,
    register_compute,
    register_gradient,
    register_injective_schedule,
    register_reduce_schedule,
    register_reference,
    register_shape_func,
    shape_arg,
)
from kiln.relay.op.rule_util import (
    i64,
    int_list,
    out_shape,
)
from kiln.relay.op.type_relations import (
    broadcast_shape,
    dim_op,
    dims,
    fail,
    is_any,
    normalize_axis,
    shape_str,
    tensor_arg,
    tensor_type,
)

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.

__all__ = ["broadcast_to", "broadcast_to_like", "collapse_sum_like", "collapse_sum_to", "tile",
           "repeat"]


# ---- repetition -------------------------------------------------------------------------------
def _tile_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d, reps = dims(data), [int(r) for r in attrs.reps]
    if any(r <= 0 for r in reps):
        fail(f"{op_name}: reps must be positive, got {reps}")
    n = max(len(d), len(reps))
    d = [1] * (n - len(d)) + d
    reps = [1] * (n - len(reps)) + reps
    return tensor_type([dim_op(lambda a, r=r: a * r, x) for x, r in zip(d, reps)], data.dtype)


define_op("tile", _tile_rel, BROADCAST, 1, A.TileAttrs, "repeat the whole tensor", 3)


def tile(data: Any, reps: Any) -> Any:
    """Repeat ``data`` ``reps[i]`` times along axis i; Expr reps give ``dyn.tile``."""
    reps = shape_arg(reps)
    if is_expr(reps):
        return call("dyn.tile", [data, reps], A.TileAttrs())
    return call("tile", [data], A.TileAttrs(reps=tuple(reps)))


def _repeat_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    if int(attrs.repeats) < 1:
        fail(f"{op_name}: repeats must be >= 1, got {attrs.repeats}")
    axis = normalize_axis(attrs.axis, len(d), op_name)
    d[axis] = dim_op(lambda a: a * int(attrs.repeats), d[axis])
    return tensor_type(d, data.dtype)


define_op("repeat", _repeat_rel, BROADCAST, 1, A.RepeatAttrs, "repeat elements", 3)


def repeat(data: Any, repeats: int, axis: int) -> Any:
    """Repeat each element ``repeats`` times along ``axis``."""
    return call("repeat", [data], A.RepeatAttrs(repeats=int(repeats), axis=int(axis)))


def _broadcast_to_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    return tensor_type(broadcast_shape(dims(data), list(attrs.shape), op_name), data.dtype)


def _broadcast_to_like_rel(types, attrs, op_name):
    data, like = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    return tensor_type(broadcast_shape(dims(data), dims(like), op_name), data.dtype)


define_op("broadcast_to", _broadcast_to_rel, BROADCAST, 1, A.InitOpAttrs, "broadcast", 4)
define_op("broadcast_to_like", _broadcast_to_like_rel, BROADCAST, 2, None,
          "broadcast to another tensor's shape", 10)


def broadcast_to(data: Any, shape: Any) -> Any:
    """Broadcast ``data`` to ``shape``; an Expr shape gives ``dyn.broadcast_to``."""
    shape = shape_arg(shape)
    if is_expr(shape):
        return call("dyn.broadcast_to", [data, shape], A.InitOpAttrs())
    return call("broadcast_to", [data], A.InitOpAttrs(shape=tuple(shape)))


def broadcast_to_like(data: Any, broadcast_type: Any) -> Any:
    """Broadcast ``data`` to the shape of ``broadcast_type``."""
    return call("broadcast_to_like", [data, broadcast_type])


def _check_collapse(data_dims, target, op_name):
    if broadcast_shape(data_dims, target, op_name) != data_dims and not any(
            is_any(x) for x in data_dims + list(target)):
        fail(f"{op_name}: {shape_str(target)} does not broadcast to {shape_str(data_dims)}")


def _collapse_sum_like_rel(types, attrs, op_name):
    data, like = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    _check_collapse(dims(data), dims(like), op_name)
    return like


def _collapse_sum_to_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    _check_collapse(dims(data), list(attrs.shape), op_name)
    return tensor_type(list(attrs.shape), data.dtype)


define_op("collapse_sum_like", _collapse_sum_like_rel, COMM_REDUCE, 2, None,
          "sum broadcast axes away", 10)
define_op("collapse_sum_to", _collapse_sum_to_rel, COMM_REDUCE, 2, A.InitOpAttrs,
          "sum broadcast axes away", 10)


def collapse_sum_like(data: Any, collapse_type: Any) -> Any:
    """Sum ``data`` over the axes along which ``collapse_type`` was broadcast to it."""
    return call("collapse_sum_like", [data, collapse_type])


def collapse_sum_to(data: Any, shape: Any) -> Any:
    """Sum ``data`` down to ``shape`` (the inverse of broadcasting to data's shape)."""
    shape = int_list(shape)
    return call("collapse_sum_to", [data, as_expr(list(shape), "int32")],
                A.InitOpAttrs(shape=tuple(shape)))


# ---- computes (TOPI) ------------------------------------------------------------------------
@register_compute("broadcast_to")
@register_compute("broadcast_to_like")
def compute_broadcast_to(attrs, inputs, out_type):
    """``topi.broadcast_to`` the call's output shape."""
    from kiln import topi

    return [topi.broadcast_to(inputs[0], out_shape(out_type))]


@register_compute("collapse_sum_like")
@register_compute("collapse_sum_to")
def compute_collapse_sum(attrs, inputs, out_type):
    """``topi.collapse_sum`` down to the call's output shape."""
    from kiln import topi

    return [topi.collapse_sum(inputs[0], out_shape(out_type))]


@register_compute("tile")
def compute_tile(attrs, inputs, out_type):
    """``topi.tile``."""
    from kiln import topi

    return [topi.tile(inputs[0], list(attrs.reps))]


@register_compute("repeat")
def compute_repeat(attrs, inputs, out_type):
    """``topi.repeat``."""
    from kiln import topi

    return [topi.repeat(inputs[0], attrs.repeats, attrs.axis)]


for _name in ("broadcast_to", "broadcast_to_like", "tile", "repeat"):
    register_injective_schedule(_name)
for _name in ("collapse_sum_like", "collapse_sum_to"):
    register_reduce_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
def _static_shape(out_type: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in out_type.shape)


@register_reference("broadcast_to")
@register_reference("broadcast_to_like")
def reference_broadcast_to(attrs, args, out_type):
    """``np.broadcast_to`` the result type's shape (a copy)."""
    return np.broadcast_to(args[0], _static_shape(out_type)).copy()


@register_reference("collapse_sum_like")
@register_reference("collapse_sum_to")
def reference_collapse_sum(attrs, args, out_type):
    """Sum the leading axes away, then the axes broadcast from 1."""
    x, shape = args[0], _static_shape(out_type)
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead))) if lead else x
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


@register_reference("tile")
def reference_tile(attrs, args, out_type):
    """``np.tile``."""
    return np.tile(args[0], [int(r) for r in attrs.reps])


@register_reference("repeat")
def reference_repeat(attrs, args, out_type):
    """``np.repeat``."""
    return np.repeat(args[0], int(attrs.repeats), axis=attrs.axis)


# ---- VM shape functions ---------------------------------------------------------------------
@register_shape_func("broadcast_to", False)
@register_shape_func("collapse_sum_to", False)
def shape_func_to_attr_shape(attrs, in_dims, out_types):
    """The attrs' (static) shape."""
    return [[i64(int(d)) for d in attrs.shape]]


@register_shape_func("broadcast_to_like", False)
@register_shape_func("collapse_sum_like", False)
def shape_func_like_second(attrs, in_dims, out_types):
    """The second argument's shape."""
    return [list(in_dims[1])]


@register_shape_func("tile", False)
def shape_func_tile(attrs, in_dims, out_types):
    """Each dim times its repeat count (both padded with leading ones to one rank)."""
    data, reps = list(in_dims[0]), [int(r) for r in attrs.reps]
    ndim = max(len(data), len(reps))
    data = [i64(1)] * (ndim - len(data)) + data
    reps = [1] * (ndim - len(reps)) + reps
    return [[d * i64(r) for d, r in zip(data, reps)]]


@register_shape_func("repeat", False)
def shape_func_repeat(attrs, in_dims, out_types):
    """The axis times ``repeats``."""
    out = list(in_dims[0])
    axis = int(attrs.axis) % len(out)
    out[axis] = out[axis] * i64(int(attrs.repeats))
    return [out]


# ---- gradients ------------------------------------------------------------------------------
@register_gradient("broadcast_to")
@register_gradient("broadcast_to_like")
def gradient_broadcast_to(orig, grad):
    """The adjoint summed back over the broadcast axes; the like argument gets zeros."""
    from kiln.relay.op.tensor import zeros_like

    return [collapse_sum_like(grad, orig.args[0])] + [zeros_like(a) for a in orig.args[1:]]


@register_gradient("collapse_sum_like")
def gradient_collapse_sum_like(orig, grad):
    """The adjoint broadcast back to the data's shape; the like argument gets zeros."""
    from kiln.relay.op.tensor import zeros_like

    data, like = orig.args
    return [broadcast_to_like(grad, data), zeros_like(like)]
