"""Shape-manipulating ("transform") operators, under TVM's ``relay.op.transform`` path.

Entry points (TVM's names and signatures): :func:`layout_transform`, :func:`cast`,
:func:`cast_like`, :func:`reinterpret`, :func:`sequence_mask`, defined here; and, re-exported
from the family module that defines each: :mod:`.reshape` (reshape, reverse_reshape,
reshape_like, transpose, squeeze, expand_dims), :mod:`.join` (concatenate, stack, split),
:mod:`.indexing` (take, gather, gather_nd, scatter_elements, scatter_nd, where),
:mod:`.slicing` (strided_slice, slice_like, reverse), :mod:`.broadcast` (broadcast_to,
broadcast_to_like, collapse_sum_like, collapse_sum_to, tile, repeat) and :mod:`.creation`
(arange, full, full_like, one_hot). (zeros/ones/*_like, clip, copy, shape_of and ndarray_size
live in :mod:`kiln.relay.op.tensor`, as in TVM.)

Per op defined here this module registers its type relation and pattern kind, TE compute (the
injective schedule), reference NumPy rule, VM shape function and gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.
from kiln.relay.op.broadcast import (
    broadcast_to,
    broadcast_to_like,
    collapse_sum_like,
    collapse_sum_to,
    repeat,
    tile,
)
from kiln.relay.op.creation import arange, full, full_like, one_hot
from kiln.relay.op.indexing import gather, gather_nd, scatter_elements, scatter_nd, take, where
from kiln.relay.op.join import concatenate, split, stack
from kiln.relay.op.layout import convert_array, convert_shape
from kiln.relay.op.op import (
    ELEMWISE,
    INJECTIVE,
    call,
    define_op,
    register_compute,
    register_gradient,
    register_injective_schedule,
    register_reference,
    register_shape_func,
)
from kiln.relay.op.reshape import (
    expand_dims,
    reshape,
    reshape_like,
    reverse_reshape,
    squeeze,
    transpose,
)
from kiln.relay.op.rule_util import (
    i64,
    out_dtype,
    reference_dtype,
    same_shape_as_input,
)
from kiln.relay.op.slicing import reverse, slice_like, strided_slice
from kiln.relay.op.type_relations import (
    dims,
    dims_equal,
    fail,
    is_any,
    shape_str,
    tensor_arg,
    tensor_type,
)
from kiln.runtime.dtype import DataType, DataTypeCode


# ---- layout and broadcasting --------------------------------------------------------------------
def _layout_transform_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    out = convert_shape(dims(data), attrs.src_layout, attrs.dst_layout, op_name)
    return tensor_type(out, data.dtype)


define_op("layout_transform", _layout_transform_rel, INJECTIVE, 1, A.LayoutTransformAttrs,
          "change the data layout (e.g. NCHW -> NCHW8c)", 3)


def layout_transform(data: Any, src_layout: str, dst_layout: str) -> Any:
    """Transform ``data`` from layout ``src_layout`` to ``dst_layout``."""
    return call("layout_transform", [data], A.LayoutTransformAttrs(src_layout=src_layout,
                                                                   dst_layout=dst_layout))


# ---- dtype --------------------------------------------------------------------------------------
def _cast_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    if not attrs.dtype:
        fail(f"{op_name}: target dtype is empty")
    return tensor_type(dims(data), attrs.dtype)


def _cast_like_rel(types, attrs, op_name):
    data, like = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    return tensor_type(dims(data), like.dtype)


define_op("cast", _cast_rel, ELEMWISE, 1, A.CastAttrs, "convert the dtype", 3)
define_op("cast_like", _cast_like_rel, ELEMWISE, 2, None, "convert to another's dtype", 3)
define_op("reinterpret", _cast_rel, ELEMWISE, 1, A.CastAttrs, "reinterpret the bits", 5)


def cast(data: Any, dtype: str) -> Any:
    """Convert ``data`` to ``dtype``."""
    return call("cast", [data], A.CastAttrs(dtype=str(dtype)))


def cast_like(data: Any, dtype_like: Any) -> Any:
    """Convert ``data`` to the dtype of ``dtype_like``."""
    return call("cast_like", [data, dtype_like])


def reinterpret(data: Any, dtype: str) -> Any:
    """Reinterpret the bits of ``data`` as ``dtype``."""
    return call("reinterpret", [data], A.CastAttrs(dtype=str(dtype)))


# ---- misc ---------------------------------------------------------------------------------------
def _sequence_mask_rel(types, attrs, op_name):
    data, length = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    d = dims(data)
    if int(attrs.axis) not in (0, 1) or len(d) < 2:
        fail(f"{op_name}: axis must be 0 or 1 on a tensor of rank >= 2")
    batch = d[1 - int(attrs.axis)]
    ln = dims(length)
    if len(ln) != 1 or not (is_any(ln[0]) or is_any(batch) or dims_equal(ln[0], batch)):
        fail(f"{op_name}: valid_length must have shape ({batch},), got {shape_str(ln)}")
    return data


define_op("sequence_mask", _sequence_mask_rel, INJECTIVE, 2, A.SequenceMaskAttrs,
          "mask positions past each sequence's length", 10)


def sequence_mask(data: Any, valid_length: Any, mask_value: float = 0, axis: int = 0) -> Any:
    """Set ``data`` past ``valid_length`` (per batch entry) along ``axis`` to ``mask_value``."""
    return call("sequence_mask", [data, valid_length],
                A.SequenceMaskAttrs(mask_value=float(mask_value), axis=int(axis)))



# ---- computes (TOPI), all with the injective schedule ---------------------------------------
@register_compute("layout_transform")
def compute_layout_transform(attrs, inputs, out_type):
    """``topi.layout_transform`` between the attrs' layouts."""
    from kiln import topi

    return [topi.layout_transform(inputs[0], attrs.src_layout, attrs.dst_layout)]


@register_compute("cast")
@register_compute("cast_like")
def compute_cast(attrs, inputs, out_type):
    """``topi.cast`` to the result dtype."""
    from kiln import topi

    return [topi.cast(inputs[0], out_dtype(out_type))]


@register_compute("reinterpret")
def compute_reinterpret(attrs, inputs, out_type):
    """``topi.reinterpret`` as the result dtype."""
    from kiln import topi

    return [topi.reinterpret(inputs[0], out_dtype(out_type))]


@register_compute("sequence_mask")
def compute_sequence_mask(attrs, inputs, out_type):
    """``topi.sequence_mask``."""
    from kiln import topi

    return [topi.sequence_mask(inputs[0], inputs[1], attrs.mask_value, attrs.axis)]


for _name in ("layout_transform", "cast", "cast_like", "reinterpret", "sequence_mask"):
    register_injective_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
@register_reference("layout_transform")
def reference_layout_transform(attrs, args, out_type):
    """:func:`~kiln.relay.op.layout.convert_array` between the attrs' layouts."""
    return convert_array(args[0], attrs.src_layout, attrs.dst_layout)


@register_reference("cast")
@register_reference("cast_like")
def reference_cast(attrs, args, out_type):
    """:func:`cast_array` to the result dtype."""
    return cast_array(args[0], DataType(out_type.dtype))


def cast_array(x: np.ndarray, dtype: DataType) -> np.ndarray:
    """Relay ``cast`` of ``x`` to ``dtype``: NumPy's ``astype``, except that the 8-bit floats
    saturate (ONNX Cast's default: NaN stays NaN, ±inf and finite values beyond the largest
    become ± that value), and that the ml_dtypes types (bfloat16, 8-bit floats, sub-byte
    integers) convert through float32, which holds each of them exactly. Integers narrower
    than a byte wrap (keep the low bits, as int8 does); a float becomes one by truncation
    toward zero, NaN and ±inf become 0."""
    target = dtype.numpy_dtype
    if _is_ml_dtype(DataType.from_numpy(x.dtype)) and x.dtype != target:
        x = x.astype(np.float32)
    if dtype.is_float8:
        import ml_dtypes

        largest = float(ml_dtypes.finfo(target).max)
        x = np.clip(x.astype(np.float64) if x.dtype.kind in "iub" else x, -largest, largest)
    elif _is_ml_dtype(dtype) and not dtype.is_float and x.dtype.kind == "f":
        x = np.where(np.isfinite(x), np.trunc(x), 0)
    return x.astype(target)


def _is_ml_dtype(t: DataType) -> bool:
    return t.is_float8 or t.type_code == DataTypeCode.BFLOAT or (t.bits < 8 and not t.is_bool)


@register_reference("reinterpret")
def reference_reinterpret(attrs, args, out_type):
    """The same bytes viewed as the result dtype."""
    return args[0].view(reference_dtype(out_type))


@register_reference("sequence_mask")
def reference_sequence_mask(attrs, args, out_type):
    """``mask_value`` at the steps at or past each batch entry's length."""
    data, lengths = args
    axis = int(attrs.axis)
    steps = np.arange(data.shape[axis])
    shape = [1] * data.ndim
    shape[axis] = -1
    lshape = [1] * data.ndim
    lshape[1 - axis] = -1  # the batch axis
    mask = steps.reshape(shape) < lengths.reshape(lshape)
    return np.where(mask, data, np.asarray(attrs.mask_value, dtype=data.dtype))


# ---- VM shape functions ---------------------------------------------------------------------
@register_shape_func("layout_transform", False)
def shape_func_layout_transform(attrs, in_dims, out_types):
    """The dims regrouped from the source layout to the destination layout."""
    from kiln.topi.transform import layout_transform_shape

    out = layout_transform_shape(in_dims[0], attrs.src_layout, attrs.dst_layout)
    return [[i64(v) if isinstance(v, int) else v for v in out]]


for _name in ("cast", "sequence_mask"):
    register_shape_func(_name, False, same_shape_as_input)


# ---- gradients ------------------------------------------------------------------------------
@register_gradient("cast")
def gradient_cast(orig, grad):
    """The adjoint cast back to the data's dtype."""
    return [cast_like(grad, orig.args[0])]


__all__ = [
    "reshape", "reverse_reshape", "reshape_like", "transpose", "squeeze", "expand_dims",
    "concatenate", "stack", "split", "take", "gather", "gather_nd", "scatter_elements",
    "scatter_nd", "strided_slice", "slice_like", "tile", "repeat", "reverse", "where",
    "one_hot", "arange", "full", "full_like", "layout_transform", "broadcast_to",
    "broadcast_to_like", "collapse_sum_like", "collapse_sum_to", "cast", "cast_like",
    "reinterpret", "sequence_mask", "cast_array",
]
