"""A per-lane ``if_then_else`` whose arms cannot fault becomes a ``Select`` before codegen.

Entry points: :func:`SelectSafeIfThenElse` (the pass) and :func:`select_safe_if_then_else`
(one statement); for the C-family printers also :func:`HoistSafeArmLoads`; :func:`has_choice`
(whether there is any ``if_then_else`` for these passes to rewrite).

``tir.if_then_else`` evaluates only the arm it takes, lane by lane, so a codegen must keep an
arm that may fault (a load past a padded border) from running in the lanes that do not take
it: masked loads, or a loop over the lanes. When both arms are provably safe in every lane
(:func:`~kiln.arith.load_bounds.speculable` under the enclosing loops' ranges, the facts
the codegens had), evaluating both and blending is exact, and that is what TIR's ``Select``
says. Deciding it here, once, leaves the C, LLVM and OpenCL printers only the choices that
need masking. An arm holding another ``if_then_else`` whose own arms may fault is kept (the
inner choice must stay restricted to the outer lanes). A choice on a scalar condition is kept
too: LLVM branches on it, and hoisting its loads ahead of the branch made a padded max_pool
kernel ~25% slower there. C binds the loading arms of such a choice before its ``?:``
(:func:`HoistSafeArmLoads`, in the C-family pipeline only) to keep GCC 12.2 from miscompiling
the masked loads it would make of a load under ``?:`` (GCC PR tree-optimization/114375).
"""

from __future__ import annotations

from typing import Any

from kiln.arith.analyzer import Analyzer
from kiln.arith.load_bounds import speculable
from kiln.ir.expr import Range
from kiln.runtime.dtype import DataType
from kiln.tir import expr as _e
from kiln.tir import stmt as _s
from kiln.tir.function import PrimFunc
from kiln.tir.stmt_functor import StmtExprMutator, post_order_visit, pre_order_visit
from kiln.tir.transform.base import PrimFuncPass, prim_func_pass

__all__ = ["SelectSafeIfThenElse", "select_safe_if_then_else", "HoistSafeArmLoads",
           "hoist_safe_arm_loads", "has_choice"]


def is_if_then_else(node: Any) -> bool:
    """Whether ``node`` is a ``tir.if_then_else`` call."""
    return isinstance(node, _e.Call) and str(node.op) == "tir.if_then_else"


def has_choice(stmt: Any) -> bool:
    """Whether ``stmt`` holds a ``tir.if_then_else``: the choice passes rewrite nothing else,
    and a kernel without one (most) skips their walks under the loops' facts (a scan visits
    each node once and stops descending at the first choice).

    Example
    -------
    >>> from kiln import tir
    >>> x = tir.Var("x", "int32")
    >>> has_choice(x + 1), has_choice(tir.if_then_else(x > 0, x, 0) + 1)
    (False, True)
    """
    found: list[Any] = []

    def visit(node: Any) -> bool | None:
        if found:
            return False
        if is_if_then_else(node):
            found.append(node)
            return False
        return None

    pre_order_visit(stmt, visit)
    return bool(found)


class SafeChoices(StmtExprMutator):
    """Rewrites safe per-lane choices, knowing the enclosing loops' ranges (the base of the
    passes that ask :func:`~kiln.arith.load_bounds.speculable` about choices' arms)."""

    def __init__(self) -> None:
        super().__init__()
        self.analyzer = Analyzer()
        self.memo: dict[int, bool] = {}  # speculable answers; reset when loop facts change

    def visit_For(self, node: _s.For) -> Any:
        outer, self.memo = self.memo, {}
        try:
            with self.analyzer.constraint_scope(node.loop_var,
                                                Range.from_min_extent(node.min, node.extent)):
                return self.generic_visit(node)
        finally:
            self.memo = outer

    def visit_Call(self, node: _e.Call) -> Any:
        node = self.generic_visit(node)
        if not is_if_then_else(node):
            return node
        cond, then, other = node.args
        lanes = DataType(node.dtype).lanes
        if lanes == 1 or DataType(cond.dtype).lanes != lanes:
            return node  # a scalar condition, or a malformed choice the codegen reports
        if not (self._safe(then) and self._safe(other)):
            return node
        return _e.Select(cond, then, other)

    def _safe(self, arm: Any) -> bool:
        """``arm`` cannot fault in any lane, nested choices' arms included."""
        if not speculable(arm, self.analyzer, self.memo):
            return False
        nested: list[Any] = []
        post_order_visit(arm, lambda n: nested.append(n) if is_if_then_else(n) else None)
        return all(speculable(a, self.analyzer, self.memo)
                   for choice in nested for a in choice.args[1:])


class _SafeArmLoads(SafeChoices):
    """Binds the loading arms of scalar-condition choices that cannot fault to Lets."""

    def visit_Call(self, node: _e.Call) -> Any:
        node = self.generic_visit(node)
        if not is_if_then_else(node) or DataType(node.args[0].dtype).lanes != 1:
            return node
        cond, *arms = node.args
        loading = [_has_load(arm) for arm in arms]
        if not any(loading) or not all(speculable(a, self.analyzer, self.memo) for a in arms):
            return node
        bound = [(_e.Var("arm", arm.dtype), arm) if loads else (None, arm)
                 for arm, loads in zip(arms, loading)]
        choice: Any = _e.Call(node.dtype, node.op, [cond] + [var if var is not None else arm
                                                         for var, arm in bound])
        for var, arm in reversed(bound):  # evaluated in order: the then arm first
            if var is not None:
                choice = _e.Let(var, arm, choice)
        return choice


def _has_load(expr: Any) -> bool:
    found: list[Any] = []
    post_order_visit(expr, lambda n: found.append(n) if isinstance(n, _e.BufferLoad) else None)
    return bool(found)


def hoist_safe_arm_loads(stmt: _s.Stmt) -> _s.Stmt:
    """``stmt`` with each scalar-condition ``if_then_else`` whose arms cannot fault and load
    memory rewritten to bind those arms first: ``let arm = A[i] in (c ? arm : 0)``."""
    return _SafeArmLoads().visit(stmt)


def _hoist_func(func: PrimFunc) -> PrimFunc:
    if not has_choice(func.body):
        return func
    body = hoist_safe_arm_loads(func.body)
    return func if body is func.body else func.with_body(body)


def HoistSafeArmLoads() -> PrimFuncPass:  # noqa: N802 - named like TVM's pass factories
    """The pass: scalar-condition ``if_then_else`` arms that load and cannot fault are bound
    before the choice, so a C compiler sees plain loads (C-family printers only)."""
    return prim_func_pass(_hoist_func, "tir.HoistSafeArmLoads")


def select_safe_if_then_else(stmt: _s.Stmt) -> _s.Stmt:
    """``stmt`` with every per-lane ``if_then_else`` whose arms cannot fault as a Select."""
    return SafeChoices().visit(stmt)


def _select_func(func: PrimFunc) -> PrimFunc:
    if not has_choice(func.body):
        return func
    body = select_safe_if_then_else(func.body)
    return func if body is func.body else func.with_body(body)


def SelectSafeIfThenElse() -> PrimFuncPass:  # noqa: N802 - named like TVM's pass factories
    """The pass: per-lane ``if_then_else`` with arms that cannot fault -> ``Select``."""
    return prim_func_pass(_select_func, "tir.SelectSafeIfThenElse")
