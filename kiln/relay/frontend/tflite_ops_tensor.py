"""TFLite shape and data-movement operators: reshape, transpose, slicing, padding, concatenation,
reductions.

Entry points: the converters registered into :data:`.tflite_ops.CONVERTERS`.

Shapes, axes, paddings and slice bounds must be constant tensors (as in TVM's frontend): they
are read at conversion time, so the Relay program stays static. Quantized data moves without
rescaling; where the output's parameters differ from the input's it is requantized.
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import infer_shape
from kiln.relay.frontend.tflite_ops import (
    fused_activation,
    inputs_of,
    is_quantized,
    option,
    register,
    requantize_to,
    require_quant,
)
from kiln.runtime.error import OpAttributeInvalid, OpAttributeUnImplemented

__all__: list[str] = []


def _axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise OpAttributeInvalid(f"{what} {axis} is out of range for rank {ndim}")
    return axis % max(ndim, 1)


def _keep_quant(conv, op, out):
    """Requantize a data-movement result when the output's parameters differ."""
    if is_quantized(conv, op):
        return requantize_to(conv, out, op.inputs[0], op.outputs[0])
    return out


@register("RESHAPE")
def convert_reshape(conv, op):
    """RESHAPE: the new shape from the shape input, else the options, else the output tensor."""
    ins = inputs_of(op, 1, 2)
    data = conv.get_expr(ins[0])
    if len(ins) > 1 and ins[1] >= 0 and conv.tensor(ins[1]).data is not None:
        shape = conv.tensor(ins[1]).data.reshape(-1)
    elif op.options is not None and op.options.NewShapeLength():
        shape = op.options.NewShapeAsNumpy()
    else:
        shape = conv.tensor(op.outputs[0]).shape
    shape = [int(d) for d in shape]
    size, known = int(np.prod(infer_shape(data))), int(np.prod([d for d in shape if d != -1]))
    if shape.count(-1) > 1 or (-1 not in shape and known != size) or \
            (-1 in shape and (known == 0 or size % known)):
        raise OpAttributeInvalid(f"cannot reshape {infer_shape(data)} to {tuple(shape)}")
    return _keep_quant(conv, op, relay.reshape(data, shape))


@register("TRANSPOSE")
def convert_transpose(conv, op):
    inputs_of(op, 2)
    data = conv.get_expr(op.inputs[0])
    perm = [int(p) for p in conv.const_value(op.inputs[1], "the permutation").reshape(-1)]
    if sorted(perm) != list(range(len(infer_shape(data)))):
        raise OpAttributeInvalid(f"permutation {perm} does not fit rank "
                                 f"{len(infer_shape(data))}")
    return relay.transpose(data, perm)


@register("SQUEEZE")
def convert_squeeze(conv, op):
    inputs_of(op, 1)
    data = conv.get_expr(op.inputs[0])
    shape = infer_shape(data)
    dims = list(op.options.SqueezeDimsAsNumpy()) if op.options is not None and \
        op.options.SqueezeDimsLength() else []
    axes = [_axis(int(a), len(shape)) for a in dims] or [i for i, d in enumerate(shape) if d == 1]
    if any(shape[a] != 1 for a in axes):
        raise OpAttributeInvalid(f"cannot squeeze axes {axes} of shape {shape}")
    return relay.squeeze(data, axis=axes)


@register("EXPAND_DIMS")
def convert_expand_dims(conv, op):
    inputs_of(op, 2)
    data = conv.get_expr(op.inputs[0])
    axis = conv.const_value(op.inputs[1], "the axis").reshape(-1)
    ndim = len(infer_shape(data))
    return relay.expand_dims(data, _axis(int(axis[0]), ndim + 1))


def _slice(data, shape, begin, end, strides):
    """``data[begin:end:strides]`` per axis with Python's clamping (negative steps by take)."""
    out = data
    starts, stops, steps = [], [], []
    for axis, (b, e, s) in enumerate(zip(begin, end, strides)):
        start, stop, step = slice(b, e, s).indices(shape[axis])
        if step < 0:
            index = np.arange(start, stop, step, dtype="int32")
            out = relay.take(out, relay.const(index), axis=axis)
            start, stop, step = 0, len(index), 1
        starts.append(start)
        stops.append(max(stop, start))
        steps.append(step)
    return relay.strided_slice(out, starts, stops, steps)


@register("STRIDED_SLICE")
def convert_strided_slice(conv, op):
    """STRIDED_SLICE with begin/end/shrink masks (ellipsis and new-axis masks refused)."""
    inputs_of(op, 4)
    data = conv.get_expr(op.inputs[0])
    shape = infer_shape(data)
    begin, end, strides = (conv.const_value(i, what).reshape(-1).astype("int64").tolist()
                           for i, what in zip(op.inputs[1:], ("begin", "end", "strides")))
    if not len(begin) == len(end) == len(strides) == len(shape):
        raise OpAttributeInvalid(f"begin/end/strides of lengths {len(begin)}/{len(end)}/"
                                 f"{len(strides)} do not match rank {len(shape)}")
    if option(op, "EllipsisMask", 0) or option(op, "NewAxisMask", 0):
        raise OpAttributeUnImplemented("STRIDED_SLICE ellipsis_mask and new_axis_mask")
    if any(s == 0 for s in strides):
        raise OpAttributeInvalid(f"strides must be non-zero, got {strides}")
    begin_mask, end_mask = option(op, "BeginMask", 0), option(op, "EndMask", 0)
    shrink = option(op, "ShrinkAxisMask", 0)
    offset = option(op, "Offset", False)
    for i in range(len(shape)):
        if offset:
            end[i] += begin[i]
        if shrink >> i & 1:
            b = begin[i] + shape[i] if begin[i] < 0 else begin[i]
            if not 0 <= b < shape[i]:
                raise OpAttributeInvalid(f"shrink index {begin[i]} is out of range for "
                                         f"dimension {i} of size {shape[i]}")
            begin[i], end[i], strides[i] = b, b + 1, 1
            continue
        if begin_mask >> i & 1:
            begin[i] = None
        if end_mask >> i & 1:
            end[i] = None
    out = _slice(data, shape, begin, end, strides)
    kept = [i for i in range(len(shape)) if not shrink >> i & 1]
    if len(kept) != len(shape):
        out_shape = [d for i, d in enumerate(infer_shape(out)) if i in kept]
        out = relay.reshape(out, out_shape)
    return _keep_quant(conv, op, out)


@register("SLICE")
def convert_slice(conv, op):
    inputs_of(op, 3)
    data = conv.get_expr(op.inputs[0])
    shape = infer_shape(data)
    begin = conv.const_value(op.inputs[1], "begin").reshape(-1).tolist()
    size = conv.const_value(op.inputs[2], "size").reshape(-1).tolist()
    if not len(begin) == len(size) == len(shape):
        raise OpAttributeInvalid(f"begin/size of lengths {len(begin)}/{len(size)} do not "
                                 f"match rank {len(shape)}")
    end = []
    for axis, (b, s) in enumerate(zip(begin, size)):
        e = shape[axis] if s == -1 else b + s
        if not 0 <= b <= e <= shape[axis]:
            raise OpAttributeInvalid(f"slice [{b}, {e}) is out of range for dimension {axis} "
                                     f"of size {shape[axis]}")
        end.append(int(e))
    return _keep_quant(conv, op, relay.strided_slice(data, [int(b) for b in begin], end))


@register("PAD", "PADV2", "MIRROR_PAD")
def convert_pad(conv, op):
    """PAD/PADV2 (the zero point, or the given value, fills quantized tensors) and MIRROR_PAD."""
    ins = inputs_of(op, 2, 3)
    data = conv.get_expr(ins[0])
    ndim = len(infer_shape(data))
    pads = conv.const_value(ins[1], "the paddings").astype("int64")
    if pads.shape != (ndim, 2) or np.any(pads < 0):
        raise OpAttributeInvalid(f"paddings must be a non-negative ({ndim}, 2) tensor, got "
                                 f"shape {pads.shape}")
    pad_width = [tuple(int(v) for v in row) for row in pads]
    if op.name == "MIRROR_PAD":
        mode = "REFLECT" if option(op, "Mode", 0) == 0 else "SYMMETRIC"
        return _keep_quant(conv, op, relay.nn.mirror_pad(data, pad_width, mode=mode))
    value = 0.0
    if len(ins) > 2 and ins[2] >= 0:
        value = conv.const_value(ins[2], "the pad value").reshape(-1)[0].item()
    elif is_quantized(conv, op):
        value = require_quant(conv, ins[0], "input").zero_point
    # the fill value has the data's dtype (a quantized zero point is int8/uint8 like its data)
    fill = relay.const(np.asarray(value, conv.tensor(ins[0]).dtype))
    return _keep_quant(conv, op, relay.nn.pad(data, pad_width, pad_value=fill))


@register("CONCATENATION")
def convert_concatenation(conv, op):
    """CONCATENATION; quantized inputs meet in the output's parameters (qnn.concatenate)."""
    if not op.inputs:
        raise OpAttributeInvalid("expects at least one input")
    values = [conv.get_expr(i) for i in op.inputs]
    axis = _axis(option(op, "Axis", 0), len(infer_shape(values[0])))
    out_i = op.outputs[0]
    if is_quantized(conv, op):
        qs = [require_quant(conv, i, "input") for i in op.inputs]
        qo = require_quant(conv, out_i, "output")
        out = relay.qnn.op.concatenate(values, [q.scale_expr() for q in qs],
                                       [q.zero_point_expr() for q in qs], qo.scale_expr(),
                                       qo.zero_point_expr(), axis=axis)
    else:
        out = relay.concatenate(values, axis=axis)
    return fused_activation(conv, out, option(op, "FusedActivationFunction", 0), out_i)


@register("PACK")
def convert_pack(conv, op):
    values = [conv.get_expr(i) for i in op.inputs]
    if not values:
        raise OpAttributeInvalid("expects at least one input")
    axis = _axis(option(op, "Axis", 0), len(infer_shape(values[0])) + 1)
    if is_quantized(conv, op):
        values = [requantize_to(conv, v, i, op.outputs[0]) for v, i in zip(values, op.inputs)]
    return relay.stack(values, axis=axis)


REDUCTIONS = {"MEAN": relay.mean, "SUM": relay.sum, "REDUCE_MAX": relay.max,
              "REDUCE_MIN": relay.min, "REDUCE_PROD": relay.prod}


@register(*REDUCTIONS)
def convert_reduce(conv, op):
    """Reductions over constant axes; a quantized MEAN is an int32 sum requantized once."""
    inputs_of(op, 2)
    data_i, out_i = op.inputs[0], op.outputs[0]
    data = conv.get_expr(data_i)
    shape = infer_shape(data)
    axes = sorted({_axis(int(a), len(shape))
                   for a in conv.const_value(op.inputs[1], "the axes").reshape(-1)})
    keep = bool(option(op, "KeepDims", False))
    if not is_quantized(conv, op):
        return REDUCTIONS[op.name](data, axis=axes, keepdims=keep)
    if op.name in ("REDUCE_MAX", "REDUCE_MIN"):
        return requantize_to(conv, REDUCTIONS[op.name](data, axis=axes, keepdims=keep),
                             data_i, out_i)
    if op.name == "REDUCE_PROD":
        raise OpAttributeUnImplemented("quantized REDUCE_PROD")
    count = int(np.prod([shape[a] for a in axes]))
    total = relay.sum(relay.cast(data, "int32"), axis=axes, keepdims=keep)
    qi, qo = require_quant(conv, data_i, "input"), require_quant(conv, out_i, "output")
    # sum(q - zp) * s / n == (sum(q) - n*zp) * (s/n): one requantize (n = 1 for SUM's scale)
    divisor = count if op.name == "MEAN" else 1
    in_scale = relay.const(np.float32(qi.scale[0] / divisor), "float32")
    in_zp = relay.const(np.int32(qi.zero_point * count), "int32")
    return relay.qnn.op.requantize(total, in_scale, in_zp, qo.scale_expr(),
                                   qo.zero_point_expr(), out_dtype=conv.tensor(out_i).dtype)
