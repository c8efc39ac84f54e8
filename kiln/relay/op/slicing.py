"""Slicing: ``strided_slice``, ``slice_like``, ``reverse``.

Entry points (TVM's names and signatures, re-exported by :mod:`kiln.relay.op.transform`):
:func:`strided_slice`, :func:`slice_like`, :func:`reverse`. Per op this module registers its
type relation and pattern kind, TE compute (the injective schedule; ``strided_slice`` switches
to run-time extents for calls with ``Any`` dims), reference NumPy rule and VM shape function.
Bounds follow TVM: omitted trailing axes are whole, out-of-range bounds are clamped.

Example
-------
>>> from kiln import relay
>>> relay.strided_slice(relay.var("x", shape=(4, 6)), [1, 0], [3, 6]).op.name
'strided_slice'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.op import (
    INJECTIVE,
    as_expr,
    call,
    define_op,
    is_expr,
    register_compute,
    register_injective_schedule,
    register_reference,
    register_shape_func,
)
from kiln.relay.op.rule_util import (
    int_list,
    optional_list,
    out_shape,
    same_shape_as_input,
    static_or_symbolic,
)
from kiln.relay.op.type_relations import (
    Any as DynDim,
)
from kiln.relay.op.type_relations import (
    dims,
    fail,
    is_static,
    normalize_axis,
    tensor_arg,
    tensor_type,
)

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.

__all__ = ["strided_slice", "slice_like", "reverse"]


def _optional_ints(values: Any) -> list:
    """Slice bounds: ints, with None for "from the start / to the end"."""
    if isinstance(values, int):
        return [int(values)]
    return [None if x is None else int(x) for x in values]


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
        from kiln.relay.op.indexing import where
        from kiln.relay.op.tensor import add, greater_equal, less, shape_of
        from kiln.relay.op.transform import cast_like

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


def _reverse_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    normalize_axis(attrs.axis, len(data.shape), op_name)
    return data


define_op("reverse", _reverse_rel, INJECTIVE, 1, A.ReverseAttrs, "reverse along an axis", 3)


def reverse(data: Any, axis: int) -> Any:
    """Reverse the elements of ``data`` along ``axis``."""
    return call("reverse", [data], A.ReverseAttrs(axis=int(axis)))


# ---- computes (TOPI), all with the injective schedule ---------------------------------------
def _strided_slice_static(attrs, inputs, out_type):
    """``topi.strided_slice`` with the attrs' bounds."""
    from kiln import topi

    return [topi.strided_slice(inputs[0], list(attrs.begin), optional_list(attrs.end),
                               optional_list(attrs.strides), optional_list(attrs.axes),
                               attrs.slice_mode)]


def _strided_slice_symbolic(attrs, inputs, out_type):
    from kiln.topi import dynamic

    spec = dynamic.attr_slice_spec(list(inputs[0].shape), list(attrs.begin),
                                   optional_list(attrs.end), optional_list(attrs.strides),
                                   optional_list(attrs.axes), attrs.slice_mode)
    return [dynamic.strided_slice(inputs[0], *spec, out_shape(out_type))]


compute_strided_slice = static_or_symbolic(_strided_slice_static, _strided_slice_symbolic)
register_compute("strided_slice", compute_strided_slice)


@register_compute("slice_like")
def compute_slice_like(attrs, inputs, out_type):
    """``topi.slice_like``."""
    from kiln import topi

    return [topi.slice_like(inputs[0], inputs[1], optional_list(attrs.axes))]


@register_compute("reverse")
def compute_reverse(attrs, inputs, out_type):
    """``topi.reverse``."""
    from kiln import topi

    return [topi.reverse(inputs[0], attrs.axis)]


for _name in ("strided_slice", "slice_like", "reverse"):
    register_injective_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
@register_reference("strided_slice")
def reference_strided_slice(attrs, args, out_type):
    """Python slicing per axis, with TVM's treatment of negative strides and "size" mode."""
    data = args[0]
    begin, end = list(attrs.begin), list(attrs.end)
    strides = list(attrs.strides) if attrs.strides else [1] * len(begin)
    axes = list(attrs.axes) if attrs.axes is not None else list(range(len(begin)))
    slices = [slice(None)] * data.ndim
    for k, axis in enumerate(axes):
        stride = int(strides[k]) if k < len(strides) else int(strides[-1])
        b = int(begin[k])
        if attrs.slice_mode == "size":
            size = int(end[k])
            e = data.shape[axis] if size < 0 else b + size
            stride = 1
        else:
            e = int(end[k]) if k < len(end) else data.shape[axis]
        n = data.shape[axis]
        if stride < 0:
            b = min(b if b >= 0 else b + n, n - 1)
            e = e + n if e < -1 else (None if e < 0 else e)
        slices[axis] = slice(b, e if e is None or e < 2**62 else None, stride)
    return data[tuple(slices)].copy()


@register_reference("slice_like")
def reference_slice_like(attrs, args, out_type):
    """The leading part of each axis, as long as the result type says."""
    return args[0][tuple(slice(0, int(n)) for n in out_type.shape)].copy()


@register_reference("reverse")
def reference_reverse(attrs, args, out_type):
    """``np.flip``."""
    return np.flip(args[0], axis=attrs.axis)


# ---- VM shape functions ---------------------------------------------------------------------
@register_shape_func("strided_slice", False)
def shape_func_strided_slice(attrs, in_dims, out_types):
    """The slice's length per axis, from the bounds clamped to the run-time extents."""
    from kiln.topi.dynamic import attr_slice_spec, slice_bounds

    end, strides, axes = (None if v is None else list(v)
                          for v in (attrs.end, attrs.strides, attrs.axes))
    spec = attr_slice_spec(in_dims[0], list(attrs.begin), end, strides, axes,
                           getattr(attrs, "slice_mode", "end"))
    return [[length for _, _, length in slice_bounds(in_dims[0], *spec)]]


@register_shape_func("slice_like", False)
def shape_func_slice_like(attrs, in_dims, out_types):
    """The data's dims with the sliced axes taken from the like tensor."""
    data, like = list(in_dims[0]), in_dims[1]
    axes = getattr(attrs, "axes", None)
    axes = range(min(len(data), len(like))) if not axes else [int(a) % len(data)
                                                              for a in axes]
    for a in axes:
        data[a] = like[a]
    return [data]


register_shape_func("reverse", False, same_shape_as_input)
