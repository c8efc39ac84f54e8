"""Joining and splitting tensors: ``concatenate``, ``stack``, ``split``.

Entry points (TVM's names and signatures, re-exported by :mod:`kiln.relay.op.transform`):
:func:`concatenate`, :func:`stack`, :func:`split`. Per op this module registers its type
relation and pattern kind, TE compute (the injective schedule; ``concatenate`` and ``split``
switch to run-time extents for calls with ``Any`` dims), reference NumPy rule and VM shape
function.

Example
-------
>>> from kiln import relay
>>> relay.concatenate([relay.var("a", shape=(2, 3)), relay.var("b", shape=(4, 3))], 0).op.name
'concatenate'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.layout import InferCorrectLayoutOutput, attrs_with, parse_layout, primal_layout
from kiln.relay.op.op import (
    INJECTIVE,
    call,
    define_op,
    register_compute,
    register_infer_correct_layout,
    register_injective_schedule,
    register_reference,
    register_shape_func,
)
from kiln.relay.op.rule_util import (
    i64,
    out_shape,
    static_or_symbolic,
)
from kiln.relay.op.type_relations import (
    Any as DynDim,
)
from kiln.relay.op.type_relations import (
    TupleType,
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

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.

__all__ = ["concatenate", "stack", "split"]


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


def concatenate_infer_correct_layout(attrs, new_in_layouts, old_in_layouts, old_in_types):
    """Concatenate blocked tensors (``NCHW16c``) along the outer part of a split axis when
    every field's extent divides by the block; else the original layouts."""
    layout = next((x for x in new_in_layouts if x), "")
    keep = InferCorrectLayoutOutput([""] * len(new_in_layouts), [""])
    ndim = len(old_in_types[0].shape) if hasattr(old_in_types[0], "shape") else -1
    old = next((x for x in old_in_layouts if x), "") or primal_layout(layout)
    if not layout or len(old) != ndim:
        return keep
    axis = int(attrs.axis) + ndim if int(attrs.axis) < 0 else int(attrs.axis)
    letters = [a for a, _ in parse_layout(layout, "concatenate")]
    factor = dict(parse_layout(layout, "concatenate")).get(old[axis].lower())
    for t in old_in_types:
        extent = getattr(t.shape[axis], "value", t.shape[axis])
        if factor and not (isinstance(extent, int) and extent % factor == 0):
            return keep
    return InferCorrectLayoutOutput([layout] * len(new_in_layouts), [layout],
                                    attrs_with(attrs, axis=letters.index(old[axis])))


register_infer_correct_layout("concatenate", concatenate_infer_correct_layout)


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


# ---- computes (TOPI), all with the injective schedule ---------------------------------------
def _concatenate_static(attrs, inputs, out_type):
    """``topi.concatenate`` along the attrs' axis."""
    from kiln import topi

    return [topi.concatenate(list(inputs), attrs.axis)]


def _concatenate_symbolic(attrs, inputs, out_type):
    from kiln.topi import dynamic

    return [dynamic.concatenate(list(inputs), attrs.axis, out_shape(out_type))]


compute_concatenate = static_or_symbolic(_concatenate_static, _concatenate_symbolic)
register_compute("concatenate", compute_concatenate)


@register_compute("stack")
def compute_stack(attrs, inputs, out_type):
    """``topi.stack`` along a new axis."""
    from kiln import topi

    return [topi.stack(list(inputs), attrs.axis)]


def _split_static(attrs, inputs, out_type):
    """``topi.split`` into sections (an int) or at indices."""
    from kiln import topi

    sections = attrs.indices_or_sections
    return topi.split(inputs[0], sections if isinstance(sections, int) else list(sections),
                      attrs.axis)


def _split_symbolic(attrs, inputs, out_type):
    from kiln.topi import dynamic

    return dynamic.split(inputs[0], [out_shape(out_type, k) for k in range(len(out_type.fields))],
                         attrs.axis)


compute_split = static_or_symbolic(_split_static, _split_symbolic)
register_compute("split", compute_split)
for _name in ("concatenate", "stack", "split"):
    register_injective_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
@register_reference("concatenate")
def reference_concatenate(attrs, args, out_type):
    """``np.concatenate`` of the tuple's fields."""
    return np.concatenate(args[0], axis=attrs.axis)


@register_reference("stack")
def reference_stack(attrs, args, out_type):
    """``np.stack`` of the tuple's fields."""
    return np.stack(args[0], axis=attrs.axis)


@register_reference("split")
def reference_split(attrs, args, out_type):
    """``np.split`` into sections (an int) or at indices (a list)."""
    sections = attrs.indices_or_sections
    if not isinstance(sections, list | tuple):
        sections = int(sections)
    else:
        sections = [int(s) for s in sections]
    return tuple(np.split(args[0], sections, axis=attrs.axis))


# ---- VM shape functions ---------------------------------------------------------------------
@register_shape_func("concatenate", False)
def shape_func_concatenate(attrs, in_dims, out_types):
    """The first input's dims with the axis extents summed."""
    axis = int(attrs.axis) % len(in_dims[0])
    out = list(in_dims[0])
    total = in_dims[0][axis]
    for d in in_dims[1:]:
        total = total + d[axis]
    out[axis] = total
    return [out]


@register_shape_func("split", False)
def shape_func_split(attrs, in_dims, out_types):
    """The axis divided into equal sections, or cut at the indices."""
    from kiln import tir

    data = list(in_dims[0])
    axis = int(attrs.axis) % len(data)
    sections = attrs.indices_or_sections
    result = []
    if isinstance(sections, int):
        for _ in range(sections):
            out = list(data)
            out[axis] = tir.floordiv(data[axis], i64(sections))
            result.append(out)
        return result
    bounds = [0] + [int(i) for i in sections]
    for k, begin in enumerate(bounds):
        out = list(data)
        end = i64(bounds[k + 1]) if k + 1 < len(bounds) else data[axis]
        out[axis] = end - i64(begin)
        result.append(out)
    return result


@register_shape_func("stack", False)
def shape_func_stack(attrs, in_dims, out_types):
    """The common dims with the number of inputs inserted at the axis."""
    data = list(in_dims[0])
    axis = int(attrs.axis)
    axis = axis if axis >= 0 else len(data) + axis + 1
    return [data[:axis] + [i64(len(in_dims))] + data[axis:]]
