"""Neural-network layers other than convolution, pooling, normalization and resampling:
activations, bias, softmax, flattening, padding and dropout.

Entry points (TVM's ``relay.nn`` signatures): :func:`bias_add`, :func:`relu`,
:func:`leaky_relu`, :func:`prelu`, :func:`softmax`, :func:`fast_softmax`, :func:`log_softmax`,
:func:`batch_flatten`, :func:`pad`, :func:`mirror_pad`, :func:`dropout`, :func:`dropout_raw`;
the helpers :func:`check_channel_vector`, :func:`channel_vectors` and :func:`axis_identity_rel`
that :mod:`.norm` shares. Per op this module registers its type relation and pattern kind,
TE compute and schedule, reference NumPy rule, VM shape function, gradient and FoldScaleAxis
rule (a positive scale passes through ``relu``).

Example
-------
>>> from kiln import relay
>>> relay.nn.softmax(relay.var("x", shape=(2, 5))).op.name
'nn.softmax'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.layout import elemwise_arbitrary_layout
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
    register_compute,
    register_gradient,
    register_infer_correct_layout,
    register_injective_schedule,
    register_opaque_schedule,
    register_reference,
    register_scale_axis_role,
    register_shape_func,
)
from kiln.relay.op.rule_util import (
    i64,
    out_dtype,
    out_shape,
    product,
    reference_dtype,
    same_shape_as_input,
    static_or_symbolic,
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

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.

__all__ = [
    "bias_add", "relu", "leaky_relu", "prelu", "softmax", "fast_softmax", "log_softmax",
    "batch_flatten", "pad", "mirror_pad", "dropout", "dropout_raw", "check_channel_vector",
    "channel_vectors", "axis_identity_rel",
]


def check_channel_vector(types, index, extent, op_name, what):
    """A relation check: ``types[index]`` must be a vector of ``extent`` elements of the
    data's dtype."""
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
    check_channel_vector(types, 1, d[axis], op_name, "bias")
    return data


def _prelu_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    axis = normalize_axis(attrs.axis, len(d), op_name)
    check_channel_vector(types, 1, d[axis], op_name, "alpha")
    return data


def channel_vectors(*indices: int):
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


def axis_identity_rel(types, attrs, op_name):
    """The type relation of an op whose result is typed like its data (with an ``axis``)."""
    data = tensor_arg(types, 0, op_name)
    normalize_axis(attrs.axis, len(data.shape), op_name)
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


define_op("nn.bias_add", _bias_add_rel, BROADCAST, 2, A.BiasAddAttrs, "add a bias vector", 1)
define_op("nn.relu", identity_rel, ELEMWISE, 1, None, "max(x, 0)", 1)
define_op("nn.leaky_relu", identity_rel, ELEMWISE, 1, A.LeakyReluAttrs, "leaky relu", 3)
for _name in ("nn.relu", "nn.leaky_relu"):
    register_infer_correct_layout(_name, elemwise_arbitrary_layout)
define_op("nn.prelu", _prelu_rel, BROADCAST, 2, A.PReluAttrs, "parametric relu", 3)
for _name in ("nn.softmax", "nn.fast_softmax", "nn.log_softmax"):
    define_op(_name, axis_identity_rel, OUT_ELEMWISE_FUSABLE, 1, A.SoftmaxAttrs, _name[3:], 1)
define_op("nn.batch_flatten", _batch_flatten_rel, INJECTIVE, 1, None, "flatten to 2-D", 2)
define_op("nn.pad", _pad_rel, INJECTIVE, 2, A.PadAttrs, "pad", 2)
define_op("nn.mirror_pad", _mirror_pad_rel, INJECTIVE, 1, A.MirrorPadAttrs, "mirror pad", 2)
define_op("nn.dropout", _dropout_rel, OPAQUE, 1, A.DropoutAttrs, "dropout (identity at "
          "inference)", 1)

# Unannotated per-channel parameters take their shape from the data (TVM's relations do too).
register_arg_types("nn.bias_add", channel_vectors(1))
register_arg_types("nn.prelu", channel_vectors(1))


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


def dropout_raw(data: Any, rate: float = 0.5) -> Any:
    """The dropout call itself: a 2-tuple (result, mask)."""
    return call("nn.dropout", [data], A.DropoutAttrs(rate=float(rate)))


def dropout(data: Any, rate: float = 0.5) -> Any:
    """Dropout; the result (field 0 of the dropout tuple), identity at inference."""
    from kiln.relay.expr import TupleWrapper

    return TupleWrapper(dropout_raw(data, rate), 2)[0]


# ---- computes (TOPI) ------------------------------------------------------------------------
@register_compute("nn.relu")
def compute_relu(attrs, inputs, out_type):
    """``topi.nn.relu``."""
    from kiln.topi import nn

    return [nn.relu(inputs[0])]


@register_compute("nn.leaky_relu")
def compute_leaky_relu(attrs, inputs, out_type):
    """``topi.nn.leaky_relu`` with the attrs' slope."""
    from kiln.topi import nn

    return [nn.leaky_relu(inputs[0], attrs.alpha)]


@register_compute("nn.prelu")
def compute_prelu(attrs, inputs, out_type):
    """``topi.nn.prelu`` with the slopes along the attrs' axis."""
    from kiln.topi import nn

    return [nn.prelu(inputs[0], inputs[1], attrs.axis)]


@register_compute("nn.bias_add")
def compute_bias_add(attrs, inputs, out_type):
    """``topi.nn.bias_add`` along the attrs' axis."""
    from kiln.topi import nn

    return [nn.bias_add(inputs[0], inputs[1], attrs.axis)]


@register_compute("nn.softmax")
def compute_softmax(attrs, inputs, out_type):
    """``topi.nn.softmax``."""
    from kiln.topi import nn

    return [nn.softmax(inputs[0], attrs.axis)]


@register_compute("nn.fast_softmax")
def compute_fast_softmax(attrs, inputs, out_type):
    """``topi.nn.fast_softmax`` (the fast exp approximation)."""
    from kiln.topi import nn

    return [nn.fast_softmax(inputs[0], attrs.axis)]


@register_compute("nn.log_softmax")
def compute_log_softmax(attrs, inputs, out_type):
    """``topi.nn.log_softmax``."""
    from kiln.topi import nn

    return [nn.log_softmax(inputs[0], attrs.axis)]


def _batch_flatten_static(attrs, inputs, out_type):
    """``topi.reshape`` to ``(N, rest)``."""
    from kiln import topi

    return [topi.reshape(inputs[0], out_shape(out_type))]


def _batch_flatten_symbolic(attrs, inputs, out_type):
    from kiln.topi import dynamic

    return [dynamic.reshape(inputs[0], out_shape(out_type))]


compute_batch_flatten = static_or_symbolic(_batch_flatten_static, _batch_flatten_symbolic)
register_compute("nn.batch_flatten", compute_batch_flatten)


def _widths(pad_width: Any) -> tuple[list[int], list[int]]:
    """The before and after widths of each axis."""
    return [int(p[0]) for p in pad_width], [int(p[1]) for p in pad_width]


@register_compute("nn.pad")
def compute_pad(attrs, inputs, out_type):
    """``topi.nn.pad`` with the pad value (argument 1) and mode."""
    from kiln.topi import nn

    return [nn.pad(inputs[0], *_widths(attrs.pad_width), inputs[1], pad_mode=attrs.pad_mode)]


@register_compute("nn.mirror_pad")
def compute_mirror_pad(attrs, inputs, out_type):
    """``topi.nn.mirror_pad``."""
    from kiln.topi import nn

    return [nn.mirror_pad(inputs[0], *_widths(attrs.pad_width), attrs.mode)]


@register_compute("nn.dropout")
def compute_dropout(attrs, inputs, out_type):
    """Inference dropout: the data unchanged and a mask of ones."""
    from kiln import topi

    return [topi.identity(inputs[0]),
            topi.full(out_shape(out_type, 1), out_dtype(out_type, 1), 1)]


for _name in ("nn.relu", "nn.leaky_relu", "nn.prelu", "nn.bias_add", "nn.batch_flatten",
              "nn.pad", "nn.mirror_pad"):
    register_injective_schedule(_name)
for _name in ("nn.softmax", "nn.fast_softmax", "nn.log_softmax", "nn.dropout"):
    register_opaque_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
def _on_axis(vector: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """``vector`` shaped to broadcast along ``axis`` of an ``ndim``-d tensor."""
    shape = [1] * ndim
    shape[axis % ndim] = -1
    return vector.reshape(shape)


@register_reference("nn.relu")
def reference_relu(attrs, args, out_type):
    """``max(x, 0)``."""
    return np.maximum(args[0], 0).astype(reference_dtype(out_type), copy=False)


@register_reference("nn.leaky_relu")
def reference_leaky_relu(attrs, args, out_type):
    """``x`` where positive, else ``alpha * x``."""
    x = args[0]
    return np.where(x > 0, x, x * attrs.alpha).astype(x.dtype)


@register_reference("nn.prelu")
def reference_prelu(attrs, args, out_type):
    """Leaky relu with one slope per channel along the attrs' axis."""
    x, alpha = args
    return np.where(x > 0, x, x * _on_axis(alpha, x.ndim, attrs.axis)).astype(x.dtype)


@register_reference("nn.bias_add")
def reference_bias_add(attrs, args, out_type):
    """The bias added along the attrs' axis."""
    x, bias = args
    return (x + _on_axis(bias, x.ndim, attrs.axis)).astype(x.dtype)


@register_reference("nn.softmax")
@register_reference("nn.fast_softmax")
def reference_softmax(attrs, args, out_type):
    """``exp(x - max) / sum(exp(x - max))`` in float64."""
    x = args[0].astype(np.float64)
    e = np.exp(x - x.max(axis=attrs.axis, keepdims=True))
    return (e / e.sum(axis=attrs.axis, keepdims=True)).astype(reference_dtype(out_type))


@register_reference("nn.log_softmax")
def reference_log_softmax(attrs, args, out_type):
    """``(x - max) - log(sum(exp(x - max)))`` in float64."""
    x = args[0].astype(np.float64)
    shifted = x - x.max(axis=attrs.axis, keepdims=True)
    out = shifted - np.log(np.exp(shifted).sum(axis=attrs.axis, keepdims=True))
    return out.astype(reference_dtype(out_type))


@register_reference("nn.batch_flatten")
def reference_batch_flatten(attrs, args, out_type):
    """``(N, everything else)``."""
    return np.reshape(args[0], (args[0].shape[0], -1))


@register_reference("nn.pad")
def reference_pad(attrs, args, out_type):
    """``np.pad`` with the pad value (constant mode) or the edge/reflect mode."""
    x, value = args[0], args[1] if len(args) > 1 else 0
    width = [(int(a), int(b)) for a, b in attrs.pad_width]
    mode = {"constant": "constant", "edge": "edge", "reflect": "reflect"}[attrs.pad_mode]
    if mode == "constant":
        return np.pad(x, width, constant_values=np.asarray(value).item())
    return np.pad(x, width, mode=mode)


@register_reference("nn.mirror_pad")
def reference_mirror_pad(attrs, args, out_type):
    """``np.pad`` symmetric (edge repeated) or reflect (edge not repeated)."""
    width = [(int(a), int(b)) for a, b in attrs.pad_width]
    mode = "symmetric" if attrs.mode == "SYMMETRIC" else "reflect"
    return np.pad(args[0], width, mode=mode)


@register_reference("nn.dropout")
def reference_dropout(attrs, args, out_type):
    """Inference dropout: the data and a mask of ones."""
    return args[0], np.ones_like(args[0])


# ---- VM shape functions ---------------------------------------------------------------------
for _name in ("nn.softmax", "nn.fast_softmax", "nn.log_softmax", "nn.bias_add", "nn.prelu",
              "nn.dropout"):
    register_shape_func(_name, False, same_shape_as_input)


@register_shape_func("nn.batch_flatten", False)
def shape_func_batch_flatten(attrs, in_dims, out_types):
    """``(N, product of the rest)``."""
    return [[in_dims[0][0], product(in_dims[0][1:])]]


@register_shape_func("nn.pad", False)
@register_shape_func("nn.mirror_pad", False)
def shape_func_pad(attrs, in_dims, out_types):
    """Each dim plus its before and after widths."""
    return [[d + i64(int(before) + int(after))
             for d, (before, after) in zip(in_dims[0], attrs.pad_width)]]


# ---- FoldScaleAxis: relu(x * s) == relu(x) * s for a positive scale s --------------------------
register_scale_axis_role("nn.relu", "positive_homogeneous")


# ---- gradients ------------------------------------------------------------------------------
@register_gradient("nn.relu")
def gradient_relu(orig, grad):
    """The adjoint where the input is positive, else 0."""
    from kiln.relay.op.tensor import greater, multiply, zeros_like
    from kiln.relay.op.transform import cast_like

    x = orig.args[0]
    return [multiply(grad, cast_like(greater(x, zeros_like(x)), x))]


@register_gradient("nn.batch_flatten")
def gradient_batch_flatten(orig, grad):
    """The adjoint reshaped back to the data's shape."""
    from kiln.relay.op.reshape import reshape_like

    return [reshape_like(grad, orig.args[0])]


@register_gradient("nn.softmax")
def gradient_softmax(orig, grad):
    """``(grad - sum(grad * y, axis)) * y`` with ``y`` the softmax."""
    from kiln.relay.op.reduce import sum as reduce_sum
    from kiln.relay.op.tensor import multiply, subtract

    weighted = reduce_sum(multiply(grad, orig), [int(orig.attrs.axis)], keepdims=True)
    return [multiply(subtract(grad, weighted), orig)]


@register_gradient("nn.log_softmax")
def gradient_log_softmax(orig, grad):
    """``grad - sum(grad, axis) * exp(y)`` with ``y`` the log-softmax."""
    from kiln.relay.op.reduce import sum as reduce_sum
    from kiln.relay.op.tensor import exp, multiply, subtract

    total = reduce_sum(grad, [int(orig.attrs.axis)], keepdims=True)
    return [subtract(grad, multiply(total, exp(orig)))]
