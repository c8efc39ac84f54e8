"""Shape rules (``FShapeFunc``) of the operators, registered in the op registry on import.

Entry points: :data:`SHAPE_RULES` (rules over input dimensions), :data:`DATA_DEPENDENT_RULES`
(rules that read input values, TVM's ``TShapeDataDependent``), :data:`VALUE_REQUIREMENTS`,
:func:`shape_rule`; :func:`broadcast_dims`, :func:`product` and :func:`i64` come from
:mod:`kiln.relay.op.rule_util`. Op family modules register their ops' shape functions beside
the ops (``register_shape_func``); the tables here hold the rules of ops not moved yet.

A rule is ``rule(attrs, in_dims, out_types) -> out_dims`` — ``in_dims`` holds, per flattened
input tensor, its dimensions as int64 ``PrimExpr``\\ s, and ``out_dims`` the same per output.
A data-dependent rule takes a fourth argument, the input tensors themselves (te placeholders),
and may read their elements (``arange`` reads start/stop/step, ``argwhere`` counts non-zeros).
:mod:`kiln.relay.vm.shape_func` composes the rules over a fused primitive function and turns
the expressions into one kernel. Run-time values a rule cannot accept (a negative size, a
reshape that changes the element count …) turn its extents into -1; the kernel then fails
with the op's entry in :data:`VALUE_REQUIREMENTS`.

Example
-------
>>> shape_rule("reshape") is not None
True
"""

from __future__ import annotations

from typing import Any

from kiln.ir.op import Op
from kiln.relay.op.rule_util import broadcast_dims, checked, i64, product
from kiln.runtime.error import TVMError
from kiln.topi.dynamic import attr_slice_spec, slice_bounds
from kiln.topi.transform import layout_transform_shape

__all__ = ["SHAPE_RULES", "DATA_DEPENDENT_RULES", "VALUE_REQUIREMENTS", "shape_rule",
           "broadcast_dims", "product", "i64"]


def _axes(axis: Any, ndim: int) -> list[int]:
    if axis is None:
        return list(range(ndim))
    axis = [axis] if isinstance(axis, int) else list(axis)
    return sorted(int(a) % ndim for a in axis)


# -- per-op rules: (attrs, in_dims, out_types) -> out_dims --------------------------------


def _as_dims(values: list[Any]) -> list[Any]:
    return [i64(v) if isinstance(v, int) else v for v in values]


def _concatenate(attrs, ins, outs):
    axis = int(attrs.axis) % len(ins[0])
    out = list(ins[0])
    total = ins[0][axis]
    for dims in ins[1:]:
        total = total + dims[axis]
    out[axis] = total
    return [out]


def _strided_slice(attrs, ins, outs):
    spec = attr_slice_spec(ins[0], list(attrs.begin), _list_or_none(attrs.end),
                           _list_or_none(attrs.strides), _list_or_none(attrs.axes),
                           getattr(attrs, "slice_mode", "end"))
    return [[length for _, _, length in slice_bounds(ins[0], *spec)]]


def _list_or_none(value: Any) -> list | None:
    return None if value is None else list(value)


def _take(attrs, ins, outs):
    data, indices = ins
    axis = getattr(attrs, "axis", None)
    if axis is None:
        return [list(indices)]
    axis = int(axis) % len(data)
    return [data[:axis] + list(indices) + data[axis + 1:]]


def _batch_flatten(attrs, ins, outs):
    return [[ins[0][0], product(ins[0][1:])]]


def _same_batch(attrs, ins, outs):
    """Ops (conv, pooling) whose only dynamic dimension is the batch of input 0."""
    out_type = outs[0]
    return [[ins[0][0]] + [i64(int(d)) if isinstance(getattr(d, "value", None), int)
                           else None for d in list(out_type.shape)[1:]]]


def _identity(attrs, ins, outs):
    return [list(ins[0])]


def _like_second(attrs, ins, outs):
    return [list(ins[1])]


def _static_attr_shape(attrs, ins, outs):
    return [[i64(int(d)) for d in attrs.shape]]


def _tile(attrs, ins, outs):
    data, reps = list(ins[0]), [int(r) for r in attrs.reps]
    ndim = max(len(data), len(reps))
    data = [i64(1)] * (ndim - len(data)) + data
    reps = [1] * (ndim - len(reps)) + reps
    return [[d * i64(r) for d, r in zip(data, reps)]]


def _repeat(attrs, ins, outs):
    out = list(ins[0])
    axis = int(attrs.axis) % len(out)
    out[axis] = out[axis] * i64(int(attrs.repeats))
    return [out]


def _split(attrs, ins, outs):
    from kiln import tir

    data = list(ins[0])
    axis = int(attrs.axis) % len(data)
    sections = attrs.indices_or_sections
    result = []
    if isinstance(sections, int):
        for _ in range(sections):
            out = list(data)
            out[axis] = tir.floordiv(data[axis], i64(sections))
            result.append(out)
        return result
    bounds = [0] + [int(i) for i in sections]
    for k, begin in enumerate(bounds):
        out = list(data)
        end = i64(bounds[k + 1]) if k + 1 < len(bounds) else data[axis]
        out[axis] = end - i64(begin)
        result.append(out)
    return result


def _stack(attrs, ins, outs):
    data = list(ins[0])
    axis = int(attrs.axis)
    axis = axis if axis >= 0 else len(data) + axis + 1
    return [data[:axis] + [i64(len(ins))] + data[axis:]]


def _pad(attrs, ins, outs):
    return [[d + i64(int(before) + int(after))
             for d, (before, after) in zip(ins[0], attrs.pad_width)]]


def _one_hot(attrs, ins, outs):
    indices = list(ins[0])
    axis = int(attrs.axis)
    axis = len(indices) if axis == -1 else axis
    return [indices[:axis] + [i64(int(attrs.depth))] + indices[axis:]]


def _topk(attrs, ins, outs):
    out = list(ins[0])
    axis = int(attrs.axis) % len(out)
    k = int(attrs.k) if attrs.k is not None else 0
    if k < 1:
        return [list(out) for _ in outs]
    valid = i64(k) <= out[axis]  # an Any axis shorter than k at run time
    out[axis] = i64(k)
    return [checked(list(out), valid) for _ in outs]


def _layout_transform(attrs, ins, outs):
    return [_as_dims(layout_transform_shape(ins[0], attrs.src_layout, attrs.dst_layout))]


def _slice_like(attrs, ins, outs):
    data, like = list(ins[0]), ins[1]
    axes = getattr(attrs, "axes", None)
    axes = range(min(len(data), len(like))) if not axes else [int(a) % len(data)
                                                              for a in axes]
    for a in axes:
        data[a] = like[a]
    return [data]


def _gather(attrs, ins, outs):
    return [list(ins[1])]


def _batch_norm(attrs, ins, outs):
    return [list(ins[0]), list(ins[3]), list(ins[4])][: len(outs)]


def _same_for_every_output(attrs, ins, outs):
    return [list(ins[0]) for _ in outs]


def _arange(attrs, ins, outs, data):
    """ceil((stop - start) / step), at least 0; reads the three scalar inputs."""
    from kiln import tir

    start, stop, step = (t() for t in data[:3])
    count = tir.ceil(tir.Cast("float64", stop - start) / tir.Cast("float64", step))
    return [[tir.Max(tir.Cast("int64", count), i64(0))]]


def _values_of(tensor: Any, count: int) -> list[Any]:
    from kiln import tir

    return [tir.Cast("int64", tensor[k]) for k in range(count)]


def _scalar_value(tensor: Any) -> Any:
    """The one element of a 0-d or single-element tensor."""
    return tensor(*([0] * len(tensor.shape)))


def _shape_from_input(index: int):
    """dyn.zeros/ones/full: the output shape is the values of input ``index``."""
    def rule(attrs, ins, outs, data):
        return [_values_of(data[index], len(outs[0].shape))]

    return rule


def _dyn_broadcast_to(attrs, ins, outs, data):
    """The values of the shape tensor, which the input must broadcast to."""
    from kiln import tir

    out = _values_of(data[1], len(outs[0].shape))
    lead = len(out) - len(ins[0])
    fits = [tir.any(d == i64(1), d == out[lead + k]) for k, d in enumerate(ins[0])]
    return [checked(out, tir.all(*fits) if fits else tir.const(True, "bool"))]


def _dyn_reshape(attrs, ins, outs, data):
    """reshape to the run-time values of a newshape tensor: 0 copies the input dimension at
    its position (unless ``allowzero``), -1 infers one extent; the element count must match.
    -1 is resolved as :func:`~kiln.topi.newshape.infer_newshape` resolves it: the input dims
    no 0 copied over the output dims no 0 copied (so (0, 3, 4) with (0, -1) gives (0, 12))."""
    from kiln import tir

    src, codes = ins[0], _values_of(data[1], len(outs[0].shape))
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


def _argwhere(attrs, ins, outs, data):
    """(number of non-zero elements, ndim): a counting stage inside the shape kernel."""
    from kiln import te, tir

    cond = data[0]
    axes = [te.reduce_axis((0, d), name=f"r{k}") for k, d in enumerate(cond.shape)]
    count = te.compute((1,), lambda _: te.sum(
        tir.Cast("int64", cond(*axes) != tir.const(0, cond.dtype)), axis=axes),
        name="nonzero_count")
    return [[count[0], i64(len(cond.shape))]]


def _dyn_tile(attrs, ins, outs, data):
    data_dims = list(ins[0])
    reps = _values_of(data[1], int(ins[1][0].value))  # the reps tensor has a static length
    ndim = max(len(data_dims), len(reps))
    data_dims = [i64(1)] * (ndim - len(data_dims)) + data_dims
    reps = [i64(1)] * (ndim - len(reps)) + reps
    return [[d * r for d, r in zip(data_dims, reps)]]


def _dyn_one_hot(attrs, ins, outs, data):
    from kiln import tir

    indices = list(ins[0])
    axis = int(attrs.axis)
    axis = len(indices) if axis == -1 else axis
    depth = tir.Cast("int64", _scalar_value(data[3]))
    return [indices[:axis] + [depth] + indices[axis:]]


def _dyn_pad(attrs, ins, outs, data):
    from kiln import tir

    widths = data[1]
    return [[d + tir.Cast("int64", widths[k, 0]) + tir.Cast("int64", widths[k, 1])
             for k, d in enumerate(ins[0])]]


def _dyn_strided_slice(attrs, ins, outs, data):
    """Lengths of a slice whose begin/end/strides are run-time tensors (one value per axis;
    a strides tensor of length 1 applies to every axis)."""
    dims = list(ins[0])
    begin, end, strides = (_values_of(t, int(n[0].value)) for t, n in zip(data[1:4], ins[1:4]))
    strides = strides * len(dims) if len(strides) == 1 else strides
    if not len(begin) == len(end) == len(strides) == len(dims):
        raise TVMError(f"dyn.strided_slice: begin, end and strides need {len(dims)} values "
                       f"each, got {len(begin)}, {len(end)} and {len(strides)}")
    return [[length for _, _, length in slice_bounds(dims, begin, end, strides)]]


def _dyn_expand_dims(attrs, ins, outs, data):
    """num_newaxis ones inserted at the run-time axis (negative counts from the end)."""
    from kiln import tir

    dims, new = list(ins[0]), int(attrs.num_newaxis)
    axis = tir.Cast("int64", _scalar_value(data[1]))
    axis = tir.Select(axis < i64(0), axis + i64(len(dims) + 1), axis)
    out = []
    for j in range(len(dims) + new):
        before = dims[j] if j < len(dims) else i64(1)
        after = dims[j - new] if j >= new else i64(1)
        out.append(tir.Select(i64(j) < axis, before,
                              tir.Select(i64(j) < axis + i64(new), i64(1), after)))
    return [out]


def _dyn_squeeze(attrs, ins, outs, data):
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


def _dyn_topk(attrs, ins, outs, data):
    """k read at run time: k < 1 keeps the whole axis; k past the axis is an error."""
    from kiln import tir

    out = list(ins[0])
    axis = int(attrs.axis) % len(out)
    k = tir.Cast("int64", _scalar_value(data[1]))
    valid = k <= out[axis]
    out[axis] = tir.Select(k < i64(1), out[axis], k)
    return [checked(list(out), valid) for _ in outs]


def _spatial_axes(layout: str, letters: str) -> list[int]:
    return [layout.index(c) for c in letters]


def _dyn_resize2d(attrs, ins, outs, data):
    """H and W are the run-time values of the size tensor."""
    out = list(ins[0])
    for axis, extent in zip(_spatial_axes(attrs.layout, "HW"), _values_of(data[1], 2)):
        out[axis] = extent
    return [out]


def _dyn_upsampling(attrs, ins, outs, data):
    """H and W scaled by the run-time scale tensors, rounded half to even like the static
    op's type relation (Python's ``round``)."""
    from kiln.tir import op as _op

    out = list(ins[0])
    for axis, scale in zip(_spatial_axes(attrs.layout, "HW"), data[1:3]):
        scaled = _op.cast(out[axis], "float64") * _op.cast(_scalar_value(scale), "float64")
        out[axis] = _op.cast(_op.round(scaled), "int64")
    return [out]


# What the run-time values must satisfy, per op, for the message of a failed shape function.
VALUE_REQUIREMENTS: dict[str, str] = {
    "reshape": "the input's element count must match the new shape",
    "contrib_reverse_reshape": "the input's element count must match the new shape",
    "dyn.reshape": "the new shape must keep the element count, with at most one -1",
    "dyn.zeros": "sizes must be non-negative",
    "dyn.ones": "sizes must be non-negative",
    "dyn.full": "sizes must be non-negative",
    "dyn.broadcast_to": "each input extent must be 1 or the target extent",
    "dyn.tile": "repeats must be non-negative",
    "dyn.one_hot": "depth must be non-negative",
    "dyn.nn.pad": "padded extents must be non-negative",
    "dyn.strided_slice": "strides must be non-zero",
    "dyn.squeeze": "each axis must be in range, named once, and of extent 1",
    "dyn.topk": "k must not exceed the axis",
    "topk": "k must not exceed the axis",
    "dyn.image.resize2d": "sizes must be non-negative",
    "dyn.nn.upsampling": "scales must be non-negative",
}


# Rules that read input values, not only shapes (TVM's TShapeDataDependent).
DATA_DEPENDENT_RULES: dict[str, Any] = {
    "arange": _arange,
    "argwhere": _argwhere,
    "dyn.zeros": _shape_from_input(0),
    "dyn.ones": _shape_from_input(0),
    "dyn.full": _shape_from_input(1),
    "dyn.broadcast_to": _dyn_broadcast_to,
    "dyn.reshape": _dyn_reshape,
    "dyn.tile": _dyn_tile,
    "dyn.one_hot": _dyn_one_hot,
    "dyn.nn.pad": _dyn_pad,
    "dyn.strided_slice": _dyn_strided_slice,
    "dyn.expand_dims": _dyn_expand_dims,
    "dyn.squeeze": _dyn_squeeze,
    "dyn.topk": _dyn_topk,
    "dyn.image.resize2d": _dyn_resize2d,
    "dyn.nn.upsampling": _dyn_upsampling,
}


SHAPE_RULES: dict[str, Any] = {
    "concatenate": _concatenate,
    "strided_slice": _strided_slice,
    "take": _take,
    "nn.batch_flatten": _batch_flatten,
    "tile": _tile,
    "repeat": _repeat,
    "split": _split,
    "stack": _stack,
    "nn.pad": _pad,
    "nn.mirror_pad": _pad,
    "one_hot": _one_hot,
    "topk": _topk,
    "layout_transform": _layout_transform,
    "slice_like": _slice_like,
    "gather": _gather,
    "nn.batch_norm": _batch_norm,
    "nn.dropout": _same_for_every_output,
    "broadcast_to": _static_attr_shape,
    "collapse_sum_to": _static_attr_shape,
    "broadcast_to_like": _like_second,
    "collapse_sum_like": _like_second,
    **{name: _identity for name in (
        "nn.softmax", "nn.log_softmax", "nn.fast_softmax", "nn.bias_add", "cast", "clip",
        "nn.prelu", "cumsum", "cumprod", "sort", "argsort", "reverse", "sequence_mask",
        "nn.layer_norm", "nn.instance_norm", "nn.group_norm", "nn.lrn", "nn.l2_normalize",
        "scatter_elements", "scatter_nd")},
    **{name: _same_batch for name in ("image.resize2d", "image.resize1d", "nn.upsampling",
                                      "nn.depth_to_space", "nn.space_to_depth")},
}


def _register() -> None:
    from kiln.relay.op.op import register_shape_func

    for table, data_dependent in ((SHAPE_RULES, False), (DATA_DEPENDENT_RULES, True)):
        for name, rule in table.items():
            try:
                Op.get(name)
            except Exception:  # noqa: BLE001 - an op this kiln does not define
                continue
            # a rule registered beside the op as well fails here, naming the op
            register_shape_func(name, data_dependent, rule)


_register()


def shape_rule(op_name: str) -> Any:
    """The ``FShapeFunc`` of an operator, or None."""
    return Op.get(op_name).get_attr("FShapeFunc")
