"""Symbolic integer intervals for bound inference (TVM's ``IntervalSet`` / ``EvalSet``).

Entry points: :class:`IntervalSet`, :func:`eval_set`, :func:`union_sets`.

``eval_set(expr, dom_map)`` gives the interval ``expr`` covers when each variable in
``dom_map`` ranges over its set; other variables stay symbolic, so the interval of
``i_outer * 32 + i_inner`` with ``i_inner`` in ``[0, 31]`` is ``[i_outer*32, i_outer*32 + 31]``.
A set's bounds may mention other variables of ``dom_map`` (a loop nested in a loop of
symbolic extent); those are relaxed in turn. ``None`` marks an unbounded side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kiln.ir.expr import IntImm, PrimExpr, Range
from kiln.runtime.object import Object, register_object
from kiln.tir import expr as _e
from kiln.tir import op as _op
from kiln.tir.stmt_functor import post_order_visit

if TYPE_CHECKING:
    from kiln.arith.analyzer import Analyzer

__all__ = ["IntervalSet", "eval_set", "union_sets"]


@register_object("arith.IntervalSet")
class IntervalSet(Object):
    """The integers in ``[min_value, max_value]`` (None: unbounded)."""

    _fields = {"min_value": PrimExpr, "max_value": PrimExpr}

    @staticmethod
    def from_range(rng: Range) -> IntervalSet:
        """The integers ``[min, min + extent - 1]`` of a Range."""
        return IntervalSet(rng.min, rng.min + rng.extent - 1)

    def is_single_point(self) -> bool:
        """Whether the set is one value (its two ends are the same node)."""
        return self.min_value is self.max_value

    def cover_range(self, default: Range | None = None) -> Range:
        """A Range covering the set (``default`` when it is unbounded)."""
        if self.min_value is None or self.max_value is None:
            if default is None:
                raise ValueError("cannot make a range from an unbounded interval")
            return default
        return Range.from_min_extent(self.min_value, self.max_value - self.min_value + 1)

    def __repr__(self) -> str:
        return f"IntervalSet[{self.min_value!r}, {self.max_value!r}]"


def _uses(expr: PrimExpr, dom_map: dict[int, Any]) -> bool:
    found = []

    def visit(node):
        if isinstance(node, _e.Var) and id(node) in dom_map:
            found.append(node)

    post_order_visit(expr, visit)
    return bool(found)


def _is_point(bounds: tuple[Any, Any]) -> bool:
    return bounds[0] is not None and bounds[0] is bounds[1]


class _Evaluator:
    def __init__(self, dom_map: dict, analyzer: Analyzer) -> None:
        self.dom: dict[int, IntervalSet] = {}
        for var, value in dom_map.items():
            var = var.var if isinstance(var, _e.IterVar) else var
            self.dom[id(var)] = value if isinstance(value, IntervalSet) else \
                IntervalSet.from_range(value)
        self.analyzer = analyzer
        # id(expr) -> (expr, bounds): an index DAG reuses sub-expressions; each is bounded once
        self._bounds: dict[int, tuple[PrimExpr, tuple[Any, Any]]] = {}

    def point(self, e: PrimExpr) -> tuple[Any, Any]:
        return (e, e)

    def eval(self, e: PrimExpr) -> tuple[Any, Any]:
        done = self._bounds.get(id(e))
        if done is not None and done[0] is e:
            return done[1]
        bounds = self._eval(e)
        self._bounds[id(e)] = (e, bounds)
        return bounds

    def _eval(self, e: PrimExpr) -> tuple[Any, Any]:
        if isinstance(e, _e.Var):
            s = self.dom.get(id(e))
            if s is None:
                return (e, e)
            lo = None if s.min_value is None else self.eval(s.min_value)[0]
            hi = None if s.max_value is None else self.eval(s.max_value)[1]
            return (lo, hi)
        if isinstance(e, IntImm) or not _uses(e, self.dom):
            return (e, e)
        method = getattr(self, "eval_" + type(e).__name__, None)
        if method is None:
            return (None, None)
        return method(e)

    @staticmethod
    def _both(f, x, y):
        return None if x is None or y is None else f(x, y)

    def eval_Add(self, e):
        a, b = self.eval(e.a), self.eval(e.b)
        return (self._both(_op.add, a[0], b[0]), self._both(_op.add, a[1], b[1]))

    def eval_Sub(self, e):
        a, b = self.eval(e.a), self.eval(e.b)
        return (self._both(_op.subtract, a[0], b[1]), self._both(_op.subtract, a[1], b[0]))

    def _sign(self, e: PrimExpr) -> int:
        bound = self.analyzer.const_int_bound(e)
        return 1 if bound.min_value >= 0 else -1 if bound.max_value <= 0 else 0

    def eval_Mul(self, e):
        a, b = self.eval(e.a), self.eval(e.b)
        if not _is_point(b) and _is_point(a):
            a, b = b, a
        if not _is_point(b):
            return (None, None)
        sign = self._sign(b[0])
        if sign == 0:
            return (None, None)
        lo, hi = self._both(_op.multiply, a[0], b[0]), self._both(_op.multiply, a[1], b[0])
        return (lo, hi) if sign > 0 else (hi, lo)

    def _div(self, e, fn):
        a, b = self.eval(e.a), self.eval(e.b)
        if not _is_point(b) or self._sign(b[0]) <= 0:
            return (None, None)
        return (self._both(fn, a[0], b[0]), self._both(fn, a[1], b[0]))

    def eval_FloorDiv(self, e):
        return self._div(e, _op.floordiv)

    def eval_Div(self, e):
        return self._div(e, _op.truncdiv)

    def eval_FloorMod(self, e):
        a, b = self.eval(e.a), self.eval(e.b)
        if _is_point(b) and isinstance(b[0], IntImm) and b[0].value > 0 and \
                a[0] is not None and a[1] is not None:
            same = self.analyzer.can_prove_equal(_op.floordiv(a[0], b[0]),
                                                 _op.floordiv(a[1], b[0]))
            if same:
                return (_op.floormod(a[0], b[0]), _op.floormod(a[1], b[0]))
        if _is_point(b) and self._sign(b[0]) > 0:
            return (IntImm(e.dtype, 0), _op.subtract(b[0], 1))
        return (None, None)

    eval_Mod = eval_FloorMod

    def eval_Min(self, e):
        a, b = self.eval(e.a), self.eval(e.b)
        return (self._both(_op.min, a[0], b[0]), self._both(_op.min, a[1], b[1]))

    def eval_Max(self, e):
        a, b = self.eval(e.a), self.eval(e.b)
        return (self._both(_op.max, a[0], b[0]), self._both(_op.max, a[1], b[1]))

    def _union(self, a, b):
        return (self._both(_op.min, a[0], b[0]), self._both(_op.max, a[1], b[1]))

    def eval_Select(self, e):
        return self._union(self.eval(e.true_value), self.eval(e.false_value))

    def eval_Call(self, e):
        if e.op == "tir.if_then_else":
            return self._union(self.eval(e.args[1]), self.eval(e.args[2]))
        return (None, None)

    def eval_Cast(self, e):
        a = self.eval(e.value)
        return tuple(None if v is None else _op.cast(v, e.dtype) for v in a)


def eval_set(expr: PrimExpr, dom_map: dict, analyzer: Analyzer | None = None) -> IntervalSet:
    """The interval ``expr`` covers when the vars of ``dom_map`` range over their sets.

    Example
    -------
    >>> from kiln import tir, arith
    >>> io, ii = tir.Var("io", "int32"), tir.Var("ii", "int32")
    >>> s = arith.eval_set(io * 32 + ii, {ii: tir.Range(0, 32)})
    >>> s.min_value, s.max_value
    (io * 32, io * 32 + 31)
    """
    if analyzer is None:
        from kiln.arith.analyzer import Analyzer

        analyzer = Analyzer()
    lo, hi = _Evaluator(dom_map, analyzer).eval(expr)
    lo = None if lo is None else analyzer.simplify(lo)
    hi = None if hi is None else analyzer.simplify(hi)
    return IntervalSet(lo, hi)


def union_sets(sets: list[IntervalSet], analyzer: Analyzer | None = None) -> IntervalSet:
    """The smallest interval containing all ``sets``."""
    if analyzer is None:
        from kiln.arith.analyzer import Analyzer

        analyzer = Analyzer()
    lo, hi = sets[0].min_value, sets[0].max_value
    for s in sets[1:]:
        lo = None if lo is None or s.min_value is None else analyzer.simplify(
            _op.min(lo, s.min_value))
        hi = None if hi is None or s.max_value is None else analyzer.simplify(
            _op.max(hi, s.max_value))
    return IntervalSet(lo, hi)
