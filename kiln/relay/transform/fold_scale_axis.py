"""Folding per-channel scales into weights (TVM's ``relay.transform.FoldScaleAxis``).

Entry points: :func:`FoldScaleAxis` (backward, forward, then FoldConstant, as TVM),
:func:`BackwardFoldScaleAxis`, :func:`ForwardFoldScaleAxis`, and the expression rewrites
:func:`backward_fold_scale_axis`, :func:`forward_fold_scale_axis`.

A *channel scale* is a constant that varies only along one axis of the tensor it multiplies
(or is a scalar). With ``s`` such a constant, ``W`` an op with a weight (argument 1) that can
take it, ``P`` an op that commutes with positive scales and ``D`` one a scale distributes over:

backward (a scale applied to a weight op's result moves into the weight's output channels)
    ``W(x, w) * s``              → ``W(x, w * s_O)``
    ``D(W(x, w), b) * s``        → ``D(W(x, w * s_O), b * s)``
    ``P(W(x, w)) * s``           → ``P(W(x, w * s_O))``          (only when ``s > 0``)
forward (a scale applied to a weight op's input moves into the weight's input channels)
    ``W(x * s, w)``              → ``W(x, w * s_I)``
    ``W(P(x * s), w)``           → ``W(P(x), w * s_I)``          (only when ``s > 0``)

``s_O``/``s_I`` is ``s`` reshaped onto the weight's output/input-channel axis. The pass names
no op: which ops take a scale, and on which axes, is each op's ``FScaleAxisOutput`` /
``FScaleAxisInput`` rule (``relay.op.register_fold_scale_axis``: conv2d, dense …), and which
op applies a scale, commutes with one or distributes it is its ``TScaleAxisRole``
(``relay.op.register_scale_axis_role``: ``"scale"`` for multiply, ``"positive_homogeneous"``
for relu, ``"distributive"`` for add), all registered by the op family modules. The rewritten
intermediate must have no other consumer. Weights stay expressions (``w * s_O``, built with
the scaling call's own op); run FoldConstant afterwards to fold constant weights, as TVM's
pipeline does.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from kiln.ir.op import Op
from kiln.relay.expr import Call, Constant, Function, const
from kiln.relay.expr_functor import ExprMutator, children_of
from kiln.relay.transform.pass_util import (
    relay_function_pass,
    relay_module_pass,
    tensor_shape,
)

__all__ = ["FoldScaleAxis", "BackwardFoldScaleAxis", "ForwardFoldScaleAxis",
           "backward_fold_scale_axis", "forward_fold_scale_axis"]


def channel_vector(scale: Any, ndim: int, axis: int, channels: int) -> np.ndarray | None:
    """The per-channel values of ``scale`` if it is a constant varying only along ``axis`` of
    an ``ndim``-d tensor with ``channels`` channels (None otherwise)."""
    if not isinstance(scale, Constant):
        return None
    value = scale.data.numpy()
    if value.ndim > ndim:
        return None
    shape = (1,) * (ndim - value.ndim) + value.shape
    if any(extent != 1 for i, extent in enumerate(shape) if i != axis):
        return None
    if shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).copy()


def _on_axis(vector: np.ndarray, ndim: int, axis: int) -> Any:
    shape = [1] * ndim
    shape[axis] = vector.size
    return const(vector.reshape(shape))


def _rule(expr: Any, key: str) -> Any:
    """The op's ``FScaleAxisOutput``/``FScaleAxisInput`` rule (see ``register_fold_scale_axis``)
    when ``expr`` calls an op that has one."""
    if isinstance(expr, Call) and isinstance(expr.op, Op):
        return expr.op.get_attr(key)
    return None


def _role(expr: Any) -> str | None:
    """The ``TScaleAxisRole`` of the op ``expr`` calls (see ``register_scale_axis_role``)."""
    return _rule(expr, "TScaleAxisRole")


def _scale_of_multiply(call: Call, is_producer: Any) -> tuple[Call, Any] | None:
    """``(producer, scale)`` when ``call`` applies a constant scale to a matching producer."""
    if _role(call) != "scale":
        return None
    lhs, rhs = call.args
    if is_producer(lhs) and isinstance(rhs, Constant):
        return lhs, rhs
    if is_producer(rhs) and isinstance(lhs, Constant):
        return rhs, lhs
    return None


def _consumers(expr: Any) -> Counter:
    counts: Counter = Counter()
    seen: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for child in children_of(node):
            counts[child] += 1
            stack.append(child)
    return counts


class _ScaleFolder(ExprMutator):
    def __init__(self, root: Any) -> None:
        super().__init__()
        self.consumers = _consumers(root)

    def single_use(self, node: Any) -> bool:
        return self.consumers[node] == 1

    def visit_function(self, node: Function) -> Any:
        return node if node.get_attr("Primitive") else super().visit_function(node)

    def visit_call(self, node: Call) -> Any:
        folded = self.fold(node)
        return folded if folded is not None else super().visit_call(node)

    def fold(self, node: Call) -> Any:
        raise NotImplementedError


class _BackwardFolder(_ScaleFolder):
    def fold(self, node: Call) -> Any:
        found = _scale_of_multiply(node, lambda e: (
            _rule(e, "FScaleAxisOutput") is not None or
            _role(e) in ("distributive", "positive_homogeneous")) and self.single_use(e))
        if found is None:
            return None
        producer, scale = found
        out_shape = tensor_shape(node)
        if out_shape is None or tensor_shape(producer) != out_shape:
            return None  # the scale broadcasts the producer up: not a per-channel scale
        return self.fold_into(producer, scale, out_shape, node.op)

    def fold_into(self, producer: Call, scale: Any, out_shape: tuple, scale_op: Op) -> Any:
        """``producer * scale`` with the scale moved into a weight, or None; ``scale_op`` is
        the op that applied the scale (it scales the weight and the bias too)."""
        rule = _rule(producer, "FScaleAxisOutput")
        if rule is not None:
            axis, weight_axis, weight_ndim = rule(producer)
            vector = channel_vector(scale, len(out_shape), axis, out_shape[axis])
            if vector is None:
                return None
            weight = Call(scale_op, [self.visit(producer.args[1]),
                                     _on_axis(vector, weight_ndim, weight_axis)])
            return Call(producer.op, [self.visit(producer.args[0]), weight], producer.attrs)
        if _role(producer) == "positive_homogeneous":
            inner = producer.args[0]
            if not bool(np.all(scale.data.numpy() > 0)) or not self.single_use(inner) or \
                    not (_rule(inner, "FScaleAxisOutput") is not None or
                         _role(inner) == "distributive"):
                return None
            folded = self.fold_into(inner, scale, out_shape, scale_op)
            return None if folded is None else Call(producer.op, [folded], producer.attrs)
        # distributive: (conv + b) * s = conv * s + b * s, with the conv on either side
        for conv, bias in (producer.args, producer.args[::-1]):
            if _rule(conv, "FScaleAxisOutput") is not None and self.single_use(conv) and \
                    tensor_shape(conv) == out_shape:
                folded = self.fold_into(conv, scale, out_shape, scale_op)
                if folded is not None:
                    scaled_bias = Call(scale_op, [self.visit(bias), scale])
                    return Call(producer.op, [folded, scaled_bias], producer.attrs)
        return None


class _ForwardFolder(_ScaleFolder):
    def fold(self, node: Call) -> Any:
        rule = _rule(node, "FScaleAxisInput")
        if rule is None:
            return None
        data, weight = node.args
        through_relu = _role(data) == "positive_homogeneous" and self.single_use(data)
        scaled = data.args[0] if through_relu else data
        if not self.single_use(scaled):
            return None
        found = _scale_of_multiply(scaled, lambda e: True)
        in_shape = tensor_shape(scaled)
        if found is None or in_shape is None:
            return None
        source, scale = found
        if tensor_shape(source) != in_shape:
            return None
        if through_relu and not bool(np.all(scale.data.numpy() > 0)):
            return None
        placement = rule(node)
        if placement is None:
            return None
        axis, weight_axis, weight_ndim = placement
        vector = channel_vector(scale, len(in_shape), axis, in_shape[axis])
        factor = None if vector is None else _on_axis(vector, weight_ndim, weight_axis)
        if factor is None:
            return None
        new_data = self.visit(source)
        if through_relu:
            new_data = Call(data.op, [new_data], data.attrs)
        new_weight = Call(scaled.op, [self.visit(weight), factor])
        return Call(node.op, [new_data, new_weight], node.attrs)


def backward_fold_scale_axis(expr: Any) -> Any:
    """Fold channel scales applied after conv2d/dense into their weights (type-checked expr).

    Example
    -------
    >>> import numpy as np, kiln
    >>> from kiln import relay
    >>> x, w = relay.var("x", shape=(1, 2)), relay.var("w", shape=(3, 2))
    >>> y = relay.multiply(relay.nn.dense(x, w), relay.const(np.ones(3, "float32")))
    >>> mod = kiln.relay.transform.InferType()(kiln.IRModule.from_expr(y))
    >>> backward_fold_scale_axis(mod["main"]).body.op.name
    'nn.dense'
    """
    return _BackwardFolder(expr).visit(expr)


def forward_fold_scale_axis(expr: Any) -> Any:
    """Fold channel scales applied before conv2d/dense into their weights (type-checked expr).

    Example
    -------
    >>> import numpy as np, kiln
    >>> from kiln import relay
    >>> x, w = relay.var("x", shape=(1, 2)), relay.var("w", shape=(3, 2))
    >>> y = relay.nn.dense(relay.multiply(x, relay.const(np.ones(2, "float32"))), w)
    >>> mod = kiln.relay.transform.InferType()(kiln.IRModule.from_expr(y))
    >>> forward_fold_scale_axis(mod["main"]).body.args[0].name_hint
    'x'
    """
    return _ForwardFolder(expr).visit(expr)


def BackwardFoldScaleAxis():  # noqa: N802 (TVM's name)
    """The pass folding scales that follow conv2d/dense into their weights."""
    return relay_function_pass("BackwardFoldScaleAxis", 3,
                               lambda func, mod, ctx: backward_fold_scale_axis(func),
                               required=("InferType",), needs_types=True)


def ForwardFoldScaleAxis():  # noqa: N802 (TVM's name)
    """The pass folding scales that precede conv2d/dense into their weights."""
    return relay_function_pass("ForwardFoldScaleAxis", 3,
                               lambda func, mod, ctx: forward_fold_scale_axis(func),
                               required=("InferType",), needs_types=True)


def FoldScaleAxis():  # noqa: N802 (TVM's name)
    """Backward folding, forward folding, then FoldConstant (TVM's sequence).

    Example
    -------
    >>> import numpy as np, kiln
    >>> from kiln import relay
    >>> x, w = relay.var("x", shape=(1, 2)), relay.var("w", shape=(3, 2))
    >>> y = relay.multiply(relay.nn.dense(x, w), relay.const(np.full(3, 2.0, "float32")))
    >>> FoldScaleAxis()(kiln.IRModule.from_expr(y))["main"].body.op.name
    'nn.dense'
    """
    from kiln.relay.transform.fold_constant import FoldConstant

    steps = (BackwardFoldScaleAxis(), ForwardFoldScaleAxis(), FoldConstant())

    def run(mod: Any, ctx: Any) -> Any:
        for step in steps:
            mod = step(mod)
        return mod

    return relay_module_pass("FoldScaleAxis", 3, run, required=("InferType",))
