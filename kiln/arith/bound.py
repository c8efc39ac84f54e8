"""Constant integer bounds and modular sets (TVM's ``ConstIntBound`` / ``ModularSet``).

Entry points: :class:`ConstIntBound`, :class:`ModularSet`, and the interval helpers the
simplifier uses (:data:`POS_INF`, :data:`NEG_INF`, :func:`interval_add` ...).

Intervals are pairs of Python ints; ``POS_INF`` / ``NEG_INF`` (int64 max/min + 1, TVM's
``kPosInf``/``kNegInf``) mark an unbounded side, and every helper saturates at them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConstIntBound", "ModularSet", "POS_INF", "NEG_INF", "Interval", "EVERYTHING",
           "interval_add", "interval_neg", "interval_mul", "interval_floordiv",
           "interval_union", "is_finite"]

POS_INF = (1 << 63) - 1
NEG_INF = -POS_INF

Interval = tuple[int, int]
EVERYTHING: Interval = (NEG_INF, POS_INF)


@dataclass(frozen=True)
class ConstIntBound:
    """``min_value <= x <= max_value``; unbounded sides are ``POS_INF`` / ``NEG_INF``."""

    min_value: int
    max_value: int

    POS_INF = POS_INF
    NEG_INF = NEG_INF

    def __repr__(self) -> str:
        lo = "-inf" if self.min_value <= NEG_INF else self.min_value
        hi = "+inf" if self.max_value >= POS_INF else self.max_value
        return f"ConstIntBound[{lo}, {hi}]"


@dataclass(frozen=True)
class ModularSet:
    """``x == coeff * k + base`` for some integer k (``coeff == 0``: x is the constant base)."""

    coeff: int
    base: int


def is_finite(v: int) -> bool:
    """Whether ``v`` is a finite bound (not ``NEG_INF``/``POS_INF``)."""
    return NEG_INF < v < POS_INF


def _clamp(v: int) -> int:
    return POS_INF if v >= POS_INF else NEG_INF if v <= NEG_INF else v


def _mul(a: int, b: int) -> int:
    if a == 0 or b == 0:
        return 0
    if is_finite(a) and is_finite(b):
        return _clamp(a * b)
    return POS_INF if (a > 0) == (b > 0) else NEG_INF


def interval_add(x: Interval, y: Interval) -> Interval:
    """``x + y`` of two intervals; an infinite end stays infinite."""
    lo = NEG_INF if x[0] <= NEG_INF or y[0] <= NEG_INF else _clamp(x[0] + y[0])
    hi = POS_INF if x[1] >= POS_INF or y[1] >= POS_INF else _clamp(x[1] + y[1])
    return (lo, hi)


def interval_neg(x: Interval) -> Interval:
    """``-x`` of an interval."""
    return (-x[1], -x[0])


def interval_mul(x: Interval, y: Interval) -> Interval:
    """``x * y`` of two intervals: the extremes of the four corner products."""
    products = [_mul(a, b) for a in x for b in y]
    return (min(products), max(products))


def interval_floordiv(x: Interval, c: int) -> Interval:
    """``floor(x / c)`` for a constant ``c != 0``."""
    def div(v: int) -> int:
        if not is_finite(v):
            return v if c > 0 else -v
        return v // c

    lo, hi = div(x[0]), div(x[1])
    return (lo, hi) if c > 0 else (hi, lo)


def interval_union(x: Interval, y: Interval) -> Interval:
    """The smallest interval holding both ``x`` and ``y``."""
    return (min(x[0], y[0]), max(x[1], y[1]))
