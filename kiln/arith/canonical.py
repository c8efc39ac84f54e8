"""The simplifier: integer expressions in a canonical polynomial form.

Entry point: :class:`Simplifier` (used through :class:`kiln.arith.Analyzer`).

An integer expression is turned into a *polynomial*: a map from monomials (sorted tuples of
atom ids) to integer coefficients, where an *atom* is anything that is not ``+ - *`` by a
constant — a variable, ``floordiv(p, c)``, ``floormod(p, c)``, ``min``, a load, a call.
Atoms are numbered in the order they are first met, and the polynomial prints back in that
order, so ``i_outer * 16 + i_inner`` stays exactly that.

Division rules use bounds: ``floordiv(q * c + r, c) == q`` when ``0 <= r < c`` is provable, and
``floormod`` likewise; ``c * floordiv(x, c) + floormod(x, c)`` recombines to ``x``. Bounds of
atoms come from the analyzer's variable ranges (loop bounds), ``floormod``'s range and
interval arithmetic. Non-integer expressions are simplified structurally with constant folding.
"""

from __future__ import annotations

import weakref
from math import gcd
from typing import TYPE_CHECKING, Any

from kiln.arith.bound import (
    EVERYTHING,
    POS_INF,
    Interval,
    interval_add,
    interval_floordiv,
    interval_mul,
    interval_union,
    is_finite,
)
from kiln.ir.expr import FloatImm, IntImm, PrimExpr
from kiln.runtime.dtype import DataType
from kiln.tir import expr as _e
from kiln.tir import op as _op
from kiln.tir.stmt_functor import StmtExprMutator, rebuild

if TYPE_CHECKING:
    from kiln.arith.analyzer import Analyzer

__all__ = ["Simplifier", "StructuralKey", "structural_key", "is_int_dtype"]

Poly = dict  # tuple[int, ...] -> int; the empty tuple is the constant term


def is_int_dtype(dtype: str) -> bool:
    """Whether ``dtype`` is a scalar signed or unsigned integer (not bool)."""
    dt = DataType(dtype)
    return (dt.is_int or dt.is_uint) and not dt.is_bool and dt.lanes == 1


class StructuralKey:
    """The interned key of an expression's structure: equal structures get the same object.

    Keys are hash-consed (built bottom-up from the keys of the children and looked up in
    one table), so equality and hashing are identity checks and cost nothing however deep
    or shared the expression is. A key holds the objects compared by identity (variables,
    buffers) so their ids stay unique while it lives; the table forgets a key once nothing
    else holds it.
    """

    __slots__ = ("parts", "anchors", "__weakref__")

    def __init__(self, parts: tuple, anchors: tuple) -> None:
        self.parts = parts  # (kind, dtype, child keys and plain values...)
        self.anchors = anchors

    def __repr__(self) -> str:
        # one level only: spelling out the children of a shared DAG is exponential
        kind = self.parts[0]
        shown = [kind.__name__ if isinstance(kind, type) else repr(kind)]
        shown += ["..." if isinstance(p, StructuralKey | tuple) else repr(p)
                  for p in self.parts[1:]]
        return f"StructuralKey({', '.join(shown)})"


class _TableRef(weakref.ref):
    """A weak reference to an interned key that remembers the parts it is filed under."""

    __slots__ = ("parts",)


_INTERNED: dict[tuple, _TableRef] = {}


def _forget(ref: _TableRef, table: dict = _INTERNED) -> None:
    """Drop a dead key's entry (the table is bound early: this may run at shutdown)."""
    if table.get(ref.parts) is ref:
        del table[ref.parts]


def _intern(parts: tuple, anchors: tuple = ()) -> StructuralKey:
    ref = _INTERNED.get(parts)
    key = ref() if ref is not None else None
    if key is None:
        key = StructuralKey(parts, anchors)
        ref = _TableRef(key, _forget)
        ref.parts = parts
        _INTERNED[parts] = ref
    return key


def structural_key(e: Any, memo: dict[int, Any] | None = None) -> Any:
    """A hashable key, the same object for structurally equal expressions (vars by identity).

    A list or tuple of expressions gets a tuple of keys. A subexpression shared by several
    parents is keyed once (``memo``, by id, may be kept across calls), so the key of a DAG
    is built in time linear in its distinct nodes, and comparing or hashing keys is O(1).

    Example
    -------
    >>> from kiln import tir
    >>> x = tir.Var("x", "int32")
    >>> structural_key(x * 2 + 1) is structural_key(x * 2 + 1)
    True
    >>> structural_key(x + 1) == structural_key(x + 2)
    False
    """
    memo = {} if memo is None else memo
    done = memo.get(id(e))
    if done is not None and done[0] is e:
        return done[1]
    key = _structural_key(e, memo)
    memo[id(e)] = (e, key)
    return key


def _structural_key(e: Any, memo: dict[int, Any]) -> Any:
    if isinstance(e, _e.Var):
        return _intern(("var", id(e)), (e,))
    if isinstance(e, IntImm | FloatImm):
        return _intern((type(e), e.dtype, e.value))
    if isinstance(e, _e.StringImm):
        return _intern(("str", e.value))
    if isinstance(e, list | tuple):
        return tuple(structural_key(x, memo) for x in e)
    if not isinstance(e, PrimExpr):
        return _intern(("obj", id(e)), (e,))
    parts: list[Any] = [type(e), e.dtype]
    anchors = []
    for name in type(e)._all_fields:
        if name in ("dtype", "span"):
            continue
        value = getattr(e, name)
        if isinstance(value, PrimExpr | list | tuple):
            parts.append(structural_key(value, memo))
        elif isinstance(value, int | str):
            parts.append(value)
        else:  # a buffer, a tensor, an op: compared by identity
            parts.append(("obj", id(value)))
            anchors.append(value)
    return _intern(tuple(parts), tuple(anchors))


_FOLD = {
    _e.Add: _op.add, _e.Sub: _op.subtract, _e.Mul: _op.multiply, _e.Div: _op.div,
    _e.Mod: _op.truncmod, _e.FloorDiv: _op.floordiv, _e.FloorMod: _op.floormod,
    _e.Min: _op.min, _e.Max: _op.max, _e.And: _op.logical_and, _e.Or: _op.logical_or,
}


class Simplifier(StmtExprMutator):
    """Rewrites expressions into simplified canonical form under an analyzer's facts."""

    def __init__(self, analyzer: Analyzer) -> None:
        super().__init__()
        self.analyzer = analyzer
        self.atoms: list[PrimExpr] = []
        self.atom_ids: dict[Any, int] = {}
        self.atom_bounds: dict[int, Interval] = {}
        # id(expr) -> (expr, simplified): lowered indices are DAGs that share subexpressions
        # (resize's clamped coordinates); without this each use re-simplifies them as a tree
        self._simplified: dict[int, tuple[PrimExpr, PrimExpr]] = {}
        # id(expr) -> (expr, key): an atom's key reuses the keys of atoms inside it
        self._keys: dict[int, Any] = {}
        # id(expr) -> (expr, polynomial): ``x1 = x0 + x0`` must not expand x0 twice
        self._polys: dict[int, tuple[PrimExpr, Poly]] = {}

    # ---- polynomial plumbing ---------------------------------------------------------------
    def atom(self, e: PrimExpr) -> int:
        """The index of ``e`` as a polynomial variable (structurally equal atoms share one)."""
        key = structural_key(e, self._keys)
        idx = self.atom_ids.get(key)
        if idx is None:
            idx = len(self.atoms)
            self.atoms.append(e)
            self.atom_ids[key] = idx
        return idx

    def atom_poly(self, e: PrimExpr) -> Poly:
        """The polynomial ``1 * e`` of an atom."""
        return {(self.atom(e),): 1}

    @staticmethod
    def const_poly(v: int) -> Poly:
        """The constant polynomial ``v``."""
        return {(): v} if v else {}

    @staticmethod
    def add_poly(p: Poly, q: Poly, scale: int = 1) -> Poly:
        """``p + scale * q``, dropping terms that cancel."""
        out = dict(p)
        for mono, c in q.items():
            v = out.get(mono, 0) + c * scale
            if v:
                out[mono] = v
            else:
                out.pop(mono, None)
        return out

    @staticmethod
    def mul_poly(p: Poly, q: Poly) -> Poly:
        """``p * q``, dropping terms that cancel."""
        out: Poly = {}
        for m1, c1 in p.items():
            for m2, c2 in q.items():
                mono = tuple(sorted(m1 + m2))
                v = out.get(mono, 0) + c1 * c2
                if v:
                    out[mono] = v
                else:
                    out.pop(mono, None)
        return out

    def to_poly(self, e: PrimExpr) -> Poly:
        """The polynomial of an (already simplified) integer expression."""
        if isinstance(e, IntImm):
            return self.const_poly(e.value)
        if isinstance(e, _e.Add):
            return self.add_poly(self.to_poly(e.a), self.to_poly(e.b))
        if isinstance(e, _e.Sub):
            return self.add_poly(self.to_poly(e.a), self.to_poly(e.b), -1)
        if isinstance(e, _e.Mul):
            return self.mul_poly(self.to_poly(e.a), self.to_poly(e.b))
        return self.atom_poly(e)

    def from_poly(self, p: Poly, dtype: str) -> PrimExpr:
        """A polynomial back as a TIR expression of ``dtype`` (positive terms first)."""
        p = self.merge_divmod(p, dtype)
        monos = sorted((m for m in p if m), key=lambda m: m)
        const = p.get((), 0)
        positive = [m for m in monos if p[m] > 0]
        negative = [m for m in monos if p[m] < 0]
        result: PrimExpr | None = None
        for mono in positive + negative:
            coeff = p[mono]
            term = self.atoms[mono[0]]
            for idx in mono[1:]:
                term = _e.Mul(term, self.atoms[idx])
            magnitude = abs(coeff)
            if magnitude != 1:
                term = _e.Mul(term, IntImm(dtype, magnitude))
            if result is None:
                result = term if coeff > 0 else _e.Mul(term, IntImm(dtype, -1))
            else:
                result = _e.Add(result, term) if coeff > 0 else _e.Sub(result, term)
        if result is None:
            return IntImm(dtype, const)
        if const > 0:
            result = _e.Add(result, IntImm(dtype, const))
        elif const < 0:
            result = _e.Sub(result, IntImm(dtype, -const))
        return result

    def merge_divmod(self, p: Poly, dtype: str) -> Poly:
        """``c * floordiv(x, c) + floormod(x, c)`` -> ``x`` (times a common factor)."""
        for mono, coeff in list(p.items()):
            if len(mono) != 1 or mono not in p:
                continue
            atom = self.atoms[mono[0]]
            if not isinstance(atom, _e.FloorMod) or not isinstance(atom.b, IntImm):
                continue
            c = atom.b.value
            partner = self.atom_ids.get(structural_key(_e.FloorDiv(atom.a, atom.b),
                                                          self._keys))
            if partner is None or p.get((partner,), 0) != coeff * c:
                continue
            p = dict(p)
            del p[mono]
            del p[(partner,)]
            p = self.add_poly(p, self.to_poly(atom.a), coeff)
        return p

    # ---- bounds -----------------------------------------------------------------------------
    def bound(self, e: PrimExpr) -> Interval:
        """Constant bounds of any integer expression."""
        if isinstance(e, IntImm):
            return (e.value, e.value)
        if isinstance(e, _e.Add | _e.Sub | _e.Mul) or not self._is_atom_like(e):
            return self.poly_bound(self.to_poly(e))
        return self.atom_bound(self.atom(e))

    @staticmethod
    def _is_atom_like(e: PrimExpr) -> bool:
        return not isinstance(e, _e.Add | _e.Sub | _e.Mul)

    def poly_bound(self, p: Poly, depth: int = 0) -> Interval:
        """``(min, max)`` of a polynomial's values, tightened by div/mod and range facts."""
        bound = self._plain_bound(p)
        for tighter in (self._paired_floordiv_bound(p), self._divmod_bound(p),
                        self._symbolic_range_bound(p, depth)):
            if tighter is not None:
                bound = (max(bound[0], tighter[0]), min(bound[1], tighter[1]))
        return bound

    def _divmod_bound(self, p: Poly) -> Interval | None:
        """``r*c*floordiv(x, c) - r*x`` is ``-r*floormod(x, c)``: bound it as such."""
        for mono, coeff in p.items():
            atom = self.atoms[mono[0]] if len(mono) == 1 else None
            if not isinstance(atom, _e.FloorDiv) or not isinstance(atom.b, IntImm):
                continue
            c = atom.b.value
            if c <= 0 or coeff % c:
                continue
            r = coeff // c
            x = self.to_poly(atom.a)
            if () in x or any(p.get(m, 0) != -r * v for m, v in x.items()):
                continue
            rest = self.add_poly(p, x, r)
            del rest[mono]
            mod = self.atom_poly(_e.FloorMod(atom.a, atom.b))
            return self._plain_bound(self.add_poly(rest, mod, -r))
        return None

    def _symbolic_range_bound(self, p: Poly, depth: int) -> Interval | None:
        """Replace loop variables by their symbolic ends (``i < n`` gives ``i - n <= -1``).

        Each variable with a known Range and a linear term is replaced by the end of its range
        that maximizes (then minimizes) the polynomial; the result is bounded again.
        """
        if depth >= 2:
            return None
        lows, highs = dict(p), dict(p)
        changed = False
        for mono, coeff in p.items():
            atom = self.atoms[mono[0]] if len(mono) == 1 else None
            if not isinstance(atom, _e.Var):
                continue
            rng = self.analyzer._var_range(atom)
            if rng is None or isinstance(rng.extent, IntImm):
                continue
            lo = self.to_poly(self.analyzer.simplify(rng.min))
            hi = self.to_poly(self.analyzer.simplify(rng.min + rng.extent - 1))
            for target, end_for_positive, end_for_negative in ((highs, hi, lo), (lows, lo, hi)):
                del target[mono]
                end = end_for_positive if coeff > 0 else end_for_negative
                summed = self.add_poly(target, end, coeff)
                target.clear()
                target.update(summed)
            changed = True
        if not changed:
            return None
        return (self.poly_bound(lows, depth + 1)[0], self.poly_bound(highs, depth + 1)[1])

    def _paired_floordiv_bound(self, p: Poly) -> Interval | None:
        """Bound ``c*floordiv(u, d) - c*floordiv(v, d) + rest`` through ``u - v``.

        ``floor(u/d) - floor(v/d)`` is ``floor((u-v)/d)`` or one more, which relates
        ``floordiv(n, 8)`` and ``floordiv(n + 7, 8)`` where plain interval arithmetic cannot.
        """
        singles = [(m, c) for m, c in p.items() if len(m) == 1 and
                   isinstance(self.atoms[m[0]], _e.FloorDiv) and
                   isinstance(self.atoms[m[0]].b, IntImm) and self.atoms[m[0]].b.value > 0]
        for m1, c1 in singles:
            for m2, c2 in singles:
                a1, a2 = self.atoms[m1[0]], self.atoms[m2[0]]
                if c1 <= 0 or c2 != -c1 or a1.b.value != a2.b.value:
                    continue
                d = a1.b.value
                lo, hi = self._plain_bound(self.add_poly(self.to_poly(a1.a),
                                                         self.to_poly(a2.a), -1))
                if not (is_finite(lo) and is_finite(hi)):
                    continue
                pair = (c1 * (lo // d), c1 * (hi // d + 1))
                rest = {m: c for m, c in p.items() if m not in (m1, m2)}
                return interval_add(self._plain_bound(rest), pair)
        return None

    def _plain_bound(self, p: Poly) -> Interval:
        total: Interval = (0, 0)
        for mono, coeff in p.items():
            term: Interval = (coeff, coeff)
            for idx in mono:
                term = interval_mul(term, self.atom_bound(idx))
            total = interval_add(total, term)
        return total

    def atom_bound(self, idx: int) -> Interval:
        """``(min, max)`` of atom ``idx`` (cached; a cycle gives everything)."""
        cached = self.atom_bounds.get(idx)
        if cached is None:
            self.atom_bounds[idx] = EVERYTHING  # guards against cycles
            cached = self._compute_atom_bound(self.atoms[idx])
            self.atom_bounds[idx] = cached
        return cached

    def _compute_atom_bound(self, e: PrimExpr) -> Interval:
        if isinstance(e, _e.Var):
            return self.analyzer._var_bound(e)
        if isinstance(e, _e.FloorDiv) and isinstance(e.b, IntImm) and e.b.value != 0:
            return interval_floordiv(self.bound(e.a), e.b.value)
        if isinstance(e, _e.FloorMod) and isinstance(e.b, IntImm) and e.b.value > 0:
            c = e.b.value
            lo, hi = self.bound(e.a)
            if is_finite(lo) and is_finite(hi) and lo // c == hi // c:
                return (lo % c, hi % c)
            return (0, c - 1)
        if isinstance(e, _e.Div | _e.Mod) and isinstance(e.b, IntImm) and e.b.value > 0:
            lo, hi = self.bound(e.a)
            if isinstance(e, _e.Div):
                return interval_floordiv((min(lo, 0), max(hi, 0)), e.b.value)
            c = e.b.value
            return (max(-(c - 1), min(lo, 0)) if lo < 0 else 0, min(c - 1, max(hi, 0)))
        if isinstance(e, _e.Min | _e.Max):
            a, b = self.bound(e.a), self.bound(e.b)
            pick = min if isinstance(e, _e.Min) else max
            return (pick(a[0], b[0]), pick(a[1], b[1]))
        if isinstance(e, _e.Select):
            return interval_union(self.bound(e.true_value), self.bound(e.false_value))
        if isinstance(e, _e.Call) and e.op == "tir.if_then_else":
            return interval_union(self.bound(e.args[1]), self.bound(e.args[2]))
        if isinstance(e, _e.Cast) and is_int_dtype(e.value.dtype):
            return self._clip_to_dtype(self.bound(e.value), e.dtype)
        dt = DataType(e.dtype)
        if dt.is_bool:
            return (0, 1)
        if dt.is_uint:
            return (0, POS_INF if dt.bits >= 63 else (1 << dt.bits) - 1)
        return EVERYTHING

    @staticmethod
    def _clip_to_dtype(x: Interval, dtype: str) -> Interval:
        dt = DataType(dtype)
        if dt.bits >= 64:
            return x
        lo = 0 if dt.is_uint else -(1 << (dt.bits - 1))
        hi = (1 << dt.bits) - 1 if dt.is_uint else (1 << (dt.bits - 1)) - 1
        if x[0] < lo or x[1] > hi:
            return (lo, hi)
        return x

    # ---- rewriting ----------------------------------------------------------------------------
    def simplify(self, e: PrimExpr) -> PrimExpr:
        """``e`` simplified: integers through their canonical polynomial, others by node."""
        if not is_int_dtype(e.dtype):
            return self.visit(e)
        done = self._simplified.get(id(e))
        if done is not None and done[0] is e:
            return done[1]
        result = self.from_poly(self.canon(e), e.dtype)
        self._simplified[id(e)] = (e, result)
        return result

    def visit(self, node: Any) -> Any:
        # simplify() shares this memo: an integer node's visit rewrites it as simplify does
        """``node`` rewritten (memoized with :meth:`simplify`)."""
        done = self._simplified.get(id(node))
        if done is not None and done[0] is node:
            return done[1]
        result = super().visit(node)
        self._simplified[id(node)] = (node, result)
        return result

    def canon(self, e: PrimExpr) -> Poly:
        """The simplified polynomial of an integer expression (callers never mutate it)."""
        done = self._polys.get(id(e))
        if done is not None and done[0] is e:
            return done[1]
        poly = self._canon(e)
        self._polys[id(e)] = (e, poly)
        return poly

    def _canon(self, e: PrimExpr) -> Poly:
        if isinstance(e, IntImm):
            return self.const_poly(e.value)
        if isinstance(e, _e.Add):
            return self.add_poly(self.canon(e.a), self.canon(e.b))
        if isinstance(e, _e.Sub):
            return self.add_poly(self.canon(e.a), self.canon(e.b), -1)
        if isinstance(e, _e.Mul):
            return self.mul_poly(self.canon(e.a), self.canon(e.b))
        if isinstance(e, _e.FloorDiv | _e.FloorMod | _e.Div | _e.Mod):
            return self.canon_div(e)
        if isinstance(e, _e.Var):
            bound = self.analyzer._var_value(e)
            if bound is not None:
                return self.canon(bound)
            return self.atom_poly(e)
        if isinstance(e, _e.Min | _e.Max):
            return self.canon_minmax(e)
        if isinstance(e, _e.Select):
            cond = self.visit(e.condition)
            if isinstance(cond, IntImm):
                return self.canon(e.true_value if cond.value else e.false_value)
            return self.atom_poly(_e.Select(cond, self.simplify(e.true_value),
                                            self.simplify(e.false_value)))
        if isinstance(e, _e.Cast) and is_int_dtype(e.value.dtype):
            value = self.simplify(e.value)
            if isinstance(value, IntImm):
                return self.const_poly(_op.cast(value, e.dtype).value)
            return self.atom_poly(_e.Cast(e.dtype, value))
        simplified = self.visit(e)
        if isinstance(simplified, IntImm):
            return self.const_poly(simplified.value)
        return self.atom_poly(simplified)

    def canon_minmax(self, e: PrimExpr) -> Poly:
        """The polynomial of a min/max: one side when the bound of their difference decides."""
        pa, pb = self.canon(e.a), self.canon(e.b)
        lo, hi = self.poly_bound(self.add_poly(pa, pb, -1))
        is_min = isinstance(e, _e.Min)
        if hi <= 0:
            return pa if is_min else pb
        if lo >= 0:
            return pb if is_min else pa
        a, b = self.from_poly(pa, e.dtype), self.from_poly(pb, e.dtype)
        return self.atom_poly(type(e)(a, b))

    def canon_div(self, e: PrimExpr) -> Poly:
        """The polynomial of a (floor/trunc) div or mod by a constant, or an atom."""
        pa = self.canon(e.a)
        divisor = self.simplify(e.b)
        floor_kind = isinstance(e, _e.FloorDiv | _e.FloorMod)
        is_div = isinstance(e, _e.FloorDiv | _e.Div)
        if isinstance(divisor, IntImm) and divisor.value > 0:
            c = divisor.value
            if not floor_kind and self.poly_bound(pa)[0] < 0:
                # truncated division of a possibly negative value: keep as is
                return self.atom_poly(type(e)(self.from_poly(pa, e.dtype), divisor))
            if c == 1:
                return pa if is_div else {}
            return self.floordiv_poly(pa, c, e.dtype) if is_div else \
                self.floormod_poly(pa, c, e.dtype)
        a = self.from_poly(pa, e.dtype)
        if isinstance(a, IntImm) and isinstance(divisor, IntImm) and divisor.value != 0:
            return self.const_poly(_FOLD[type(e)](a, divisor).value)
        return self.atom_poly(type(e)(a, divisor))

    def _split(self, p: Poly, c: int) -> tuple[Poly, Poly]:
        """(terms whose coefficient c divides, divided by c; the remaining terms)."""
        quotient, rest = {}, {}
        for mono, coeff in p.items():
            if mono and coeff % c == 0:
                quotient[mono] = coeff // c
            else:
                rest[mono] = coeff
        return quotient, rest

    def floordiv_poly(self, p: Poly, c: int, dtype: str) -> Poly:
        """``floor(p / c)``: the exact quotient terms plus the remainder's division."""
        quotient, rest = self._split(p, c)
        lo, hi = self.poly_bound(rest)
        if is_finite(lo) and is_finite(hi) and lo // c == hi // c:
            return self.add_poly(quotient, self.const_poly(lo // c))
        g = c
        for coeff in rest.values():
            g = gcd(g, coeff)
        if g > 1:
            rest = {m: v // g for m, v in rest.items()}
            c //= g
        inner = self.from_poly(rest, dtype)
        if len(rest) == 1 and () not in rest:
            (mono, coeff), = rest.items()
            atom = self.atoms[mono[0]] if len(mono) == 1 else None
            if coeff == 1 and isinstance(atom, _e.FloorDiv) and isinstance(atom.b, IntImm) \
                    and atom.b.value > 0:
                nested = _e.FloorDiv(atom.a, IntImm(dtype, atom.b.value * c))
                return self.add_poly(quotient, self.atom_poly(nested))
        return self.add_poly(quotient, self.atom_poly(_e.FloorDiv(inner, IntImm(dtype, c))))

    def floormod_poly(self, p: Poly, c: int, dtype: str) -> Poly:
        # (a*x + r) mod c == ((a mod c)*x + r) mod c
        """``p mod c``: coefficients reduced mod ``c``, folded when the bound decides."""
        rest = {m: v % c if m else v for m, v in p.items() if not m or v % c}
        const = rest.get((), 0)
        if const:
            rest = dict(rest)
            if const % c:
                rest[()] = const % c
            else:
                del rest[()]
        lo, hi = self.poly_bound(rest)
        if is_finite(lo) and is_finite(hi) and lo // c == hi // c:
            return self.add_poly(rest, self.const_poly(-(lo // c) * c))
        g = c
        for coeff in rest.values():
            g = gcd(g, coeff)
        scale = 1
        if g > 1:
            rest = {m: v // g for m, v in rest.items()}
            c //= g
            scale = g
        if len(rest) == 1 and () not in rest:
            (mono, coeff), = rest.items()
            atom = self.atoms[mono[0]] if len(mono) == 1 else None
            if coeff == 1 and isinstance(atom, _e.FloorMod) and isinstance(atom.b, IntImm) \
                    and atom.b.value % c == 0:
                rest = self.to_poly(atom.a)
                rest = self.canon_div(_e.FloorMod(self.from_poly(rest, dtype),
                                                  IntImm(dtype, c)))
                return {m: v * scale for m, v in rest.items()}
        atom = self.atom_poly(_e.FloorMod(self.from_poly(rest, dtype), IntImm(dtype, c)))
        return {m: v * scale for m, v in atom.items()}

    # ---- non-polynomial nodes -------------------------------------------------------------
    def generic_visit(self, node: Any) -> Any:
        """Rewrite the children, then fold a node of two constants."""
        node = super().generic_visit(node)
        fold = _FOLD.get(type(node))
        if fold is not None:
            return fold(node.a, node.b)
        return node

    def visit_IntImm(self, node):
        """A constant is already simple."""
        return node

    def visit_Var(self, node):
        """A variable's bound value (simplified) if the analyzer has one."""
        value = self.analyzer._var_value(node)
        return node if value is None else self.simplify(value)

    visit_SizeVar = visit_Var

    def _int_visit(self, node):
        if is_int_dtype(node.dtype):
            return self.from_poly(self.canon(node), node.dtype)
        return self.generic_visit(node)

    visit_Add = visit_Sub = visit_Mul = visit_FloorDiv = visit_FloorMod = _int_visit
    visit_Div = visit_Mod = visit_Min = visit_Max = _int_visit

    def visit_Cast(self, node):
        """A cast of the simplified value (folded for constants)."""
        value = self.simplify(node.value)
        return _op.cast(value, node.dtype)

    def _compare(self, node):
        a, b = node.a, node.b
        if is_int_dtype(a.dtype):
            diff = self.add_poly(self.canon(a), self.canon(b), -1)
            lo, hi = self.poly_bound(diff)
            verdict = _DECIDE[type(node)](lo, hi)
            if verdict is not None:
                return IntImm("bool", int(verdict))
            return type(node)(self.simplify(a), self.simplify(b))
        return _op.compare(type(node), self.simplify(a), self.simplify(b))

    visit_LT = visit_LE = visit_GT = visit_GE = visit_EQ = visit_NE = _compare

    def visit_Not(self, node):
        """``!a`` of the simplified operand (folded for constants)."""
        return _op.logical_not(self.visit(node.a))

    def visit_Select(self, node):
        """A select decided by its condition, or of simplified arms."""
        cond = self.visit(node.condition)
        if isinstance(cond, IntImm):
            return self.simplify(node.true_value if cond.value else node.false_value)
        t, f = self.simplify(node.true_value), self.simplify(node.false_value)
        if structural_key(t, self._keys) is structural_key(f, self._keys):
            return t
        return _e.Select(cond, t, f)

    def visit_Call(self, node):
        """A call of simplified arguments; a constant if_then_else/likely is decided."""
        args = [self.simplify(a) if isinstance(a, PrimExpr) and not isinstance(a, _e.IterVar)
                else a for a in node.args]
        if node.op == "tir.if_then_else" and isinstance(args[0], IntImm):
            return args[1] if args[0].value else args[2]
        if node.op == "tir.likely" and isinstance(args[0], IntImm):
            return args[0]
        if all(a is b for a, b in zip(args, node.args)):
            return node
        return rebuild(node, {"args": args})


_DECIDE = {
    # verdict from the bounds [lo, hi] of a - b, or None when undecided
    _e.LT: lambda lo, hi: True if hi < 0 else False if lo >= 0 else None,
    _e.LE: lambda lo, hi: True if hi <= 0 else False if lo > 0 else None,
    _e.GT: lambda lo, hi: True if lo > 0 else False if hi <= 0 else None,
    _e.GE: lambda lo, hi: True if lo >= 0 else False if hi < 0 else None,
    _e.EQ: lambda lo, hi: True if lo == hi == 0 else False if lo > 0 or hi < 0 else None,
    _e.NE: lambda lo, hi: False if lo == hi == 0 else True if lo > 0 or hi < 0 else None,
}
