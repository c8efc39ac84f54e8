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


@_register("add")
def _add_grad(orig: Call, grad: Any) -> list:
    x, y = orig.args
    return [_unbroadcast(grad, x), _unbroadcast(grad, y)]


@_register("subtract")
def _subtract_grad(orig: Call, grad: Any) -> list:
    x, y = orig.args
    return [_unbroadcast(grad, x), _unbroadcast(_op.negative(grad), y)]


@_register("multiply")
def _multiply_grad(orig: Call, grad: Any) -> list:
    x, y = orig.args
    return [_unbroadcast(_op.multiply(grad, y), x), _unbroadcast(_op.multiply(grad, x), y)]


@_register("divide")
def _divide_grad(orig: Call, grad: Any) -> list:
    x, y = orig.args
    dy = _op.negative(_op.divide(_op.multiply(grad, orig), y))
    return [_unbroadcast(_op.divide(grad, y), x), _unbroadcast(dy, y)]


@_register("negative")
def _negative_grad(orig: Call, grad: Any) -> list:
    return [_op.negative(grad)]


@_register("exp")
def _exp_grad(orig: Call, grad: Any) -> list:
    return [_op.multiply(grad, orig)]


@_register("log")
def _log_grad(orig: Call, grad: Any) -> list:
    return [_op.divide(grad, orig.args[0])]


@_register("sqrt")
def _sqrt_grad(orig: Call, grad: Any) -> list:
    return [_op.divide(_op.multiply(grad, _scalar_like(0.5, orig)), orig)]


@_register("tanh")
def _tanh_grad(orig: Call, grad: Any) -> list:
    return [_op.multiply(grad, _op.subtract(_scalar_like(1.0, orig),
                                            _op.multiply(orig, orig)))]


@_register("sigmoid")
def _sigmoid_grad(orig: Call, grad: Any) -> list:
    return [_op.multiply(grad, _op.multiply(orig, _op.subtract(_scalar_like(1.0, orig),
                                                               orig)))]


@_register("nn.relu")
def _relu_grad(orig: Call, grad: Any) -> list:
    x = orig.args[0]
    positive = _op.cast_like(_op.greater(x, _op.zeros_like(x)), x)
    return [_op.multiply(grad, positive)]


def _reduced_axes(orig: Call) -> list[int]:
    ndim = _ndim(orig.args[0])
    axis = orig.attrs.axis
    axes = list(range(ndim)) if axis is None else [int(a) % ndim for a in axis]
    if orig.attrs.exclude:
        axes = [a for a in range(ndim) if a not in axes]
    return axes


def _spread_back(orig: Call, grad: Any) -> Any:
    """The adjoint of a reduction's result broadcast back over the reduced axes."""
    data = orig.args[0]
    if not orig.attrs.keepdims:
        shape = list(type_of(data).concrete_shape)
        for axis in _reduced_axes(orig):
            shape[axis] = 1
        grad = _op.reshape(grad, shape)
    return _op.broadcast_to_like(grad, data)


@_register("sum")
def _sum_grad(orig: Call, grad: Any) -> list:
    return [_spread_back(orig, grad)]


@_register("mean")
def _mean_grad(orig: Call, grad: Any) -> list:
    shape = type_of(orig.args[0]).concrete_shape
    count = int(np.prod([shape[a] for a in _reduced_axes(orig)], dtype=np.int64))
    return [_op.divide(_spread_back(orig, grad), _scalar_like(float(count), orig))]


def _conv2d_geometry(orig: Call) -> tuple:
    attrs = orig.attrs
    if int(attrs.groups) != 1 or str(attrs.data_layout) != "NCHW" or \
            str(attrs.kernel_layout) != "OIHW" or any(int(d) != 1 for d in attrs.dilation):
        raise TVMError("gradient: nn.conv2d is differentiable for groups=1, dilation 1 and "
                       "NCHW/OIHW layouts only")
    strides = [int(v) for v in attrs.strides]
    padding = [int(v) for v in attrs.padding]  # top, left, bottom, right
    return strides, padding


@_register("nn.conv2d")
def _conv2d_grad(orig: Call, grad: Any) -> list:
    data, weight = orig.args
    strides, padding = _conv2d_geometry(orig)
    n, c, height, width = type_of(data).concrete_shape
    out_c, _, kh, kw = type_of(weight).concrete_shape
    oh, ow = type_of(orig).concrete_shape[2:]
    # d data: the transposed convolution, padded at the end to reach the input's size
    natural = [(oh - 1) * strides[0] - padding[0] - padding[2] + kh,
               (ow - 1) * strides[1] - padding[1] - padding[3] + kw]
    d_data = _op.nn.conv2d_transpose(grad, weight, strides=strides, padding=padding,
                                     channels=c, kernel_size=(kh, kw),
                                     output_padding=(height - natural[0], width - natural[1]))
    # d weight: correlate the input with the output adjoint (batch and channels swapped),
    # the forward stride becoming the dilation; cut the extra rows a stride can leave
    swapped = _op.nn.conv2d(_op.transpose(data, (1, 0, 2, 3)), _op.transpose(grad, (1, 0, 2, 3)),
                            padding=padding, dilation=strides)
    d_weight = _op.strided_slice(_op.transpose(swapped, (1, 0, 2, 3)), [0, 0, 0, 0],
                                 [out_c, c, kh, kw])
    return [d_data, d_weight]


@_register("reshape", "squeeze", "expand_dims", "contrib_reverse_reshape", "nn.batch_flatten")
def _reshape_grad(orig: Call, grad: Any) -> list:
    return [_op.reshape_like(grad, orig.args[0])]


@_register("transpose")
def _transpose_grad(orig: Call, grad: Any) -> list:
    ndim = _ndim(orig.args[0])
    axes = orig.attrs.axes
    axes = list(range(ndim - 1, -1, -1)) if axes is None else [int(a) % ndim for a in axes]
    return [_op.transpose(grad, [int(i) for i in np.argsort(axes)])]


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


@_register("zeros_like", "ones_like")
def _constant_like_grad(orig: Call, grad: Any) -> list:
    return [_op.zeros_like(orig.args[0])]
