"""The ``dyn.*`` operators: variants whose shape-like arguments are tensors, not attributes.

Entry points: the registered ops ``dyn.reshape``, ``dyn.broadcast_to``, ``dyn.expand_dims``,
``dyn.full``, ``dyn.zeros``, ``dyn.ones``, ``dyn.one_hot``, ``dyn.squeeze``,
``dyn.strided_slice``, ``dyn.tile`` (the variants of ``dyn.topk``, ``dyn.image.resize2d``,
``dyn.nn.pad`` and ``dyn.nn.upsampling`` are in :mod:`.dyn_nn`), and the helpers
:func:`shape_tensor_length`, :func:`all_any`, :func:`tensor_ints`, :func:`tensor_scalar`,
:func:`element_dims`, :func:`scalar_element` they share. Users reach them through the static
constructors (``relay.reshape`` with an Expr ``newshape`` …), as in TVM; ``DynamicToStatic``
turns them back when the shapes are constants.

Their relations know the output *rank* (from the static length of the shape tensor) but not
the extents, which are ``Any``; the VM computes them with a data-dependent shape function,
registered here with each op's compute (over the extents the VM binds), reference NumPy rule
(the static twin's rule with the tensors read as attrs) and run-time value requirement.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.creation import one_hot_rel
from kiln.relay.op.creation import reference_one_hot as reference_static_one_hot
from kiln.relay.op.op import (
    BROADCAST,
    ELEMWISE,
    INJECTIVE,
    OUT_ELEMWISE_FUSABLE,
    define_op,
    register_compute,
    register_injective_schedule,
    register_reference,
    register_shape_func,
    register_shape_requirement,
)
from kiln.relay.op.rule_util import (
    AttrsWith,
    checked,
    i64,
    numpy_dtype,
    out_dtype,
    out_shape,
    product,
)
from kiln.relay.op.slicing import reference_strided_slice as reference_static_strided_slice
from kiln.relay.op.type_relations import Any as DynDim
from kiln.relay.op.type_relations import dims, fail, is_static, tensor_arg, tensor_type
from kiln.runtime.error import TVMError


def shape_tensor_length(types, index: int, op_name: str, what: str) -> int:
    """The static length of the 1-D shape-like tensor ``types[index]`` (the output rank)."""
    shape = dims(tensor_arg(types, index, op_name))
    if len(shape) != 1 or not is_static(shape[0]):
        fail(f"{op_name}: {what} must be a 1-D tensor of static length, got shape {shape}")
    return shape[0]


def all_any(rank: int) -> list:
    """``rank`` dims, each ``Any``."""
    return [DynDim() for _ in range(rank)]


def _reshape_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    return tensor_type(all_any(shape_tensor_length(types, 1, op_name, "newshape")), data.dtype)


def _broadcast_to_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    rank = shape_tensor_length(types, 1, op_name, "shape")
    if rank < len(data.shape):
        fail(f"{op_name}: cannot broadcast rank {len(data.shape)} to rank {rank}")
    return tensor_type(all_any(rank), data.dtype)


def _expand_dims_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    if tensor_arg(types, 1, op_name).shape:
        fail(f"{op_name}: axis must be a scalar tensor")
    return tensor_type(all_any(len(data.shape) + int(attrs.num_newaxis)), data.dtype)


def _full_rel(types, attrs, op_name):
    fill = tensor_arg(types, 0, op_name)
    if fill.shape:
        fail(f"{op_name}: fill value must be a scalar")
    rank = shape_tensor_length(types, 1, op_name, "shape")
    return tensor_type(all_any(rank), attrs.dtype or fill.dtype)


def _init_rel(types, attrs, op_name):
    return tensor_type(all_any(shape_tensor_length(types, 0, op_name, "shape")), attrs.dtype)


def _squeeze_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    count = shape_tensor_length(types, 1, op_name, "axis")
    if count > len(data.shape):
        fail(f"{op_name}: cannot squeeze {count} axes of a rank-{len(data.shape)} tensor")
    return tensor_type(all_any(len(data.shape) - count), data.dtype)


def _strided_slice_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    for index, what in ((1, "begin"), (2, "end"), (3, "strides")):
        length = shape_tensor_length(types, index, op_name, what)
        if length > len(data.shape):
            fail(f"{op_name}: {what} has {length} entries for a rank-{len(data.shape)} tensor")
    return tensor_type(all_any(len(data.shape)), data.dtype)


def _tile_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    rank = max(len(data.shape), shape_tensor_length(types, 1, op_name, "reps"))
    return tensor_type(all_any(rank), data.dtype)


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


# ---- computes: the output extents are shape variables the VM binds from the shape functions --
def compute_reshape_to_out_type(attrs, inputs, out_type):
    """The data reshaped (row-major order kept) to the output's run-time extents; adding or
    dropping extent-1 axes is such a reshape too."""
    from kiln.topi import dynamic

    return [dynamic.reshape(inputs[0], out_shape(out_type))]


for _name in ("dyn.reshape", "dyn.expand_dims", "dyn.squeeze"):
    register_compute(_name, compute_reshape_to_out_type)


@register_compute("dyn.broadcast_to")
def compute_broadcast_to(attrs, inputs, out_type):
    """The data broadcast to the run-time shape."""
    from kiln.topi import dynamic

    return [dynamic.broadcast_to(inputs[0], out_shape(out_type))]


def _fill_compute(value: int | None) -> Any:
    """The compute of a fill of ``value`` (None: the fill value is argument 0)."""
    def compute(attrs, inputs, out_type):
        from kiln.topi import dynamic

        fill = inputs[0] if value is None else value
        return [dynamic.full(out_shape(out_type), out_dtype(out_type), fill)]

    compute.__name__ = compute.__qualname__ = f"compute_fill_{value}"
    return compute


register_compute("dyn.zeros", _fill_compute(0))
register_compute("dyn.ones", _fill_compute(1))
register_compute("dyn.full", _fill_compute(None))


@register_compute("dyn.tile")
def compute_tile(attrs, inputs, out_type):
    """The data tiled to the run-time shape."""
    from kiln.topi import dynamic

    return [dynamic.tile(inputs[0], out_shape(out_type))]


@register_compute("dyn.one_hot")
def compute_one_hot(attrs, inputs, out_type):
    """One-hot with the run-time depth (the output's extent on the axis)."""
    from kiln.topi import dynamic

    return [dynamic.one_hot(inputs[0], inputs[1], inputs[2], out_shape(out_type),
                            int(attrs.axis), out_dtype(out_type))]


@register_compute("dyn.strided_slice")
def compute_strided_slice(attrs, inputs, out_type):
    """A slice whose begin/end/strides are tensors read at run time."""
    from kiln.topi import dynamic

    ndim = len(inputs[0].shape)
    spec = [dynamic.tensor_values(bound, ndim) for bound in inputs[1:4]]
    return [dynamic.strided_slice(inputs[0], *spec, out_shape(out_type))]


for _name in ("dyn.reshape", "dyn.expand_dims", "dyn.squeeze", "dyn.broadcast_to",
              "dyn.zeros", "dyn.ones", "dyn.full", "dyn.tile", "dyn.one_hot",
              "dyn.strided_slice"):
    register_injective_schedule(_name)


# ---- reference semantics (NumPy): the static op's rule with the tensors read as attrs -------
def tensor_ints(value: Any) -> list[int]:
    """A shape-like tensor's values as ints."""
    return [int(v) for v in np.asarray(value).reshape(-1)]


def tensor_scalar(value: Any) -> Any:
    """The one value of a scalar tensor."""
    return np.asarray(value).item()


@register_reference("dyn.reshape")
def reference_reshape(attrs, args, out_type):
    """``np.reshape`` to the resolved run-time new shape."""
    from kiln.topi.newshape import infer_newshape

    return np.reshape(args[0], infer_newshape(args[0].shape, tensor_ints(args[1]),
                                              bool(getattr(attrs, "allowzero", False))))


@register_reference("dyn.broadcast_to")
def reference_broadcast_to(attrs, args, out_type):
    """``np.broadcast_to`` the run-time shape (a copy)."""
    return np.broadcast_to(args[0], tensor_ints(args[1])).copy()


@register_reference("dyn.zeros")
def reference_zeros(attrs, args, out_type):
    """Zeros of the run-time shape."""
    return np.zeros(tensor_ints(args[0]), dtype=numpy_dtype(attrs.dtype))


@register_reference("dyn.ones")
def reference_ones(attrs, args, out_type):
    """Ones of the run-time shape."""
    return np.ones(tensor_ints(args[0]), dtype=numpy_dtype(attrs.dtype))


@register_reference("dyn.full")
def reference_full(attrs, args, out_type):
    """The fill value in the run-time shape."""
    return np.full(tensor_ints(args[1]), tensor_scalar(args[0]), dtype=numpy_dtype(attrs.dtype))


@register_reference("dyn.expand_dims")
def reference_expand_dims(attrs, args, out_type):
    """``num_newaxis`` unit axes inserted at the run-time axis."""
    x, axis = args[0], int(tensor_scalar(args[1]))
    axis = axis if axis >= 0 else x.ndim + axis + 1
    for _ in range(int(attrs.num_newaxis)):
        x = np.expand_dims(x, axis)
    return x


@register_reference("dyn.squeeze")
def reference_squeeze(attrs, args, out_type):
    """``np.squeeze`` of the run-time axes."""
    return np.squeeze(args[0], axis=tuple(tensor_ints(args[1])))


@register_reference("dyn.tile")
def reference_tile(attrs, args, out_type):
    """``np.tile`` by the run-time repeats."""
    return np.tile(args[0], tensor_ints(args[1]))


@register_reference("dyn.one_hot")
def reference_one_hot(attrs, args, out_type):
    """``one_hot``'s rule with the run-time depth."""
    return reference_static_one_hot(AttrsWith(attrs, depth=int(tensor_scalar(args[3]))), args[:3],
                                    out_type)


@register_reference("dyn.strided_slice")
def reference_strided_slice(attrs, args, out_type):
    """``strided_slice``'s rule with the run-time bounds (every axis)."""
    data, begin, end, strides = args
    return reference_static_strided_slice(
        AttrsWith(attrs, begin=tensor_ints(begin), end=tensor_ints(end),
                  strides=tensor_ints(strides), axes=None),
        [data], out_type)


# ---- VM shape functions: data dependent, they read the shape-like tensors -------------------
def element_dims(tensor: Any, count: int) -> list[Any]:
    """The first ``count`` elements of a 1-D tensor (a te placeholder) as int64 dims."""
    from kiln import tir

    return [tir.Cast("int64", tensor[k]) for k in range(count)]


def scalar_element(tensor: Any) -> Any:
    """The one element of a 0-d or single-element tensor."""
    return tensor(*([0] * len(tensor.shape)))


def _shape_from_input(index: int) -> Any:
    """dyn.zeros/ones/full: the output shape is the values of input ``index``."""
    def rule(attrs, ins, outs, data):
        return [element_dims(data[index], len(outs[0].shape))]

    return rule


@register_shape_func("dyn.broadcast_to", True)
def shape_func_dyn_broadcast_to(attrs, ins, outs, data):
    """The values of the shape tensor, which the input must broadcast to."""
    from kiln import tir

    out = element_dims(data[1], len(outs[0].shape))
    lead = len(out) - len(ins[0])
    fits = [tir.any(d == i64(1), d == out[lead + k]) for k, d in enumerate(ins[0])]
    return [checked(out, tir.all(*fits) if fits else tir.const(True, "bool"))]


@register_shape_func("dyn.reshape", True)
def shape_func_dyn_reshape(attrs, ins, outs, data):
    """reshape to the run-time values of a newshape tensor: 0 copies the input dimension at
    its position (unless ``allowzero``), -1 infers one extent; the element count must match.
    -1 is resolved as :func:`~kiln.topi.newshape.infer_newshape` resolves it: the input dims
    no 0 copied over the output dims no 0 copied (so (0, 3, 4) with (0, -1) gives (0, 12))."""
    from kiln import tir

    src, codes = ins[0], element_dims(data[1], len(outs[0].shape))
    one, minus_one = i64(1), i64(-1)
    copy_zero = not bool(getattr(attrs, "allowzero", False))
    copied = [tir.all(c == i64(0), tir.const(copy_zero and k < len(src), "bool"))
              for k, c in enumerate(codes)]
    resolved = [tir.Select(copied[k], src[k], c) if copy_zero and k < len(src) else c
                for k, c in enumerate(codes)]
    total = product([tir.Select(copied[k], one, d) if k < len(codes) else d
                     for k, d in enumerate(src)])
    known = product([tir.Select(tir.any(copied[k], r == minus_one), one, r)
                     for k, r in enumerate(resolved)])
    inferred = tir.floordiv(total, tir.Max(known, one))
    out = [tir.Select(r == minus_one, inferred, r) for r in resolved]
    inferred_count = sum((tir.Cast("int64", r == minus_one) for r in resolved), i64(0))
    return [checked(out, tir.all(product(out) == product(src), inferred_count <= one))]


@register_shape_func("dyn.tile", True)
def shape_func_dyn_tile(attrs, ins, outs, data):
    """Each dim times the run-time repeat count (both padded with leading ones)."""
    data_dims = list(ins[0])
    reps = element_dims(data[1], int(ins[1][0].value))  # the reps tensor has a static length
    ndim = max(len(data_dims), len(reps))
    data_dims = [i64(1)] * (ndim - len(data_dims)) + data_dims
    reps = [i64(1)] * (ndim - len(reps)) + reps
    return [[d * r for d, r in zip(data_dims, reps)]]


@register_shape_func("dyn.one_hot", True)
def shape_func_dyn_one_hot(attrs, ins, outs, data):
    """The indices' dims with the run-time depth inserted at the axis."""
    from kiln import tir

    indices = list(ins[0])
    axis = int(attrs.axis)
    axis = len(indices) if axis == -1 else axis
    depth = tir.Cast("int64", scalar_element(data[3]))
    return [indices[:axis] + [depth] + indices[axis:]]


@register_shape_func("dyn.strided_slice", True)
def shape_func_dyn_strided_slice(attrs, ins, outs, data):
    """Lengths of a slice whose begin/end/strides are run-time tensors (one value per axis;
    a strides tensor of length 1 applies to every axis)."""
    from kiln.topi.dynamic import slice_bounds

    dims = list(ins[0])
    begin, end, strides = (element_dims(t, int(n[0].value)) for t, n in zip(data[1:4], ins[1:4]))
    strides = strides * len(dims) if len(strides) == 1 else strides
    if not len(begin) == len(end) == len(strides) == len(dims):
        raise TVMError(f"dyn.strided_slice: begin, end and strides need {len(dims)} values "
                       f"each, got {len(begin)}, {len(end)} and {len(strides)}")
    return [[length for _, _, length in slice_bounds(dims, begin, end, strides)]]


@register_shape_func("dyn.expand_dims", True)
def shape_func_dyn_expand_dims(attrs, ins, outs, data):
    """num_newaxis ones inserted at the run-time axis (negative counts from the end)."""
    from kiln import tir

    dims, new = list(ins[0]), int(attrs.num_newaxis)
    axis = tir.Cast("int64", scalar_element(data[1]))
    axis = tir.Select(axis < i64(0), axis + i64(len(dims) + 1), axis)
    out = []
    for j in range(len(dims) + new):
        before = dims[j] if j < len(dims) else i64(1)
        after = dims[j - new] if j >= new else i64(1)
        out.append(tir.Select(i64(j) < axis, before,
                              tir.Select(i64(j) < axis + i64(new), i64(1), after)))
    return [out]


@register_shape_func("dyn.squeeze", True)
def shape_func_dyn_squeeze(attrs, ins, outs, data):
    """The dims left after dropping the run-time axes (each must be 1)."""
    from kiln import tir

    dims = list(ins[0])
    count = int(ins[1][0].value) if ins[1] else 0
    axes = [tir.Cast("int64", data[1][k]) for k in range(count)]
    axes = [tir.Select(a < i64(0), a + i64(len(dims)), a) for a in axes]

    def dropped(k):
        flag = tir.const(False, "bool")
        for a in axes:
            flag = tir.any(flag, a == i64(k))
        return flag

    # output dim j is the j-th kept input dim: kept index = j + (dropped axes at or before it)
    out = []
    for j in range(len(dims) - count):
        value = dims[-1]
        for k in range(len(dims) - 1, -1, -1):
            kept_before = i64(0)
            for m in range(k):
                kept_before = kept_before + tir.Select(dropped(m), i64(0), i64(1))
            is_jth = tir.all(tir.Not(dropped(k)), kept_before == i64(j))
            value = tir.Select(is_jth, dims[k], value)
        out.append(value)
    # every axis named once, in range, and of extent 1
    dropped_count = sum((tir.Cast("int64", dropped(k)) for k in range(len(dims))), i64(0))
    ones = [tir.any(tir.Not(dropped(k)), d == i64(1)) for k, d in enumerate(dims)]
    return [checked(out, tir.all(dropped_count == i64(count), *ones))]


for _name, _index in (("dyn.zeros", 0), ("dyn.ones", 0), ("dyn.full", 1)):
    register_shape_func(_name, True, _shape_from_input(_index))


# What the run-time values must satisfy, for the message of a failed shape function.
for _name, _requirement in (
        ("dyn.reshape", "the new shape must keep the element count, with at most one -1"),
        ("dyn.zeros", "sizes must be non-negative"),
        ("dyn.ones", "sizes must be non-negative"),
        ("dyn.full", "sizes must be non-negative"),
        ("dyn.broadcast_to", "each input extent must be 1 or the target extent"),
        ("dyn.tile", "repeats must be non-negative"),
        ("dyn.one_hot", "depth must be non-negative"),
        ("dyn.strided_slice", "strides must be non-zero"),
        ("dyn.squeeze", "each axis must be in range, named once, and of extent 1")):
    register_shape_requirement(_name, _requirement)


DYN_OPS = (
    "dyn.reshape", "dyn.broadcast_to", "dyn.expand_dims", "dyn.full", "dyn.zeros",
    "dyn.ones", "dyn.one_hot", "dyn.squeeze", "dyn.strided_slice", "dyn.tile", "dyn.topk",
    "dyn.image.resize2d", "dyn.nn.pad", "dyn.nn.upsampling",
)

__all__ = ["DYN_OPS", "shape_tensor_length", "all_any", "tensor_ints", "tensor_scalar",
           "scalar_element", "element_dims"]
