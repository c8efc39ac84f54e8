"""Sorting computes (TVM's ``topi.sort``, ``argsort``, ``topk``) as rank reductions.

Entry points: :func:`argsort`, :func:`sort`, :func:`topk`.

Each element's rank along the axis counts the elements that sort before it (ties keep their
original order, so the sort is stable); the k-th output is the element whose rank is k.
That is two reductions of length ``n`` per element: O(n^2) work, but plain loops that every
target compiles, with no data-dependent control flow.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.tir import op as _op
from kiln.topi.utils import normalize_axes


def _with_axis(idx: tuple, axis: int, value: Any) -> list:
    out = list(idx)
    out[axis] = value
    return out


def _rank(data: te.Tensor, axis: int, is_ascend: bool) -> te.Tensor:
    j = te.reduce_axis((0, data.shape[axis]), name="j")

    def body(*i):
        mine, other = data(*i), data(*_with_axis(i, axis, j.var))
        before = other < mine if is_ascend else other > mine
        tie_before = _op.logical_and(_op.equal(other, mine), j.var < i[axis])
        return te.sum(_op.if_then_else(_op.logical_or(before, tie_before), 1, 0), axis=j)

    return te.compute(data.shape, body, name="T_rank", tag="sort_rank")


def argsort(data: te.Tensor, axis: int = -1, is_ascend: bool = True,
            dtype: str = "int32") -> te.Tensor:
    """Indices that sort ``data`` along ``axis`` (stable)."""
    axis = normalize_axes(axis, data.ndim)[0]
    rank = _rank(data, axis, is_ascend)
    src = te.reduce_axis((0, data.shape[axis]), name="src")

    def body(*i):
        hit = _op.equal(rank(*_with_axis(i, axis, src.var)), i[axis])
        return te.sum(_op.if_then_else(hit, _op.cast(src.var, dtype), _op.const(0, dtype)),
                      axis=src)

    return te.compute(data.shape, body, name="T_argsort", tag="sort")


def _take_along(data: te.Tensor, indices: te.Tensor, axis: int, shape: list,
                name: str) -> te.Tensor:
    def body(*i):
        return data(*_with_axis(i, axis, _op.cast(indices(*i), "int32")))

    return te.compute(shape, body, name=name, tag="injective")


def sort(data: te.Tensor, axis: int = -1, is_ascend: bool = True) -> te.Tensor:
    """``data`` sorted along ``axis``."""
    axis = normalize_axes(axis, data.ndim)[0]
    order = argsort(data, axis, is_ascend, "int32")
    return _take_along(data, order, axis, list(data.shape), "T_sort")


def topk(data: te.Tensor, k: int = 1, axis: int = -1, ret_type: str = "both",
         is_ascend: bool = False, dtype: str = "int32") -> list[te.Tensor]:
    """The ``k`` largest (smallest when ``is_ascend``) elements along ``axis`` and/or their
    indices: ``[values, indices]``, ``[values]`` or ``[indices]`` by ``ret_type``."""
    axis = normalize_axes(axis, data.ndim)[0]
    n = int(data.shape[axis].value) if hasattr(data.shape[axis], "value") else data.shape[axis]
    k = n if k is None or k < 1 else k
    order = argsort(data, axis, is_ascend, "int32")
    shape = _with_axis(tuple(data.shape), axis, k)
    indices = te.compute(shape, lambda *i: _op.cast(order(*i), dtype), name="T_topk_indices",
                         tag="injective")
    values = _take_along(data, order, axis, shape, "T_topk_values")
    return {"both": [values, indices], "values": [values], "indices": [indices]}[ret_type]


__all__ = ["argsort", "sort", "topk"]
