"""Reductions: sum, mean, max, min, prod, all, any, argmax, argmin, variance (+ std helpers).

Entry points: one constructor per op with TVM's signature
``sum(data, axis=None, keepdims=False, exclude=False)``; :func:`argmax`/:func:`argmin` add
``select_last_index``; :func:`variance`, :func:`std`, :func:`mean_variance`, :func:`mean_std`.

All reductions are ``COMM_REDUCE``. ``axis`` None reduces every axis; ``exclude`` reduces every
axis *not* listed; ``keepdims`` keeps reduced axes as extent 1. argmax/argmin give int32.

Example
-------
>>> from kiln import relay
>>> y = relay.sum(relay.var("x", shape=(2, 3, 4)), axis=1, keepdims=True)
>>> y.attrs.axis, y.attrs.keepdims
((1,), True)
"""

from __future__ import annotations

from typing import Any

from kiln.relay.op import op_attrs as A
from kiln.relay.op.op import COMM_REDUCE, call, define_op
from kiln.relay.op.type_relations import dims, fail, normalize_axis, tensor_arg, tensor_type


def reduce_axes(ndim: int, axis: Any, exclude: bool, op_name: str) -> list[int]:
    """The sorted axes a reduction folds (TVM's ``GetReduceAxes``)."""
    if axis is None:
        return list(range(ndim))
    axes = [normalize_axis(a, ndim, op_name) for a in axis]
    if len(set(axes)) != len(axes):
        fail(f"{op_name}: duplicate axes in {list(axis)}")
    if exclude:
        return [a for a in range(ndim) if a not in axes]
    return sorted(axes)


def _reduced_shape(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    axes = set(reduce_axes(len(d), attrs.axis, bool(attrs.exclude), op_name))
    if attrs.keepdims:
        return data, [1 if k in axes else x for k, x in enumerate(d)]
    return data, [x for k, x in enumerate(d) if k not in axes]


def _reduce_rel(types, attrs, op_name):
    data, shape = _reduced_shape(types, attrs, op_name)
    return tensor_type(shape, data.dtype)


def _arg_reduce_rel(types, attrs, op_name):
    _, shape = _reduced_shape(types, attrs, op_name)
    return tensor_type(shape, "int32")


def _variance_rel(types, attrs, op_name):
    data, shape = _reduced_shape(types, attrs, op_name)
    mean = tensor_arg(types, 1, op_name)
    if str(mean.dtype) != str(data.dtype):
        fail(f"{op_name}: mean dtype {mean.dtype} differs from data dtype {data.dtype}")
    return tensor_type(shape, data.dtype)


REDUCE_OPS = {
    "sum": "sum of elements",
    "mean": "arithmetic mean",
    "max": "maximum",
    "min": "minimum",
    "prod": "product",
    "all": "logical and",
    "any": "logical or",
}
ARG_REDUCE_OPS = {"argmax": "index of the maximum", "argmin": "index of the minimum"}

for _name, _doc in REDUCE_OPS.items():
    define_op(_name, _reduce_rel, COMM_REDUCE, 1, A.ReduceAttrs, _doc, 4)
for _name, _doc in ARG_REDUCE_OPS.items():
    define_op(_name, _arg_reduce_rel, COMM_REDUCE, 1, A.ArgReduceAttrs, _doc, 4)
define_op("variance", _variance_rel, COMM_REDUCE, 2, A.VarianceAttrs,
          "mean squared deviation from a given mean", 4)


def _axis_list(axis: Any) -> tuple[int, ...] | None:
    if axis is None:
        return None
    if isinstance(axis, int):
        return (int(axis),)
    return tuple(int(a) for a in axis)


def _make_reduce(name: str, doc: str):
    def constructor(data: Any, axis: Any = None, keepdims: bool = False,
                    exclude: bool = False) -> Any:
        return call(name, [data], A.ReduceAttrs(axis=_axis_list(axis), keepdims=bool(keepdims),
                                                exclude=bool(exclude)))

    constructor.__name__ = constructor.__qualname__ = name
    constructor.__doc__ = (
        f"The {doc} of ``data`` over ``axis`` (every axis when None; every other axis when "
        "``exclude``); ``keepdims`` keeps reduced axes with extent 1."
    )
    return constructor


def _make_arg_reduce(name: str, doc: str):
    def constructor(data: Any, axis: Any = None, keepdims: bool = False, exclude: bool = False,
                    select_last_index: bool = False) -> Any:
        return call(name, [data], A.ArgReduceAttrs(
            axis=_axis_list(axis), keepdims=bool(keepdims), exclude=bool(exclude),
            select_last_index=bool(select_last_index)))

    constructor.__name__ = constructor.__qualname__ = name
    constructor.__doc__ = (
        f"The {doc} of ``data`` along ``axis`` (int32); ties pick the last index when "
        "``select_last_index``."
    )
    return constructor


for _name, _doc in REDUCE_OPS.items():
    globals()[_name] = _make_reduce(_name, _doc)
for _name, _doc in ARG_REDUCE_OPS.items():
    globals()[_name] = _make_arg_reduce(_name, _doc)


def variance(data: Any, axis: Any = None, keepdims: bool = False, exclude: bool = False,
             unbiased: bool = False, with_mean: Any = None) -> Any:
    """Variance of ``data`` over ``axis`` (``unbiased`` divides by N - 1)."""
    mean_value = with_mean
    if mean_value is None:
        mean_value = globals()["mean"](data, axis, True, exclude)
    return call("variance", [data, mean_value], A.VarianceAttrs(
        axis=_axis_list(axis), keepdims=bool(keepdims), exclude=bool(exclude),
        unbiased=bool(unbiased)))


def std(data: Any, axis: Any = None, keepdims: bool = False, exclude: bool = False,
        unbiased: bool = False) -> Any:
    """Standard deviation: ``sqrt(variance(...))``."""
    from kiln.relay.op.tensor import sqrt  # type: ignore[attr-defined]

    return sqrt(variance(data, axis, keepdims, exclude, unbiased))


def mean_variance(data: Any, axis: Any = None, keepdims: bool = False, exclude: bool = False,
                  unbiased: bool = False) -> Any:
    """``Tuple(mean, variance)`` sharing one mean computation."""
    from kiln.relay.expr import Tuple, TupleWrapper
    from kiln.relay.op.transform import squeeze

    m = globals()["mean"](data, axis, True, exclude)
    var = variance(data, axis, keepdims, exclude, unbiased, with_mean=m)
    if not keepdims:
        m = squeeze(m)  # as TVM: drops every unit axis of the kept-dims mean
    return TupleWrapper(Tuple([m, var]), 2)


def mean_std(data: Any, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Any:
    """``Tuple(mean, std)``."""
    from kiln.relay.expr import Tuple, TupleWrapper
    from kiln.relay.op.tensor import sqrt  # type: ignore[attr-defined]

    pair = mean_variance(data, axis, keepdims, exclude)
    return TupleWrapper(Tuple([pair[0], sqrt(pair[1])]), 2)


def logsumexp(data: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """``log(sum(exp(data), axis))`` computed stably: ``max + log(sum(exp(data - max)))``."""
    from kiln.relay.op.tensor import add, exp, log, subtract  # type: ignore[attr-defined]
    from kiln.relay.op.transform import squeeze

    peak = globals()["max"](data, axis, True)
    total = globals()["sum"](exp(subtract(data, peak)), axis, keepdims)
    if not keepdims:
        peak = squeeze(peak, axis=_axis_list(axis))
    return add(log(total), peak)


__all__ = [*REDUCE_OPS, *ARG_REDUCE_OPS, "variance", "std", "mean_variance", "mean_std",
           "logsumexp", "reduce_axes"]
