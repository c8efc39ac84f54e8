"""Indexing: ``take``, ``gather``, ``gather_nd``, ``scatter_elements``, ``scatter_nd``,
``where``.

Entry points (TVM's names and signatures, re-exported by :mod:`kiln.relay.op.transform`):
:func:`take`, :func:`gather`, :func:`gather_nd`, :func:`scatter_elements`,
:func:`scatter_nd`, :func:`where`. Per op this module registers its type relation and
pattern kind, TE compute and schedule, reference NumPy rule and VM shape function.

Example
-------
>>> from kiln import relay
>>> relay.take(relay.var("x", shape=(5, 3)), relay.const([4, 0]), axis=0).op.name
'take'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.op import (
    BROADCAST,
    INJECTIVE,
    OPAQUE,
    as_expr,
    call,
    define_op,
    register_compute,
    register_injective_schedule,
    register_opaque_schedule,
    register_reference,
    register_shape_func,
)
from kiln.relay.op.rule_util import (
    reference_dtype,
    same_shape_as_input,
)
from kiln.relay.op.type_relations import (
    broadcast_shape,
    dims,
    dims_equal,
    fail,
    is_any,
    is_static,
    normalize_axis,
    shape_str,
    tensor_arg,
    tensor_type,
)
from kiln.runtime.error import TVMError

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.

__all__ = ["take", "gather", "gather_nd", "scatter_elements", "scatter_nd", "where"]


# ---- indexing ---------------------------------------------------------------------------------
_TAKE_MODES = ("clip", "wrap", "fast")


def _take_rel(types, attrs, op_name):
    data, indices = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    if not str(indices.dtype).startswith(("int", "uint")):
        fail(f"{op_name}: indices must be integers, got {indices.dtype}")
    if attrs.mode not in _TAKE_MODES:
        fail(f"{op_name}: mode must be one of {_TAKE_MODES}, got {attrs.mode!r}")
    d, ind = dims(data), dims(indices)
    if attrs.axis is None:
        return tensor_type(ind, data.dtype)
    axis = normalize_axis(attrs.axis, len(d), op_name)
    batch = int(attrs.batch_dims)
    batch = batch + len(ind) if batch < 0 else batch
    if not 0 <= batch <= min(axis, len(ind)):
        fail(f"{op_name}: batch_dims {attrs.batch_dims} must be <= axis {axis} and <= the "
             f"indices rank {len(ind)}")
    return tensor_type(d[:axis] + ind[batch:] + d[axis + 1:], data.dtype)


define_op("take", _take_rel, INJECTIVE, 2, A.TakeAttrs, "gather along an axis", 3)


def take(data: Any, indices: Any, axis: int | None = None, batch_dims: int = 0,
         mode: str = "clip") -> Any:
    """Take elements of ``data`` at ``indices`` along ``axis`` (of the flattened data when
    None); ``mode`` "clip", "wrap" or "fast" treats out-of-range indices."""
    return call("take", [data, as_expr(indices, "int32")], A.TakeAttrs(
        batch_dims=batch_dims, axis=None if axis is None else int(axis), mode=mode))


def _gather_rel(types, attrs, op_name):
    data, indices = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    if len(data.shape) != len(indices.shape):
        fail(f"{op_name}: data rank {len(data.shape)} and indices rank {len(indices.shape)} "
             "must match")
    normalize_axis(attrs.axis, len(data.shape), op_name)
    return tensor_type(dims(indices), data.dtype)


define_op("gather", _gather_rel, INJECTIVE, 2, A.GatherAttrs, "gather along an axis", 3)


def gather(data: Any, axis: int, indices: Any) -> Any:
    """``out[i][j] = data[indices[i][j]][j]`` style gather along ``axis``."""
    return call("gather", [data, indices], A.GatherAttrs(axis=int(axis)))


def _gather_nd_rel(types, attrs, op_name):
    data, indices = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    d, ind = dims(data), dims(indices)
    if not ind:
        fail(f"{op_name}: indices must have rank >= 1")
    m = attrs.index_rank if attrs.index_rank is not None else ind[0]
    if not is_static(m):
        fail(f"{op_name}: the first indices dim must be static (or index_rank given)")
    batch = int(attrs.batch_dims)
    if batch + m > len(d):
        fail(f"{op_name}: indices address {m} dims after {batch} batch dims of a rank-"
             f"{len(d)} tensor")
    return tensor_type(ind[1:] + d[batch + m:], data.dtype)


define_op("gather_nd", _gather_nd_rel, INJECTIVE, 2, A.GatherNDAttrs, "gather by n-d indices", 3)


@register_shape_func("gather_nd", False)
def gather_nd_shape_func(attrs, in_dims, out_types):
    """``indices.shape[1:] + data.shape[batch_dims + M:]``; M from the output's rank."""
    data, indices = in_dims
    index_rank = len(indices) - 1 + len(data) - int(attrs.batch_dims) - len(out_types[0].shape)
    return [list(indices[1:]) + list(data[int(attrs.batch_dims) + index_rank:])]


def gather_nd(data: Any, indices: Any, batch_dims: int = 0, index_rank: int | None = None) -> Any:
    """Gather slices of ``data`` addressed by the first axis of ``indices``."""
    return call("gather_nd", [data, indices], A.GatherNDAttrs(batch_dims=batch_dims,
                                                             index_rank=index_rank))


_SCATTER_REDUCTIONS = ("update", "add", "mul", "mean", "min", "max")


def _scatter_elements_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    indices, updates = tensor_arg(types, 1, op_name), tensor_arg(types, 2, op_name)
    if not len(data.shape) == len(indices.shape) == len(updates.shape):
        fail(f"{op_name}: data, indices and updates must have one rank")
    if attrs.reduction not in _SCATTER_REDUCTIONS:
        fail(f"{op_name}: reduction must be one of {_SCATTER_REDUCTIONS}, got "
             f"{attrs.reduction!r}")
    normalize_axis(attrs.axis, len(data.shape), op_name)
    return data


define_op("scatter_elements", _scatter_elements_rel, OPAQUE, 3, A.ScatterElementsAttrs,
          "scatter updates along an axis", 10)


def scatter_elements(data: Any, indices: Any, updates: Any, axis: int = 0,
                     reduction: str = "update") -> Any:
    """Scatter ``updates`` into a copy of ``data`` at ``indices`` along ``axis``."""
    return call("scatter_elements", [data, indices, updates],
                A.ScatterElementsAttrs(axis=int(axis), reduction=reduction))


def _scatter_nd_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    indices, updates = tensor_arg(types, 1, op_name), tensor_arg(types, 2, op_name)
    if attrs.mode not in ("update", "add", "mul", "min", "max"):
        fail(f"{op_name}: mode must be update/add/mul/min/max, got {attrs.mode!r}")
    ind, upd, d = dims(indices), dims(updates), dims(data)
    if ind and is_static(ind[0]):
        expected = ind[1:] + d[ind[0]:]
        if len(expected) != len(upd) or not all(
                is_any(a) or is_any(b) or dims_equal(a, b) for a, b in zip(expected, upd)):
            fail(f"{op_name}: updates shape {shape_str(upd)} must be {shape_str(expected)}")
    if str(updates.dtype) != str(data.dtype):
        fail(f"{op_name}: updates dtype {updates.dtype} differs from data dtype {data.dtype}")
    return data


define_op("scatter_nd", _scatter_nd_rel, OPAQUE, 3, A.ScatterNDAttrs, "scatter by n-d indices", 3)


def scatter_nd(data: Any, indices: Any, updates: Any, mode: str = "update") -> Any:
    """Scatter ``updates`` into a copy of ``data`` at n-d ``indices``."""
    return call("scatter_nd", [data, indices, updates], A.ScatterNDAttrs(mode=mode))


def _where_rel(types, attrs, op_name):
    cond = tensor_arg(types, 0, op_name)
    x, y = tensor_arg(types, 1, op_name), tensor_arg(types, 2, op_name)
    if str(x.dtype) != str(y.dtype):
        fail(f"{op_name}: x and y must have one dtype, got {x.dtype} and {y.dtype}")
    shape = broadcast_shape(dims(x), dims(y), op_name)
    return tensor_type(broadcast_shape(dims(cond), shape, op_name), x.dtype)


define_op("where", _where_rel, BROADCAST, 3, None, "select by a condition", 4)


def where(condition: Any, x: Any, y: Any) -> Any:
    """Elementwise ``x if condition else y`` with broadcasting."""
    return call("where", [condition, as_expr(x), as_expr(y)])


# ---- computes (TOPI) ------------------------------------------------------------------------
@register_compute("take")
def compute_take(attrs, inputs, out_type):
    """``topi.take`` with the attrs' axis, batch dims and out-of-range mode."""
    from kiln import topi

    return [topi.take(inputs[0], inputs[1], attrs.axis, attrs.batch_dims, attrs.mode)]


@register_compute("gather")
def compute_gather(attrs, inputs, out_type):
    """``topi.gather`` along the attrs' axis."""
    from kiln import topi

    return [topi.gather(inputs[0], attrs.axis, inputs[1])]


@register_compute("gather_nd")
def compute_gather_nd(attrs, inputs, out_type):
    """``topi.gather_nd``."""
    from kiln import topi

    return [topi.gather_nd(inputs[0], inputs[1], attrs.batch_dims)]


@register_compute("scatter_elements")
def compute_scatter_elements(attrs, inputs, out_type):
    """``topi.scatter_elements`` (a copy of the data, then the updates in order)."""
    from kiln import topi

    return [topi.scatter_elements(*inputs, attrs.axis, attrs.reduction)]


@register_compute("scatter_nd")
def compute_scatter_nd(attrs, inputs, out_type):
    """``topi.scatter_nd``."""
    from kiln import topi

    return [topi.scatter_nd(*inputs, attrs.mode)]


@register_compute("where")
def compute_where(attrs, inputs, out_type):
    """``topi.where`` with broadcasting."""
    from kiln import topi

    return [topi.where(*inputs)]


for _name in ("take", "gather", "gather_nd", "where"):
    register_injective_schedule(_name)
for _name in ("scatter_elements", "scatter_nd"):  # sequential updates: never fused
    register_opaque_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
@register_reference("take")
def reference_take(attrs, args, out_type):
    """``np.take`` after applying the mode to out-of-range indices."""
    data, indices = args
    axis = attrs.axis
    if axis is None:
        data, axis = data.reshape(-1), 0
    axis = int(axis) % data.ndim
    n = data.shape[axis]
    if attrs.mode == "clip":
        indices = np.clip(indices, 0, n - 1)
    elif attrs.mode == "wrap":
        indices = np.mod(indices, n)
    else:  # "fast": assumed in range; negative indices count from the end
        indices = np.where(indices < 0, indices + n, indices)
    if attrs.batch_dims:
        raise TVMError("take with batch_dims has no NumPy reference implementation")
    return np.take(data, indices.astype(np.int64), axis=axis)


@register_reference("gather")
def reference_gather(attrs, args, out_type):
    """``np.take_along_axis``."""
    data, indices = args
    return np.take_along_axis(data, indices.astype(np.int64), axis=attrs.axis)


@register_reference("gather_nd")
def reference_gather_nd(attrs, args, out_type):
    """One data slice per column of the indices (after ``batch_dims`` batch axes)."""
    data, indices = args
    b = int(attrs.batch_dims or 0)
    m = indices.shape[0]
    shape = tuple(int(d) for d in out_type.shape)
    flat = indices.reshape(m, -1).astype(np.int64)
    batch = data.shape[:b]
    results = []
    for j in range(flat.shape[1]):
        idx = tuple(flat[:, j])
        if b:
            bidx = np.unravel_index(j % int(np.prod(batch)), batch)
            results.append(data[bidx + idx])
        else:
            results.append(data[idx])
    return np.array(results, dtype=data.dtype).reshape(shape)


@register_reference("scatter_elements")
def reference_scatter_elements(attrs, args, out_type):
    """The updates written (or combined) one at a time into a copy of the data."""
    data, indices, updates = args
    out = data.copy()
    axis = int(attrs.axis) % data.ndim
    reduce = {"update": None, "add": np.add, "mul": np.multiply, "min": np.minimum,
              "max": np.maximum, "mean": None}[attrs.reduction]
    for pos in np.ndindex(indices.shape):
        target = list(pos)
        i = int(indices[pos])
        target[axis] = i + data.shape[axis] if i < 0 else i
        target = tuple(target)
        out[target] = updates[pos] if reduce is None else reduce(out[target], updates[pos])
    return out


@register_reference("scatter_nd")
def reference_scatter_nd(attrs, args, out_type):
    """The update slices written (or combined) one at a time into a copy of the data."""
    data, indices, updates = args
    out = data.copy()
    m = indices.shape[0]
    flat_idx = indices.reshape(m, -1).astype(np.int64)
    flat_upd = updates.reshape((flat_idx.shape[1],) + data.shape[m:])
    combine = {"update": lambda old, new: new, "add": np.add, "mul": np.multiply,
               "min": np.minimum, "max": np.maximum}.get(attrs.mode)
    if combine is None:
        raise TVMError(f"scatter_nd: unknown mode {attrs.mode!r}")
    for j in range(flat_idx.shape[1]):
        target = tuple(flat_idx[:, j])
        out[target] = combine(out[target], flat_upd[j])
    return out


@register_reference("where")
def reference_where(attrs, args, out_type):
    """``np.where`` in the result dtype."""
    return np.where(args[0], args[1], args[2]).astype(reference_dtype(out_type))


# ---- VM shape functions ---------------------------------------------------------------------
@register_shape_func("take", False)
def shape_func_take(attrs, in_dims, out_types):
    """The data's dims with the axis replaced by the indices' dims."""
    data, indices = in_dims
    axis = getattr(attrs, "axis", None)
    if axis is None:
        return [list(indices)]
    axis = int(axis) % len(data)
    return [data[:axis] + list(indices) + data[axis + 1:]]


@register_shape_func("gather", False)
def shape_func_gather(attrs, in_dims, out_types):
    """The indices' dims."""
    return [list(in_dims[1])]


for _name in ("scatter_elements", "scatter_nd"):
    register_shape_func(_name, False, same_shape_as_input)
