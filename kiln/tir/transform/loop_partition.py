"""LoopPartition: split a loop so its main part needs no ``likely`` bounds check.

Entry points: :func:`LoopPartition` (the pass), :func:`partition_loops`.

A split that does not divide its extent guards the body with ``if likely(i_outer * f +
i_inner < n)``. For a loop ``v`` whose body holds such a condition, linear in ``v`` with a
positive coefficient ``c`` (``c * v + rest < 0``), the condition holds for every value of the
inner loops as long as ``v < floordiv(c - 1 - max(rest), c)``. The loop becomes a main loop up
to that point, with the condition replaced by true, and a tail loop with the original body.
Simplify afterwards cleans the tail (a tail of extent 1 inlines its variable, and the inner
condition then partitions the inner loop).

A condition with a negative coefficient (``c * v + rest >= 0``, e.g. a padded read's ``col >=
0``) holds from ``v >= floordiv(max(rest'), c) + 1`` on: a serial loop becomes a head loop with
the original body, then the main loop, itself partitioned again (its right border). Parallel
loops are not split on such conditions (each part would be its own pool launch).
"""

from __future__ import annotations

from kiln.arith.analyzer import Analyzer
from kiln.arith.canonical import structural_key
from kiln.arith.int_set import eval_set
from kiln.ir.expr import IntImm, PrimExpr, Range
from kiln.tir import expr as _e
from kiln.tir import op as _op
from kiln.tir import stmt as _s
from kiln.tir.function import PrimFunc
from kiln.tir.stmt_functor import StmtExprMutator, post_order_visit, substitute
from kiln.tir.transform.base import prim_func_pass

__all__ = ["LoopPartition", "partition_loops"]


def _conjuncts(cond: PrimExpr) -> list[PrimExpr]:
    if isinstance(cond, _e.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _likely_conditions(body: _s.Stmt) -> list[PrimExpr]:
    found: list[PrimExpr] = []

    def visit(node):
        if isinstance(node, _e.Call) and node.op == "tir.likely":
            found.extend(_conjuncts(node.args[0]))

    post_order_visit(body, visit)
    return found


def _inner_loops(body: _s.Stmt) -> dict:
    loops = {}

    def visit(node):
        if isinstance(node, _s.For):
            loops[node.loop_var] = Range.from_min_extent(node.min, node.extent)

    post_order_visit(body, visit)
    return loops


def _uses(expr: PrimExpr, var: _e.Var) -> bool:
    hit = []
    post_order_visit(expr, lambda n: hit.append(1) if n is var else None)
    return bool(hit)


class _Replace(StmtExprMutator):
    def __init__(self, keys: set) -> None:
        super().__init__()
        self.keys = keys

    def visit_Call(self, node):
        if node.op == "tir.likely":
            rest = [c for c in _conjuncts(node.args[0]) if structural_key(c) not in self.keys]
            return _op.likely(_op.all(*rest)) if rest else _op.const(True)
        return self.generic_visit(node)


class _Partitioner(StmtExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.analyzer = Analyzer()

    def visit(self, node):
        if isinstance(node, PrimExpr):
            return node
        return super().visit(node)

    def _split_point(self, loop: _s.For, cond: PrimExpr, lower: bool = False
                     ) -> PrimExpr | None:
        """If ``cond`` is linear in the loop var: the first value for which it may fail
        (an upper bound), or with ``lower`` the first from which it always holds."""
        ana = self.analyzer
        v = loop.loop_var
        if not isinstance(cond, _e.LT | _e.LE | _e.GT | _e.GE) or not _uses(cond, v):
            return None
        a, b = (cond.a, cond.b) if isinstance(cond, _e.LT | _e.LE) else (cond.b, cond.a)
        diff = a - b if isinstance(cond, _e.LT | _e.GT) else a - b - 1  # holds iff diff < 0
        # constants of the loop var's own type: an int64 var (a symbolic batch) set to an
        # int32 0 leaves casts that hide the coefficient
        at0 = ana.simplify(substitute(diff, {v: _op.const(0, v.dtype)}))
        coeff = ana.simplify(substitute(diff, {v: _op.const(1, v.dtype)}) - at0)
        if not isinstance(coeff, IntImm) or (coeff.value < 0) != lower or coeff.value == 0:
            return None
        if not ana.can_prove_equal(diff, v * coeff + at0):
            return None
        inner = _inner_loops(loop.body)
        rest = eval_set(at0, inner, ana).max_value
        if rest is None:
            return None
        c = abs(coeff.value)
        if lower:  # -c * v + rest < 0 for every inner value iff v > max(rest) / c
            return ana.simplify(_op.floordiv(rest, c) + 1)
        return ana.simplify(_op.floordiv(c - 1 - rest, c))

    def _peel_head(self, node: _s.For, conds: list) -> _s.Stmt | None:
        """``node`` as a head loop that keeps the lower-bound conditions of ``conds`` which
        fail first, then the main loop without them (partitioned again), or None."""
        ana = self.analyzer
        end = ana.simplify(node.min + node.extent)
        for cond in conds:
            raw = self._split_point(node, cond, lower=True)
            if raw is None:
                continue
            point = ana.simplify(_op.min(_op.max(raw, node.min), end))
            if ana.can_prove_equal(point, node.min) or ana.can_prove_equal(point, end):
                continue
            keys = {structural_key(c) for c in conds
                    if c is cond or self._same_point(node, c, raw, lower=True)}
            head_extent = ana.simplify(point - node.min)
            if isinstance(head_extent, IntImm) and head_extent.value == 1:
                head = self.visit(substitute(node.body, {node.loop_var: node.min}))
            else:
                head_var = _e.Var(node.loop_var.name, node.loop_var.dtype)
                head_body = self._visit_in(head_var, node.min, point,
                                           substitute(node.body, {node.loop_var: head_var}))
                head = _s.For(head_var, node.min, head_extent, node.kind, head_body,
                              node.thread_binding, node.annotations)
            main = _s.For(node.loop_var, point, ana.simplify(end - point), node.kind,
                          _Replace(keys).visit(node.body), node.thread_binding,
                          node.annotations)
            return _s.stmt_seq(head, self.visit(main))
        return None

    def visit_For(self, node):
        conds = [c for c in _likely_conditions(node.body) if _uses(c, node.loop_var)]
        if node.kind == _s.ForKind.THREAD_BINDING:
            conds = []  # a GPU thread axis is one launch: it keeps its guard (as TVM)
        if node.kind == _s.ForKind.SERIAL and conds:
            peeled = self._peel_head(node, conds)
            if peeled is not None:
                return peeled
        for cond in conds:
            raw = self._split_point(node, cond)
            if raw is None:
                continue
            ana = self.analyzer
            end = ana.simplify(node.min + node.extent)
            point = ana.simplify(_op.min(_op.max(raw, node.min), end))
            if ana.can_prove_equal(point, node.min):
                continue
            keys = {structural_key(c) for c in conds if c is cond or self._same_point(node, c,
                                                                                       raw)}
            main_body = self._visit_in(node.loop_var, node.min, point,
                                       _Replace(keys).visit(node.body))
            main = _s.For(node.loop_var, node.min, ana.simplify(point - node.min), node.kind,
                          main_body, node.thread_binding, node.annotations)
            if ana.can_prove_equal(point, end):
                return main
            tail_extent = ana.simplify(end - point)
            if isinstance(tail_extent, IntImm) and tail_extent.value == 1:
                # a single last iteration: inline it so its inner loops can be partitioned
                tail = self.visit(substitute(node.body, {node.loop_var: point}))
            else:
                tail_var = _e.Var(node.loop_var.name, node.loop_var.dtype)
                tail_body = substitute(node.body, {node.loop_var: tail_var})
                tail = _s.For(tail_var, point, tail_extent, node.kind, tail_body,
                              node.thread_binding, node.annotations)
            return _s.stmt_seq(main, tail)
        body = self._visit_in(node.loop_var, node.min, node.min + node.extent, node.body)
        return _s.For(node.loop_var, node.min, node.extent, node.kind, body,
                      node.thread_binding, node.annotations)

    def _same_point(self, loop: _s.For, cond: PrimExpr, point: PrimExpr,
                    lower: bool = False) -> bool:
        own = self._split_point(loop, cond, lower)
        if own is None:
            return False
        return self.analyzer.can_prove_equal(own, point)

    def _visit_in(self, var: _e.Var, begin: PrimExpr, end: PrimExpr, body: _s.Stmt):
        extent = self.analyzer.simplify(end - begin)
        with self.analyzer.constraint_scope(var, Range.from_min_extent(begin, extent)):
            return self.visit(body)


def partition_loops(func: PrimFunc) -> PrimFunc:
    """Partition the loops of ``func`` on their ``likely`` conditions (``func`` itself when
    it has none: nothing to partition, and lowering then skips the Simplify after it)."""
    if not _likely_conditions(func.body):
        return func
    return func.with_body(_Partitioner().visit(func.body))


def LoopPartition():  # noqa: N802 - TVM's pass name
    """The LoopPartition pass."""
    return prim_func_pass(partition_loops, "tir.LoopPartition")
