"""The ``dyn.*`` variants of the nn, image and algorithm ops: ``dyn.nn.pad``,
``dyn.nn.upsampling``, ``dyn.image.resize2d``, ``dyn.topk``.

Entry points: the registered ops (reached through ``relay.nn.pad``, ``relay.nn.upsampling``,
``relay.image.resize2d`` and ``relay.topk`` given Relay-expression widths, scales, sizes or
``k``, as in TVM). Like the shape-op variants in :mod:`.dyn`, each registers its relation (the
static twin's where it handles the tensor inputs), compute over the extents the VM binds,
reference NumPy rule (the static twin's rule with the tensors read as attrs), data-dependent
shape function and run-time value requirement.
"""

from __future__ import annotations

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.algorithm import reference_topk as reference_static_topk
from kiln.relay.op.algorithm import topk_rel
from kiln.relay.op.dyn.dyn import all_any, element_dims, scalar_element, tensor_ints, tensor_scalar
from kiln.relay.op.image.image import resize2d_rel, resize_reference, spatial_extents
from kiln.relay.op.nn.nn import reference_pad as reference_static_pad
from kiln.relay.op.nn.resample import reference_upsampling as reference_static_upsampling
from kiln.relay.op.nn.resample import upsampling_rel
from kiln.relay.op.op import (
    INJECTIVE,
    OPAQUE,
    define_op,
    register_compute,
    register_injective_schedule,
    register_opaque_schedule,
    register_reference,
    register_shape_func,
    register_shape_requirement,
)
from kiln.relay.op.rule_util import AttrsWith, checked, i64, out_dtype, out_shape
from kiln.relay.op.type_relations import dims, fail, is_static, tensor_arg, tensor_type
from kiln.runtime.error import TVMError

__all__: list[str] = []


def _pad_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    width = dims(tensor_arg(types, 1, op_name))
    if len(width) != 2 or (is_static(width[0]) and width[0] != len(data.shape)):
        fail(f"{op_name}: pad_width must have shape ({len(data.shape)}, 2), got {width}")
    if tensor_arg(types, 2, op_name).shape:
        fail(f"{op_name}: pad_value must be a scalar")
    return tensor_type(all_any(len(data.shape)), data.dtype)


define_op("dyn.topk", topk_rel, OPAQUE, 2, A.TopKAttrs, "top k", 6)
define_op("dyn.image.resize2d", resize2d_rel, INJECTIVE, 3, A.Resize2DAttrs, "resize", 5)
define_op("dyn.nn.pad", _pad_rel, INJECTIVE, 3, A.PadAttrs, "pad", 2)
define_op("dyn.nn.upsampling", upsampling_rel, INJECTIVE, 3, A.UpSamplingAttrs, "upsample", 2)


# ---- computes: the output extents are shape variables the VM binds from the shape functions --
@register_compute("dyn.nn.pad")
def compute_pad(attrs, inputs, out_type):
    """Padding by the run-time widths (argument 1) with the pad value (argument 2)."""
    from kiln.topi import dynamic

    return [dynamic.pad(inputs[0], inputs[1], inputs[2], out_shape(out_type), attrs.pad_mode)]


@register_compute("dyn.topk")
def compute_topk(attrs, inputs, out_type):
    """The top ``k`` (read at run time: the output's extent on the axis)."""
    from kiln.topi import dynamic

    field = out_shape(out_type, 0) if attrs.ret_type == "both" else out_shape(out_type)
    return dynamic.topk(inputs[0], field, attrs.axis, attrs.ret_type, attrs.is_ascend,
                        attrs.dtype)


@register_compute("dyn.image.resize2d")
def compute_resize2d(attrs, inputs, out_type):
    """``topi.image.resize2d`` to the run-time size, with the run-time roi (argument 2)."""
    from kiln import topi
    from kiln.topi import dynamic

    roi = dynamic.tensor_values(inputs[2], 4, "float32")
    return [topi.image.resize2d(inputs[0], roi, spatial_extents(out_type, attrs.layout),
                                attrs.layout, attrs.method,
                                attrs.coordinate_transformation_mode, attrs.rounding_method,
                                attrs.cubic_alpha, attrs.cubic_exclude,
                                attrs.extrapolation_value, out_dtype(out_type))]


@register_compute("dyn.nn.upsampling")
def compute_upsampling(attrs, inputs, out_type):
    """``topi.nn.upsampling`` to the output's run-time H and W."""
    from kiln.topi import nn

    return [nn.upsampling(inputs[0], None, None, attrs.layout, attrs.method,
                          attrs.align_corners, out_size=spatial_extents(out_type, attrs.layout))]


for _name in ("dyn.nn.pad", "dyn.image.resize2d", "dyn.nn.upsampling"):
    register_injective_schedule(_name)
register_opaque_schedule("dyn.topk")


# ---- reference semantics (NumPy): the static op's rule with the tensors read as attrs -------
@register_reference("dyn.topk")
def reference_topk(attrs, args, out_type):
    """``topk``'s rule with the run-time ``k``."""
    k = int(tensor_scalar(args[1]))
    return reference_static_topk(AttrsWith(attrs, k=k), args[:1], out_type)


@register_reference("dyn.nn.pad")
def reference_pad(attrs, args, out_type):
    """``nn.pad``'s rule with the run-time widths."""
    data, width, value = args
    pairs = np.asarray(width).reshape(-1, 2).tolist()
    return reference_static_pad(AttrsWith(attrs, pad_width=pairs), [data, value], out_type)


@register_reference("dyn.image.resize2d")
def reference_resize2d(attrs, args, out_type):
    """``image.resize2d``'s rule with the run-time size and roi."""
    data, size, roi = args
    if any(v < 0 for v in tensor_ints(size)):
        raise TVMError(f"dyn.image.resize2d: sizes must be non-negative, got {tensor_ints(size)}")
    return resize_reference(AttrsWith(attrs, size=tensor_ints(size),
                                      roi=[float(v) for v in np.ravel(roi)]),
                            [data], out_type, 2)


@register_reference("dyn.nn.upsampling")
def reference_upsampling(attrs, args, out_type):
    """``nn.upsampling``'s rule with the run-time scales."""
    data, scale_h, scale_w = args
    return reference_static_upsampling(
        AttrsWith(attrs, scale_h=float(tensor_scalar(scale_h)),
                  scale_w=float(tensor_scalar(scale_w))),
        [data], out_type)


# ---- VM shape functions: data dependent, they read the tensors --------------------------------
@register_shape_func("dyn.nn.pad", True)
def shape_func_dyn_pad(attrs, ins, outs, data):
    """Each dim plus its run-time before and after widths."""
    from kiln import tir

    widths = data[1]
    return [[d + tir.Cast("int64", widths[k, 0]) + tir.Cast("int64", widths[k, 1])
             for k, d in enumerate(ins[0])]]


@register_shape_func("dyn.topk", True)
def shape_func_dyn_topk(attrs, ins, outs, data):
    """k read at run time: k < 1 keeps the whole axis; k past the axis is an error."""
    from kiln import tir

    out = list(ins[0])
    axis = int(attrs.axis) % len(out)
    k = tir.Cast("int64", scalar_element(data[1]))
    valid = k <= out[axis]
    out[axis] = tir.Select(k < i64(1), out[axis], k)
    return [checked(list(out), valid) for _ in outs]


def _spatial_axes(layout: str, letters: str) -> list[int]:
    return [layout.index(c) for c in letters]


@register_shape_func("dyn.image.resize2d", True)
def shape_func_dyn_resize2d(attrs, ins, outs, data):
    """H and W are the run-time values of the size tensor."""
    out = list(ins[0])
    for axis, extent in zip(_spatial_axes(attrs.layout, "HW"), element_dims(data[1], 2)):
        out[axis] = extent
    return [out]


@register_shape_func("dyn.nn.upsampling", True)
def shape_func_dyn_upsampling(attrs, ins, outs, data):
    """H and W scaled by the run-time scale tensors, rounded half to even like the static
    op's type relation (Python's ``round``)."""
    from kiln.tir import op as _op

    out = list(ins[0])
    for axis, scale in zip(_spatial_axes(attrs.layout, "HW"), data[1:3]):
        scaled = _op.cast(out[axis], "float64") * _op.cast(scalar_element(scale), "float64")
        out[axis] = _op.cast(_op.round(scaled), "int64")
    return [out]


# What the run-time values must satisfy, for the message of a failed shape function.
for _name, _requirement in (("dyn.nn.pad", "padded extents must be non-negative"),
                            ("dyn.topk", "k must not exceed the axis"),
                            ("dyn.image.resize2d", "sizes must be non-negative"),
                            ("dyn.nn.upsampling", "scales must be non-negative")):
    register_shape_requirement(_name, _requirement)
