"""Reductions over axes (TVM's ``topi.reduction``).

Entry points: :func:`sum`, :func:`mean`, :func:`max`, :func:`min`, :func:`prod`, :func:`all`,
:func:`any`, :func:`argmax`, :func:`argmin`, :func:`variance`, :func:`collapse_sum`. Each takes
``axis`` (None for all, an int, or ints; negatives count from the end), ``keepdims`` and
``exclude`` (reduce every axis *not* listed) as Relay's reduce attrs do.

Example
-------
>>> from kiln import te, topi
>>> A = te.placeholder((2, 3, 4), name="A")
>>> [int(d) for d in topi.sum(A, axis=(0, -1), keepdims=True).shape]
[1, 3, 1]
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

from kiln import te
from kiln.tir import op as _op
from kiln.topi import tag
from kiln.topi.utils import normalize_axes
from kiln.topi.utils import prod as _prod


def reduced_axes(ndim: int, axis: Any, exclude: bool = False) -> list[int]:
    """The axes a reduction removes."""
    axes = normalize_axes(axis, ndim)
    if exclude:
        axes = [i for i in range(ndim) if i not in axes]
    return axes


# Sums of these dtypes accumulate in the wider dtype and round once at the end, as NumPy's
# pairwise sum and ONNX Runtime do: a float16 accumulator loses a bit per doubling of the count.
ACCUMULATOR_DTYPE = {"float16": "float32"}


def _reduce(data: te.Tensor, axis: Any, keepdims: bool, exclude: bool,
            reducer: Callable, name: str, accumulate: str | None = None) -> te.Tensor:
    axes = reduced_axes(data.ndim, axis, exclude)
    kept = [i for i in range(data.ndim) if i not in axes]
    out_shape = [1 if i in axes else data.shape[i] for i in range(data.ndim)] if keepdims \
        else [data.shape[i] for i in kept]
    red = [te.reduce_axis((0, data.shape[i]), name=f"k{i}") for i in axes]

    def body(*idx):
        full, it, rt = [], iter(idx), iter(red)
        for i in range(data.ndim):
            if i in axes:
                full.append(next(rt).var)
                if keepdims:
                    next(it)
            else:
                full.append(next(it))
        value = data(*full) if accumulate is None else _op.cast(data(*full), accumulate)
        if not red:
            return value
        return reducer(value, axis=red)

    return te.compute(out_shape, body, name=name, tag=tag.COMM_REDUCE)


def _narrow(wide: te.Tensor, dtype: str, name: str) -> te.Tensor:
    if wide.dtype == dtype:
        return wide
    return te.compute(wide.shape, lambda *i: _op.cast(wide(*i), dtype), name=name,
                      tag=tag.ELEMWISE)


def sum(data: te.Tensor, axis: Any = None, keepdims: bool = False,  # noqa: A001
        exclude: bool = False) -> te.Tensor:
    """Sum over ``axis`` (float16 accumulates in float32, see ``ACCUMULATOR_DTYPE``)."""
    wide = ACCUMULATOR_DTYPE.get(str(data.dtype))
    total = _reduce(data, axis, keepdims, exclude, te.sum, "T_sum", wide)
    return _narrow(total, data.dtype, "T_sum_round")


def max(data: te.Tensor, axis: Any = None, keepdims: bool = False,  # noqa: A001
        exclude: bool = False) -> te.Tensor:
    """Maximum over ``axis``."""
    return _reduce(data, axis, keepdims, exclude, te.max, "T_max")


def min(data: te.Tensor, axis: Any = None, keepdims: bool = False,  # noqa: A001
        exclude: bool = False) -> te.Tensor:
    """Minimum over ``axis``."""
    return _reduce(data, axis, keepdims, exclude, te.min, "T_min")


# the product reducer (identity 1), shared with topi.transform's cumulative product
prod_reducer = _op.comm_reducer(lambda x, y: x * y, lambda t: _op.const(1, t), name="prod")
_all_reducer = _op.comm_reducer(lambda x, y: _op.logical_and(x, y),
                                lambda t: _op.const(True, t), name="all")
_any_reducer = _op.comm_reducer(lambda x, y: _op.logical_or(x, y),
                                lambda t: _op.const(False, t), name="any")


def prod(data: te.Tensor, axis: Any = None, keepdims: bool = False,
         exclude: bool = False) -> te.Tensor:
    """Product over ``axis``."""
    return _reduce(data, axis, keepdims, exclude, prod_reducer, "T_prod")


def _as_bool(data: te.Tensor) -> te.Tensor:
    if data.dtype == "bool":
        return data
    return te.compute(data.shape, lambda *i: _op.cast(data(*i), "bool"), name="T_bool",
                      tag=tag.ELEMWISE)


def all(data: te.Tensor, axis: Any = None, keepdims: bool = False,  # noqa: A001
        exclude: bool = False) -> te.Tensor:
    """Logical and over ``axis``."""
    return _reduce(_as_bool(data), axis, keepdims, exclude, _all_reducer, "T_all")


def any(data: te.Tensor, axis: Any = None, keepdims: bool = False,  # noqa: A001
        exclude: bool = False) -> te.Tensor:
    """Logical or over ``axis``."""
    return _reduce(_as_bool(data), axis, keepdims, exclude, _any_reducer, "T_any")


def _count(data: te.Tensor, axes: list[int]) -> Any:
    return _prod([data.shape[i] for i in axes])


def mean(data: te.Tensor, axis: Any = None, keepdims: bool = False,
         exclude: bool = False) -> te.Tensor:
    """Arithmetic mean over ``axis`` (integer means truncate toward zero, as TVM's ``div``)."""
    axes = reduced_axes(data.ndim, axis, exclude)
    wide = ACCUMULATOR_DTYPE.get(str(data.dtype), data.dtype)
    total = _reduce(data, axis, keepdims, exclude, te.sum, "T_sum", wide)
    count = _op.cast(_count(data, axes), wide)
    divide = _op.truncdiv if "int" in str(wide) else (lambda a, b: a / b)
    return te.compute(total.shape, lambda *i: _op.cast(divide(total(*i), count), data.dtype),
                      name="T_mean", tag=tag.ELEMWISE)


def variance(data: te.Tensor, mean_value: te.Tensor, axis: Any = None,
             keepdims: bool = False, exclude: bool = False,
             unbiased: bool = False) -> te.Tensor:
    """Mean squared deviation from ``mean_value`` (keepdims-shaped, as Relay passes it)."""
    axes = reduced_axes(data.ndim, axis, exclude)
    offset = data.ndim - mean_value.ndim

    def dev(*i):
        m_idx = [0 if int(getattr(mean_value.shape[j], "value", 0)) == 1 else i[j + offset]
                 for j in range(mean_value.ndim)]
        d = data(*i) - mean_value(*m_idx)
        return d * d

    sq = te.compute(data.shape, dev, name="T_sqdev", tag=tag.BROADCAST)
    total = sum(sq, axis, keepdims, exclude)
    count = _count(data, axes)
    count = _op.cast(count - 1 if unbiased else count, data.dtype)
    return te.compute(total.shape, lambda *i: total(*i) / count, name="T_variance",
                      tag=tag.ELEMWISE)


def _arg_reducer(better: Callable[[Any, Any], Any], select_last: bool):
    def combine(lhs, rhs):
        li, lv = lhs
        ri, rv = rhs
        take_rhs = better(rv, lv)
        tie = _op.equal(rv, lv)
        pick_on_tie = ri > li if select_last else ri < li
        use_rhs = _op.logical_or(take_rhs, _op.logical_and(tie, pick_on_tie))
        return (_op.if_then_else(use_rhs, ri, li), _op.if_then_else(use_rhs, rv, lv))

    return combine


def _arg_reduce(data: te.Tensor, axis: Any, keepdims: bool, exclude: bool,
                select_last_index: bool, is_max: bool, name: str) -> te.Tensor:
    axes = reduced_axes(data.ndim, axis, exclude)
    kept = [i for i in range(data.ndim) if i not in axes]
    better = _op.greater if is_max else _op.less
    start = _op.min_value if is_max else _op.max_value
    reducer = _op.comm_reducer(_arg_reducer(better, select_last_index),
                               lambda ti, tv: (_op.const(-1, ti), start(tv)), name=name)
    out_shape = [1 if i in axes else data.shape[i] for i in range(data.ndim)] if keepdims \
        else [data.shape[i] for i in kept]
    red = [te.reduce_axis((0, data.shape[i]), name=f"k{i}") for i in axes]
    red_shape = [data.shape[i] for i in axes]

    def body(*idx):
        full, it, rt = [], iter(idx), iter(red)
        for i in range(data.ndim):
            if i in axes:
                full.append(next(rt).var)
                if keepdims:
                    next(it)
            else:
                full.append(next(it))
        flat = None
        for r, dim in zip(red, red_shape):
            flat = r.var if flat is None else flat * dim + r.var
        flat = _op.const(0, "int32") if flat is None else _op.cast(flat, "int32")
        return reducer((flat, data(*full)), axis=red)

    idx_val = te.compute(out_shape, body, name=name + "_red_temp", tag=tag.COMM_REDUCE_IDX)
    return te.compute(out_shape, lambda *i: idx_val[0](*i), name=name,
                      tag=tag.COMM_REDUCE_IDX)


def argmax(data: te.Tensor, axis: Any = None, keepdims: bool = False, exclude: bool = False,
           select_last_index: bool = False) -> te.Tensor:
    """Index of the maximum along ``axis`` (flattened over several axes); int32."""
    return _arg_reduce(data, axis, keepdims, exclude, select_last_index, True, "T_argmax")


def argmin(data: te.Tensor, axis: Any = None, keepdims: bool = False, exclude: bool = False,
           select_last_index: bool = False) -> te.Tensor:
    """Index of the minimum along ``axis``; int32."""
    return _arg_reduce(data, axis, keepdims, exclude, select_last_index, False, "T_argmin")


def collapse_sum(data: te.Tensor, target_shape: Any) -> te.Tensor:
    """Sum ``data`` down to ``target_shape`` (the reverse of broadcasting)."""
    target = [int(getattr(d, "value", d)) for d in target_shape]
    lead = data.ndim - len(target)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(target)
                                if d == 1 and int(getattr(data.shape[lead + i], "value", 0)) != 1]
    if not axes:
        return te.compute(data.shape, lambda *i: data(*i), name="T_collapse_sum",
                          tag=tag.INJECTIVE)
    out = sum(data, axes, keepdims=True)
    if lead == 0:
        return out
    from kiln.topi.transform import reshape

    return reshape(out, target)


_ = builtins
__all__ = ["sum", "max", "min", "prod", "all", "any", "mean", "variance", "argmax", "argmin",
           "collapse_sum", "reduced_axes"]
