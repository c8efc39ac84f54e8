"""Counting work in a Relay graph: multiply-accumulates and layer depth.

Entry points: :func:`get_total_mac_number`, :func:`count_layers`.

Each op's count is its ``FMacCount`` rule, registered beside the op by its family module
(``relay/op/nn/dense.py``, ``relay/op/nn/conv.py``) with ``relay.op.register_mac_count``.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.op import Op
from kiln.relay.expr import Call
from kiln.relay.expr_functor import children_of, post_order_visit

__all__ = ["get_total_mac_number", "count_layers"]


def get_total_mac_number(expr: Any) -> int:
    """Multiply-accumulate operations of the convolutions and matrix products in ``expr``.

    The expression is type-inferred first if it has no types yet.

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2, 8))
    >>> w = relay.var("w", shape=(4, 8))
    >>> get_total_mac_number(relay.nn.dense(x, w))
    64
    """
    from kiln.ir.module import IRModule
    from kiln.relay.type_infer import infer_expr, infer_module

    roots = []
    if isinstance(expr, IRModule):
        expr = infer_module(expr)
        roots = list(expr.functions.values())
    else:
        if getattr(expr, "checked_type_", None) is None:
            infer_expr(expr)
        roots = [expr]
    total = 0

    def count(node: Any) -> None:
        nonlocal total
        if isinstance(node, Call) and isinstance(node.op, Op):
            rule = node.op.get_attr("FMacCount")
            if rule is not None:
                total += rule(node)

    for root in roots:
        post_order_visit(root, count)
    return total


def count_layers(expr: Any, valid_ops: list[str]) -> int:
    """The most calls of ``valid_ops`` on any one path through ``expr`` (its depth in layers).

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(4,))
    >>> count_layers(relay.nn.relu(relay.nn.relu(x) + x), ["nn.relu"])
    2
    """
    wanted = set(valid_ops)
    depth: dict[int, int] = {}

    def measure(node: Any) -> None:
        below = max((depth.get(id(c), 0) for c in children_of(node)), default=0)
        is_layer = isinstance(node, Call) and isinstance(node.op, Op) and node.op.name in wanted
        depth[id(node)] = below + (1 if is_layer else 0)

    post_order_visit(expr, measure)
    return depth[id(expr)]
