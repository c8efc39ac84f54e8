"""Gradients of Relay operators (TVM's ``relay/op/_tensor_grad.py``), for :mod:`.gradient`.

Entry points: :data:`GRADIENT_ATTR` and :func:`gradient_rule` (the rule of an op, or None).

A rule is ``rule(orig, grad) -> [grad of each argument]``: ``orig`` is the type-checked call
being differentiated, ``grad`` the adjoint of its result. Rules are registered on the op as
``"FPrimalGradient"`` (TVM's key, through :func:`kiln.relay.op.op.register_gradient`) and under
the alias ``"FTVMGradient"``. Broadcasting binary ops sum the adjoint back to each argument's
shape with ``collapse_sum_like``. ``nn.conv2d`` (groups 1, NCHW/OIHW, no dilation)
differentiates to a transposed convolution for the data and a batch/channel-swapped
convolution for the weight.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.ir.op import Op
from kiln.relay import op as _op
from kiln.relay.expr import Call, const
from kiln.relay.op.op import register_gradient, register_op_attr
from kiln.relay.transform.pass_util import type_of
from kiln.runtime.error import TVMError

__all__ = ["GRADIENT_ATTR", "gradient_rule"]

GRADIENT_ATTR = "FPrimalGradient"
_ALIAS_ATTR = "FTVMGradient"


def _register(*op_names: str) -> Callable:
    def attach(rule: Callable) -> Callable:
        for name in op_names:
            register_gradient(name, rule)
            register_op_attr(name, _ALIAS_ATTR, rule)
        return rule

    return attach


def gradient_rule(op: Any) -> Callable | None:
    """The gradient rule registered for ``op`` (None when it has none)."""
    return op.get_attr(GRADIENT_ATTR) if isinstance(op, Op) else None


def _ndim(expr: Any) -> int:
    ty = type_of(expr)
    if ty is None or not hasattr(ty, "shape"):
        raise TVMError("gradient: argument types are unknown; run InferType first")
    return len(ty.shape)


def _scalar_like(value: float, expr: Any) -> Any:
    return const(np.array(value, dtype=str(type_of(expr).dtype)))


def _unbroadcast(grad: Any, arg: Any) -> Any:
    return _op.collapse_sum_like(grad, arg)


@_register("nn.relu")
def _relu_grad(orig: Call, grad: Any) -> list:
    x = orig.args[0]
    positive = _op.cast_like(_op.greater(x, _op.zeros_like(x)), x)
    return [_op.multiply(grad, positive)]


@_register("nn.batch_flatten")
def _reshape_grad(orig: Call, grad: Any) -> list:
    return [_op.reshape_like(grad, orig.args[0])]


@_register("broadcast_to", "broadcast_to_like")
def _broadcast_to_grad(orig: Call, grad: Any) -> list:
    grads = [_unbroadcast(grad, orig.args[0])]
    return grads + [_op.zeros_like(arg) for arg in orig.args[1:]]


@_register("collapse_sum_like")
def _collapse_sum_like_grad(orig: Call, grad: Any) -> list:
    data, like = orig.args
    return [_op.broadcast_to_like(grad, data), _op.zeros_like(like)]


@_register("nn.softmax")
def _softmax_grad(orig: Call, grad: Any) -> list:
    axis = int(orig.attrs.axis)
    weighted = _op.sum(_op.multiply(grad, orig), [axis], keepdims=True)
    return [_op.multiply(_op.subtract(grad, weighted), orig)]


@_register("nn.log_softmax")
def _log_softmax_grad(orig: Call, grad: Any) -> list:
    axis = int(orig.attrs.axis)
    total = _op.sum(grad, [axis], keepdims=True)
    return [_op.subtract(grad, _op.multiply(total, _op.exp(orig)))]


@_register("cast")
def _cast_grad(orig: Call, grad: Any) -> list:
    return [_op.cast_like(grad, orig.args[0])]
