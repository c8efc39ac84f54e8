"""The ``dyn.*`` operators: variants whose shape-like arguments are tensors, not attributes.

Entry points: the registered ops ``dyn.reshape``, ``dyn.broadcast_to``, ``dyn.expand_dims``,
``dyn.full``, ``dyn.zeros``, ``dyn.ones``, ``dyn.one_hot``, ``dyn.squeeze``,
``dyn.strided_slice``, ``dyn.tile``, ``dyn.topk``, ``dyn.image.resize2d``, ``dyn.nn.pad``,
``dyn.nn.upsampling``. Users reach them through the static constructors (``relay.reshape`` with
an Expr ``newshape`` …), as in TVM; ``DynamicToStatic`` turns them back when the shapes are
constants.

Their relations know the output *rank* (from the static length of the shape tensor) but not
the extents, which are ``Any``; the VM computes them with a data-dependent shape function.
"""

from __future__ import annotations

from kiln.relay.op import op_attrs as A
from kiln.relay.op.algorithm import topk_rel
from kiln.relay.op.image.image import resize2d_rel
from kiln.relay.op.nn.nn import upsampling_rel
from kiln.relay.op.op import (
    BROADCAST,
    ELEMWISE,
    INJECTIVE,
    OPAQUE,
    OUT_ELEMWISE_FUSABLE,
    define_op,
)
from kiln.relay.op.transform import one_hot_rel
from kiln.relay.op.type_relations import Any as DynDim
from kiln.relay.op.type_relations import dims, fail, is_static, tensor_arg, tensor_type


def shape_tensor_length(types, index: int, op_name: str, what: str) -> int:
    """The static length of the 1-D shape-like tensor ``types[index]`` (the output rank)."""
    shape = dims(tensor_arg(types, index, op_name))
    if len(shape) != 1 or not is_static(shape[0]):
        fail(f"{op_name}: {what} must be a 1-D tensor of static length, got shape {shape}")
    return shape[0]


def _all_any(rank: int) -> list:
    return [DynDim() for _ in range(rank)]


def _reshape_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    return tensor_type(_all_any(shape_tensor_length(types, 1, op_name, "newshape")), data.dtype)


def _broadcast_to_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    rank = shape_tensor_length(types, 1, op_name, "shape")
    if rank < len(data.shape):
        fail(f"{op_name}: cannot broadcast rank {len(data.shape)} to rank {rank}")
    return tensor_type(_all_any(rank), data.dtype)


def _expand_dims_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    if tensor_arg(types, 1, op_name).shape:
        fail(f"{op_name}: axis must be a scalar tensor")
    return tensor_type(_all_any(len(data.shape) + int(attrs.num_newaxis)), data.dtype)


def _full_rel(types, attrs, op_name):
    fill = tensor_arg(types, 0, op_name)
    if fill.shape:
        fail(f"{op_name}: fill value must be a scalar")
    rank = shape_tensor_length(types, 1, op_name, "shape")
    return tensor_type(_all_any(rank), attrs.dtype or fill.dtype)


def _init_rel(types, attrs, op_name):
    return tensor_type(_all_any(shape_tensor_length(types, 0, op_name, "shape")), attrs.dtype)


def _squeeze_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    count = shape_tensor_length(types, 1, op_name, "axis")
    if count > len(data.shape):
        fail(f"{op_name}: cannot squeeze {count} axes of a rank-{len(data.shape)} tensor")
    return tensor_type(_all_any(len(data.shape) - count), data.dtype)


def _strided_slice_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    for index, what in ((1, "begin"), (2, "end"), (3, "strides")):
        length = shape_tensor_length(types, index, op_name, what)
        if length > len(data.shape):
            fail(f"{op_name}: {what} has {length} entries for a rank-{len(data.shape)} tensor")
    return tensor_type(_all_any(len(data.shape)), data.dtype)


def _tile_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    rank = max(len(data.shape), shape_tensor_length(types, 1, op_name, "reps"))
    return tensor_type(_all_any(rank), data.dtype)


def _pad_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    width = dims(tensor_arg(types, 1, op_name))
    if len(width) != 2 or (is_static(width[0]) and width[0] != len(data.shape)):
        fail(f"{op_name}: pad_width must have shape ({len(data.shape)}, 2), got {width}")
    if tensor_arg(types, 2, op_name).shape:
        fail(f"{op_name}: pad_value must be a scalar")
    return tensor_type(_all_any(len(data.shape)), data.dtype)


define_op("dyn.reshape", _reshape_rel, INJECTIVE, 2, A.ReshapeAttrs, "reshape", 3)
define_op("dyn.broadcast_to", _broadcast_to_rel, BROADCAST, 2, A.InitOpAttrs, "broadcast", 4)
define_op("dyn.expand_dims", _expand_dims_rel, INJECTIVE, 2, A.DynExpandDimsAttrs,
          "insert axes", 1)
define_op("dyn.full", _full_rel, ELEMWISE, 2, A.InitOpAttrs, "fill", 3)
define_op("dyn.zeros", _init_rel, ELEMWISE, 1, A.InitOpAttrs, "zeros", 3)
define_op("dyn.ones", _init_rel, ELEMWISE, 1, A.InitOpAttrs, "ones", 3)
define_op("dyn.one_hot", one_hot_rel, OUT_ELEMWISE_FUSABLE, 4, A.OneHotAttrs, "one-hot", 10)
define_op("dyn.squeeze", _squeeze_rel, INJECTIVE, 2, A.SqueezeAttrs, "drop unit axes", 3)
define_op("dyn.strided_slice", _strided_slice_rel, INJECTIVE, 4, A.StridedSliceAttrs,
          "slice", 4)
define_op("dyn.tile", _tile_rel, INJECTIVE, 2, A.TileAttrs, "tile", 3)
define_op("dyn.topk", topk_rel, OPAQUE, 2, A.TopKAttrs, "top k", 6)
define_op("dyn.image.resize2d", resize2d_rel, INJECTIVE, 3, A.Resize2DAttrs, "resize", 5)
define_op("dyn.nn.pad", _pad_rel, INJECTIVE, 3, A.PadAttrs, "pad", 2)
define_op("dyn.nn.upsampling", upsampling_rel, INJECTIVE, 3, A.UpSamplingAttrs,
          "upsample", 2)

DYN_OPS = (
    "dyn.reshape", "dyn.broadcast_to", "dyn.expand_dims", "dyn.full", "dyn.zeros",
    "dyn.ones", "dyn.one_hot", "dyn.squeeze", "dyn.strided_slice", "dyn.tile", "dyn.topk",
    "dyn.image.resize2d", "dyn.nn.pad", "dyn.nn.upsampling",
)

__all__ = ["DYN_OPS", "shape_tensor_length"]
