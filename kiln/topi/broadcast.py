"""Broadcasting binary computes (TVM's ``topi.broadcast``) with NumPy's rules.

Entry points: :func:`broadcast_shape`, :func:`broadcast_to`, and one function per op in
:data:`BINARY` (``add``, ``subtract``, ``multiply``, ``divide``, ``floor_divide``, ``mod``,
``power``, ``maximum``, ``less``, ``logical_and``, ``left_shift`` …). An operand may be a tensor,
a Python number or a scalar expression; numbers take the tensor operand's dtype.

Example
-------
>>> from kiln import te, topi
>>> A = te.placeholder((3, 1), name="A")
>>> B = te.placeholder((4,), name="B")
>>> [int(d) for d in topi.add(A, B).shape]
[3, 4]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kiln import te
from kiln.ir.expr import PrimExpr
from kiln.ir.structural import structural_equal
from kiln.runtime.error import TVMError
from kiln.tir import expr as _e
from kiln.tir import op as _op
from kiln.topi import tag


def broadcast_shape(a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    """The NumPy broadcast of two shapes; TVMError when they are incompatible."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        ca, cb = _static(da), _static(db)
        if ca == 1:
            out.append(db)
        elif cb == 1 or (ca is not None and ca == cb):
            out.append(da)
        elif ca is not None and cb is not None:
            raise TVMError(f"shapes {_show(a)} and {_show(b)} do not broadcast "
                           f"(dimension -{i}: {ca} vs {cb})")
        elif ca is None and cb is None and not _same_extent(da, db):
            # two run-time extents, each 1 or the other (the VM's shape functions check it):
            # the larger one, as NumPy's
            out.append(_op.max(da, db))
        else:
            out.append(da if cb is None else db)
    return out[::-1]


def _same_extent(a: Any, b: Any) -> bool:
    return a is b or structural_equal(a, b)


def _static(dim: Any) -> int | None:
    if isinstance(dim, int):
        return dim
    return int(dim.value) if isinstance(dim, _e.IntImm) else None


def _show(shape: Sequence[Any]) -> str:
    return "(" + ", ".join(str(_static(d) if _static(d) is not None else d) for d in shape) + ")"


def broadcast_reader(t: te.Tensor, out_ndim: int,
                     shape: Sequence[Any] | None = None) -> Callable[..., Any]:
    """Index ``t`` with output indices, pinning broadcast (size-1) dimensions to 0.

    A run-time extent of ``t`` that is not the output's (``shape``; None: unknown) may be 1
    while the output's is larger (NumPy broadcasts it): such a dimension reads index
    ``i * (extent != 1)``, a loop-invariant stride that LLVM's vectorizer specializes."""
    offset = out_ndim - t.ndim
    out = list(shape)[offset:] if shape is not None else [None] * t.ndim
    rules = []  # per dim: "zero", "same" or the run-time extent to test
    for dim, out_dim in zip(t.shape, out):
        if _static(dim) == 1:
            rules.append("zero")
        elif _static(dim) is not None or (out_dim is not None and _same_extent(dim, out_dim)):
            rules.append("same")
        else:
            rules.append(dim)

    def read(*idx):
        own = idx[offset:]
        return t(*[0 if rule == "zero" else i if rule == "same" else
                   i * _op.cast(_op.not_equal(rule, _op.const(1, rule.dtype)), i.dtype)
                   for rule, i in zip(rules, own)])

    return read


def broadcast_to(x: te.Tensor, shape: Sequence[Any]) -> te.Tensor:
    """``x`` repeated along size-1 (and missing leading) dimensions up to ``shape``."""
    shape = list(shape)
    broadcast_shape(x.shape, shape)
    read = broadcast_reader(x, len(shape), shape)
    return te.compute(shape, lambda *i: read(*i), name="T_broadcast_to", tag=tag.BROADCAST)


def _scalar(value: Any, dtype: str) -> PrimExpr:
    if isinstance(value, PrimExpr):
        return value if value.dtype == dtype else _op.cast(value, dtype)
    return _op.const(value, dtype)


def broadcast_binary(fn: Callable[[Any, Any], Any], a: Any, b: Any, name: str) -> Any:
    """``fn`` of ``a`` and ``b`` broadcast against each other (tensors or scalars)."""
    a_tensor, b_tensor = isinstance(a, te.Tensor), isinstance(b, te.Tensor)
    if not a_tensor and not b_tensor:
        return fn(_op.convert_expr(a), _op.convert_expr(b))
    if not b_tensor:
        value = _scalar(b, a.dtype)
        return te.compute(a.shape, lambda *i: fn(a(*i), value), name=name, tag=tag.ELEMWISE)
    if not a_tensor:
        value = _scalar(a, b.dtype)
        return te.compute(b.shape, lambda *i: fn(value, b(*i)), name=name, tag=tag.ELEMWISE)
    shape = broadcast_shape(a.shape, b.shape)
    ra, rb = broadcast_reader(a, len(shape), shape), broadcast_reader(b, len(shape), shape)
    return te.compute(shape, lambda *i: fn(ra(*i), rb(*i)), name=name, tag=tag.BROADCAST)


def _is_int(x: Any) -> bool:
    return x.dtype.startswith(("int", "uint"))


def _divide(x: Any, y: Any) -> Any:
    return _op.truncdiv(x, y) if _is_int(x) else _op.div(x, y)


def _floor_mod(x: Any, y: Any) -> Any:
    """Python's ``%`` (NumPy's ``remainder``): the result takes the divisor's sign. Floats
    follow NumPy's algorithm (fmod, then one correction), not ``x - floor(x / y) * y``, which
    gives NaN for an infinite divisor and +0 where the divisor is negative."""
    if _is_int(x):
        return _op.floormod(x, y)
    zero = _op.const(0, x.dtype)
    rem = _op.fmod(x, y)
    wrong_sign = _op.logical_and(rem != zero, (rem < zero) != (y < zero))
    rem = _op.if_then_else(wrong_sign, rem + y, rem)
    return _op.if_then_else(rem == zero, _op.copysign(zero, y), rem)


def _power(x: Any, y: Any) -> Any:
    """``x ** y``; integers go through float64 (exact while the result fits in 53 bits), as
    LLVM's pow intrinsic takes floating-point operands only."""
    if not _is_int(x):
        return _op.power(x, y)
    wide = _op.power(_op.cast(x, "float64"), _op.cast(y, "float64"))
    return _op.cast(_op.round(wide), x.dtype)


def _shift_in_range(x: Any, y: Any) -> Any:
    width = _op.const(int("".join(c for c in x.dtype if c.isdigit()) or 32), y.dtype)
    below = y < width
    return below if y.dtype.startswith("uint") else _op.logical_and(y >= _op.const(0, y.dtype),
                                                                      below)


def _left_shift(x: Any, y: Any) -> Any:
    """``x << y``, 0 where ``y`` is negative or at least the bit width (NumPy's rule; C leaves
    those undefined and LLVM makes them poison)."""
    inside = _shift_in_range(x, y)
    shifted = _op.left_shift(x, _op.if_then_else(inside, y, _op.const(0, y.dtype)))
    return _op.if_then_else(inside, shifted, _op.const(0, x.dtype))


def _right_shift(x: Any, y: Any) -> Any:
    """``x >> y``; a negative or too-wide ``y`` gives the sign fill (-1 or 0), as NumPy's."""
    inside = _shift_in_range(x, y)
    shifted = _op.right_shift(x, _op.if_then_else(inside, y, _op.const(0, y.dtype)))
    fill = _op.const(0, x.dtype)
    if not x.dtype.startswith("uint"):
        fill = _op.if_then_else(x < fill, _op.const(-1, x.dtype), fill)
    return _op.if_then_else(inside, shifted, fill)


def _trunc_div(x: Any, y: Any) -> Any:
    return _op.truncdiv(x, y) if _is_int(x) else _op.trunc(_op.div(x, y))


def _trunc_mod(x: Any, y: Any) -> Any:
    return _op.truncmod(x, y) if _is_int(x) else _op.fmod(x, y)


def _logical(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def apply(x, y):
        return fn(_op.cast(x, "bool") if x.dtype != "bool" else x,
                  _op.cast(y, "bool") if y.dtype != "bool" else y)
    return apply


def _logical_xor(x: Any, y: Any) -> Any:
    return _op.not_equal(x, y)


# name -> scalar function of two operands of one dtype.
BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": _op.add, "subtract": _op.subtract, "multiply": _op.multiply,
    "divide": _divide, "floor_divide": _op.floordiv, "floor_mod": _floor_mod,
    "mod": _trunc_mod, "trunc_divide": _trunc_div, "trunc_mod": _trunc_mod,
    "power": _power, "maximum": _op.max, "minimum": _op.min,
    "equal": _op.equal, "not_equal": _op.not_equal, "less": _op.less,
    "less_equal": _op.less_equal, "greater": _op.greater, "greater_equal": _op.greater_equal,
    "logical_and": _logical(_op.logical_and), "logical_or": _logical(_op.logical_or),
    "logical_xor": _logical(_logical_xor), "bitwise_and": _op.bitwise_and,
    "bitwise_or": _op.bitwise_or, "bitwise_xor": _op.bitwise_xor,
    "left_shift": _left_shift, "right_shift": _right_shift,
}


def _make_binary(name: str, fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def binary(lhs: Any, rhs: Any) -> Any:
        return broadcast_binary(fn, lhs, rhs, f"T_{name}")

    binary.__name__ = name
    binary.__doc__ = f"Broadcasting elementwise ``{name}(lhs, rhs)``."
    return binary


for _name, _fn in BINARY.items():
    globals()[_name] = _make_binary(_name, _fn)

__all__ = ["broadcast_shape", "broadcast_to", "broadcast_binary", *BINARY]
