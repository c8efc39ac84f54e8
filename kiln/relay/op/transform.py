"""Shape-manipulating ("transform") operators: reshape, transpose, slicing, gathering, fills.

Entry points (TVM's names and signatures): :func:`reshape`, :func:`reshape_like`,
:func:`reverse_reshape`, :func:`transpose`, :func:`squeeze`, :func:`expand_dims`,
:func:`concatenate`, :func:`stack`, :func:`split`, :func:`take`, :func:`gather`,
:func:`gather_nd`, :func:`scatter_elements`, :func:`scatter_nd`, :func:`strided_slice`,
:func:`slice_like`, :func:`tile`, :func:`repeat`, :func:`reverse`, :func:`where`,
:func:`one_hot`, :func:`arange`, :func:`full`, :func:`full_like`, :func:`layout_transform`,
:func:`broadcast_to`, :func:`broadcast_to_like`, :func:`collapse_sum_like`,
:func:`collapse_sum_to`, :func:`cast`, :func:`cast_like`, :func:`reinterpret`,
:func:`sequence_mask`. (zeros/ones/*_like, clip, copy, shape_of and ndarray_size live in
:mod:`kiln.relay.op.tensor`, as in TVM.)

Each op's relation sits right above its constructor; the ``define_op`` line under the relation
registers the op with its pattern kind. Constructors that take a shape dispatch to the
``dyn.*`` variant when the shape is a Relay expression, as TVM's do.
"""

from __future__ import annotations

import math
from typing import Any

from kiln.relay.op import op_attrs as A
from kiln.relay.op.layout import convert_shape
from kiln.relay.op.op import (
    BROADCAST,
    COMM_REDUCE,
    ELEMWISE,
    INJECTIVE,
    OPAQUE,
    OUT_ELEMWISE_FUSABLE,
    as_expr,
    call,
    constant_value,
    define_op,
    is_expr,
    register_shape_func,
    shape_arg,
)
from kiln.relay.op.reshape import (
    expand_dims,
    reshape,
    reshape_like,
    reverse_reshape,
    squeeze,
    transpose,
)
from kiln.relay.op.rule_util import int_list
from kiln.relay.op.type_relations import (
    Any as DynDim,
)
from kiln.relay.op.type_relations import (
    TupleType,
    broadcast_shape,
    dim_op,
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


def _optional_ints(values: Any) -> list:
    """Slice bounds: ints, with None for "from the start / to the end"."""
    if isinstance(values, int):
        return [int(values)]
    return [None if x is None else int(x) for x in values]


def _tuple_fields(types, op_name):
    if not types or not isinstance(types[0], TupleType):
        fail(f"{op_name}: expects a tuple of tensors, got {types[0] if types else None}")
    fields = list(types[0].fields)
    if not fields:
        fail(f"{op_name}: expects a non-empty tuple of tensors")
    for k in range(len(fields)):
        tensor_arg(fields, k, op_name)
    first = fields[0]
    for f in fields[1:]:
        if str(f.dtype) != str(first.dtype):
            fail(f"{op_name}: all tensors must have one dtype, got {first.dtype} and {f.dtype}")
        if len(f.shape) != len(first.shape):
            fail(f"{op_name}: all tensors must have one rank, got {len(first.shape)} and "
                 f"{len(f.shape)}")
    return fields


def _concatenate_rel(types, attrs, op_name):
    fields = _tuple_fields(types, op_name)
    shapes = [dims(f) for f in fields]
    ndim = len(shapes[0])
    if ndim == 0:
        fail(f"{op_name}: cannot concatenate scalars")
    axis = normalize_axis(attrs.axis, ndim, op_name)
    out = list(shapes[0])
    out[axis] = 0
    for s in shapes:
        out[axis] = dim_op(lambda a, b: a + b, out[axis], s[axis])
    dynamic_axis = any(is_any(s[axis]) for s in shapes)
    for i in range(ndim):
        if i == axis:
            continue
        known = [s[i] for s in shapes if not is_any(s[i])]
        for k in known[1:]:
            if not dims_equal(known[0], k):
                fail(f"{op_name}: shapes {', '.join(shape_str(s) for s in shapes)} differ "
                     f"outside the concatenation axis {axis}")
        # As TVM: a partly-Any axis stays Any unless the concatenation axis is itself dynamic,
        # so a static output never hides an unchecked dynamic input extent.
        if known and (len(known) == len(shapes) or dynamic_axis):
            out[i] = known[0]
        else:
            out[i] = DynDim()
    return tensor_type(out, fields[0].dtype)


define_op("concatenate", _concatenate_rel, INJECTIVE, 1, A.ConcatenateAttrs,
          "join tensors along an axis", 1)


def _as_tuple(data: Any) -> Any:
    if isinstance(data, list | tuple):
        from kiln.relay.expr import Tuple

        return Tuple(list(data))
    return data


def concatenate(data: Any, axis: int) -> Any:
    """Concatenate a list (or Tuple expression) of tensors along ``axis``."""
    if isinstance(data, list | tuple) and not data:
        raise ValueError("relay.concatenate expects at least one tensor")
    return call("concatenate", [_as_tuple(data)], A.ConcatenateAttrs(axis=int(axis)))


def _stack_rel(types, attrs, op_name):
    fields = _tuple_fields(types, op_name)
    shapes = [dims(f) for f in fields]
    out = list(shapes[0])
    for s in shapes[1:]:
        for i, (a, b) in enumerate(zip(out, s)):
            if is_any(a):
                out[i] = b
            elif not is_any(b) and not dims_equal(a, b):
                fail(f"{op_name}: all tensors must have one shape, got {shape_str(shapes[0])} "
                     f"and {shape_str(s)}")
    axis = normalize_axis(attrs.axis, len(out) + 1, op_name)
    return tensor_type(out[:axis] + [len(fields)] + out[axis:], fields[0].dtype)


define_op("stack", _stack_rel, INJECTIVE, 1, A.StackAttrs, "join tensors along a new axis", 3)


def stack(data: Any, axis: int) -> Any:
    """Stack a list (or Tuple expression) of same-shaped tensors along a new ``axis``."""
    return call("stack", [_as_tuple(data)], A.StackAttrs(axis=int(axis)))


def _split_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    if not d:
        fail(f"{op_name}: cannot split a scalar")
    axis = normalize_axis(attrs.axis, len(d), op_name)
    extent = d[axis]
    spec = attrs.indices_or_sections
    pieces: list = []
    if isinstance(spec, int):
        if spec <= 0:
            fail(f"{op_name}: sections must be positive, got {spec}")
        if is_static(extent) and extent % spec:
            fail(f"{op_name}: axis {axis} of extent {extent} is not divisible into {spec} "
                 "sections")
        pieces = [dim_op(lambda a, s=spec: a // s, extent)] * spec
    else:
        begin = 0
        for index in spec:  # as TVM: strictly ascending, inside the axis, no empty piece
            index = int(index)
            if index <= begin:
                fail(f"{op_name}: indices {list(spec)} must be a strictly ascending list of "
                     "positive indices")
            pieces.append(index - begin)
            begin = index
        if is_static(extent) and begin >= extent:
            fail(f"{op_name}: index {begin} is not inside axis {axis} of extent {extent}")
        pieces.append(dim_op(lambda a, b=begin: a - b, extent))
    fields = []
    for piece in pieces:
        shape = list(d)
        shape[axis] = piece
        fields.append(tensor_type(shape, data.dtype))
    return TupleType(fields)


define_op("split", _split_rel, INJECTIVE, 1, A.SplitAttrs, "split into a tuple", 3)


def split(data: Any, indices_or_sections: Any, axis: int = 0) -> Any:
    """Split ``data`` into equal ``sections`` (an int) or at ``indices`` (a tuple); returns a
    TupleWrapper over the tuple-typed call."""
    from kiln.relay.expr import TupleWrapper

    if not hasattr(indices_or_sections, "__len__"):  # an int (Python or NumPy)
        spec: Any = int(indices_or_sections)
        size = spec
    else:
        spec = tuple(int(i) for i in indices_or_sections)
        size = len(spec) + 1
    return TupleWrapper(call("split", [data], A.SplitAttrs(indices_or_sections=spec,
                                                             axis=int(axis))), size)


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


# ---- slicing ----------------------------------------------------------------------------------
_MAX_INDEX = 2**63 - 1  # TVM's "to the end" marker for an omitted begin/end


def _canonical_index(index: int, extent: int, stride: int) -> int:
    lo, hi = (-1, extent - 1) if stride < 0 else (0, extent)
    index = index + extent if index < 0 else index
    return min(max(index, lo), hi)


def _slice_vectors(attrs, ndim, op_name):
    """Axes and per-axis (begin, end, stride) as TVM's StridedSliceRel/ConvertToVec make them:
    omitted trailing axes are whole, None entries and "size" mode resolved to end indices."""
    begin, end = list(attrs.begin or ()), list(attrs.end or ())
    strides = [int(x) for x in (attrs.strides or ())]
    if attrs.axes is not None:
        axes = [normalize_axis(a, ndim, op_name) for a in attrs.axes]
        if not len(axes) == len(begin) == len(end):
            fail(f"{op_name}: axes, begin and end must have one length")
        strides += [1] * (len(axes) - len(strides))
    else:
        if max(len(begin), len(end), len(strides)) > ndim:
            fail(f"{op_name}: begin {begin} / end {end} / strides {strides} are longer than "
                 f"the rank {ndim}")
        axes = list(range(ndim))
        strides += [1] * (ndim - len(strides))
        begin += [0 if strides[i] > 0 else _MAX_INDEX for i in range(len(begin), ndim)]
        # as TVM: an omitted end with a negative stride is 0 (exclusive)
        end += [_MAX_INDEX if strides[i] > 0 else 0 for i in range(len(end), ndim)]
    if len(strides) != len(axes):
        fail(f"{op_name}: strides {strides} do not match the {len(axes)} sliced axes")
    size_mode = attrs.slice_mode == "size"
    steps = [1] * len(axes) if size_mode else strides
    starts = [(0 if steps[k] > 0 else _MAX_INDEX) if b is None else int(b)
              for k, b in enumerate(begin)]
    stops = []
    for k, e in enumerate(end):
        if e is None or (size_mode and int(e) < 0):
            stops.append(0 if steps[k] < 0 else _MAX_INDEX)
        else:
            stops.append(starts[k] + int(e) if size_mode else int(e))
    return axes, starts, stops, steps


def _strided_slice_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    if attrs.slice_mode not in ("end", "size"):
        fail(f"{op_name}: slice_mode must be 'end' or 'size', got {attrs.slice_mode!r}")
    axes, starts, stops, steps = _slice_vectors(attrs, len(d), op_name)
    out = list(d)
    for axis, start, stop, step in zip(axes, starts, stops, steps):
        if step == 0:
            fail(f"{op_name}: stride on axis {axis} is 0")
        extent = d[axis]
        if not is_static(extent):
            out[axis] = DynDim()
            continue
        b = _canonical_index(start, extent, step)
        e = _canonical_index(stop, extent, step)
        if (step < 0 and e > b) or (step > 0 and b > e):
            fail(f"{op_name}: begin {start} and end {stop} are inverted for stride {step} on "
                 f"axis {axis} of extent {extent}")
        out[axis] = (abs(e - b) + abs(step) - 1) // abs(step)
    return tensor_type(out, data.dtype)


define_op("strided_slice", _strided_slice_rel, INJECTIVE, 1, A.StridedSliceAttrs,
          "slice with strides", 4)


def strided_slice(data: Any, begin: Any, end: Any, strides: Any = None, axes: Any = None,
                  slice_mode: str = "end") -> Any:
    """``data[begin:end:strides]`` per axis (or per listed ``axes``); ``slice_mode="size"``
    reads ``end`` as sizes (-1: to the end). Expr bounds give ``dyn.strided_slice``.

    Example
    -------
    >>> from kiln import relay
    >>> y = relay.strided_slice(relay.var("x", shape=(4, 6)), begin=[3, 0], end=[0, 6],
    ...                         strides=[-1, 2])
    """
    strides = strides or [1]
    if any(is_expr(v) for v in (begin, end, strides)):
        from kiln.relay.op.tensor import add, greater_equal, less, shape_of

        if axes is not None:
            raise ValueError("strided_slice: axes is not supported with dynamic begin/end")
        begin, end, strides = (as_expr(list(v), "int64") if not is_expr(v) else v
                               for v in (begin, end, strides))
        shape = slice_like(cast_like(shape_of(data), begin), begin)
        begin = where(less(begin, cast_like(as_expr(0), begin)), add(begin, shape), begin)
        begin = where(greater_equal(begin, shape), shape, begin)
        return call("dyn.strided_slice", [data, begin, end, strides],
                    A.StridedSliceAttrs(slice_mode=slice_mode))
    return call("strided_slice", [data], A.StridedSliceAttrs(
        begin=_optional_ints(begin), end=_optional_ints(end), strides=int_list(strides),
        slice_mode=slice_mode, axes=int_list(axes)))


def _slice_like_rel(types, attrs, op_name):
    data, like = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    d, s = dims(data), dims(like)
    if attrs.axes is None or len(attrs.axes) == 0:
        axes = list(range(min(len(d), len(s))))
    else:
        axes = [normalize_axis(a, len(d), op_name) for a in attrs.axes]
    out = list(d)
    for a in axes:
        if a >= len(s):
            fail(f"{op_name}: axis {a} is past the rank {len(s)} of shape_like")
        if is_static(d[a]) and is_static(s[a]) and s[a] > d[a]:
            fail(f"{op_name}: shape_like extent {s[a]} exceeds data extent {d[a]} on axis {a}")
        out[a] = s[a]
    return tensor_type(out, data.dtype)


define_op("slice_like", _slice_like_rel, INJECTIVE, 2, A.SliceLikeAttrs,
          "slice to another tensor's shape", 10)


def slice_like(data: Any, shape_like: Any, axes: Any = None) -> Any:
    """Slice ``data`` to the shape of ``shape_like`` on ``axes`` (all common axes if None)."""
    return call("slice_like", [data, shape_like], A.SliceLikeAttrs(axes=int_list(axes)))


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


def _reverse_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    normalize_axis(attrs.axis, len(data.shape), op_name)
    return data


define_op("reverse", _reverse_rel, INJECTIVE, 1, A.ReverseAttrs, "reverse along an axis", 3)


def reverse(data: Any, axis: int) -> Any:
    """Reverse the elements of ``data`` along ``axis``."""
    return call("reverse", [data], A.ReverseAttrs(axis=int(axis)))


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


def one_hot_rel(types, attrs, op_name):
    """The type relation of one_hot (indices' shape with depth inserted at axis)."""
    indices = tensor_arg(types, 0, op_name)
    on, off = tensor_arg(types, 1, op_name), tensor_arg(types, 2, op_name)
    if on.shape or off.shape:
        fail(f"{op_name}: on_value and off_value must be scalars")
    d = dims(indices)
    if len(types) != 4 and int(attrs.depth) <= 0:
        fail(f"{op_name}: depth must be positive, got {attrs.depth}")
    depth = DynDim() if len(types) == 4 else int(attrs.depth)  # dyn.one_hot: depth is input 3
    axis = len(d) if int(attrs.axis) == -1 else normalize_axis(attrs.axis, len(d) + 1, op_name)
    return tensor_type(d[:axis] + [depth] + d[axis:], attrs.dtype or on.dtype)


define_op("one_hot", one_hot_rel, OUT_ELEMWISE_FUSABLE, 3, A.OneHotAttrs, "one-hot encode", 10)


def one_hot(indices: Any, on_value: Any, off_value: Any, depth: Any, axis: int,
            dtype: str) -> Any:
    """One-hot encode ``indices`` with ``depth`` classes inserted at ``axis`` (-1: last)."""
    value = constant_value(depth)
    if value is not None:
        depth = int(value)
    on_value, off_value = as_expr(on_value, dtype), as_expr(off_value, dtype)
    if is_expr(depth):
        return call("dyn.one_hot", [indices, on_value, off_value, depth],
                    A.OneHotAttrs(axis=int(axis), dtype=dtype))
    return call("one_hot", [indices, on_value, off_value],
                A.OneHotAttrs(depth=int(depth), axis=int(axis), dtype=dtype))


# ---- creation -----------------------------------------------------------------------------------
def _arange_rel(types, attrs, op_name):
    for k, what in enumerate(("start", "stop", "step")):
        arg = tensor_arg(types, k, op_name)
        if arg.shape or str(arg.dtype) != str(attrs.dtype):
            fail(f"{op_name}: {what} must be a {attrs.dtype} scalar, got {arg}")
    values = [constant_value(e) for e in (attrs.start, attrs.stop, attrs.step)]
    if any(v is None for v in values):
        return tensor_type([DynDim()], attrs.dtype)
    start, stop, step = (float(v) for v in values)
    length = math.ceil((stop - start) / step) if step else 0
    if length <= 0:  # TVM rejects empty and infinite ranges
        fail(f"{op_name}: invalid range start={start:g}, stop={stop:g}, step={step:g}")
    return tensor_type([length], attrs.dtype)


define_op("arange", _arange_rel, OPAQUE, 3, A.ArangeAttrs, "evenly spaced values", 3)


def arange(start: Any, stop: Any = None, step: Any = None, dtype: str = "float32") -> Any:
    """Values ``start, start + step, …`` below ``stop`` (``arange(n)`` counts from 0)."""
    if step is None:
        step = as_expr(1, dtype)
    if stop is None:
        start, stop = as_expr(0, dtype), start
    start, stop, step = (as_expr(v, dtype) for v in (start, stop, step))
    return call("arange", [start, stop, step],
                A.ArangeAttrs(start=start, stop=stop, step=step, dtype=dtype))


def _full_rel(types, attrs, op_name):
    fill = tensor_arg(types, 0, op_name)
    if fill.shape:
        fail(f"{op_name}: fill value must be a scalar, got shape {shape_str(dims(fill))}")
    return tensor_type(list(attrs.shape), attrs.dtype or fill.dtype)


define_op("full", _full_rel, ELEMWISE, 1, A.InitOpAttrs, "tensor filled with a value", 3)


def full(fill_value: Any, shape: Any = (), dtype: str = "") -> Any:
    """A tensor of ``shape`` filled with ``fill_value``; an Expr shape gives ``dyn.full``."""
    fill_value = as_expr(fill_value, dtype or None)
    shape = shape_arg(shape)
    if is_expr(shape):
        return call("dyn.full", [fill_value, shape], A.InitOpAttrs(dtype=dtype))
    return call("full", [fill_value], A.InitOpAttrs(shape=tuple(shape), dtype=dtype))


def _full_like_rel(types, attrs, op_name):
    data, fill = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    if fill.shape:
        fail(f"{op_name}: fill value must be a scalar, got shape {shape_str(dims(fill))}")
    return data


define_op("full_like", _full_like_rel, ELEMWISE, 2, None, "like-shaped fill", 3)


def full_like(data: Any, fill_value: Any) -> Any:
    """A tensor shaped and typed like ``data`` filled with the scalar ``fill_value``."""
    return call("full_like", [data, as_expr(fill_value)])


# ---- layout and broadcasting --------------------------------------------------------------------
def _layout_transform_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    out = convert_shape(dims(data), attrs.src_layout, attrs.dst_layout, op_name)
    return tensor_type(out, data.dtype)


define_op("layout_transform", _layout_transform_rel, INJECTIVE, 1, A.LayoutTransformAttrs,
          "change the data layout (e.g. NCHW -> NCHW8c)", 3)


def layout_transform(data: Any, src_layout: str, dst_layout: str) -> Any:
    """Transform ``data`` from layout ``src_layout`` to ``dst_layout``."""
    return call("layout_transform", [data], A.LayoutTransformAttrs(src_layout=src_layout,
                                                                   dst_layout=dst_layout))


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


# ---- dtype --------------------------------------------------------------------------------------
def _cast_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    if not attrs.dtype:
        fail(f"{op_name}: target dtype is empty")
    return tensor_type(dims(data), attrs.dtype)


def _cast_like_rel(types, attrs, op_name):
    data, like = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    return tensor_type(dims(data), like.dtype)


define_op("cast", _cast_rel, ELEMWISE, 1, A.CastAttrs, "convert the dtype", 3)
define_op("cast_like", _cast_like_rel, ELEMWISE, 2, None, "convert to another's dtype", 3)
define_op("reinterpret", _cast_rel, ELEMWISE, 1, A.CastAttrs, "reinterpret the bits", 5)


def cast(data: Any, dtype: str) -> Any:
    """Convert ``data`` to ``dtype``."""
    return call("cast", [data], A.CastAttrs(dtype=str(dtype)))


def cast_like(data: Any, dtype_like: Any) -> Any:
    """Convert ``data`` to the dtype of ``dtype_like``."""
    return call("cast_like", [data, dtype_like])


def reinterpret(data: Any, dtype: str) -> Any:
    """Reinterpret the bits of ``data`` as ``dtype``."""
    return call("reinterpret", [data], A.CastAttrs(dtype=str(dtype)))


# ---- misc ---------------------------------------------------------------------------------------
def _sequence_mask_rel(types, attrs, op_name):
    data, length = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    d = dims(data)
    if int(attrs.axis) not in (0, 1) or len(d) < 2:
        fail(f"{op_name}: axis must be 0 or 1 on a tensor of rank >= 2")
    batch = d[1 - int(attrs.axis)]
    ln = dims(length)
    if len(ln) != 1 or not (is_any(ln[0]) or is_any(batch) or dims_equal(ln[0], batch)):
        fail(f"{op_name}: valid_length must have shape ({batch},), got {shape_str(ln)}")
    return data


define_op("sequence_mask", _sequence_mask_rel, INJECTIVE, 2, A.SequenceMaskAttrs,
          "mask positions past each sequence's length", 10)


def sequence_mask(data: Any, valid_length: Any, mask_value: float = 0, axis: int = 0) -> Any:
    """Set ``data`` past ``valid_length`` (per batch entry) along ``axis`` to ``mask_value``."""
    return call("sequence_mask", [data, valid_length],
                A.SequenceMaskAttrs(mask_value=float(mask_value), axis=int(axis)))


__all__ = [
    "reshape", "reverse_reshape", "reshape_like", "transpose", "squeeze", "expand_dims",
    "concatenate", "stack", "split", "take", "gather", "gather_nd", "scatter_elements",
    "scatter_nd", "strided_slice", "slice_like", "tile", "repeat", "reverse", "where",
    "one_hot", "arange", "full", "full_like", "layout_transform", "broadcast_to",
    "broadcast_to_like", "collapse_sum_like", "collapse_sum_to", "cast", "cast_like",
    "reinterpret", "sequence_mask",
]
