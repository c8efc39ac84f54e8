"""The arithmetic analyzer (TVM's ``tvm.arith.Analyzer``).

Entry point: :class:`Analyzer` with ``simplify``, ``canonical_simplify``, ``rewrite_simplify``,
``const_int_bound``, ``modular_set``, ``can_prove``, ``bind``, ``update``,
``constraint_scope`` and ``int_set``.

The analyzer holds facts about variables: a range (from ``bind(var, Range)`` or loop bounds),
a value (``bind(var, expr)``) or constant bounds (``update``). Simplification is done by
:class:`kiln.arith.canonical.Simplifier` under those facts.
"""

from __future__ import annotations

from contextlib import contextmanager
from math import gcd
from typing import Any

from kiln.arith.bound import (
    EVERYTHING,
    NEG_INF,
    POS_INF,
    ConstIntBound,
    Interval,
    ModularSet,
    interval_add,
)
from kiln.arith.canonical import Simplifier, is_int_dtype
from kiln.ir.expr import IntImm, PrimExpr, Range
from kiln.runtime.error import TVMError
from kiln.tir import expr as _e
from kiln.tir.op import convert_expr

__all__ = ["Analyzer"]


class Analyzer:
    """Facts about integer variables, and the simplifier and provers that use them.

    Example
    -------
    >>> from kiln import tir, arith
    >>> i, j = tir.Var("i", "int32"), tir.Var("j", "int32")
    >>> ana = arith.Analyzer()
    >>> ana.bind(j, tir.Range(0, 16))
    >>> ana.simplify(tir.floordiv(i * 16 + j, 16))
    i
    >>> ana.const_int_bound(tir.floormod(i, 8)).max_value
    7
    """

    def __init__(self) -> None:
        self._ranges: dict[int, tuple[_e.Var, Range]] = {}
        self._values: dict[int, PrimExpr] = {}
        self._bounds: dict[int, Interval] = {}

    # ---- facts -----------------------------------------------------------------------------
    def bind(self, var: _e.Var, value: Any, allow_override: bool = False) -> None:
        """Bind ``var`` to a Range (its value lies in it) or to an expression (its value)."""
        if isinstance(var, _e.IterVar):
            var = var.var
        key = id(var)
        if not allow_override and (key in self._values or key in self._ranges):
            old = self._values.get(key) or self._ranges[key][1]
            if old is not value:
                raise TVMError(f"Analyzer.bind: {var.name} is already bound")
        if isinstance(value, Range):
            self._ranges[key] = (var, value)
            self._values.pop(key, None)
        else:
            self._values[key] = convert_expr(value)
        self._bounds.pop(key, None)

    def update(self, var: _e.Var, info: ConstIntBound, override: bool = False) -> None:
        """Record constant bounds for ``var``."""
        self._bounds[id(var)] = (info.min_value, info.max_value)

    def unbind(self, var: _e.Var) -> None:
        """Forget every fact about ``var``."""
        key = id(var)
        self._ranges.pop(key, None)
        self._values.pop(key, None)
        self._bounds.pop(key, None)

    @contextmanager
    def constraint_scope(self, var: _e.Var, rng: Range):
        """Bind ``var`` to ``rng`` within a ``with`` block."""
        key = id(var)
        saved = (self._ranges.get(key), self._values.get(key), self._bounds.get(key))
        self.bind(var, rng, allow_override=True)
        try:
            yield
        finally:
            for table, old in zip((self._ranges, self._values, self._bounds), saved):
                if old is None:
                    table.pop(key, None)
                else:
                    table[key] = old

    def _var_value(self, var: _e.Var) -> PrimExpr | None:
        return self._values.get(id(var))

    def _var_range(self, var: _e.Var) -> Range | None:
        entry = self._ranges.get(id(var))
        return None if entry is None else entry[1]

    def _var_bound(self, var: _e.Var) -> Interval:
        key = id(var)
        bound = self._bounds.get(key)
        if bound is not None:
            return bound
        bound = EVERYTHING
        if isinstance(var, _e.SizeVar):
            bound = (0, POS_INF)
        entry = self._ranges.get(key)
        if entry is not None:
            rng = entry[1]
            self._bounds[key] = bound  # breaks cycles while the range is evaluated
            lo_min, lo_max = self.const_int_bound_interval(rng.min)
            _, ext_max = self.const_int_bound_interval(rng.extent)
            hi = interval_add((lo_max, lo_max), (ext_max, ext_max))[1]
            bound = (max(bound[0], lo_min), hi - 1 if hi < POS_INF else POS_INF)
            self._bounds[key] = bound
        return bound

    # ---- queries ---------------------------------------------------------------------------
    def simplify(self, expr: Any, steps: int = 2) -> PrimExpr:
        """Simplify ``expr`` (constant folding, canonical affine form, div/mod rules)."""
        expr = convert_expr(expr)
        return Simplifier(self).simplify(expr)

    canonical_simplify = simplify
    rewrite_simplify = simplify

    def const_int_bound_interval(self, expr: Any) -> Interval:
        """``(min, max)`` of an integer expression's values (infinities when unbounded)."""
        expr = convert_expr(expr)
        if isinstance(expr, IntImm):
            return (expr.value, expr.value)
        if not is_int_dtype(expr.dtype) and not str(expr.dtype) == "bool":
            return EVERYTHING
        simplifier = Simplifier(self)
        return simplifier.poly_bound(simplifier.canon(expr))

    def const_int_bound(self, expr: Any) -> ConstIntBound:
        """Constant lower/upper bounds of an integer expression."""
        lo, hi = self.const_int_bound_interval(expr)
        return ConstIntBound(max(lo, NEG_INF), min(hi, POS_INF))

    def modular_set(self, expr: Any) -> ModularSet:
        """``expr == coeff * k + base``: the coarsest such fact the polynomial shows."""
        expr = convert_expr(expr)
        simplifier = Simplifier(self)
        poly = simplifier.canon(expr)
        coeff = 0
        for mono, c in poly.items():
            if mono:
                coeff = gcd(coeff, abs(c))
        base = poly.get((), 0)
        return ModularSet(coeff, base % coeff if coeff else base)

    def can_prove(self, cond: Any) -> bool:
        """Whether ``cond`` simplifies to true under the known facts."""
        result = self.simplify(cond)
        return isinstance(result, IntImm) and result.value != 0

    def can_prove_equal(self, a: Any, b: Any) -> bool:
        """Whether ``a - b`` simplifies to the constant 0."""
        diff = self.simplify(convert_expr(a) - convert_expr(b))
        return isinstance(diff, IntImm) and diff.value == 0

    def int_set(self, expr: Any, dom_map: dict | None = None):
        """The interval of values ``expr`` takes when vars range over ``dom_map``."""
        from kiln.arith.int_set import eval_set

        return eval_set(convert_expr(expr), dom_map or {}, self)
