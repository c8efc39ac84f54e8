"""Tensors made from scalars: ``arange``, ``full``, ``full_like``, ``one_hot``.

Entry points (TVM's names and signatures, re-exported by :mod:`kiln.relay.op.transform`):
:func:`arange`, :func:`full`, :func:`full_like`, :func:`one_hot` (``zeros``/``ones`` and
their ``*_like`` forms live in :mod:`kiln.relay.op.tensor`, as in TVM). Per op this module
registers its type relation and pattern kind, TE compute (the injective schedule), reference
NumPy rule and VM shape function. Constructors given a Relay-expression shape or depth build
the ``dyn.*`` variant, as TVM's do.

Example
-------
>>> from kiln import relay
>>> relay.full(relay.const(1.5), shape=(2, 3)).op.name
'full'
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.op import (
    ELEMWISE,
    OPAQUE,
    OUT_ELEMWISE_FUSABLE,
    as_expr,
    call,
    constant_value,
    define_op,
    is_expr,
    register_compute,
    register_injective_schedule,
    register_op_attr,
    register_reference,
    register_shape_func,
    shape_arg,
)
from kiln.relay.op.rule_util import (
    i64,
    out_dtype,
    out_shape,
    reference_dtype,
)
from kiln.relay.op.type_relations import (
    Any as DynDim,
)
from kiln.relay.op.type_relations import (
    dims,
    fail,
    normalize_axis,
    shape_str,
    tensor_arg,
    tensor_type,
)

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.

__all__ = ["one_hot", "arange", "full", "full_like"]


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
# start/stop/step are both arguments and attributes (as in TVM): the text format prints them
# once, as arguments, and the parser fills these attributes from them
register_op_attr("arange", "TAttrsFromArgs", ("start", "stop", "step"))


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


# ---- computes (TOPI), all with the injective schedule ---------------------------------------
@register_compute("one_hot")
def compute_one_hot(attrs, inputs, out_type):
    """``topi.one_hot`` with the attrs' depth and axis."""
    from kiln import topi

    return [topi.one_hot(*inputs, attrs.depth, attrs.axis, out_dtype(out_type))]


@register_compute("arange")
def compute_arange(attrs, inputs, out_type):
    """``start + i * step`` over the output extent (from the shape function when dynamic)."""
    from kiln import te, topi
    from kiln.tir import op as tir_op

    start, step = inputs[0], inputs[2]
    dtype = out_dtype(out_type)
    return [te.compute(out_shape(out_type), lambda i: tir_op.cast(start(), dtype) +
                       tir_op.cast(i, dtype) * tir_op.cast(step(), dtype),
                       name="T_arange", tag=topi.tag.INJECTIVE)]


@register_compute("full")
def compute_full(attrs, inputs, out_type):
    """``topi.full`` of the fill value (argument 0)."""
    from kiln import topi

    return [topi.full(out_shape(out_type), out_dtype(out_type), inputs[0])]


@register_compute("full_like")
def compute_full_like(attrs, inputs, out_type):
    """``topi.full`` of the fill value (argument 1) in the like tensor's shape."""
    from kiln import topi

    return [topi.full(out_shape(out_type), out_dtype(out_type), inputs[1])]


for _name in ("one_hot", "arange", "full", "full_like"):
    register_injective_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
@register_reference("one_hot")
def reference_one_hot(attrs, args, out_type):
    """``on`` where the index equals the position along the new axis, else ``off``."""
    indices, on, off = args
    depth, axis = int(attrs.depth), int(attrs.axis)
    hot = np.expand_dims(indices, -1) == np.arange(depth)
    out = np.where(hot, on, off).astype(reference_dtype(out_type))
    return np.moveaxis(out, -1, axis if axis >= 0 else out.ndim + axis)


@register_reference("arange")
def reference_arange(attrs, args, out_type):
    """``np.arange`` of the three scalar arguments."""
    start, stop, step = (np.asarray(a).item() for a in args)
    return np.arange(start, stop, step).astype(reference_dtype(out_type))


@register_reference("full")
@register_reference("full_like")
def reference_full(attrs, args, out_type):
    """``np.full`` in the like tensor's shape (``full_like``) or the attrs' (``full``)."""
    fill_value = np.asarray(args[-1]).item()
    shape = args[0].shape if len(args) == 2 else tuple(int(d) for d in (
        attrs.shape if getattr(attrs, "shape", None) is not None else out_type.shape))
    return np.full(shape, fill_value, dtype=reference_dtype(out_type))


# ---- VM shape functions ---------------------------------------------------------------------
@register_shape_func("one_hot", False)
def shape_func_one_hot(attrs, in_dims, out_types):
    """The indices' dims with ``depth`` inserted at the axis."""
    indices = list(in_dims[0])
    axis = int(attrs.axis)
    axis = len(indices) if axis == -1 else axis
    return [indices[:axis] + [i64(int(attrs.depth))] + indices[axis:]]


@register_shape_func("arange", True)
def shape_func_arange(attrs, in_dims, out_types, data):
    """ceil((stop - start) / step), at least 0; reads the three scalar inputs."""
    from kiln import tir

    start, stop, step = (t() for t in data[:3])
    count = tir.ceil(tir.Cast("float64", stop - start) / tir.Cast("float64", step))
    return [[tir.Max(tir.Cast("int64", count), i64(0))]]
