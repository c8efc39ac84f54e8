"""Helpers the op family modules share when they write an op's rules.

Entry points: for computes, :func:`out_shape`, :func:`out_dtype`, :func:`int_list`,
:func:`optional_list`,
:func:`static_or_symbolic`; for reference rules, :func:`reference_dtype`, :func:`numpy_dtype`,
:class:`AttrsWith`; for shape functions (``rule(attrs, in_dims, out_types) -> out_dims`` over
int64 ``PrimExpr`` dims), :func:`i64`, :func:`broadcast_dims`, :func:`product`,
:func:`checked`, :func:`same_shape_as_input`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kiln import tir
from kiln.runtime.dtype import DataType

__all__ = ["out_shape", "out_dtype", "int_list", "optional_list", "static_or_symbolic",
           "reference_dtype", "numpy_dtype", "AttrsWith", "i64", "broadcast_dims", "product",
           "checked", "same_shape_as_input"]


# ---- computes: compute(attrs, inputs, out_type) -> [te.Tensor] -------------------------------
def out_shape(out_type: Any, index: int | None = None) -> list[Any]:
    """The output shape (of field ``index`` of a tuple type) with static dims as ints."""
    t = out_type.fields[index] if index is not None else out_type
    return [int(d.value) if isinstance(getattr(d, "value", None), int) else d for d in t.shape]


def out_dtype(out_type: Any, index: int | None = None) -> str:
    """The output dtype (of field ``index`` of a tuple type)."""
    return str((out_type.fields[index] if index is not None else out_type).dtype)


def int_list(value: Any) -> list[int] | None:
    """An int or a sequence of ints as a list of ints (None stays None)."""
    if value is None:
        return None
    if isinstance(value, int):
        return [int(value)]
    return [int(v) for v in value]


def optional_list(value: Any) -> Any:
    """An attrs tuple as a list; None and scalars as they are."""
    return None if value is None else (list(value) if isinstance(value, tuple | list) else value)


def static_or_symbolic(static: Callable, symbolic: Callable) -> Callable:
    """A compute that is ``static`` (constant shapes, folded indexing) unless the call has a
    run-time extent (``Any`` dims, sized by the VM's shape functions), then ``symbolic``."""
    def compute(attrs: Any, inputs: list, out_type: Any) -> list:
        from kiln.topi import dynamic  # the loop-level layer, loaded by the first lowering

        shapes = [list(t.shape) for t in getattr(out_type, "fields", [out_type])]
        shapes += [list(t.shape) for t in inputs]
        if all(dynamic.is_static(shape) for shape in shapes):
            return static(attrs, inputs, out_type)
        return symbolic(attrs, inputs, out_type)

    # named and documented as, and attributed to the module of, the static compute
    compute.__name__, compute.__qualname__ = static.__name__, static.__qualname__
    compute.__module__, compute.__doc__ = static.__module__, static.__doc__
    return compute


# ---- reference rules: reference(attrs, args, out_type) -> np.ndarray --------------------------
def reference_dtype(out_type: Any) -> np.dtype:
    """The NumPy dtype of a call's (tensor) result type."""
    return numpy_dtype(out_type.dtype)


def numpy_dtype(dtype: Any) -> np.dtype:
    """The NumPy dtype of a Relay dtype string (bfloat16, float8 … through ml_dtypes)."""
    return np.dtype(DataType(str(dtype)).numpy_dtype)


class AttrsWith:
    """A view of an attrs node with some fields replaced: a ``dyn.*`` op's reference rule
    reads the values its static twin takes as attrs from its tensor arguments."""

    def __init__(self, attrs: Any, **fields: Any) -> None:
        self._attrs, self._fields = attrs, fields

    def __getattr__(self, name: str) -> Any:
        if name in self._fields:
            return self._fields[name]
        return getattr(self._attrs, name)


def is_integer_dtype(dtype: np.dtype) -> bool:
    """Integers and bool. Test this rather than ``kind == "f"``: ml_dtypes' bfloat16 and
    float8 types have kind ``V``, so a float test misses them."""
    return np.dtype(dtype).kind in "iub"


def wide_dtype(dtype: np.dtype) -> type:
    """The type a reference rule accumulates ``dtype`` in: int64 or float64."""
    return np.int64 if is_integer_dtype(dtype) else np.float64


# ---- shape functions: rule(attrs, in_dims, out_types) -> out_dims ---------------------------
def i64(value: int) -> Any:
    """An int64 constant dim."""
    return tir.const(int(value), "int64")


def broadcast_dims(dims_list: list[list[Any]]) -> list[Any]:
    """NumPy broadcasting of several dimension lists."""
    ndim = max(len(d) for d in dims_list)
    out = []
    for k in range(ndim):
        result = None
        for dims in dims_list:
            offset = k - (ndim - len(dims))
            if offset < 0:
                continue
            d = dims[offset]
            result = d if result is None else tir.Select(result == i64(1), d, result)
        out.append(result)
    return out


def product(dims: list[Any]) -> Any:
    """The product of int64 dims (1 for none)."""
    result = i64(1)
    for d in dims:
        result = result * d
    return result


def same_shape_as_input(attrs: Any, in_dims: list[list[Any]], out_types: list) -> list:
    """The shape function of an op whose every output has its first input's shape."""
    return [list(in_dims[0]) for _ in out_types]


def checked(dims: list[Any], valid: Any) -> list[Any]:
    """``dims``, or all -1 when ``valid`` is false at run time: the VM refuses to allocate a
    negative extent, so bad shape-carrying input raises a TVMError instead of reading out of
    bounds."""
    return [tir.Select(valid, d, i64(-1)) for d in dims]
