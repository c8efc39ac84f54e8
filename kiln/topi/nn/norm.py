"""Normalization computes (TVM's ``topi.nn`` norms), inference form.

Entry points: :func:`batch_norm` (returns ``[out, moving_mean, moving_var]`` as Relay does),
:func:`layer_norm`, :func:`group_norm`, :func:`instance_norm`, :func:`l2_normalize`,
:func:`lrn`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln import te
from kiln.tir import op as _op
from kiln.topi import tag
from kiln.topi.utils import get_const_tuple, normalize_axes, prod


def batch_norm(data: te.Tensor, gamma: te.Tensor, beta: te.Tensor, moving_mean: te.Tensor,
               moving_var: te.Tensor, axis: int = 1, epsilon: float = 1e-5,
               center: bool = True, scale: bool = True) -> list[te.Tensor]:
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` with statistics along ``axis``."""
    axis = normalize_axes(axis, data.ndim)[0]
    eps = _op.const(epsilon, data.dtype)

    def body(*i):
        c = i[axis]
        out = (data(*i) - moving_mean(c)) / _op.sqrt(moving_var(c) + eps)
        if scale:
            out = out * gamma(c)
        if center:
            out = out + beta(c)
        return out

    out = te.compute(data.shape, body, name="T_batch_norm", tag=tag.BROADCAST)
    mean = te.compute(moving_mean.shape, lambda c: moving_mean(c), name="T_bn_mean",
                      tag=tag.INJECTIVE)
    var = te.compute(moving_var.shape, lambda c: moving_var(c), name="T_bn_var",
                     tag=tag.INJECTIVE)
    return [out, mean, var]


def _normalize(data: te.Tensor, axes: list[int], epsilon: float, name: str):
    """``(x - mean) / sqrt(var + eps)`` with statistics over ``axes`` (kept as size 1)."""
    from kiln.topi.reduction import sum as reduce_sum

    count = _op.const(float(prod([get_const_tuple(data.shape)[a] for a in axes])), data.dtype)
    total = reduce_sum(data, axes, keepdims=True)

    def stat_index(i):
        return [0 if k in axes else v for k, v in enumerate(i)]

    mean = te.compute(total.shape, lambda *i: total(*i) / count, name=name + "_mean",
                      tag=tag.ELEMWISE)
    sq = te.compute(data.shape, lambda *i: (data(*i) - mean(*stat_index(i))) *
                    (data(*i) - mean(*stat_index(i))), name=name + "_sq", tag=tag.BROADCAST)
    var_sum = reduce_sum(sq, axes, keepdims=True)
    eps = _op.const(epsilon, data.dtype)
    return te.compute(data.shape, lambda *i: (data(*i) - mean(*stat_index(i))) *
                      _op.rsqrt(var_sum(*stat_index(i)) / count + eps),
                      name=name + "_norm", tag=tag.BROADCAST)


def _affine(x: te.Tensor, gamma: te.Tensor, beta: te.Tensor, axes: Sequence[int], center: bool,
            scale: bool, name: str) -> te.Tensor:
    def body(*i):
        idx = [i[a] for a in axes]
        out = x(*i)
        if scale:
            out = out * gamma(*idx)
        if center:
            out = out + beta(*idx)
        return out

    return te.compute(x.shape, body, name=name, tag=tag.BROADCAST)


def layer_norm(data: te.Tensor, gamma: te.Tensor, beta: te.Tensor, axis: Any = -1,
               epsilon: float = 1e-5, center: bool = True, scale: bool = True) -> te.Tensor:
    """Normalize over ``axis`` (int or ints); ``gamma``/``beta`` span those axes."""
    axes = normalize_axes(axis, data.ndim)
    return _affine(_normalize(data, axes, epsilon, "T_layer_norm"), gamma, beta, axes, center,
                   scale, "T_layer_norm")


def instance_norm(data: te.Tensor, gamma: te.Tensor, beta: te.Tensor, axis: int = 1,
                  epsilon: float = 1e-5, center: bool = True, scale: bool = True):
    """Normalize each (batch, channel) over the remaining axes."""
    axis = normalize_axes(axis, data.ndim)[0]
    axes = [k for k in range(1, data.ndim) if k != axis]
    return _affine(_normalize(data, axes, epsilon, "T_instance_norm"), gamma, beta, [axis],
                   center, scale, "T_instance_norm")


def group_norm(data: te.Tensor, gamma: te.Tensor, beta: te.Tensor, num_groups: int,
               axis: int = 1, epsilon: float = 1e-5, center: bool = True,
               scale: bool = True) -> te.Tensor:
    """Normalize channel groups (of ``channels / num_groups``) with the remaining axes."""
    from kiln.topi.transform import reshape

    axis = normalize_axes(axis, data.ndim)[0]
    shape = list(get_const_tuple(data.shape))
    grouped = shape[:axis] + [num_groups, shape[axis] // num_groups] + shape[axis + 1:]
    x = reshape(data, grouped)
    axes = [k for k in range(1, len(grouped)) if k != axis]
    normed = reshape(_normalize(x, axes, epsilon, "T_group_norm"), shape)
    return _affine(normed, gamma, beta, [axis], center, scale, "T_group_norm")


def l2_normalize(data: te.Tensor, eps: float, axis: Any = None) -> te.Tensor:
    """``x / sqrt(max(sum(x^2 over axis), eps))``."""
    from kiln.topi.reduction import sum as reduce_sum

    axes = normalize_axes(axis, data.ndim)
    sq = te.compute(data.shape, lambda *i: data(*i) * data(*i), name="T_l2_sq",
                    tag=tag.ELEMWISE)
    total = reduce_sum(sq, axes, keepdims=True)
    floor = _op.const(eps, data.dtype)
    return te.compute(data.shape, lambda *i: data(*i) / _op.sqrt(_op.max(
        total(*[0 if k in axes else v for k, v in enumerate(i)]), floor)),
        name="T_l2_normalize", tag=tag.BROADCAST)


def lrn(data: te.Tensor, size: int, axis: int = 1, alpha: float = 1e-4, beta: float = 0.75,
        bias: float = 2.0) -> te.Tensor:
    """Local response normalization across ``size`` neighbours along ``axis``."""
    from kiln.topi.nn.pad import pad

    axis = normalize_axes(axis, data.ndim)[0]
    half = size // 2
    before = [half if k == axis else 0 for k in range(data.ndim)]
    after = [size - 1 - half if k == axis else 0 for k in range(data.ndim)]
    padded = pad(data, before, after, name="T_lrn_pad")
    r = te.reduce_axis((0, size), name="r")

    def window(*i):
        src = list(i)
        src[axis] = i[axis] + r.var
        v = padded(*src)
        return te.sum(v * v, axis=r)

    sqr_sum = te.compute(data.shape, window, name="T_lrn_sqr_sum", tag="lrn_sum")
    a = _op.const(alpha / size, data.dtype)
    return te.compute(data.shape, lambda *i: data(*i) / _op.power(
        _op.const(bias, data.dtype) + a * sqr_sum(*i), _op.const(beta, data.dtype)),
        name="T_lrn", tag=tag.ELEMWISE)
