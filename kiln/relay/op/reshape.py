"""The reshape family: ``reshape``, ``contrib_reverse_reshape``, ``reshape_like``,
``transpose``, ``squeeze``, ``expand_dims`` — everything kiln knows about them, in one place.

Entry points (TVM's names and signatures, re-exported by :mod:`kiln.relay.op.transform`):
:func:`reshape`, :func:`reverse_reshape`, :func:`reshape_like`, :func:`transpose`,
:func:`squeeze`, :func:`expand_dims`. Per op this module registers its type relation and
pattern kind, TE compute (the injective schedule), reference NumPy rule, VM shape function and
gradient. ``reshape``'s special values (0, -1, -2, -3, -4) are resolved by
:func:`kiln.topi.newshape.infer_newshape` in the relation, the reference rule and the shape
function alike.

Example
-------
>>> from kiln import relay
>>> relay.reshape(relay.var("x", shape=(2, 3, 4)), (0, -1)).op.name
'reshape'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.op import (
    BROADCAST,
    INJECTIVE,
    call,
    constant_value,
    define_op,
    is_expr,
    register_compute,
    register_gradient,
    register_injective_schedule,
    register_reference,
    register_shape_func,
    register_shape_requirement,
    shape_arg,
)
from kiln.relay.op.rule_util import (
    checked,
    i64,
    int_list,
    optional_list,
    out_shape,
    product,
    static_or_symbolic,
)
from kiln.relay.op.type_relations import (
    dims,
    fail,
    is_static,
    normalize_axis,
    shape_str,
    tensor_arg,
    tensor_type,
)
from kiln.runtime.error import TVMError, TypeInferenceError

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.
__all__ = ["reshape", "reverse_reshape", "reshape_like", "transpose", "squeeze", "expand_dims"]


# ---- reshape family ----------------------------------------------------------------------
# The special values (0, -1, -2, -3, -4) are resolved by topi.newshape.infer_newshape, the one
# resolver the interpreter and the VM's shape functions use too.
def _reshape_rel(types, attrs, op_name):
    from kiln.topi.newshape import infer_newshape

    data = tensor_arg(types, 0, op_name)
    out = infer_newshape(dims(data), attrs.newshape, bool(attrs.allowzero), op_name,
                         TypeInferenceError)
    return tensor_type(out, data.dtype)


def _reverse_reshape_rel(types, attrs, op_name):
    from kiln.topi.newshape import infer_newshape

    data = tensor_arg(types, 0, op_name)
    out = infer_newshape(dims(data)[::-1], list(attrs.newshape)[::-1], False, op_name,
                         TypeInferenceError)
    return tensor_type(out[::-1], data.dtype)


define_op("reshape", _reshape_rel, INJECTIVE, 1, A.ReshapeAttrs, "reshape", 3)
define_op("contrib_reverse_reshape", _reverse_reshape_rel, INJECTIVE, 1, A.ReshapeAttrs,
          "reshape with special values applied right to left", 10)


def reshape(data: Any, newshape: Any, allowzero: bool = False) -> Any:
    """Reshape ``data`` to ``newshape`` (0 copies, -1 infers, -2 copies the rest, -3 merges
    two dims, -4 splits one dim in two); an Expr ``newshape`` gives ``dyn.reshape``.

    Example
    -------
    >>> from kiln import relay
    >>> y = relay.reshape(relay.var("x", shape=(2, 3, 4)), newshape=(-1, 4))
    """
    newshape = shape_arg(newshape)
    if is_expr(newshape):
        return call("dyn.reshape", [data, newshape], A.ReshapeAttrs(allowzero=allowzero))
    return call("reshape", [data], A.ReshapeAttrs(newshape=tuple(newshape),
                                                  allowzero=bool(allowzero)))


def reverse_reshape(data: Any, newshape: Any) -> Any:
    """Reshape with the special values applied from the right (``contrib_reverse_reshape``)."""
    return call("contrib_reverse_reshape", [data],
                A.ReshapeAttrs(newshape=tuple(int_list(newshape))))


def _reshape_like_rel(types, attrs, op_name):
    from kiln.topi.newshape import element_count

    data, like = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    d, s = dims(data), dims(like)

    def span(shape, begin, end):
        b = normalize_axis(begin, len(shape) + 1, op_name) if begin else 0
        e = len(shape) if end is None else normalize_axis(end, len(shape) + 1, op_name)
        return b, e

    lb, le = span(d, attrs.lhs_begin, attrs.lhs_end)
    rb, re_ = span(s, attrs.rhs_begin, attrs.rhs_end)
    out = d[:lb] + s[rb:re_] + d[le:]
    if all(is_static(x) for x in d + out) and element_count(d) != element_count(out):
        fail(f"{op_name}: cannot reshape {shape_str(d)} like {shape_str(s)}")
    return tensor_type(out, data.dtype)


define_op("reshape_like", _reshape_like_rel, INJECTIVE, 2, A.ReshapeLikeAttrs,
          "reshape to (part of) another tensor's shape", 10)


def reshape_like(data: Any, shape_like: Any, lhs_begin: int = 0, lhs_end: int | None = None,
                 rhs_begin: int = 0, rhs_end: int | None = None) -> Any:
    """Reshape dims ``[lhs_begin, lhs_end)`` of data to dims ``[rhs_begin, rhs_end)`` of
    ``shape_like``."""
    return call("reshape_like", [data, shape_like], A.ReshapeLikeAttrs(
        lhs_begin=lhs_begin, lhs_end=lhs_end, rhs_begin=rhs_begin, rhs_end=rhs_end))


# ---- axes -------------------------------------------------------------------------------------
def _transpose_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    if attrs.axes is None or len(attrs.axes) == 0:
        return tensor_type(d[::-1], data.dtype)
    if len(attrs.axes) != len(d):
        fail(f"{op_name}: axes {list(attrs.axes)} do not match rank {len(d)}")
    axes = [normalize_axis(a, len(d), op_name) for a in attrs.axes]
    if sorted(axes) != list(range(len(d))):
        fail(f"{op_name}: axes {list(attrs.axes)} are not a permutation")
    return tensor_type([d[a] for a in axes], data.dtype)


define_op("transpose", _transpose_rel, INJECTIVE, 1, A.TransposeAttrs, "permute axes", 3)


def transpose(data: Any, axes: Sequence[int] | None = None) -> Any:
    """Permute the axes of ``data`` (reverse them when ``axes`` is None)."""
    return call("transpose", [data], A.TransposeAttrs(axes=int_list(axes)))


def _squeeze_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    if attrs.axis is None:
        if not all(is_static(x) for x in d):
            fail(f"{op_name}: axis needs to be given for a dynamic input {shape_str(d)}")
        return tensor_type([x for x in d if x != 1], data.dtype)
    axes = {normalize_axis(a, len(d), op_name) for a in attrs.axis}
    for a in axes:
        if is_static(d[a]) and d[a] != 1:
            fail(f"{op_name}: cannot squeeze axis {a} of extent {d[a]} (must be 1)")
    return tensor_type([x for k, x in enumerate(d) if k not in axes], data.dtype)


define_op("squeeze", _squeeze_rel, INJECTIVE, 1, A.SqueezeAttrs, "drop unit axes", 3)


def squeeze(data: Any, axis: Any = None) -> Any:
    """Remove unit axes (all of them when ``axis`` is None); an Expr axis -> ``dyn.squeeze``."""
    value = constant_value(axis)
    if value is not None:
        axis = [int(a) for a in value.reshape(-1)]
    if is_expr(axis):
        return call("dyn.squeeze", [data, axis], A.SqueezeAttrs())
    return call("squeeze", [data], A.SqueezeAttrs(axis=int_list(axis)))


def _expand_dims_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    if attrs.num_newaxis < 0:
        fail(f"{op_name}: num_newaxis must be >= 0, got {attrs.num_newaxis}")
    axis = normalize_axis(attrs.axis, len(d) + 1, op_name)
    return tensor_type(d[:axis] + [1] * attrs.num_newaxis + d[axis:], data.dtype)


define_op("expand_dims", _expand_dims_rel, BROADCAST, 1, A.ExpandDimsAttrs, "insert axes", 1)


def expand_dims(data: Any, axis: Any, num_newaxis: int = 1) -> Any:
    """Insert ``num_newaxis`` unit axes at ``axis``; an Expr axis -> ``dyn.expand_dims``."""
    value = constant_value(axis)
    if value is not None:
        axis = int(value)
    if is_expr(axis):
        return call("dyn.expand_dims", [data, axis], A.DynExpandDimsAttrs(num_newaxis=num_newaxis))
    return call("expand_dims", [data], A.ExpandDimsAttrs(axis=int(axis), num_newaxis=num_newaxis))


# ---- computes (TOPI), all with the injective schedule -----------------------------------------
def _reshape_static(attrs, inputs, out_type):
    """``topi.reshape`` to the call's (static) output shape."""
    from kiln import topi

    return [topi.reshape(inputs[0], out_shape(out_type))]


def _reshape_symbolic(attrs, inputs, out_type):
    from kiln.topi import dynamic

    return [dynamic.reshape(inputs[0], out_shape(out_type))]


compute_reshape = static_or_symbolic(_reshape_static, _reshape_symbolic)
for _name in ("reshape", "contrib_reverse_reshape", "reshape_like"):
    register_compute(_name, compute_reshape)


@register_compute("transpose")
def compute_transpose(attrs, inputs, out_type):
    """``topi.transpose``."""
    from kiln import topi

    return [topi.transpose(inputs[0], optional_list(attrs.axes))]


@register_compute("squeeze")
def compute_squeeze(attrs, inputs, out_type):
    """``topi.squeeze``."""
    from kiln import topi

    return [topi.squeeze(inputs[0], optional_list(attrs.axis))]


@register_compute("expand_dims")
def compute_expand_dims(attrs, inputs, out_type):
    """``topi.expand_dims``."""
    from kiln import topi

    return [topi.expand_dims(inputs[0], attrs.axis, attrs.num_newaxis)]


for _name in ("reshape", "contrib_reverse_reshape", "reshape_like", "transpose", "squeeze",
              "expand_dims"):
    register_injective_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
@register_reference("reshape")
def reference_reshape(attrs, args, out_type):
    """``np.reshape`` to the resolved new shape."""
    from kiln.topi.newshape import infer_newshape

    return np.reshape(args[0], infer_newshape(args[0].shape, attrs.newshape,
                                              bool(attrs.allowzero)))


@register_reference("contrib_reverse_reshape")
def reference_reverse_reshape(attrs, args, out_type):
    """The codes resolved from the last dimension backwards."""
    from kiln.topi.newshape import infer_newshape

    shape = infer_newshape(args[0].shape[::-1], list(attrs.newshape)[::-1])
    return np.reshape(args[0], shape[::-1])


def _like_span(shape: Sequence[Any], begin: Any, end: Any) -> tuple[int, int]:
    """Dims ``[begin, end)`` of ``shape`` (``end`` None: to the last)."""
    ndim = len(shape)
    return int(begin) % (ndim + 1) if begin else 0, ndim if end is None else int(end) % (ndim + 1)


@register_reference("reshape_like")
def reference_reshape_like(attrs, args, out_type):
    """Dims ``[lhs_begin, lhs_end)`` of the data replaced by the like tensor's span."""
    x, like = args
    lb, le = _like_span(x.shape, attrs.lhs_begin, attrs.lhs_end)
    rb, re_ = _like_span(like.shape, attrs.rhs_begin, attrs.rhs_end)
    return np.reshape(x, x.shape[:lb] + like.shape[rb:re_] + x.shape[le:])


@register_reference("squeeze")
def reference_squeeze(attrs, args, out_type):
    """``np.squeeze`` of the given unit axes (all of them when None)."""
    axis = None if attrs.axis is None else tuple(int(a) for a in attrs.axis)
    return np.squeeze(args[0], axis=axis)


@register_reference("expand_dims")
def reference_expand_dims(attrs, args, out_type):
    """``num_newaxis`` unit axes inserted at ``axis``."""
    x, axis = args[0], int(attrs.axis)
    axis = axis if axis >= 0 else x.ndim + axis + 1
    for _ in range(int(attrs.num_newaxis)):
        x = np.expand_dims(x, axis)
    return x


@register_reference("transpose")
def reference_transpose(attrs, args, out_type):
    """``np.transpose`` (axes reversed when none are given)."""
    axes = None if not attrs.axes else [int(a) for a in attrs.axes]
    return np.transpose(args[0], axes)


# ---- VM shape functions ---------------------------------------------------------------------
def _as_dims(values: list[Any]) -> list[Any]:
    return [i64(v) if isinstance(v, int) else v for v in values]


@register_shape_func("reshape", False)
def shape_func_reshape(attrs, in_dims, out_types):
    """The resolved new shape; all -1 (a clear run-time error) if the count differs."""
    from kiln.topi.newshape import infer_newshape

    out = _as_dims(infer_newshape(in_dims[0], attrs.newshape, bool(attrs.allowzero)))
    return [checked(out, product(out) == product(in_dims[0]))]


@register_shape_func("contrib_reverse_reshape", False)
def shape_func_reverse_reshape(attrs, in_dims, out_types):
    """The codes resolved from the last dimension backwards."""
    from kiln.topi.newshape import infer_newshape

    out = _as_dims(infer_newshape(in_dims[0][::-1], list(attrs.newshape)[::-1]))[::-1]
    return [checked(out, product(out) == product(in_dims[0]))]


@register_shape_func("reshape_like", False)
def shape_func_reshape_like(attrs, in_dims, out_types):
    """The data's dims with its span replaced by the like tensor's."""
    data, like = list(in_dims[0]), list(in_dims[1])
    lb, le = _like_span(data, attrs.lhs_begin, attrs.lhs_end)
    rb, re_ = _like_span(like, attrs.rhs_begin, attrs.rhs_end)
    return [data[:lb] + like[rb:re_] + data[le:]]


@register_shape_func("transpose", False)
def shape_func_transpose(attrs, in_dims, out_types):
    """The input dims permuted."""
    data = in_dims[0]
    axes = list(range(len(data)))[::-1] if not attrs.axes else \
        [int(a) % len(data) for a in attrs.axes]
    return [[data[a] for a in axes]]


@register_shape_func("expand_dims", False)
def shape_func_expand_dims(attrs, in_dims, out_types):
    """Unit dims inserted at ``axis``."""
    data = list(in_dims[0])
    axis = int(attrs.axis)
    axis = axis if axis >= 0 else len(data) + axis + 1
    return [data[:axis] + [i64(1)] * int(attrs.num_newaxis) + data[axis:]]


@register_shape_func("squeeze", False)
def shape_func_squeeze(attrs, in_dims, out_types):
    """The input dims without the squeezed axes (which must be given)."""
    data = in_dims[0]
    if attrs.axis is None:
        raise TVMError("squeeze with axis=None on a dynamic shape cannot know which dims are 1")
    drop = {int(a) % len(data) for a in attrs.axis}
    return [[d for k, d in enumerate(data) if k not in drop]]


for _name in ("reshape", "contrib_reverse_reshape"):
    register_shape_requirement(_name, "the input's element count must match the new shape")


# ---- gradients ------------------------------------------------------------------------------
@register_gradient("reshape")
@register_gradient("contrib_reverse_reshape")
@register_gradient("squeeze")
@register_gradient("expand_dims")
def gradient_reshape(orig, grad):
    """The adjoint reshaped back to the data's shape."""
    return [reshape_like(grad, orig.args[0])]


@register_gradient("transpose")
def gradient_transpose(orig, grad):
    """The adjoint transposed by the inverse permutation."""
    ndim = len(orig.args[0].checked_type.shape)
    axes = orig.attrs.axes
    axes = list(range(ndim - 1, -1, -1)) if not axes else [int(a) % ndim for a in axes]
    return [transpose(grad, [int(i) for i in np.argsort(axes)])]
