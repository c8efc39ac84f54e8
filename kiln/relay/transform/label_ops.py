"""Labels for primitive functions (TVM's ``LabelOps``).

Entry points: :func:`LabelOps` (the pass), :func:`label_ops` (one expression) and
:func:`primitive_hash` (the label).

Every ``Primitive`` function gets the attribute ``hash``: its structural hash as 16 hex digits
(the key lowering caches kernels by, equal for structurally equal functions), and
``func_name``: its fused name (``fused_nn_conv2d_add_nn_relu``, see
:func:`~kiln.relay.transform.fuse_ops.fused_function_name`).
"""

from __future__ import annotations

from typing import Any

from kiln.ir.structural import structural_hash
from kiln.relay.expr import Function
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.transform.fuse_ops import fused_function_name
from kiln.relay.transform.pass_util import relay_function_pass

__all__ = ["LabelOps", "label_ops", "primitive_hash"]


def primitive_hash(func: Function) -> str:
    """The structural hash of ``func`` (labels excluded) as 16 lower-case hex digits."""
    unlabeled = func.without_attr("hash").without_attr("func_name")
    return f"{structural_hash(unlabeled) & 0xFFFFFFFFFFFFFFFF:016x}"


class _Labeler(ExprMutator):
    def visit_function(self, node: Function) -> Any:
        if node.get_attr("Primitive"):
            return node.with_attrs({"hash": primitive_hash(node),
                                    "func_name": fused_function_name(node)})
        return super().visit_function(node)


def label_ops(expr: Any) -> Any:
    """``expr`` with every primitive function labelled.

    Example
    -------
    >>> from kiln import relay
    >>> p = relay.var("p", shape=(2,))
    >>> prim = relay.Function([p], relay.exp(p)).with_attr("Primitive", 1)
    >>> labeled = label_ops(prim)
    >>> len(labeled.attrs["hash"]), labeled.attrs["func_name"]
    (16, 'fused_exp')
    """
    return _Labeler().visit(expr)


def LabelOps():  # noqa: N802 (TVM's name)
    """The pass labelling primitive functions with ``hash`` and ``func_name``."""

    def rewrite(func: Function, mod: Any, ctx: Any) -> Function:
        if func.get_attr("Primitive"):
            return func.with_attrs({"hash": primitive_hash(func),
                                    "func_name": fused_function_name(func)})
        return label_ops(func)

    return relay_function_pass("LabelOps", 0, rewrite)
