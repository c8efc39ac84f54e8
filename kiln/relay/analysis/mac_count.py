"""Counting work in a Relay graph: multiply-accumulates and layer depth.

Entry points: :func:`get_total_mac_number`, :func:`count_layers`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kiln.ir.op import Op
from kiln.relay.expr import Call
from kiln.relay.expr_functor import children_of, post_order_visit

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


def _matmul_macs(call: Call) -> int:
    data = _shape(call.args[0])
    transpose_a = bool(getattr(call.attrs, "transpose_a", False))
    reduce_extent = data[-2] if transpose_a else data[-1]
    return math.prod(_shape(call)) * reduce_extent


_MAC_RULES: dict[str, Callable[[Call], int]] = {
    "nn.conv1d": _conv_macs,
    "nn.conv2d": _conv_macs,
    "nn.conv3d": _conv_macs,
    "nn.conv1d_transpose": _conv_transpose_macs,
    "nn.conv2d_transpose": _conv_transpose_macs,
    "nn.dense": _matmul_macs,
    "nn.matmul": _matmul_macs,
    "nn.batch_matmul": _matmul_macs,
}


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
            rule = _MAC_RULES.get(node.op.name)
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
