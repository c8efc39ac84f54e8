"""Shared pieces of operator type relations: argument checks, dims, broadcasting.

Entry points: :func:`tensor_arg`, :func:`dims`, :func:`tensor_type`, :func:`fail`,
:func:`broadcast_shape`, :func:`normalize_axis`, :func:`dim_op`, :func:`is_any`, and the
generic relations :func:`identity_rel`, :func:`identity_comp_rel`, :func:`broadcast_rel`,
:func:`broadcast_comp_rel`.

A relation works on *dims*: a Python ``int`` for a known extent, the :class:`~kiln.ir.type.Any`
node for an extent known only at run time, or a symbolic ``PrimExpr`` (a ``tir.Var``).
:func:`dims` turns a ``TensorType``'s shape into dims and :func:`tensor_type` turns dims back.
Arithmetic on dims goes through :func:`dim_op`: ints compute, ``Any`` stays ``Any``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any as _AnyT

from kiln.ir.expr import IntImm, PrimExpr
from kiln.ir.type import Any, TensorType, TupleType
from kiln.runtime.error import TypeInferenceError

Dim = _AnyT  # int | Any | PrimExpr

__all__ = [
    "Any",
    "TensorType",
    "TupleType",
    "fail",
    "tensor_arg",
    "dims",
    "dim_value",
    "is_any",
    "is_static",
    "tensor_type",
    "dim_op",
    "dims_equal",
    "broadcast_shape",
    "normalize_axis",
    "shape_str",
    "identity_rel",
    "identity_comp_rel",
    "broadcast_rel",
    "broadcast_comp_rel",
    "named",
]


def fail(message: str) -> None:
    """Raise the error a relation reports for ill-typed arguments."""
    raise TypeInferenceError(message)


def tensor_arg(types: Sequence[_AnyT], index: int, op_name: str) -> TensorType:
    """``types[index]``, checked to be a tensor type."""
    if index >= len(types):
        fail(f"{op_name}: expects at least {index + 1} arguments, got {len(types)}")
    ty = types[index]
    if not isinstance(ty, TensorType):
        fail(f"{op_name}: argument {index} must be a tensor, got {ty}")
    return ty


def dim_value(d: _AnyT) -> Dim:
    """One shape entry as a dim: ``int`` for a constant, else the node itself."""
    if isinstance(d, bool):
        return int(d)
    if isinstance(d, int):
        return d
    if isinstance(d, IntImm):
        return int(d.value)
    return d


def dims(ty: TensorType) -> list[Dim]:
    """The shape of ``ty`` as a list of dims."""
    return [dim_value(d) for d in ty.shape]


def is_any(d: Dim) -> bool:
    return isinstance(d, Any)


def is_static(d: Dim) -> bool:
    return isinstance(d, int)


def _to_prim(d: Dim) -> PrimExpr:
    if isinstance(d, int):
        return IntImm("int64" if not -(2**31) <= d < 2**31 else "int32", d)
    return d


def tensor_type(shape: Sequence[Dim], dtype: _AnyT) -> TensorType:
    """A ``TensorType`` from dims (ints become ``IntImm``)."""
    return TensorType([_to_prim(dim_value(d)) for d in shape], str(dtype))


def dim_op(fn: Callable[..., _AnyT], *ds: Dim) -> Dim:
    """Apply shape arithmetic ``fn`` to dims: constants fold, ``Any`` propagates.

    Symbolic dims compute symbolically when the TIR arithmetic is available, else the result
    is ``Any`` (known only at run time), which is always a sound answer.
    """
    if all(isinstance(d, int) for d in ds):
        return int(fn(*ds))
    if any(is_any(d) for d in ds):
        return Any()
    try:
        return dim_value(fn(*ds))
    except Exception:  # noqa: BLE001 - symbolic arithmetic unavailable: fall back to Any
        return Any()


def dims_equal(a: Dim, b: Dim) -> bool:
    """Whether two dims are provably equal (same constant or the same symbolic node)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, int) or isinstance(b, int) or is_any(a) or is_any(b):
        return a is b
    from kiln.ir.structural import structural_equal  # symbolic extents: same expression

    return a is b or structural_equal(a, b, map_free_vars=False)


def shape_str(shape: Sequence[Dim]) -> str:
    """``(3, 4)`` / ``(?, 4)`` for messages."""
    parts = ["?" if is_any(d) else str(d) for d in shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def broadcast_shape(s1: Sequence[Dim], s2: Sequence[Dim], op_name: str) -> list[Dim]:
    """NumPy broadcasting of two shapes, with ``Any`` standing for "1 or the other extent"."""
    out: list[Dim] = []
    n1, n2 = len(s1), len(s2)
    for i in range(1, max(n1, n2) + 1):
        if i > n1:
            out.append(s2[n2 - i])
            continue
        if i > n2:
            out.append(s1[n1 - i])
            continue
        a, b = s1[n1 - i], s2[n2 - i]
        if dims_equal(a, b):
            out.append(a)
        elif a == 1 if isinstance(a, int) else False:
            out.append(b)
        elif b == 1 if isinstance(b, int) else False:
            out.append(a)
        elif is_any(a):
            out.append(b)
        elif is_any(b):
            out.append(a)
        else:
            fail(
                f"{op_name}: shapes {shape_str(s1)} and {shape_str(s2)} are not "
                "broadcast-compatible"
            )
    return out[::-1]


def normalize_axis(axis: int, ndim: int, op_name: str, extra: int = 0) -> int:
    """``axis`` in ``[-ndim - extra, ndim + extra)`` made non-negative."""
    axis = int(axis)
    if not -(ndim + extra) <= axis < ndim + extra:
        fail(f"{op_name}: axis {axis} is out of range for a tensor of rank {ndim}")
    return axis + ndim + extra if axis < 0 else axis


# ---- generic relations --------------------------------------------------------------------


def identity_rel(types: Sequence[_AnyT], attrs: _AnyT, op_name: str = "op") -> TensorType:
    """Output type = type of the first argument (unary elementwise ops)."""
    return tensor_arg(types, 0, op_name)


def identity_comp_rel(types: Sequence[_AnyT], attrs: _AnyT, op_name: str = "op") -> TensorType:
    """Same shape as the input, dtype bool (``isnan`` …)."""
    data = tensor_arg(types, 0, op_name)
    return tensor_type(dims(data), "bool")


def _broadcast(types: Sequence[_AnyT], op_name: str, out_dtype: str | None) -> TensorType:
    lhs = tensor_arg(types, 0, op_name)
    rhs = tensor_arg(types, 1, op_name)
    if str(lhs.dtype) != str(rhs.dtype):
        fail(f"{op_name}: data types {lhs.dtype} and {rhs.dtype} do not match")
    d1, d2 = dims(lhs), dims(rhs)
    shape = broadcast_shape(d1, d2, op_name)
    if out_dtype is None and len(shape) == len(d1) and all(map(dims_equal, shape, d1)):
        return lhs  # the common same-shape case: reuse the input type
    return tensor_type(shape, out_dtype or lhs.dtype)


def broadcast_rel(types: Sequence[_AnyT], attrs: _AnyT, op_name: str = "op") -> TensorType:
    """Broadcast two same-dtype tensors; the output keeps the dtype (``add`` …)."""
    return _broadcast(types, op_name, None)


def broadcast_comp_rel(types: Sequence[_AnyT], attrs: _AnyT, op_name: str = "op") -> TensorType:
    """Broadcast two same-dtype tensors; the output is bool (``less`` …)."""
    return _broadcast(types, op_name, "bool")


def named(rel: Callable, op_name: str) -> Callable:
    """``rel`` with ``op_name`` bound, so its messages name the op."""

    def bound(types: Sequence[_AnyT], attrs: _AnyT) -> _AnyT:
        return rel(types, attrs, op_name)

    bound.__name__ = f"{getattr(rel, '__name__', 'rel')}[{op_name}]"
    bound.__qualname__ = bound.__name__
    return bound
