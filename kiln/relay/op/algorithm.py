"""Sorting, selection and scans: sort, argsort, topk, argwhere, cumsum, cumprod.

Entry points (TVM's signatures): :func:`sort`, :func:`argsort`, :func:`topk`,
:func:`argwhere`, :func:`cumsum`, :func:`cumprod`. All are ``OPAQUE`` (never fused), as in TVM.

``topk`` returns a TupleWrapper ``(values, indices)`` for ``ret_type="both"`` and a single
tensor for ``"values"``/``"indices"``; a Relay-expression ``k`` gives ``dyn.topk``. ``argwhere``
has a data-dependent first dimension (``Any``).

Example
-------
>>> from kiln import relay
>>> values, indices = relay.topk(relay.var("x", shape=(2, 10)), k=3)
"""

from __future__ import annotations

from typing import Any

from kiln.relay.op import op_attrs as A
from kiln.relay.op.op import OPAQUE, call, constant_value, define_op, is_expr
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


__all__ = ["sort", "argsort", "topk", "argwhere", "cumsum", "cumprod"]
