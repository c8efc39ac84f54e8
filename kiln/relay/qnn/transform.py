"""``relay.qnn.transform``: passes over the QNN dialect.

Entry points: :func:`CanonicalizeOps` (QNN ops to plain Relay), :func:`Legalize` (the
target's QNN legalizations, then CanonicalizeOps: what ``relay.build`` runs first),
:func:`canonicalize_qnn` / :func:`legalize_qnn` (one expression), :func:`has_qnn_ops`.

Example
-------
>>> import kiln
>>> from kiln import relay
>>> x = relay.var("x", shape=(4,))
>>> mod = kiln.IRModule.from_expr(relay.qnn.op.quantize(x, relay.const(0.5), relay.const(0)))
>>> relay.qnn.transform.CanonicalizeOps()(mod)["main"].body.op.name
'cast'
"""

from __future__ import annotations

from typing import Any

from kiln.relay.expr import Call, Function
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.qnn import elemwise  # noqa: F401 (registers the add/subtract/mul lowerings)
from kiln.relay.qnn.canonicalize import QNN_LOWERINGS
from kiln.relay.transform.pass_util import is_op_call, relay_function_pass

__all__ = ["CanonicalizeOps", "Legalize", "canonicalize_qnn", "legalize_qnn", "has_qnn_ops"]


class _QnnRewriter(ExprMutator):
    """Replaces each QNN call that ``rule(call, typed call)`` rewrites (None keeps it)."""

    def __init__(self, rules: dict, *extra: Any) -> None:
        super().__init__()
        self.rules, self.extra, self.found = rules, extra, False

    def visit_function(self, node: Function) -> Any:
        return node if node.get_attr("Primitive") else super().visit_function(node)

    def visit_call(self, node: Call) -> Any:
        new = super().visit_call(node)
        rule = self.rules.get(new.op.name) if is_op_call(new) else None
        replaced = None if rule is None else rule(new, node, *self.extra)
        if replaced is None:
            return new
        self.found = True
        return replaced


def canonicalize_qnn(expr: Any, mod: Any = None) -> Any:
    """Lower the QNN ops of a type-checked expression to plain Relay."""
    from kiln.relay.type_infer import infer_expr

    # qnn.add/subtract/mul lower to qnn.requantize: type that and lower again
    for _ in range(3):
        canon = _QnnRewriter(QNN_LOWERINGS)
        expr = canon.visit(expr)
        if not canon.found:
            return expr
        infer_expr(expr, mod)
    return expr


def has_qnn_ops(mod: Any) -> bool:
    """Whether any function of ``mod`` calls a ``qnn.*`` op."""
    from kiln.relay.analysis import post_order_visit

    found = []

    def visit(node: Any) -> None:
        if is_op_call(node) and node.op.name.startswith("qnn."):
            found.append(node)

    for func in mod.functions.values():
        if isinstance(func, Function):
            post_order_visit(func, visit)
    return bool(found)


def CanonicalizeOps():  # noqa: N802 (TVM's name)
    """The pass lowering the QNN ops (quantize, dequantize, requantize, add, subtract, mul)
    to plain Relay."""

    def rewrite(func: Function, mod: Any, ctx: Any) -> Function:
        return canonicalize_qnn(func, mod)

    return relay_function_pass("qnn.CanonicalizeOps", 0, rewrite, required=("InferType",),
                               needs_types=True)


def legalize_qnn(expr: Any, target: Any = None, mod: Any = None) -> Any:
    """Apply the target's QNN legalizations (:mod:`kiln.relay.qnn.legalize`) to a
    type-checked expression; the result still holds QNN ops."""
    from kiln.relay.qnn.legalize import QNN_LEGALIZATIONS
    from kiln.relay.type_infer import infer_expr

    rewriter = _QnnRewriter(QNN_LEGALIZATIONS, target)
    expr = rewriter.visit(expr)
    if rewriter.found:
        infer_expr(expr, mod)
    return expr


def Legalize():  # noqa: N802 (TVM's name)
    """TVM's ``relay.qnn.transform.Legalize``: the current target's QNN legalizations (u8 x s8
    on x86, table lookups for 8-bit unary ops), then :func:`CanonicalizeOps`."""
    from kiln.ir.transform import Sequential
    from kiln.target import Target

    def rewrite(func: Function, mod: Any, ctx: Any) -> Function:
        return legalize_qnn(func, Target.current(allow_none=True), mod)

    legalize = relay_function_pass("qnn.QnnLegalize", 0, rewrite, required=("InferType",),
                                   needs_types=True)
    return Sequential([legalize, CanonicalizeOps()], name="qnn.Legalize")
