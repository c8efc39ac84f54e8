"""Resampling layers: ``upsampling`` and the pixel shuffles ``depth_to_space`` and
``space_to_depth``.

Entry points (TVM's ``relay.nn`` signatures): :func:`upsampling`, :func:`depth_to_space`,
:func:`space_to_depth`, and :func:`upsampling_rel` (shared with ``dyn.nn.upsampling``). Per op
this module registers its type relation and pattern kind, TE compute (the injective schedule),
reference NumPy rule (upsampling is a resize, through :mod:`kiln.relay.op.image.image`'s
reference) and VM shape function.

Example
-------
>>> from kiln import relay
>>> relay.nn.upsampling(relay.var("x", shape=(1, 3, 4, 4)), 2, 2).op.name
'nn.upsampling'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.layout import convert_array
from kiln.relay.op.nn.conv import shape_func_same_batch
from kiln.relay.op.nn.pool import spatial_axes
from kiln.relay.op.op import (
    INJECTIVE,
    as_expr,
    call,
    constant_value,
    define_op,
    is_expr,
    register_compute,
    register_injective_schedule,
    register_reference,
    register_shape_func,
)
from kiln.relay.op.rule_util import (
    reference_dtype,
)
from kiln.relay.op.type_relations import (
    dim_op,
    dims,
    fail,
    is_static,
    tensor_arg,
    tensor_type,
)

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.

__all__ = ["upsampling", "depth_to_space", "space_to_depth", "upsampling_rel"]


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


define_op("nn.upsampling", upsampling_rel, INJECTIVE, 1, A.UpSamplingAttrs, "upsample", 2)
define_op("nn.depth_to_space", _depth_to_space_rel, INJECTIVE, 1, A.SubPixelAttrs,
          "move channel blocks to space", 5)
define_op("nn.space_to_depth", _space_to_depth_rel, INJECTIVE, 1, A.SubPixelAttrs,
          "move spatial blocks to channels", 5)


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


# ---- computes (TOPI), all with the injective schedule ---------------------------------------
@register_compute("nn.upsampling")
def compute_upsampling(attrs, inputs, out_type):
    """``topi.nn.upsampling`` by the attrs' scales."""
    from kiln.topi import nn

    return [nn.upsampling(inputs[0], attrs.scale_h, attrs.scale_w, attrs.layout, attrs.method,
                          attrs.align_corners)]


@register_compute("nn.depth_to_space")
def compute_depth_to_space(attrs, inputs, out_type):
    """``topi.nn.depth_to_space``."""
    from kiln.topi import nn

    return [nn.depth_to_space(inputs[0], attrs.block_size, attrs.layout, attrs.mode)]


@register_compute("nn.space_to_depth")
def compute_space_to_depth(attrs, inputs, out_type):
    """``topi.nn.space_to_depth``."""
    from kiln.topi import nn

    return [nn.space_to_depth(inputs[0], attrs.block_size, attrs.layout)]


for _name in ("nn.upsampling", "nn.depth_to_space", "nn.space_to_depth"):
    register_injective_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
class _UpsamplingAsResize:
    """nn.upsampling expressed as resize attributes (TVM's topi does the same)."""

    cubic_alpha, cubic_exclude, extrapolation_value = -0.75, 0, 0.0

    def __init__(self, attrs) -> None:
        nearest = attrs.method == "nearest_neighbor"
        self.method = {"nearest_neighbor": "nearest_neighbor", "bilinear": "linear",
                       "bicubic": "cubic"}[attrs.method]
        self.coordinate_transformation_mode = (
            "align_corners" if attrs.align_corners else "asymmetric" if nearest else "half_pixel")
        self.rounding_method = "floor" if nearest else ""


@register_reference("nn.upsampling")
def reference_upsampling(attrs, args, out_type):
    """H and W resized to ``round(extent * scale)`` with the matching resize method."""
    from kiln.relay.op.image.image import resize_axis

    x = convert_array(args[0], attrs.layout, "NCHW").astype(np.float64)
    sizes = (int(round(x.shape[2] * attrs.scale_h)), int(round(x.shape[3] * attrs.scale_w)))
    resize = _UpsamplingAsResize(attrs)
    for axis, size in zip((2, 3), sizes):
        x = resize_axis(x, axis, size, resize, (0.0, 1.0))
    return convert_array(x.astype(reference_dtype(out_type)), "NCHW", attrs.layout)


@register_reference("nn.depth_to_space")
def reference_depth_to_space(attrs, args, out_type):
    """Channel blocks moved into space (DCR: depth-column-row order; CRD: column-row-depth)."""
    x = convert_array(args[0], attrs.layout, "NCHW")
    b = int(attrs.block_size)
    n, c, h, w = x.shape
    if attrs.mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:  # CRD
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return convert_array(y.reshape(n, c // (b * b), h * b, w * b), "NCHW", attrs.layout)


@register_reference("nn.space_to_depth")
def reference_space_to_depth(attrs, args, out_type):
    """Spatial blocks moved into channels."""
    x = convert_array(args[0], attrs.layout, "NCHW")
    b = int(attrs.block_size)
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return convert_array(y.reshape(n, c * b * b, h // b, w // b), "NCHW", attrs.layout)


# ---- VM shape functions ---------------------------------------------------------------------
for _name in ("nn.upsampling", "nn.depth_to_space", "nn.space_to_depth"):
    register_shape_func(_name, False, shape_func_same_batch)
