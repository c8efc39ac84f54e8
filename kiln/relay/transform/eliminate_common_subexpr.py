"""Common sub-expression elimination (TVM's ``relay.transform.EliminateCommonSubexpr``).

Entry points: :func:`EliminateCommonSubexpr` (the pass) and :func:`eliminate_common_subexpr`
(one expression).

Two operator calls are the same when they call the same operator on the same argument nodes
(after their own arguments were merged; equal scalar constants count as the same) with
structurally equal attrs; the later one is replaced by the earlier. Field accesses of the same
tuple node merge too. Stateful operators never merge, and ``fskip(expr) -> bool`` excludes
more. A call seen inside an ``If`` branch, a match clause or a function body is not reused
outside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.ir.op import Op
from kiln.ir.structural import structural_equal
from kiln.relay.adt import Clause
from kiln.relay.expr import Call, Constant, Function, If, TupleGetItem
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.transform.pass_util import relay_function_pass

__all__ = ["EliminateCommonSubexpr", "eliminate_common_subexpr"]


def _arg_key(arg: Any) -> Any:
    if isinstance(arg, Constant) and not arg.data.shape:
        return ("scalar", str(arg.data.dtype), arg.data.numpy().item())
    return id(arg)


class _CommonSubexprEliminator(ExprMutator):
    def __init__(self, fskip: Callable | None) -> None:
        super().__init__()
        self.fskip = fskip
        self.calls: dict[tuple, list[Call]] = {}
        self.items: dict[tuple, TupleGetItem] = {}

    def scoped(self, visit: Callable, node: Any) -> Any:
        """Visit ``node`` with tables that forget what was added inside it."""
        saved_calls = {key: list(found) for key, found in self.calls.items()}
        saved_items = dict(self.items)
        try:
            return visit(node)
        finally:
            self.calls, self.items = saved_calls, saved_items

    def visit_if(self, node: If) -> Any:
        cond = self.visit(node.cond)
        then = self.scoped(self.visit, node.true_branch)
        other = self.scoped(self.visit, node.false_branch)
        if cond is node.cond and then is node.true_branch and other is node.false_branch:
            return node
        return If(cond, then, other, node.span)

    def visit_function(self, node: Function) -> Any:
        if node.get_attr("Primitive"):
            return node
        return self.scoped(super().visit_function, node)

    def visit_clause(self, clause: Clause) -> Clause:
        return self.scoped(super().visit_clause, clause)

    def visit_call(self, node: Call) -> Any:
        new = super().visit_call(node)
        if not isinstance(new, Call) or not isinstance(new.op, Op):
            return new
        if new.op.get_attr("TOpIsStateful") or (self.fskip is not None and self.fskip(new)):
            return new
        key = (new.op.name, tuple(_arg_key(a) for a in new.args))
        candidates = self.calls.setdefault(key, [])
        for candidate in candidates:
            if structural_equal(candidate.attrs, new.attrs) and \
                    structural_equal(tuple(candidate.type_args), tuple(new.type_args)):
                return candidate
        candidates.append(new)
        return new

    def visit_tuple_getitem(self, node: TupleGetItem) -> Any:
        new = super().visit_tuple_getitem(node)
        if self.fskip is not None and self.fskip(new):
            return new
        key = (id(new.tuple_value), new.index)
        return self.items.setdefault(key, new)


def eliminate_common_subexpr(expr: Any, fskip: Callable | None = None) -> Any:
    """Merge repeated operator calls of ``expr``.

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x")
    >>> y = eliminate_common_subexpr(relay.add(relay.exp(x), relay.exp(x)))
    >>> y.args[0] is y.args[1]
    True
    """
    return _CommonSubexprEliminator(fskip).visit(expr)


def EliminateCommonSubexpr(fskip: Callable | None = None):  # noqa: N802 (TVM's name)
    """The pass merging common sub-expressions of every function.

    ``fskip(expr) -> bool`` names calls that must not be merged.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> mod = kiln.IRModule.from_expr(relay.Function([x], relay.exp(x) + relay.exp(x)))
    >>> body = EliminateCommonSubexpr()(mod)["main"].body
    >>> body.args[0] is body.args[1]
    True
    """

    def rewrite(func: Function, mod: Any, ctx: Any) -> Function:
        return eliminate_common_subexpr(func, fskip)

    return relay_function_pass("EliminateCommonSubexpr", 3, rewrite)
