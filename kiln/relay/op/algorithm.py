"""Sorting, selection and scans: sort, argsort, topk, argwhere, cumsum, cumprod.

Entry points (TVM's signatures): :func:`sort`, :func:`argsort`, :func:`topk`,
:func:`argwhere`, :func:`cumsum`, :func:`cumprod`. All are ``OPAQUE`` (never fused), as in TVM.

``topk`` returns a TupleWrapper ``(values, indices)`` for ``ret_type="both"`` and a single
tensor for ``"values"``/``"indices"``; a Relay-expression ``k`` gives ``dyn.topk``. ``argwhere``
has a data-dependent first dimension (``Any``). Per op this module registers its type relation,
TE compute (the opaque schedule), reference NumPy rule and VM shape function.

Example
-------
>>> from kiln import relay
>>> values, indices = relay.topk(relay.var("x", shape=(2, 10)), k=3)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.op import (
    OPAQUE,
    call,
    constant_value,
    define_op,
    is_expr,
    register_compute,
    register_opaque_schedule,
    register_reference,
    register_shape_func,
    register_shape_requirement,
)
from kiln.relay.op.rule_util import (
    checked,
    i64,
    numpy_dtype,
    out_dtype,
    out_shape,
    reference_dtype,
    same_shape_as_input,
)
from kiln.relay.op.type_relations import (
    Any as DynDim,
)
from kiln.relay.op.type_relations import (
    TupleType,
    dim_op,
    dims,
    fail,
    is_static,
    normalize_axis,
    tensor_arg,
    tensor_type,
)


def _sort_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    normalize_axis(attrs.axis, len(data.shape), op_name)
    return data


def _argsort_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    normalize_axis(attrs.axis, len(data.shape), op_name)
    return tensor_type(dims(data), attrs.dtype)


_TOPK_RET_TYPES = ("both", "values", "indices")


def topk_rel(types, attrs, op_name):
    """The type relation of topk (also dyn.topk's: same outputs, k from data)."""
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    axis = normalize_axis(attrs.axis, len(d), op_name)
    if attrs.ret_type not in _TOPK_RET_TYPES:
        fail(f"{op_name}: ret_type must be one of {_TOPK_RET_TYPES}, got {attrs.ret_type!r}")
    out = list(d)
    if len(types) > 1:  # dyn.topk: k is a tensor input
        out[axis] = DynDim()
    elif attrs.k is not None and int(attrs.k) >= 1:
        if is_static(d[axis]) and int(attrs.k) > d[axis]:
            fail(f"{op_name}: k={attrs.k} exceeds the extent {d[axis]} of axis {axis}")
        out[axis] = int(attrs.k)
    values = tensor_type(out, data.dtype)
    indices = tensor_type(out, attrs.dtype)
    return {"both": TupleType([values, indices]), "values": values,
            "indices": indices}[attrs.ret_type]


def _argwhere_rel(types, attrs, op_name):
    cond = tensor_arg(types, 0, op_name)
    return tensor_type([DynDim(), len(cond.shape)], "int32")


def _scan_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    dtype = attrs.dtype or data.dtype
    if attrs.axis is None:
        total: Any = 1
        for x in dims(data):
            total = dim_op(lambda a, b: a * b, total, x)
        return tensor_type([total], dtype)
    normalize_axis(attrs.axis, len(data.shape), op_name)
    return tensor_type(dims(data), dtype)


define_op("sort", _sort_rel, OPAQUE, 1, A.ArgsortAttrs, "sort along an axis", 6)
define_op("argsort", _argsort_rel, OPAQUE, 1, A.ArgsortAttrs, "indices that sort", 6)
define_op("topk", topk_rel, OPAQUE, 1, A.TopKAttrs, "k largest (or smallest)", 6)
define_op("argwhere", _argwhere_rel, OPAQUE, 1, None, "indices of non-zero elements", 10)
define_op("cumsum", _scan_rel, OPAQUE, 1, A.ScanopAttrs, "running sum", 3)
define_op("cumprod", _scan_rel, OPAQUE, 1, A.ScanopAttrs, "running product", 3)


def sort(data: Any, axis: int = -1, is_ascend: bool = 1) -> Any:
    """The values of ``data`` sorted along ``axis``."""
    return call("sort", [data], A.ArgsortAttrs(axis=int(axis), is_ascend=bool(is_ascend)))


def argsort(data: Any, axis: int = -1, is_ascend: bool = 1, dtype: str = "int32") -> Any:
    """The indices that sort ``data`` along ``axis``."""
    return call("argsort", [data], A.ArgsortAttrs(axis=int(axis), is_ascend=bool(is_ascend),
                                                  dtype=dtype))


def topk(data: Any, k: Any = 1, axis: int = -1, ret_type: str = "both",
         is_ascend: bool = False, dtype: str = "int32") -> Any:
    """The ``k`` largest (``is_ascend``: smallest) elements along ``axis``; ``k < 1`` keeps
    all. ``ret_type`` "both" returns a TupleWrapper (values, indices)."""
    from kiln.relay.expr import TupleWrapper

    value = constant_value(k)
    if value is not None:
        k = int(value)
    if is_expr(k):
        out = call("dyn.topk", [data, k], A.TopKAttrs(axis=int(axis), ret_type=ret_type,
                                                      is_ascend=bool(is_ascend), dtype=dtype))
    else:
        out = call("topk", [data], A.TopKAttrs(k=int(k), axis=int(axis), ret_type=ret_type,
                                               is_ascend=bool(is_ascend), dtype=dtype))
    return TupleWrapper(out, 2) if ret_type == "both" else out


def argwhere(condition: Any) -> Any:
    """Indices of the non-zero elements of ``condition``: shape ``(?, ndim)``, int32."""
    return call("argwhere", [condition])


def _scan(name: str, data: Any, axis: Any, dtype: Any, exclusive: Any) -> Any:
    return call(name, [data], A.ScanopAttrs(axis=None if axis is None else int(axis),
                                            dtype=dtype or "", exclusive=bool(exclusive)))


def cumsum(data: Any, axis: int | None = None, dtype: str | None = None,
           exclusive: bool | None = None) -> Any:
    """Running sum along ``axis`` (of the flattened input when None)."""
    return _scan("cumsum", data, axis, dtype, exclusive)


def cumprod(data: Any, axis: int | None = None, dtype: str | None = None,
            exclusive: bool | None = None) -> Any:
    """Running product along ``axis`` (of the flattened input when None)."""
    return _scan("cumprod", data, axis, dtype, exclusive)


# ---- computes (TOPI), all opaque: never fused, as in TVM ----------------------------------------
@register_compute("sort")
def compute_sort(attrs, inputs, out_type):
    """``topi.sort``."""
    from kiln import topi

    return [topi.sort(inputs[0], attrs.axis, attrs.is_ascend)]


@register_compute("argsort")
def compute_argsort(attrs, inputs, out_type):
    """``topi.argsort`` in the result dtype."""
    from kiln import topi

    return [topi.argsort(inputs[0], attrs.axis, attrs.is_ascend, out_dtype(out_type))]


@register_compute("topk")
def compute_topk(attrs, inputs, out_type):
    """``topi.topk`` (a list of values and indices for ``ret_type="both"``)."""
    from kiln import topi

    return topi.topk(inputs[0], attrs.k, attrs.axis, attrs.ret_type, attrs.is_ascend,
                     attrs.dtype)


@register_compute("argwhere")
def compute_argwhere(attrs, inputs, out_type):
    """Indices of the non-zero elements; the row count comes from the shape function."""
    from kiln.topi import dynamic

    return [dynamic.argwhere(inputs[0], out_shape(out_type), out_dtype(out_type))]


@register_compute("cumsum")
def compute_cumsum(attrs, inputs, out_type):
    """``topi.cumsum``."""
    from kiln import topi

    return [topi.cumsum(inputs[0], attrs.axis, out_dtype(out_type), bool(attrs.exclusive))]


@register_compute("cumprod")
def compute_cumprod(attrs, inputs, out_type):
    """``topi.cumprod``."""
    from kiln import topi

    return [topi.cumprod(inputs[0], attrs.axis, out_dtype(out_type), bool(attrs.exclusive))]


for _name in ("sort", "argsort", "topk", "argwhere", "cumsum", "cumprod"):
    register_opaque_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
@register_reference("sort")
def reference_sort(attrs, args, out_type):
    """A stable sort, flipped for descending order."""
    out = np.sort(args[0], axis=attrs.axis, kind="stable")
    return out if attrs.is_ascend else np.flip(out, axis=attrs.axis)


def stable_argsort(x: np.ndarray, axis: int, ascend: bool) -> np.ndarray:
    """Stable order (ties by position); NaN is the largest key, as in the compiled kernels
    (last ascending, first descending)."""
    order = np.argsort(x if ascend else -x.astype(np.float64) if x.dtype != bool else ~x,
                       axis=axis, kind="stable")
    if ascend or x.dtype.kind not in "fc":
        return order
    # descending: -NaN sorted last; move the NaNs to the front, keeping both groups' order
    not_nan = ~np.isnan(np.take_along_axis(x, order, axis=axis))
    return np.take_along_axis(order, np.argsort(not_nan, axis=axis, kind="stable"), axis=axis)


@register_reference("argsort")
def reference_argsort(attrs, args, out_type):
    """:func:`stable_argsort` in the attrs' dtype."""
    dtype = reference_dtype(out_type)
    return stable_argsort(args[0], attrs.axis, attrs.is_ascend).astype(dtype)


@register_reference("topk")
def reference_topk(attrs, args, out_type):
    """The first ``k`` of the stable order (the whole axis for ``k < 1``)."""
    x = args[0]
    axis = int(attrs.axis) % x.ndim
    k = int(attrs.k) if attrs.k is not None and int(attrs.k) > 0 else x.shape[axis]
    order = stable_argsort(x, axis, attrs.is_ascend)
    idx = np.take(order, np.arange(k), axis=axis)
    values = np.take_along_axis(x, idx, axis=axis)
    indices = idx.astype(numpy_dtype(attrs.dtype))
    return {"both": (values, indices), "values": values, "indices": indices}[attrs.ret_type]


@register_reference("argwhere")
def reference_argwhere(attrs, args, out_type):
    """``np.argwhere``."""
    return np.argwhere(args[0]).astype(reference_dtype(out_type))


def _scan_reference(func: Callable, identity: int) -> Callable:
    """The reference rule of a scan: ``func`` along the axis, shifted when exclusive."""
    def reference(attrs, args, out_type):
        x = args[0].astype(reference_dtype(out_type))
        axis = attrs.axis
        if axis is None:
            x, axis = x.reshape(-1), 0
        out = func(x, axis=int(axis)).astype(x.dtype)  # NumPy widens int32 sums
        if attrs.exclusive:
            out = np.concatenate(
                [np.full_like(np.take(out, [0], axis=axis), identity),
                 np.delete(out, -1, axis=axis) if out.shape[axis] else out], axis=axis)
        return out

    reference.__name__ = reference.__qualname__ = f"reference_{func.__name__}"
    return reference


register_reference("cumsum", _scan_reference(np.cumsum, 0))
register_reference("cumprod", _scan_reference(np.cumprod, 1))


# ---- VM shape functions ---------------------------------------------------------------------
for _name in ("sort", "argsort", "cumsum", "cumprod"):
    register_shape_func(_name, False, same_shape_as_input)


@register_shape_func("topk", False)
def shape_func_topk(attrs, in_dims, out_types):
    """``k`` along the axis (the whole axis for ``k < 1``); all -1 if the axis is shorter."""
    out = list(in_dims[0])
    axis = int(attrs.axis) % len(out)
    k = int(attrs.k) if attrs.k is not None else 0
    if k < 1:
        return [list(out) for _ in out_types]
    valid = i64(k) <= out[axis]  # an Any axis shorter than k at run time
    out[axis] = i64(k)
    return [checked(list(out), valid) for _ in out_types]


register_shape_requirement("topk", "k must not exceed the axis")


@register_shape_func("argwhere", True)
def shape_func_argwhere(attrs, in_dims, out_types, data):
    """(number of non-zero elements, ndim): a counting stage inside the shape kernel."""
    from kiln import te, tir

    cond = data[0]
    axes = [te.reduce_axis((0, d), name=f"r{k}") for k, d in enumerate(cond.shape)]
    count = te.compute((1,), lambda _: te.sum(
        tir.Cast("int64", cond(*axes) != tir.const(0, cond.dtype)), axis=axes),
        name="nonzero_count")
    return [[count[0], i64(len(cond.shape))]]


__all__ = ["sort", "argsort", "topk", "argwhere", "cumsum", "cumprod"]
