"""More TFLite operators: comparisons, logic, select, ADD_N, TILE, SPLIT/SPLIT_V/UNPACK, GATHER,
GATHER_ND, BATCH_MATMUL, ZEROS_LIKE.

Entry points: the converters registered into :data:`.tflite_ops.CONVERTERS`.

Comparisons, logic and arithmetic here are float/integer ops; on quantized tensors only the
data-movement ones (TILE, SPLIT, SPLIT_V, UNPACK, GATHER, GATHER_ND) are converted, keeping the
parameters; the others raise ``OpNotImplemented``.
"""

from __future__ import annotations

from functools import reduce

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import infer_shape
from kiln.relay.frontend.tflite_ops import (
    inputs_of,
    is_quantized,
    option,
    register,
    requantize_to,
)
from kiln.runtime.error import OpAttributeInvalid, OpNotImplemented

__all__: list[str] = []

COMPARISONS = {"EQUAL": relay.equal, "NOT_EQUAL": relay.not_equal, "LESS": relay.less,
               "LESS_EQUAL": relay.less_equal, "GREATER": relay.greater,
               "GREATER_EQUAL": relay.greater_equal, "LOGICAL_AND": relay.logical_and,
               "LOGICAL_OR": relay.logical_or}


def _float_only(conv, op) -> None:
    if is_quantized(conv, op):
        raise OpNotImplemented(f"quantized {op.name}")


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise OpAttributeInvalid(f"axis {axis} is out of range for rank {ndim}")
    return axis % ndim


@register(*COMPARISONS)
def convert_comparison(conv, op):
    inputs_of(op, 2)
    _float_only(conv, op)
    return COMPARISONS[op.name](conv.get_expr(op.inputs[0]), conv.get_expr(op.inputs[1]))


@register("LOGICAL_NOT")
def convert_logical_not(conv, op):
    inputs_of(op, 1)
    return relay.logical_not(conv.get_expr(op.inputs[0]))


@register("SELECT", "SELECT_V2")
def convert_select(conv, op):
    inputs_of(op, 3)
    _float_only(conv, op)
    cond, x, y = (conv.get_expr(i) for i in op.inputs)
    return relay.where(cond, x, y)


@register("ADD_N")
def convert_add_n(conv, op):
    if not op.inputs:
        raise OpAttributeInvalid("expects at least one input")
    _float_only(conv, op)
    return reduce(relay.add, [conv.get_expr(i) for i in op.inputs])


@register("ZEROS_LIKE")
def convert_zeros_like(conv, op):
    inputs_of(op, 1)
    _float_only(conv, op)
    return relay.zeros_like(conv.get_expr(op.inputs[0]))


@register("TILE")
def convert_tile(conv, op):
    inputs_of(op, 2)
    data = conv.get_expr(op.inputs[0])
    reps = [int(r) for r in conv.const_value(op.inputs[1], "the multiples").reshape(-1)]
    if len(reps) != len(infer_shape(data)) or any(r < 0 for r in reps):
        raise OpAttributeInvalid(f"multiples {reps} do not fit rank {len(infer_shape(data))}")
    return relay.tile(data, reps)


def _split(data, sizes, axis):
    """``data`` split along ``axis`` into pieces of ``sizes``, as a list."""
    cuts = np.cumsum(sizes)[:-1].tolist()
    parts = relay.split(data, cuts, axis=axis) if cuts else None
    return [parts[i] for i in range(len(sizes))] if cuts else [data]


@register("SPLIT")
def convert_split(conv, op):
    """SPLIT: inputs (axis, data), ``num_splits`` equal pieces."""
    inputs_of(op, 2)
    data = conv.get_expr(op.inputs[1])
    shape = infer_shape(data)
    axis = _axis(int(conv.const_value(op.inputs[0], "the axis").reshape(-1)[0]), len(shape))
    n = int(option(op, "NumSplits", len(op.outputs)))
    if n <= 0 or shape[axis] % n or n != len(op.outputs):
        raise OpAttributeInvalid(f"cannot split dimension {axis} of size {shape[axis]} into "
                                 f"{n} equal pieces for {len(op.outputs)} outputs")
    return _split(data, [shape[axis] // n] * n, axis)


@register("SPLIT_V")
def convert_split_v(conv, op):
    """SPLIT_V: inputs (data, size_splits, axis); one size may be -1 (the rest)."""
    inputs_of(op, 3)
    data = conv.get_expr(op.inputs[0])
    shape = infer_shape(data)
    axis = _axis(int(conv.const_value(op.inputs[2], "the axis").reshape(-1)[0]), len(shape))
    sizes = [int(s) for s in conv.const_value(op.inputs[1], "the split sizes").reshape(-1)]
    if sizes.count(-1) == 1:
        sizes[sizes.index(-1)] = shape[axis] - (sum(sizes) + 1)
    if any(s < 0 for s in sizes) or sum(sizes) != shape[axis] or len(sizes) != len(op.outputs):
        raise OpAttributeInvalid(f"split sizes {sizes} do not cover dimension {axis} of size "
                                 f"{shape[axis]} with {len(op.outputs)} outputs")
    return _split(data, sizes, axis)


@register("UNPACK")
def convert_unpack(conv, op):
    inputs_of(op, 1)
    data = conv.get_expr(op.inputs[0])
    shape = infer_shape(data)
    axis = _axis(int(option(op, "Axis", 0)), len(shape))
    if shape[axis] != len(op.outputs):
        raise OpAttributeInvalid(f"dimension {axis} has {shape[axis]} slices, the operator "
                                 f"names {len(op.outputs)} outputs")
    return [relay.squeeze(p, axis=[axis]) for p in _split(data, [1] * shape[axis], axis)]


@register("GATHER")
def convert_gather(conv, op):
    """GATHER along ``axis`` (``batch_dims`` leading dimensions shared); indices checked when
    constant (TFLite fails on out-of-range indices; run-time ones are clipped)."""
    inputs_of(op, 2)
    data, indices = conv.get_expr(op.inputs[0]), conv.get_expr(op.inputs[1])
    shape = infer_shape(data)
    axis = _axis(int(option(op, "Axis", 0)), len(shape))
    constant = conv.tensor(op.inputs[1]).data
    if constant is not None and constant.size and \
            (constant.min() < 0 or constant.max() >= shape[axis]):
        raise OpAttributeInvalid(f"gather indices {constant.min()}..{constant.max()} are out "
                                 f"of range for dimension {axis} of size {shape[axis]}")
    return relay.take(data, indices, axis=axis, batch_dims=int(option(op, "BatchDims", 0)))


@register("GATHER_ND")
def convert_gather_nd(conv, op):
    """GATHER_ND: the last axis of ``indices`` indexes ``params``' leading axes (Relay's
    ``gather_nd`` wants it first); constant indices are checked against the shape."""
    inputs_of(op, 2)
    data, indices = conv.get_expr(op.inputs[0]), conv.get_expr(op.inputs[1])
    shape, index_shape = infer_shape(data), infer_shape(indices)
    if conv.tensor(op.inputs[1]).dtype not in ("int32", "int64"):
        raise OpAttributeInvalid(f"indices must be int32 or int64, got "
                                 f"{conv.tensor(op.inputs[1]).dtype}")
    if not index_shape or not 1 <= index_shape[-1] <= len(shape):
        raise OpAttributeInvalid(f"indices of shape {index_shape} do not index params of "
                                 f"shape {shape}")
    depth = index_shape[-1]
    constant = conv.tensor(op.inputs[1]).data
    if constant is not None and constant.size:
        bounds = np.asarray(shape[:depth]).reshape([1] * (constant.ndim - 1) + [depth])
        if np.any(constant < 0) or np.any(constant >= bounds):
            raise OpAttributeInvalid(f"gather_nd indices are out of range for params of shape "
                                     f"{shape}")
    first = relay.transpose(indices, [len(index_shape) - 1] + list(range(len(index_shape) - 1)))
    out = relay.gather_nd(data, first)
    if is_quantized(conv, op):
        out = requantize_to(conv, out, op.inputs[0], op.outputs[0])
    return out


@register("BATCH_MATMUL")
def convert_batch_matmul(conv, op):
    """BATCH_MATMUL of 3-D operands (``adj_x``/``adj_y`` transpose them)."""
    inputs_of(op, 2)
    _float_only(conv, op)
    x, y = conv.get_expr(op.inputs[0]), conv.get_expr(op.inputs[1])
    if len(infer_shape(x)) != 3 or len(infer_shape(y)) != 3:
        raise OpNotImplemented(f"BATCH_MATMUL of ranks {len(infer_shape(x))} and "
                               f"{len(infer_shape(y))} (kiln converts 3-D operands)")
    return relay.nn.batch_matmul(x, y, transpose_a=bool(option(op, "AdjX", False)),
                                 transpose_b=bool(option(op, "AdjY", False)))
