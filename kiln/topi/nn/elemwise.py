"""Activation and bias computes (TVM's ``topi.nn.elemwise``).

Entry points: :func:`relu`, :func:`leaky_relu`, :func:`prelu`, :func:`bias_add`.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.tir import op as _op
from kiln.topi import tag
from kiln.topi.utils import normalize_axes


def relu(x: te.Tensor) -> te.Tensor:
    """``max(x, 0)``."""
    zero = _op.const(0, x.dtype)
    return te.compute(x.shape, lambda *i: _op.max(x(*i), zero), name="T_relu",
                      tag=tag.ELEMWISE)


def leaky_relu(x: te.Tensor, alpha: float) -> te.Tensor:
    """``x`` where positive, else ``alpha * x``."""
    a = _op.const(alpha, x.dtype)

    def body(*i):
        v = x(*i)
        return _op.if_then_else(v > _op.const(0, x.dtype), v, v * a)

    return te.compute(x.shape, body, name="T_leaky_relu", tag=tag.ELEMWISE)


def prelu(x: te.Tensor, slope: te.Tensor, axis: int = 1) -> te.Tensor:
    """``x`` where positive, else ``slope[channel] * x``, channels along ``axis``."""
    axis = normalize_axes(axis, x.ndim)[0]

    def body(*i):
        v = x(*i)
        return _op.if_then_else(v > _op.const(0, x.dtype), v, v * slope(i[axis]))

    return te.compute(x.shape, body, name="T_prelu", tag=tag.BROADCAST)


def bias_add(x: te.Tensor, bias: te.Tensor, axis: int = 1) -> te.Tensor:
    """``x + bias`` with ``bias`` along ``axis``."""
    axis = normalize_axes(axis, x.ndim)[0]
    return te.compute(x.shape, lambda *i: x(*i) + bias(i[axis]), name="T_bias_add",
                      tag=tag.BROADCAST)


def batch_flatten(x: te.Tensor) -> te.Tensor:
    """``x`` reshaped to ``(batch, everything else)``."""
    from kiln.topi.transform import reshape
    from kiln.topi.utils import get_const_tuple, prod

    shape = get_const_tuple(x.shape)
    return reshape(x, [shape[0], prod(shape[1:])])


_ = Any
