"""Elementwise computes (TVM's ``topi.math``): one te.compute applying a scalar function.

Entry points: one function per op (``exp``, ``sqrt``, ``sigmoid``, ``sign``, ``isnan`` …,
generated from :data:`UNARY`), and :func:`clip`, :func:`cast`, :func:`reinterpret`,
:func:`identity`, :func:`elemwise_sum`.

Example
-------
>>> from kiln import te, topi
>>> A = te.placeholder((4,), name="A")
>>> topi.exp(A).op.tag
'elemwise'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi import tag


def _sign(x: Any) -> Any:
    zero, one = _op.const(0, x.dtype), _op.const(1, x.dtype)
    if x.dtype.startswith("uint") or x.dtype == "bool":
        return _op.if_then_else(x > zero, one, zero)
    return _op.if_then_else(x > zero, one, _op.if_then_else(x < zero, -one, zero))


def _logical_not(x: Any) -> Any:
    return _op.logical_not(x) if x.dtype == "bool" else _op.equal(x, _op.const(0, x.dtype))


# name -> scalar function; "round" is round-half-to-even as in Relay (and NumPy).
UNARY: dict[str, Callable[[Any], Any]] = {
    "exp": _op.exp, "log": _op.log, "log2": _op.log2, "log10": _op.log10,
    "sqrt": _op.sqrt, "rsqrt": _op.rsqrt, "tanh": _op.tanh, "sigmoid": _op.sigmoid,
    "erf": _op.erf, "floor": _op.floor, "ceil": _op.ceil, "round": _op.nearbyint,
    "trunc": _op.trunc, "abs": _op.abs, "sin": _op.sin, "cos": _op.cos, "tan": _op.tan,
    "asin": _op.asin, "acos": _op.acos, "atan": _op.atan, "sinh": _op.sinh,
    "cosh": _op.cosh, "asinh": _op.asinh, "acosh": _op.acosh, "atanh": _op.atanh,
    "negative": _op.negative, "sign": _sign, "bitwise_not": _op.bitwise_not,
    "logical_not": _logical_not, "isnan": _op.isnan, "isinf": _op.isinf,
    "isfinite": _op.isfinite,
    # The fast_* ops may approximate; kiln evaluates them exactly (C's libm, vectorized).
    "fast_exp": _op.exp, "fast_tanh": _op.tanh, "fast_erf": _op.erf,
}


def elemwise(x: te.Tensor, fn: Callable[[Any], Any], name: str) -> te.Tensor:
    """``fn`` applied to every element of ``x``."""
    return te.compute(x.shape, lambda *i: fn(x(*i)), name=name, tag=tag.ELEMWISE)


def _make_unary(name: str, fn: Callable[[Any], Any]) -> Callable[[te.Tensor], te.Tensor]:
    def unary(x: te.Tensor) -> te.Tensor:
        return elemwise(x, fn, f"T_{name}")

    unary.__name__ = name
    unary.__doc__ = f"Elementwise ``{name}(x)``."
    return unary


for _name, _fn in UNARY.items():
    globals()[_name] = _make_unary(_name, _fn)


def identity(x: te.Tensor) -> te.Tensor:
    """A copy of ``x`` (Relay's ``copy``)."""
    return elemwise(x, lambda v: v, "T_identity")


def clip(x: te.Tensor, a_min: Any, a_max: Any) -> te.Tensor:
    """``min(max(x, a_min), a_max)`` elementwise."""
    lo, hi = _op.const(a_min, x.dtype), _op.const(a_max, x.dtype)
    return elemwise(x, lambda v: _op.min(_op.max(v, lo), hi), "T_clip")


def cast(x: Any, dtype: str) -> Any:
    """``x`` converted to ``dtype`` (a tensor or a scalar expression)."""
    if not isinstance(x, te.Tensor):
        return _op.cast(x, dtype)
    return te.compute(x.shape, lambda *i: _op.cast(x(*i), dtype), name="T_cast",
                      tag=tag.ELEMWISE)


def reinterpret(x: te.Tensor, dtype: str) -> te.Tensor:
    """The bits of ``x`` read as ``dtype`` (same width)."""
    return te.compute(x.shape, lambda *i: _op.reinterpret(dtype, x(*i)),
                      name="T_reinterpret", tag=tag.ELEMWISE)


def elemwise_sum(xs: list[te.Tensor]) -> te.Tensor:
    """The elementwise sum of same-shaped tensors."""
    if not xs:
        raise TVMError("elemwise_sum needs at least one tensor")

    def body(*i):
        total = xs[0](*i)
        for x in xs[1:]:
            total = total + x(*i)
        return total

    return te.compute(xs[0].shape, body, name="T_elemwise_sum", tag=tag.ELEMWISE)


def full_like(x: te.Tensor, fill_value: Any) -> te.Tensor:
    """A tensor shaped like ``x`` filled with ``fill_value``."""
    value = _op.const(fill_value, x.dtype) if not isinstance(fill_value, te.Tensor) else None
    if value is None:
        return te.compute(x.shape, lambda *i: _op.cast(fill_value(), x.dtype),
                          name="T_full_like", tag=tag.ELEMWISE)
    return te.compute(x.shape, lambda *i: value, name="T_full_like", tag=tag.ELEMWISE)


__all__ = ["elemwise", "identity", "clip", "cast", "reinterpret", "elemwise_sum", "full_like",
           *UNARY]
