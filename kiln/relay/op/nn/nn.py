"""Neural-network layers other than convolution and pooling.

Entry points (TVM's ``relay.nn`` signatures): :func:`bias_add`, :func:`relu`,
:func:`leaky_relu`, :func:`prelu`, :func:`softmax`, :func:`fast_softmax`, :func:`log_softmax`,
:func:`batch_flatten`, :func:`pad`, :func:`mirror_pad`, :func:`lrn`, :func:`l2_normalize`,
:func:`dropout`, :func:`dropout_raw`, :func:`batch_norm`, :func:`instance_norm`,
:func:`layer_norm`, :func:`group_norm`, :func:`upsampling`, :func:`depth_to_space`,
:func:`space_to_depth`.

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

from kiln.relay.op import op_attrs as A
from kiln.relay.op.nn.pool import spatial_axes
from kiln.relay.op.op import (
    BROADCAST,
    ELEMWISE,
    INJECTIVE,
    OPAQUE,
    OUT_ELEMWISE_FUSABLE,
    as_expr,
    call,
    constant_value,
    define_op,
    is_expr,
    register_arg_types,
)
from kiln.relay.op.type_relations import (
    TupleType,
    dim_op,
    dims,
    dims_equal,
    fail,
    identity_rel,
    is_any,
    is_static,
    normalize_axis,
    shape_str,
    tensor_arg,
    tensor_type,
)


def _check_vector(types, index, extent, op_name, what):
    """``types[index]`` must be a vector of ``extent`` elements of the data's dtype."""
    vec = tensor_arg(types, index, op_name)
    v = dims(vec)
    if len(v) != 1 or not (is_any(v[0]) or is_any(extent) or dims_equal(v[0], extent)):
        fail(f"{op_name}: {what} must have shape ({extent},), got {shape_str(v)}")
    dtype = str(types[0].dtype)
    if str(vec.dtype) != dtype:
        fail(f"{op_name}: {what} must have dtype {dtype}, got {vec.dtype}")


def _bias_add_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    axis = normalize_axis(attrs.axis, len(d), op_name)
    _check_vector(types, 1, d[axis], op_name, "bias")
    return data


def _prelu_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    axis = normalize_axis(attrs.axis, len(d), op_name)
    _check_vector(types, 1, d[axis], op_name, "alpha")
    return data


def _channel_vectors(*indices: int):
    """An ``FInferArgTypes`` rule: arguments ``indices`` are vectors over the data's ``axis``
    (a bias, prelu's alpha, a norm's gamma/beta/mean/var) of the data's dtype."""

    def rule(types, attrs, op_name):
        if types[0] is None:
            return {}
        data = tensor_arg(types, 0, op_name)
        d = dims(data)
        vec = tensor_type([d[normalize_axis(attrs.axis, len(d), op_name)]], data.dtype)
        return {i: vec for i in indices if types[i] is None}

    rule.__name__ = f"channel_vectors{indices}"
    return rule


def _axis_identity_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    normalize_axis(attrs.axis, len(data.shape), op_name)
    return data


def _l2_normalize_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    for a in attrs.axis or ():
        normalize_axis(a, len(data.shape), op_name)
    return data


def _batch_flatten_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    if not d:
        fail(f"{op_name}: cannot flatten a scalar")
    rest: Any = 1
    for x in d[1:]:
        rest = dim_op(lambda a, b: a * b, rest, x)
    return tensor_type([d[0], rest], data.dtype)


_PAD_MODES = ("constant", "edge", "reflect")


def _padded_shape(data, pad_width, op_name, allow_negative):
    d = dims(data)
    width = [[int(w) for w in p] for p in pad_width]
    if len(width) != len(d) or any(len(p) != 2 for p in width):
        fail(f"{op_name}: pad_width must hold one (before, after) pair per axis of "
             f"{shape_str(d)}, got {width}")
    out = []
    for x, (before, after) in zip(d, width):
        if not allow_negative and (before < 0 or after < 0):
            fail(f"{op_name}: negative padding {width}")
        extent = dim_op(lambda v, b=before, a=after: v + b + a, x)
        if is_static(extent) and extent < 0:  # nn.pad crops with negative widths, down to 0
            fail(f"{op_name}: padding {width} leaves a negative extent for {shape_str(d)}")
        out.append(extent)
    return tensor_type(out, data.dtype)


def _pad_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    if attrs.pad_mode not in _PAD_MODES:
        fail(f"{op_name}: pad_mode must be one of {_PAD_MODES}, got {attrs.pad_mode!r}")
    if tensor_arg(types, 1, op_name).shape:
        fail(f"{op_name}: pad_value must be a scalar")
    return _padded_shape(data, attrs.pad_width, op_name, True)


def _mirror_pad_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    if attrs.mode not in ("SYMMETRIC", "REFLECT"):
        fail(f"{op_name}: mode must be SYMMETRIC or REFLECT, got {attrs.mode!r}")
    return _padded_shape(data, attrs.pad_width, op_name, False)


def _dropout_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    return TupleType([data, tensor_type(dims(data), data.dtype)])


def _norm_params(types, attrs, op_name, channel_count):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    axis = normalize_axis(attrs.axis, len(d), op_name)
    extent = d[axis] if channel_count is None else channel_count(d, axis)
    for index, what in ((1, "gamma"), (2, "beta")):
        _check_vector(types, index, extent, op_name, what)
    return data, d, axis


def _batch_norm_rel(types, attrs, op_name):
    data, d, axis = _norm_params(types, attrs, op_name, None)
    for index, what in ((3, "moving_mean"), (4, "moving_var")):
        _check_vector(types, index, d[axis], op_name, what)
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


_UPSAMPLING_METHODS = ("nearest_neighbor", "bilinear", "bicubic")


def upsampling_rel(types, attrs, op_name):
    """The type relation of nn.upsampling (H and W scaled by the attrs)."""
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    if attrs.method not in _UPSAMPLING_METHODS:
        fail(f"{op_name}: method must be one of {_UPSAMPLING_METHODS}, got {attrs.method!r}")
    h, w = spatial_axes(attrs.layout, "HW", len(d), op_name)
    if len(types) > 1:  # dyn.nn.upsampling: scales are tensors
        from kiln.relay.op.type_relations import Any as DynDim

        d[h], d[w] = DynDim(), DynDim()
    else:
        d[h] = dim_op(lambda x: round(x * float(attrs.scale_h)), d[h])
        d[w] = dim_op(lambda x: round(x * float(attrs.scale_w)), d[w])
    return tensor_type(d, data.dtype)


def _subpixel_axes(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    b = int(attrs.block_size)
    if b <= 0:
        fail(f"{op_name}: block_size must be positive, got {b}")
    c = spatial_axes(attrs.layout, "C", len(d), op_name)[0]
    h, w = spatial_axes(attrs.layout, "HW", len(d), op_name)
    return data, d, b, c, h, w


def _depth_to_space_rel(types, attrs, op_name):
    data, d, b, c, h, w = _subpixel_axes(types, attrs, op_name)
    if attrs.mode not in ("DCR", "CRD"):
        fail(f"{op_name}: mode must be DCR or CRD, got {attrs.mode!r}")
    if is_static(d[c]) and d[c] % (b * b):
        fail(f"{op_name}: {d[c]} channels are not divisible by block_size^2 = {b * b}")
    d[c] = dim_op(lambda x: x // (b * b), d[c])
    d[h], d[w] = dim_op(lambda x: x * b, d[h]), dim_op(lambda x: x * b, d[w])
    return tensor_type(d, data.dtype)


def _space_to_depth_rel(types, attrs, op_name):
    data, d, b, c, h, w = _subpixel_axes(types, attrs, op_name)
    for axis in (h, w):
        if is_static(d[axis]) and d[axis] % b:
            fail(f"{op_name}: spatial extent {d[axis]} is not divisible by {b}")
    d[c] = dim_op(lambda x: x * b * b, d[c])
    d[h], d[w] = dim_op(lambda x: x // b, d[h]), dim_op(lambda x: x // b, d[w])
    return tensor_type(d, data.dtype)


define_op("nn.bias_add", _bias_add_rel, BROADCAST, 2, A.BiasAddAttrs, "add a bias vector", 1)
define_op("nn.relu", identity_rel, ELEMWISE, 1, None, "max(x, 0)", 1)
define_op("nn.leaky_relu", identity_rel, ELEMWISE, 1, A.LeakyReluAttrs, "leaky relu", 3)
define_op("nn.prelu", _prelu_rel, BROADCAST, 2, A.PReluAttrs, "parametric relu", 3)
for _name in ("nn.softmax", "nn.fast_softmax", "nn.log_softmax"):
    define_op(_name, _axis_identity_rel, OUT_ELEMWISE_FUSABLE, 1, A.SoftmaxAttrs, _name[3:], 1)
define_op("nn.batch_flatten", _batch_flatten_rel, INJECTIVE, 1, None, "flatten to 2-D", 2)
define_op("nn.pad", _pad_rel, INJECTIVE, 2, A.PadAttrs, "pad", 2)
define_op("nn.mirror_pad", _mirror_pad_rel, INJECTIVE, 1, A.MirrorPadAttrs, "mirror pad", 2)
# TVM registers no pattern for lrn and the norms; FuseOps treats them as opaque.
define_op("nn.lrn", _axis_identity_rel, OPAQUE, 1, A.LRNAttrs, "local response norm", 2)
define_op("nn.l2_normalize", _l2_normalize_rel, OPAQUE, 1, A.L2NormalizeAttrs,
          "l2 normalize", 2)
define_op("nn.dropout", _dropout_rel, OPAQUE, 1, A.DropoutAttrs, "dropout (identity at "
          "inference)", 1)
define_op("nn.batch_norm", _batch_norm_rel, OUT_ELEMWISE_FUSABLE, 5, A.BatchNormAttrs,
          "batch normalization", 1)
define_op("nn.instance_norm", _norm_rel, OPAQUE, 3, A.InstanceNormAttrs, "instance norm", 1)
define_op("nn.layer_norm", _norm_rel, OPAQUE, 3, A.LayerNormAttrs, "layer norm", 1)
define_op("nn.group_norm", _group_norm_rel, OPAQUE, 3, A.GroupNormAttrs, "group norm", 1)
define_op("nn.upsampling", upsampling_rel, INJECTIVE, 1, A.UpSamplingAttrs, "upsample", 2)
define_op("nn.depth_to_space", _depth_to_space_rel, INJECTIVE, 1, A.SubPixelAttrs,
          "move channel blocks to space", 5)
define_op("nn.space_to_depth", _space_to_depth_rel, INJECTIVE, 1, A.SubPixelAttrs,
          "move spatial blocks to channels", 5)

# Unannotated per-channel parameters take their shape from the data (TVM's relations do too).
register_arg_types("nn.bias_add", _channel_vectors(1))
register_arg_types("nn.prelu", _channel_vectors(1))
register_arg_types("nn.batch_norm", _channel_vectors(1, 2, 3, 4))
for _name in ("nn.instance_norm", "nn.layer_norm", "nn.group_norm"):
    register_arg_types(_name, _channel_vectors(1, 2))


def bias_add(data: Any, bias: Any, axis: int = 1) -> Any:
    """Add the vector ``bias`` along ``axis`` of ``data``."""
    return call("nn.bias_add", [data, bias], A.BiasAddAttrs(axis=int(axis)))


def relu(data: Any) -> Any:
    """``max(data, 0)``."""
    return call("nn.relu", [data])


def leaky_relu(data: Any, alpha: float = 0.01) -> Any:
    """``data if data > 0 else alpha * data``."""
    return call("nn.leaky_relu", [data], A.LeakyReluAttrs(alpha=float(alpha)))


def prelu(data: Any, alpha: Any, axis: int = 1) -> Any:
    """Leaky relu with a learned slope per channel (``alpha`` along ``axis``)."""
    return call("nn.prelu", [data, alpha], A.PReluAttrs(axis=int(axis)))


def softmax(data: Any, axis: int = -1) -> Any:
    """Softmax along ``axis``."""
    return call("nn.softmax", [data], A.SoftmaxAttrs(axis=int(axis)))


def fast_softmax(data: Any, axis: int = -1) -> Any:
    """Softmax with the fast exp approximation."""
    return call("nn.fast_softmax", [data], A.SoftmaxAttrs(axis=int(axis)))


def log_softmax(data: Any, axis: int = -1) -> Any:
    """``log(softmax(data))`` computed stably."""
    return call("nn.log_softmax", [data], A.SoftmaxAttrs(axis=int(axis)))


def batch_flatten(data: Any) -> Any:
    """Flatten every axis but the first: ``(N, C, H, W) -> (N, C*H*W)``."""
    return call("nn.batch_flatten", [data])


def _pad_width(pad_width: Any) -> tuple:
    return tuple(tuple(int(v) for v in pair) for pair in pad_width)


def pad(data: Any, pad_width: Any, pad_value: Any = 0, pad_mode: str = "constant") -> Any:
    """Pad each axis by ``pad_width[i] = (before, after)``; an Expr pad_width gives
    ``dyn.nn.pad``.

    Example
    -------
    >>> from kiln import relay
    >>> y = relay.nn.pad(relay.var("x", shape=(2, 3)), ((1, 1), (0, 2)))
    """
    value = constant_value(pad_width)
    if value is not None:
        pad_width = value.tolist()
    pad_value = as_expr(pad_value)
    if is_expr(pad_width):
        return call("dyn.nn.pad", [data, pad_width, pad_value], A.PadAttrs(pad_mode=pad_mode))
    return call("nn.pad", [data, pad_value], A.PadAttrs(pad_width=_pad_width(pad_width),
                                                       pad_mode=pad_mode))


def mirror_pad(data: Any, pad_width: Any, mode: str = "SYMMETRIC") -> Any:
    """Pad by mirroring the border (``SYMMETRIC`` repeats the edge, ``REFLECT`` does not)."""
    return call("nn.mirror_pad", [data], A.MirrorPadAttrs(mode=mode,
                                                         pad_width=_pad_width(pad_width)))


def lrn(data: Any, size: int = 5, axis: int = 1, bias: float = 2, alpha: float = 0.00001,
        beta: float = 0.75) -> Any:
    """Local response normalization across ``size`` neighbouring channels."""
    return call("nn.lrn", [data], A.LRNAttrs(size=int(size), axis=int(axis), bias=float(bias),
                                             alpha=float(alpha), beta=float(beta)))


def l2_normalize(data: Any, eps: float, axis: Any = None) -> Any:
    """``data / sqrt(max(sum(data**2, axis), eps))``."""
    axis = None if axis is None else tuple(int(a) for a in axis)
    return call("nn.l2_normalize", [data], A.L2NormalizeAttrs(eps=float(eps), axis=axis))


def dropout_raw(data: Any, rate: float = 0.5) -> Any:
    """The dropout call itself: a 2-tuple (result, mask)."""
    return call("nn.dropout", [data], A.DropoutAttrs(rate=float(rate)))


def dropout(data: Any, rate: float = 0.5) -> Any:
    """Dropout; the result (field 0 of the dropout tuple), identity at inference."""
    from kiln.relay.expr import TupleWrapper

    return TupleWrapper(dropout_raw(data, rate), 2)[0]


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


def upsampling(data: Any, scale_h: Any = 1, scale_w: Any = 1, layout: str = "NCHW",
               method: str = "nearest_neighbor", align_corners: bool = False) -> Any:
    """Scale the H and W axes by ``scale_h``/``scale_w``; Expr scales give
    ``dyn.nn.upsampling``."""
    scales = []
    for s in (scale_h, scale_w):
        value = constant_value(s)
        scales.append(float(value) if value is not None else s)
    if any(is_expr(s) for s in scales):
        scales = [as_expr(s, "float64") for s in scales]
        return call("dyn.nn.upsampling", [data, *scales], A.UpSamplingAttrs(
            layout=layout, method=method, align_corners=bool(align_corners)))
    return call("nn.upsampling", [data], A.UpSamplingAttrs(
        scale_h=float(scales[0]), scale_w=float(scales[1]), layout=layout, method=method,
        align_corners=bool(align_corners)))


def depth_to_space(data: Any, block_size: int, layout: str = "NCHW", mode: str = "DCR") -> Any:
    """Move ``block_size x block_size`` channel blocks into space."""
    return call("nn.depth_to_space", [data], A.SubPixelAttrs(block_size=int(block_size),
                                                             layout=layout, mode=mode))


def space_to_depth(data: Any, block_size: int, layout: str = "NCHW") -> Any:
    """Move ``block_size x block_size`` spatial blocks into channels."""
    return call("nn.space_to_depth", [data], A.SubPixelAttrs(block_size=int(block_size),
                                                             layout=layout))


__all__ = [
    "bias_add", "relu", "leaky_relu", "prelu", "softmax", "fast_softmax", "log_softmax",
    "batch_flatten", "pad", "mirror_pad", "lrn", "l2_normalize", "dropout", "dropout_raw",
    "batch_norm", "instance_norm", "layer_norm", "group_norm", "upsampling",
    "depth_to_space", "space_to_depth",
]
