"""Reductions: sum, mean, max, min, prod, all, any, argmax, argmin, variance (+ std helpers).

Entry points: one constructor per op with TVM's signature
``sum(data, axis=None, keepdims=False, exclude=False)``; :func:`argmax`/:func:`argmin` add
``select_last_index``; :func:`variance`, :func:`std`, :func:`mean_variance`, :func:`mean_std`.

All reductions are ``COMM_REDUCE``. ``axis`` None reduces every axis; ``exclude`` reduces every
axis *not* listed; ``keepdims`` keeps reduced axes as extent 1. argmax/argmin give int32.
Below the definitions, the family's rules: TOPI computes with the reduction schedule, NumPy
references (accumulating as the kernels do), the VM shape function and the gradients of
``sum`` and ``mean``.

Example
-------
>>> from kiln import relay
>>> y = relay.sum(relay.var("x", shape=(2, 3, 4)), axis=1, keepdims=True)
>>> y.attrs.axis, y.attrs.keepdims
((1,), True)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.relay.expr import const
from kiln.relay.op import op_attrs as A
from kiln.relay.op.broadcast import broadcast_to_like
from kiln.relay.op.op import (
    COMM_REDUCE,
    call,
    define_op,
    register_compute,
    register_gradient,
    register_reduce_schedule,
    register_reference,
    register_shape_func,
)
from kiln.relay.op.reshape import reshape
from kiln.relay.op.rule_util import i64, is_integer_dtype, optional_list, reference_dtype
from kiln.relay.op.type_relations import dims, fail, normalize_axis, tensor_arg, tensor_type

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.


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


# ---- computes (TOPI) and schedule kind ------------------------------------------------------
def _reduce_compute(topi_name: str) -> Callable:
    """The TE compute of a reduction: ``topi.<topi_name>(data, axis, keepdims, exclude)``."""
    def compute(attrs: Any, inputs: list, out_type: Any) -> list:
        from kiln import topi

        return [getattr(topi, topi_name)(inputs[0], optional_list(attrs.axis), attrs.keepdims,
                                         attrs.exclude)]

    compute.__name__ = compute.__qualname__ = f"compute_{topi_name}"
    return compute


def _arg_reduce_compute(topi_name: str) -> Callable:
    """The TE compute of argmax/argmin (with ``select_last_index``)."""
    def compute(attrs: Any, inputs: list, out_type: Any) -> list:
        from kiln import topi

        return [getattr(topi, topi_name)(inputs[0], optional_list(attrs.axis), attrs.keepdims,
                                         attrs.exclude, attrs.select_last_index)]

    compute.__name__ = compute.__qualname__ = f"compute_{topi_name}"
    return compute


for _name in REDUCE_OPS:
    register_compute(_name, _reduce_compute(_name))
for _name in ARG_REDUCE_OPS:
    register_compute(_name, _arg_reduce_compute(_name))


@register_compute("variance")
def compute_variance(attrs, inputs, out_type):
    """``topi.variance`` of the data about the given mean."""
    from kiln import topi

    return [topi.variance(inputs[0], inputs[1], optional_list(attrs.axis), attrs.keepdims,
                          attrs.exclude, attrs.unbiased)]


for _name in (*REDUCE_OPS, *ARG_REDUCE_OPS, "variance"):
    register_reduce_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
_NUMPY_REDUCTIONS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min,
                     "prod": np.prod, "all": np.all, "any": np.any}


def _axes(attrs: Any, x: np.ndarray, op_name: str) -> tuple[int, ...]:
    return tuple(reduce_axes(x.ndim, attrs.axis, bool(attrs.exclude), op_name))


def _reduce_reference(op_name: str) -> Callable:
    """The reference rule of a reduction, accumulating as the kernels do."""
    func = _NUMPY_REDUCTIONS[op_name]

    def reference(attrs: Any, args: list, out_type: Any) -> np.ndarray:
        from kiln.topi.reduction import ACCUMULATOR_DTYPE

        x = args[0]
        axes = _axes(attrs, x, op_name)
        extra = {}
        if func in (np.max, np.min) and x.size == 0:  # TIR starts from the dtype's extremes
            if is_integer_dtype(x.dtype):
                info = np.iinfo(x.dtype)
                extra["initial"] = info.min if func is np.max else info.max
            else:
                extra["initial"] = -np.inf if func is np.max else np.inf
        wide = ACCUMULATOR_DTYPE.get(str(x.dtype))
        if wide is not None and func in (np.sum, np.mean):
            # as the kernels do: accumulate in the wider type, round once (NumPy's own float16
            # sum does so only along a contiguous axis)
            extra["dtype"] = np.dtype(wide)
        result = func(x, axis=axes, keepdims=bool(attrs.keepdims), **extra) \
            if axes or x.ndim == 0 else x.copy()
        return np.asarray(result).astype(reference_dtype(out_type), copy=False)

    reference.__name__ = reference.__qualname__ = f"reference_{op_name}"
    return reference


def _arg_reduce_reference(op_name: str) -> Callable:
    """The reference rule of argmax/argmin: the reduced axes flattened last, as in TVM."""
    pick = np.argmax if op_name == "argmax" else np.argmin

    def reference(attrs: Any, args: list, out_type: Any) -> np.ndarray:
        x = args[0]
        axes = _axes(attrs, x, op_name)
        keep = [a for a in range(x.ndim) if a not in axes]
        moved = np.transpose(x, keep + list(axes)).reshape([x.shape[a] for a in keep] + [-1])
        if attrs.select_last_index:
            idx = moved.shape[-1] - 1 - pick(moved[..., ::-1], axis=-1)
        else:
            idx = pick(moved, axis=-1)
        if attrs.keepdims:
            idx = idx.reshape([1 if a in axes else x.shape[a] for a in range(x.ndim)])
        return np.asarray(idx).astype(reference_dtype(out_type))

    reference.__name__ = reference.__qualname__ = f"reference_{op_name}"
    return reference


for _name in REDUCE_OPS:
    register_reference(_name, _reduce_reference(_name))
for _name in ARG_REDUCE_OPS:
    register_reference(_name, _arg_reduce_reference(_name))


@register_reference("variance")
def reference_variance(attrs, args, out_type):
    """Mean squared deviation from the given mean (over N - 1 when ``unbiased``)."""
    x, mean = args
    axes = _axes(attrs, x, "variance")
    count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    squares = np.sum((x - mean) ** 2, axis=axes, keepdims=bool(attrs.keepdims))
    return (squares / (count - 1 if attrs.unbiased else count)).astype(reference_dtype(out_type))


# ---- VM shape functions ---------------------------------------------------------------------
def shape_func_reduce(attrs, in_dims, out_types):
    """The input dims without the reduced axes (extent 1 with ``keepdims``)."""
    data = in_dims[0]
    axes = set(reduce_axes(len(data), attrs.axis, bool(attrs.exclude), "reduce"))
    return [[(i64(1) if k in axes else d) for k, d in enumerate(data)
             if attrs.keepdims or k not in axes]]


for _name in (*REDUCE_OPS, *ARG_REDUCE_OPS, "variance"):
    register_shape_func(_name, False, shape_func_reduce)


# ---- gradients ------------------------------------------------------------------------------
def _spread_back(orig: Any, grad: Any) -> Any:
    """The adjoint of a reduction's result broadcast back over the reduced axes."""
    data = orig.args[0]
    if not orig.attrs.keepdims:
        shape = list(data.checked_type.concrete_shape)
        for axis in reduce_axes(len(shape), orig.attrs.axis, bool(orig.attrs.exclude), "sum"):
            shape[axis] = 1
        grad = reshape(grad, shape)
    return broadcast_to_like(grad, data)


@register_gradient("sum")
def gradient_sum(orig, grad):
    """The adjoint, broadcast back to the data."""
    return [_spread_back(orig, grad)]


@register_gradient("mean")
def gradient_mean(orig, grad):
    """The adjoint over the count, broadcast back to the data."""
    shape = orig.args[0].checked_type.concrete_shape
    axes = reduce_axes(len(shape), orig.attrs.axis, bool(orig.attrs.exclude), "mean")
    count = np.array(math.prod(shape[a] for a in axes), dtype=str(orig.checked_type.dtype))
    return [call("divide", [_spread_back(orig, grad), const(count)])]


__all__ = [*REDUCE_OPS, *ARG_REDUCE_OPS, "variance", "std", "mean_variance", "mean_std",
           "logsumexp", "reduce_axes"]
