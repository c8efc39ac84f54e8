"""Operator layout alteration (TVM's ``relay.transform.AlterOpLayout``).

Entry points: :func:`AlterOpLayout` (the pass) and :func:`alter_op_layout` (one expression).

An op may register ``FTVMAlterOpLayout(attrs, inputs, tinfos, out_type) -> expr | None`` to
trade itself, for the current target, for a faster form in another data layout — e.g.
``nn.dense`` becomes ``nn.contrib_dense_pack`` over a ``layout_transform``-ed weight. The
replacement must produce the original output type; layout transforms of constants are folded
by the FoldConstant that follows, so packed weights cost nothing at run time. Runs at opt
level 3, inside the target's scope (``with target:``), as ``relay.build`` does.
"""

from __future__ import annotations

from typing import Any

from kiln.relay.expr import Call, Function
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.transform.pass_util import is_op_call, relay_function_pass, type_of
from kiln.runtime.error import TVMError

__all__ = ["AlterOpLayout", "alter_op_layout"]


class _Alterer(ExprMutator):
    def visit_function(self, node: Function) -> Any:
        return node if node.get_attr("Primitive") else super().visit_function(node)

    def visit_call(self, node: Call) -> Any:
        new = super().visit_call(node)
        if not is_op_call(new):
            return new
        alter = new.op.get_attr("FTVMAlterOpLayout")
        if alter is None:
            return new
        tinfos = [type_of(arg) for arg in node.args]
        out_type = type_of(node)
        if out_type is None or any(t is None for t in tinfos):
            raise TVMError(f"AlterOpLayout needs the types of {new.op.name}; run InferType first")
        altered = alter(new.attrs, list(new.args), tinfos, out_type)
        return new if altered is None else altered


def alter_op_layout(expr: Any) -> Any:
    """Apply every op's ``FTVMAlterOpLayout`` in a type-checked expression."""
    import kiln.relay.op.strategy  # noqa: F401  (the strategies register the alterations)

    return _Alterer().visit(expr)


def AlterOpLayout():  # noqa: N802 (TVM's name)
    """The pass replacing ops by their target-preferred layout forms (opt level 3)."""

    def rewrite(func: Any, mod: Any, ctx: Any) -> Any:
        return alter_op_layout(func)

    return relay_function_pass("AlterOpLayout", 3, rewrite, required=("InferType",),
                               needs_types=True, skip_primitive=True)
