"""Scatter computes (TVM's ``topi.scatter_elements``, ``scatter_nd``) as gathers.

Entry points: :func:`scatter_elements`, :func:`scatter_nd`.

Rather than writing updates in sequence, each output element reduces over the updates that
land on it: ``update`` keeps the last one (highest update position, as a sequential scatter
would), ``add``/``mul``/``min``/``max`` combine them with the data value, ``mean`` averages
them with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi.utils import get_const_int, normalize_axes

_COMBINE: dict[str, tuple[Callable, Callable]] = {
    # mode -> (reducer over matching updates, identity for a dtype)
    "add": (te.sum, lambda t: _op.const(0, t)),
    "mul": (_op.comm_reducer(lambda x, y: x * y, lambda t: _op.const(1, t), name="mul"),
            lambda t: _op.const(1, t)),
    "min": (te.min, _op.max_value),
    "max": (te.max, _op.min_value),
}


def _all(conds: list) -> Any:
    out = _op.const(True)
    for c in conds:
        out = _op.logical_and(out, c)
    return out


def _scatter(data: te.Tensor, updates_at: Callable, match: Callable, red: list,
             position_of: Callable, mode: str, name: str) -> te.Tensor:
    """Shared reduction: ``match(i, axes)`` says whether the update at reduction ``axes``
    lands on output ``i``; ``position_of(axes)`` is that update's flat position."""
    dtype = data.dtype
    position = position_of(red)
    if mode in ("update", "mean"):
        last = te.compute(data.shape, lambda *i: te.max(
            _op.if_then_else(match(i), position, -1), axis=red), name=name + "_last")
        if mode == "update":
            red2 = [te.reduce_axis((0, r.dom.extent), name=r.var.name + "2") for r in red]

            def body(*i):
                pos2 = position_of(red2)
                hit = _op.logical_and(match(i, red2), _op.equal(pos2, last(*i)))
                return te.sum(_op.if_then_else(hit, updates_at(i, red2), _op.const(0, dtype)),
                              axis=red2)

            picked = te.compute(data.shape, body, name=name + "_pick")
            return te.compute(data.shape, lambda *i: _op.if_then_else(
                last(*i) >= 0, picked(*i), data(*i)), name=name, tag="scatter")
        total = te.compute(data.shape, lambda *i: te.sum(_op.if_then_else(
            match(i), updates_at(i, red), _op.const(0, dtype)), axis=red), name=name + "_sum")
        red3 = [te.reduce_axis((0, r.dom.extent), name=r.var.name + "3") for r in red]
        count = te.compute(data.shape, lambda *i: te.sum(_op.if_then_else(
            match(i, red3), 1, 0), axis=red3), name=name + "_count")
        return te.compute(data.shape, lambda *i: (data(*i) + total(*i)) / _op.cast(
            count(*i) + 1, dtype), name=name, tag="scatter")
    if mode not in _COMBINE:
        raise TVMError(f"scatter: unknown reduction {mode!r}")
    reducer, identity = _COMBINE[mode]
    acc = te.compute(data.shape, lambda *i: reducer(_op.if_then_else(
        match(i), updates_at(i, red), identity(dtype)), axis=red), name=name + "_acc")
    combine = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b,
               "min": _op.min, "max": _op.max}[mode]
    return te.compute(data.shape, lambda *i: combine(data(*i), acc(*i)), name=name,
                      tag="scatter")


def scatter_elements(data: te.Tensor, indices: te.Tensor, updates: te.Tensor, axis: int = 0,
                     reduction: str = "update") -> te.Tensor:
    """``out[.., indices[q], ..] (op)= updates[q]`` along ``axis`` (ONNX ScatterElements)."""
    axis = normalize_axes(axis, data.ndim)[0]
    ishape = [get_const_int(d) for d in indices.shape]
    size = data.shape[axis]
    red = [te.reduce_axis((0, ishape[axis]), name="q")]

    def position_of(rs):
        return rs[0].var

    def match(i, rs=red):
        q = list(i)
        q[axis] = rs[0].var
        inside = [i[d] < ishape[d] for d in range(data.ndim) if d != axis]
        safe = [_op.min(v, ishape[d] - 1) for d, v in enumerate(q)]
        target = _op.cast(indices(*safe), "int32")
        target = _op.if_then_else(target < 0, target + _op.cast(size, "int32"), target)
        return _op.logical_and(_all(inside), _op.equal(target, i[axis]))

    def updates_at(i, rs=red):
        q = list(i)
        q[axis] = rs[0].var
        return updates(*[_op.min(v, ishape[d] - 1) for d, v in enumerate(q)])

    return _scatter(data, updates_at, match, red, position_of, reduction,
                    "T_scatter_elements")


def scatter_nd(data: te.Tensor, indices: te.Tensor, updates: te.Tensor,
               mode: str = "update") -> te.Tensor:
    """``out[indices[:, y]] (op)= updates[y]``: indices ``(M, Y...)``, updates ``(Y..., X...)``."""
    m = get_const_int(indices.shape[0])
    yshape = [get_const_int(d) for d in indices.shape[1:]]
    red = [te.reduce_axis((0, n), name=f"y{k}") for k, n in enumerate(yshape)]

    def position_of(rs):
        flat: Any = 0
        for r, n in zip(rs, yshape):
            flat = flat * n + r.var
        return flat

    def match(i, rs=red):
        ys = [r.var for r in rs]
        conds = [_op.equal(_op.cast(indices(k, *ys), "int32"), i[k]) for k in range(m)]
        return _all(conds)

    def updates_at(i, rs=red):
        return updates(*([r.var for r in rs] + list(i[m:])))

    return _scatter(data, updates_at, match, red, position_of, mode, "T_scatter_nd")


__all__ = ["scatter_elements", "scatter_nd"]
