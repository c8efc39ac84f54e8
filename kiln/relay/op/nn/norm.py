"""Normalization layers: ``batch_norm``, ``instance_norm``, ``layer_norm``, ``group_norm``,
``l2_normalize``, ``lrn``.

Entry points (TVM's ``relay.nn`` signatures): :func:`batch_norm`, :func:`instance_norm`,
:func:`layer_norm`, :func:`group_norm`, :func:`l2_normalize`, :func:`lrn`. Per op this module
registers its type relation and pattern kind, TE compute (the opaque schedule; x86 has its own
in :mod:`kiln.relay.op.strategy.x86`), reference NumPy rule and VM shape function.
``SimplifyInference`` rewrites ``batch_norm`` (and the other norms) into elementwise ops before
lowering, as TVM does.

Example
-------
>>> from kiln import relay
>>> x = relay.var("x", shape=(1, 16, 8, 8))
>>> out = relay.nn.batch_norm(x, *[relay.var(n, shape=(16,)) for n in "gbmv"])
>>> len(out)
3
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.nn.nn import axis_identity_rel, channel_vectors, check_channel_vector
from kiln.relay.op.op import (
    OPAQUE,
    OUT_ELEMWISE_FUSABLE,
    call,
    define_op,
    register_arg_types,
    register_compute,
    register_opaque_schedule,
    register_reference,
    register_shape_func,
)
from kiln.relay.op.rule_util import (
    optional_list,
    reference_dtype,
    same_shape_as_input,
)
from kiln.relay.op.type_relations import (
    TupleType,
    dims,
    fail,
    is_static,
    normalize_axis,
    tensor_arg,
    tensor_type,
)

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.

__all__ = ["batch_norm", "instance_norm", "layer_norm", "group_norm", "l2_normalize", "lrn"]


def _l2_normalize_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    for a in attrs.axis or ():
        normalize_axis(a, len(data.shape), op_name)
    return data


def _norm_params(types, attrs, op_name, channel_count):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    axis = normalize_axis(attrs.axis, len(d), op_name)
    extent = d[axis] if channel_count is None else channel_count(d, axis)
    for index, what in ((1, "gamma"), (2, "beta")):
        check_channel_vector(types, index, extent, op_name, what)
    return data, d, axis


def _batch_norm_rel(types, attrs, op_name):
    data, d, axis = _norm_params(types, attrs, op_name, None)
    for index, what in ((3, "moving_mean"), (4, "moving_var")):
        check_channel_vector(types, index, d[axis], op_name, what)
    vec = tensor_type([d[axis]], data.dtype)
    return TupleType([data, vec, vec])


def _norm_rel(types, attrs, op_name):
    return _norm_params(types, attrs, op_name, None)[0]


def _group_norm_rel(types, attrs, op_name):
    data, d, axis = _norm_params(types, attrs, op_name, None)
    groups = int(attrs.num_groups)
    if groups <= 0 or (is_static(d[axis]) and d[axis] % groups):
        fail(f"{op_name}: {d[axis]} channels cannot be split into {groups} groups")
    return data


# TVM registers no pattern for lrn and the norms; FuseOps treats them as opaque.
define_op("nn.lrn", axis_identity_rel, OPAQUE, 1, A.LRNAttrs, "local response norm", 2)
define_op("nn.l2_normalize", _l2_normalize_rel, OPAQUE, 1, A.L2NormalizeAttrs,
          "l2 normalize", 2)
define_op("nn.batch_norm", _batch_norm_rel, OUT_ELEMWISE_FUSABLE, 5, A.BatchNormAttrs,
          "batch normalization", 1)
define_op("nn.instance_norm", _norm_rel, OPAQUE, 3, A.InstanceNormAttrs, "instance norm", 1)
define_op("nn.layer_norm", _norm_rel, OPAQUE, 3, A.LayerNormAttrs, "layer norm", 1)
define_op("nn.group_norm", _group_norm_rel, OPAQUE, 3, A.GroupNormAttrs, "group norm", 1)

# Unannotated per-channel parameters take their shape from the data (TVM's relations do too).
register_arg_types("nn.batch_norm", channel_vectors(1, 2, 3, 4))
for _name in ("nn.instance_norm", "nn.layer_norm", "nn.group_norm"):
    register_arg_types(_name, channel_vectors(1, 2))


def lrn(data: Any, size: int = 5, axis: int = 1, bias: float = 2, alpha: float = 0.00001,
        beta: float = 0.75) -> Any:
    """Local response normalization across ``size`` neighbouring channels."""
    return call("nn.lrn", [data], A.LRNAttrs(size=int(size), axis=int(axis), bias=float(bias),
                                             alpha=float(alpha), beta=float(beta)))


def l2_normalize(data: Any, eps: float, axis: Any = None) -> Any:
    """``data / sqrt(max(sum(data**2, axis), eps))``."""
    axis = None if axis is None else tuple(int(a) for a in axis)
    return call("nn.l2_normalize", [data], A.L2NormalizeAttrs(eps=float(eps), axis=axis))


def batch_norm(data: Any, gamma: Any, beta: Any, moving_mean: Any, moving_var: Any,
               axis: int = 1, epsilon: float = 1e-5, center: bool = True,
               scale: bool = True) -> Any:
    """Batch normalization: a TupleWrapper (normalized data, mean, var)."""
    from kiln.relay.expr import TupleWrapper

    out = call("nn.batch_norm", [data, gamma, beta, moving_mean, moving_var],
               A.BatchNormAttrs(axis=int(axis), epsilon=float(epsilon), center=bool(center),
                                scale=bool(scale)))
    return TupleWrapper(out, 3)


def instance_norm(data: Any, gamma: Any, beta: Any, axis: int = 1, epsilon: float = 1e-5,
                  center: bool = True, scale: bool = True) -> Any:
    """Normalize each (sample, channel) plane."""
    return call("nn.instance_norm", [data, gamma, beta], A.InstanceNormAttrs(
        axis=int(axis), epsilon=float(epsilon), center=bool(center), scale=bool(scale)))


def layer_norm(data: Any, gamma: Any, beta: Any, axis: int = -1, epsilon: float = 1e-5,
               center: bool = True, scale: bool = True) -> Any:
    """Normalize along ``axis`` with per-feature ``gamma``/``beta``."""
    return call("nn.layer_norm", [data, gamma, beta], A.LayerNormAttrs(
        axis=int(axis), epsilon=float(epsilon), center=bool(center), scale=bool(scale)))


def group_norm(data: Any, gamma: Any, beta: Any, num_groups: int, axis: int = 1,
               epsilon: float = 1e-5, center: bool = True, scale: bool = True) -> Any:
    """Normalize over groups of ``num_groups`` channel blocks."""
    return call("nn.group_norm", [data, gamma, beta], A.GroupNormAttrs(
        num_groups=int(num_groups), axis=int(axis), epsilon=float(epsilon),
        center=bool(center), scale=bool(scale)))


# ---- computes (TOPI), all opaque (x86 schedules them in strategy/x86.py) --------------------
@register_compute("nn.batch_norm")
def compute_batch_norm(attrs, inputs, out_type):
    """``topi.nn.batch_norm``: the normalized data, the mean and the variance."""
    from kiln.topi import nn

    return nn.batch_norm(*inputs, attrs.axis, attrs.epsilon, attrs.center, attrs.scale)


@register_compute("nn.layer_norm")
def compute_layer_norm(attrs, inputs, out_type):
    """``topi.nn.layer_norm``."""
    from kiln.topi import nn

    return [nn.layer_norm(*inputs, attrs.axis, attrs.epsilon, attrs.center, attrs.scale)]


@register_compute("nn.instance_norm")
def compute_instance_norm(attrs, inputs, out_type):
    """``topi.nn.instance_norm``."""
    from kiln.topi import nn

    return [nn.instance_norm(*inputs, attrs.axis, attrs.epsilon, attrs.center, attrs.scale)]


@register_compute("nn.group_norm")
def compute_group_norm(attrs, inputs, out_type):
    """``topi.nn.group_norm``."""
    from kiln.topi import nn

    return [nn.group_norm(*inputs, attrs.num_groups, attrs.axis, attrs.epsilon, attrs.center,
                          attrs.scale)]


@register_compute("nn.l2_normalize")
def compute_l2_normalize(attrs, inputs, out_type):
    """``topi.nn.l2_normalize``."""
    from kiln.topi import nn

    return [nn.l2_normalize(inputs[0], attrs.eps, optional_list(attrs.axis))]


@register_compute("nn.lrn")
def compute_lrn(attrs, inputs, out_type):
    """``topi.nn.lrn``."""
    from kiln.topi import nn

    return [nn.lrn(inputs[0], attrs.size, attrs.axis, attrs.alpha, attrs.beta, attrs.bias)]


for _name in ("nn.batch_norm", "nn.layer_norm", "nn.instance_norm", "nn.group_norm",
              "nn.l2_normalize", "nn.lrn"):
    register_opaque_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
def _channel_shape(ndim: int, axis: int) -> list[int]:
    shape = [1] * ndim
    shape[axis % ndim] = -1
    return shape


@register_reference("nn.batch_norm")
def reference_batch_norm(attrs, args, out_type):
    """``x * gamma / sqrt(var + eps) + (beta - mean * scale)``, and the mean and variance."""
    x, gamma, beta, mean, var = args
    shape = _channel_shape(x.ndim, attrs.axis)
    scale = (gamma if attrs.scale else np.ones_like(gamma)) / np.sqrt(var + attrs.epsilon)
    shift = (beta if attrs.center else 0) - mean * scale
    out = (x * scale.reshape(shape) + np.reshape(shift, shape)).astype(x.dtype)
    return out, mean.copy(), var.copy()


def _normalize(x, axes, gamma, beta, attrs, channel_axis):
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` in float64, then gamma and beta."""
    xf = x.astype(np.float64)
    mean = xf.mean(axis=axes, keepdims=True)
    var = xf.var(axis=axes, keepdims=True)
    out = (xf - mean) / np.sqrt(var + attrs.epsilon)
    shape = _channel_shape(x.ndim, channel_axis)
    if attrs.scale:
        out = out * gamma.reshape(shape)
    if attrs.center:
        out = out + beta.reshape(shape)
    return out.astype(x.dtype)


@register_reference("nn.layer_norm")
def reference_layer_norm(attrs, args, out_type):
    """Statistics along the attrs' axis."""
    x, gamma, beta = args
    return _normalize(x, (attrs.axis % x.ndim,), gamma, beta, attrs, attrs.axis)


@register_reference("nn.instance_norm")
def reference_instance_norm(attrs, args, out_type):
    """Statistics over every axis but the batch and the channel."""
    x, gamma, beta = args
    axis = attrs.axis % x.ndim
    axes = tuple(a for a in range(1, x.ndim) if a != axis)
    return _normalize(x, axes, gamma, beta, attrs, axis)


@register_reference("nn.group_norm")
def reference_group_norm(attrs, args, out_type):
    """Statistics per group of channels (and the axes after them)."""
    x, gamma, beta = args
    axis = attrs.axis % x.ndim
    groups = int(attrs.num_groups)
    c = x.shape[axis]
    shape = list(x.shape[:axis]) + [groups, c // groups] + list(x.shape[axis + 1:])
    xg = x.astype(np.float64).reshape(shape)
    axes = tuple(a for a in range(axis + 1, len(shape)))
    mean = xg.mean(axis=axes, keepdims=True)
    var = xg.var(axis=axes, keepdims=True)
    out = ((xg - mean) / np.sqrt(var + attrs.epsilon)).reshape(x.shape)
    cshape = _channel_shape(x.ndim, axis)
    if attrs.scale:
        out = out * gamma.reshape(cshape)
    if attrs.center:
        out = out + beta.reshape(cshape)
    return out.astype(x.dtype)


@register_reference("nn.l2_normalize")
def reference_l2_normalize(attrs, args, out_type):
    """``x / sqrt(max(sum(x ** 2, axis), eps))``."""
    x = args[0]
    axes = tuple(range(x.ndim)) if attrs.axis is None else \
        tuple(int(a) % x.ndim for a in attrs.axis)
    sq = np.sum(x.astype(np.float64) ** 2, axis=axes, keepdims=True)
    return (x / np.sqrt(np.maximum(sq, attrs.eps))).astype(x.dtype)


@register_reference("nn.lrn")
def reference_lrn(attrs, args, out_type):
    """``x / (bias + alpha * window_sum(x ** 2) / size) ** beta`` across channels."""
    from numpy.lib.stride_tricks import sliding_window_view

    x = args[0].astype(np.float64)
    axis, size = attrs.axis % x.ndim, int(attrs.size)
    sq = np.moveaxis(x ** 2, axis, -1)
    half = size // 2
    padded = np.pad(sq, [(0, 0)] * (sq.ndim - 1) + [(half, size - 1 - half)])
    window = sliding_window_view(padded, size, axis=-1).sum(axis=-1)
    window = np.moveaxis(window, -1, axis)
    out = x / (attrs.bias + attrs.alpha * window / size) ** attrs.beta
    return out.astype(reference_dtype(out_type))


# ---- VM shape functions ---------------------------------------------------------------------
for _name in ("nn.layer_norm", "nn.instance_norm", "nn.group_norm", "nn.lrn",
              "nn.l2_normalize"):
    register_shape_func(_name, False, same_shape_as_input)


@register_shape_func("nn.batch_norm", False)
def shape_func_batch_norm(attrs, in_dims, out_types):
    """The data's shape, and the moving mean's and variance's."""
    return [list(in_dims[0]), list(in_dims[3]), list(in_dims[4])][: len(out_types)]
