"""Undo fusion (TVM's ``relay.transform.DefuseOps``).

Entry points: :func:`DefuseOps` (the pass) and :func:`defuse_ops` (one expression).

Each call of a ``Primitive`` function literal is replaced by the function's body with its
parameters bound to the call's arguments, so ``DefuseOps(FuseOps(m))`` is ``m`` again.
"""

from __future__ import annotations

from typing import Any

from kiln.relay.expr import Call, Function
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.transform.pass_util import fresh_copy, relay_function_pass

__all__ = ["DefuseOps", "defuse_ops"]


class _Defuser(ExprMutator):
    def visit_call(self, node: Call) -> Any:
        new = super().visit_call(node)
        func = new.op
        if isinstance(func, Function) and func.get_attr("Primitive"):
            return fresh_copy(func.body, dict(zip(func.params, new.args)))
        return new


def defuse_ops(expr: Any) -> Any:
    """``expr`` with every primitive function call inlined.

    Example
    -------
    >>> from kiln import relay
    >>> p, x = relay.var("p"), relay.var("x")
    >>> prim = relay.Function([p], relay.exp(p)).with_attr("Primitive", 1)
    >>> defuse_ops(prim(x)).args[0] is x
    True
    """
    return _Defuser().visit(expr)


def DefuseOps():  # noqa: N802 (TVM's name)
    """The pass inlining every primitive (fused) function back into its caller."""
    return relay_function_pass("DefuseOps", 3, lambda func, mod, ctx: defuse_ops(func))
