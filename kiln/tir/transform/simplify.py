"""Simplify and RemoveNoOp.

Entry points: :func:`Simplify`, :func:`RemoveNoOp` (passes), :func:`simplify_stmt`,
:func:`remove_no_op`.

Simplify runs the arithmetic simplifier over every expression with the enclosing loops'
ranges known, folds branches whose condition is decided, drops loops of extent 0 and inlines
loops of extent 1. RemoveNoOp deletes statements that do nothing (empty loops, ``Evaluate``
of a constant, branches with no effect).
"""

from __future__ import annotations

from typing import Any

from kiln.arith.analyzer import Analyzer
from kiln.arith.bound import POS_INF, ConstIntBound
from kiln.ir.expr import IntImm, PrimExpr, Range
from kiln.tir import expr as _e
from kiln.tir import stmt as _s
from kiln.tir.function import PrimFunc
from kiln.tir.stmt_functor import StmtExprMutator, substitute
from kiln.tir.transform.base import prim_func_pass

__all__ = ["Simplify", "RemoveNoOp", "simplify_stmt", "remove_no_op", "is_no_op",
           "simplify_prim_func"]


class _StmtSimplifier(StmtExprMutator):
    def __init__(self, analyzer: Analyzer) -> None:
        super().__init__()
        self.analyzer = analyzer

    def visit(self, node: Any) -> Any:
        if isinstance(node, PrimExpr) and not isinstance(node, _e.IterVar):
            return self.analyzer.simplify(node)
        return super().visit(node)

    def visit_For(self, node):
        lo = self.analyzer.simplify(node.min)
        extent = self.analyzer.simplify(node.extent)
        if isinstance(extent, IntImm) and extent.value <= 0:
            return _s.Evaluate(0)
        if isinstance(extent, IntImm) and extent.value == 1 and \
                node.kind != _s.ForKind.THREAD_BINDING:
            return self.visit(substitute(node.body, {node.loop_var: lo}))
        with self.analyzer.constraint_scope(node.loop_var, Range.from_min_extent(lo, extent)):
            body = self.visit(node.body)
        if is_no_op(body):
            return _s.Evaluate(0)
        return _s.For(node.loop_var, lo, extent, node.kind, body, node.thread_binding,
                      node.annotations)

    def visit_IfThenElse(self, node):
        cond = self.analyzer.simplify(node.condition)
        if isinstance(cond, IntImm):
            if cond.value:
                return self.visit(node.then_case)
            return self.visit(node.else_case) if node.else_case is not None else \
                _s.Evaluate(0)
        then_case = self.visit(node.then_case)
        else_case = self.visit(node.else_case) if node.else_case is not None else None
        return _s.IfThenElse(cond, then_case, else_case)

    def visit_LetStmt(self, node):
        value = self.analyzer.simplify(node.value)
        if isinstance(value, IntImm | _e.Var):
            return self.visit(substitute(node.body, {node.var: value}))
        return _s.LetStmt(node.var, value, self.visit(node.body))

    def visit_SeqStmt(self, node):
        return _s.stmt_seq([self.visit(s) for s in node.seq])


def simplify_stmt(stmt: _s.Stmt, analyzer: Analyzer | None = None) -> _s.Stmt:
    """Simplify a statement (see module docstring)."""
    return _StmtSimplifier(analyzer or Analyzer()).visit(stmt)


def simplify_prim_func(func: PrimFunc) -> PrimFunc:
    """``func`` with its body simplified (buffer extents known non-negative) and no-ops
    removed: the ``tir.Simplify`` pass on one function."""
    analyzer = Analyzer()
    for buf in func.buffer_map.values():
        for dim in buf.shape:
            if isinstance(dim, _e.Var):
                analyzer.update(dim, ConstIntBound(0, POS_INF))
    return func.with_body(remove_no_op(simplify_stmt(func.body, analyzer)))


def Simplify():  # noqa: N802 - TVM's pass name
    """The Simplify pass."""
    return prim_func_pass(simplify_prim_func, "tir.Simplify")


def is_no_op(stmt: _s.Stmt | None) -> bool:
    """Whether ``stmt`` has no effect."""
    if stmt is None:
        return True
    if isinstance(stmt, _s.Evaluate):
        return isinstance(stmt.value, IntImm | _e.FloatImm | _e.Var)
    if isinstance(stmt, _s.SeqStmt):
        return all(is_no_op(s) for s in stmt.seq)
    return False


class _NoOpRemover(StmtExprMutator):
    def visit(self, node: Any) -> Any:
        if isinstance(node, PrimExpr):
            return node
        return super().visit(node)

    def visit_SeqStmt(self, node):
        seq = [s for s in (self.visit(s) for s in node.seq) if not is_no_op(s)]
        return _s.stmt_seq(seq) if seq else _s.Evaluate(0)

    def visit_For(self, node):
        body = self.visit(node.body)
        if is_no_op(body):
            return _s.Evaluate(0)
        return _s.For(
            node.loop_var, node.min, node.extent, node.kind, body, node.thread_binding,
            node.annotations)

    def visit_IfThenElse(self, node):
        then_case = self.visit(node.then_case)
        else_case = self.visit(node.else_case) if node.else_case is not None else None
        if is_no_op(else_case):
            else_case = None
        if is_no_op(then_case) and else_case is None:
            return _s.Evaluate(0)
        return _s.IfThenElse(node.condition, then_case, else_case)

    def visit_LetStmt(self, node):
        body = self.visit(node.body)
        return _s.Evaluate(0) if is_no_op(body) else _s.LetStmt(node.var, node.value, body)

    def visit_AttrStmt(self, node):
        body = self.visit(node.body)
        if is_no_op(body) and not node.attr_key.startswith("pragma_import"):
            return _s.Evaluate(0)
        return _s.AttrStmt(node.node, node.attr_key, node.value, body)

    def visit_Allocate(self, node):
        body = self.visit(node.body)
        if is_no_op(body):
            return _s.Evaluate(0)
        return _s.Allocate(node.buffer_var, node.dtype, node.extents, node.condition, body,
                           node.annotations)


def remove_no_op(stmt: _s.Stmt) -> _s.Stmt:
    """Delete statements without effect."""
    return _NoOpRemover().visit(stmt)


def RemoveNoOp():  # noqa: N802 - TVM's pass name
    """The RemoveNoOp pass."""
    return prim_func_pass(lambda f: f.with_body(remove_no_op(f.body)), "tir.RemoveNoOp")
