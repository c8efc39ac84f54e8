"""Counting work in a Relay graph: multiply-accumulates and layer depth.

Entry points: :func:`get_total_mac_number`, :func:`count_layers`.

Each op's count is its ``FMacCount`` rule, registered beside the op with
``relay.op.register_mac_count``; the table below holds the rules of ops not yet moved into a
family module.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kiln.ir.op import Op
from kiln.relay.expr import Call
from kiln.relay.expr_functor import children_of, post_order_visit
from kiln.relay.op.op import register_mac_count

__all__ = ["get_total_mac_number", "count_layers"]


def _shape(expr: Any) -> tuple[int, ...]:
    return expr.checked_type.concrete_shape


def _layout_axis(attrs: Any, key: str, default: str, axis: str) -> int:
    layout = str(getattr(attrs, key, None) or default)
    return layout.index(axis)


def _conv_macs(call: Call) -> int:
    # Each output element sums over one filter: all kernel axes except the output channels.
    kernel = _shape(call.args[1])
    default = "OI" + "DHW"[3 - (len(kernel) - 2):]
    out_axis = _layout_axis(call.attrs, "kernel_layout", default, "O")
    return math.prod(_shape(call)) * math.prod(kernel) // kernel[out_axis]


def _conv_transpose_macs(call: Call) -> int:
    # Each input element is scattered through one filter slice: kernel axes except inputs.
    kernel = _shape(call.args[1])
    default = "IO" + "DHW"[3 - (len(kernel) - 2):]
    in_axis = _layout_axis(call.attrs, "kernel_layout", default, "I")
    return math.prod(_shape(call.args[0])) * math.prod(kernel) // kernel[in_axis]


_MAC_RULES: dict[str, Callable[[Call], int]] = {
    "nn.conv1d": _conv_macs,
    "nn.conv2d": _conv_macs,
    "nn.conv3d": _conv_macs,
    "nn.conv1d_transpose": _conv_transpose_macs,
    "nn.conv2d_transpose": _conv_transpose_macs,
}
for _name, _rule in _MAC_RULES.items():
    if not Op.get(_name).has_attr("FMacCount"):
        register_mac_count(_name, _rule)


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
