"""Shape rules (``FShapeFunc``) of the operators, registered in the op registry on import.

Entry points: :data:`SHAPE_RULES` (rules over input dimensions), :data:`DATA_DEPENDENT_RULES`
(rules that read input values, TVM's ``TShapeDataDependent``), :func:`shape_rule`,
:func:`dyn_slice_bounds`.

A rule is ``rule(attrs, in_dims, out_types) -> out_dims`` — ``in_dims`` holds, per flattened
input tensor, its dimensions as int64 ``PrimExpr``\\ s, and ``out_dims`` the same per output.
A data-dependent rule takes a fourth argument, the input tensors themselves (te placeholders),
and may read their elements (``arange`` reads start/stop/step, ``argwhere`` counts non-zeros).
:mod:`kiln.relay.vm.shape_func` composes the rules over a fused primitive function and turns
the expressions into one kernel.

Example
-------
>>> shape_rule("nn.dense") is not None
True
"""

from __future__ import annotations

from typing import Any

from kiln.ir.op import Op
from kiln.runtime.error import TVMError

__all__ = ["SHAPE_RULES", "DATA_DEPENDENT_RULES", "shape_rule", "dyn_slice_bounds",
           "broadcast_dims", "product", "i64"]


def i64(value: int) -> Any:
    from kiln import tir

    return tir.const(int(value), "int64")


def broadcast_dims(dims_list: list[list[Any]]) -> list[Any]:
    """NumPy broadcasting of several dimension lists."""
    from kiln import tir

    ndim = max(len(d) for d in dims_list)
    out = []
    for k in range(ndim):
        result = None
        for dims in dims_list:
            offset = k - (ndim - len(dims))
            if offset < 0:
                continue
            d = dims[offset]
            result = d if result is None else tir.Select(result == i64(1), d, result)
        out.append(result)
    return out


def product(dims: list[Any]) -> Any:
    result = i64(1)
    for d in dims:
        result = result * d
    return result


def _axes(axis: Any, ndim: int) -> list[int]:
    if axis is None:
        return list(range(ndim))
    axis = [axis] if isinstance(axis, int) else list(axis)
    return sorted(int(a) % ndim for a in axis)


# -- per-op rules: (attrs, in_dims, out_types) -> out_dims --------------------------------


def _dense(attrs, ins, outs):
    return [ins[0][:-1] + [ins[1][0]]]


def _matmul(attrs, ins, outs):
    a, b = ins
    rows = a[-1] if getattr(attrs, "transpose_a", False) else a[-2]
    cols = b[-2] if getattr(attrs, "transpose_b", False) else b[-1]
    return [broadcast_dims([a[:-2], b[:-2]]) + [rows, cols]]


def _batch_matmul(attrs, ins, outs):
    a, b = ins
    rows = a[-1] if getattr(attrs, "transpose_a", False) else a[-2]
    cols = b[-2] if getattr(attrs, "transpose_b", True) else b[-1]
    return [broadcast_dims([a[:1], b[:1]]) + [rows, cols]]


def _reshape(attrs, ins, outs):
    """TVM's newshape codes: 0 copy, -1 infer, -2 copy the rest, -3 merge two, -4 split."""
    from kiln import tir

    data = ins[0]
    newshape = [int(v) for v in attrs.newshape]
    out: list[Any] = []
    infer_at = -1
    src = 0
    i = 0
    while i < len(newshape):
        code = newshape[i]
        if code > 0:
            out.append(i64(code))
            src += 1
        elif code == 0:
            out.append(data[src])
            src += 1
        elif code == -1:
            infer_at = len(out)
            out.append(None)
            src += 1
        elif code == -2:
            out.extend(data[src:])
            src = len(data)
        elif code == -3:
            out.append(data[src] * data[src + 1])
            src += 2
        elif code == -4:
            first, second = newshape[i + 1], newshape[i + 2]
            if first == -1:
                out += [tir.floordiv(data[src], i64(second)), i64(second)]
            elif second == -1:
                out += [i64(first), tir.floordiv(data[src], i64(first))]
            else:
                out += [i64(first), i64(second)]
            src += 1
            i += 2
        else:
            raise TVMError(f"reshape: bad newshape code {code}")
        i += 1
    if infer_at >= 0:
        known = product([d for d in out if d is not None])
        out[infer_at] = tir.floordiv(product(data), known)
    return [out]


def _concatenate(attrs, ins, outs):
    axis = int(attrs.axis) % len(ins[0])
    out = list(ins[0])
    total = ins[0][axis]
    for dims in ins[1:]:
        total = total + dims[axis]
    out[axis] = total
    return [out]


def _transpose(attrs, ins, outs):
    data = ins[0]
    axes = getattr(attrs, "axes", None)
    axes = list(range(len(data)))[::-1] if not axes else [int(a) % len(data) for a in axes]
    return [[data[a] for a in axes]]


def _expand_dims(attrs, ins, outs):
    data = list(ins[0])
    axis = int(attrs.axis)
    axis = axis if axis >= 0 else len(data) + axis + 1
    return [data[:axis] + [i64(1)] * int(attrs.num_newaxis) + data[axis:]]


def _squeeze(attrs, ins, outs):
    data = ins[0]
    axis = getattr(attrs, "axis", None)
    if axis is None:
        raise TVMError("squeeze with axis=None on a dynamic shape cannot know which dims are 1")
    drop = set(_axes(axis, len(data)))
    return [[d for k, d in enumerate(data) if k not in drop]]


def _reduce(attrs, ins, outs):
    data = ins[0]
    axes = set(_axes(getattr(attrs, "axis", None), len(data)))
    if getattr(attrs, "exclude", False):
        axes = set(range(len(data))) - axes
    keep = getattr(attrs, "keepdims", False)
    return [[(i64(1) if k in axes else d) for k, d in enumerate(data)
             if keep or k not in axes]]


def _strided_slice(attrs, ins, outs):
    from kiln import tir

    data = ins[0]
    ndim = len(data)
    axes = list(attrs.axes) if getattr(attrs, "axes", None) is not None else list(range(ndim))
    begin, end = list(attrs.begin), list(attrs.end)
    strides = list(attrs.strides or [1]) if attrs.strides is not None else [1]
    out = list(data)
    for n, axis in enumerate(axes[: len(begin)]):
        dim = data[axis]
        stride = int(strides[n] if n < len(strides) else strides[-1])
        if stride <= 0:
            raise TVMError("strided_slice on a dynamic shape supports positive strides only")
        b = int(begin[n])
        e = None if n >= len(end) or end[n] is None else int(end[n])
        lo = dim + i64(b) if b < 0 else i64(b)
        if getattr(attrs, "slice_mode", "end") == "size":
            hi = dim if e is None or e < 0 else lo + i64(e)
        else:
            hi = dim if e is None else (dim + i64(e) if e < 0 else i64(e))
        lo = tir.Max(tir.Min(lo, dim), i64(0))
        hi = tir.Max(tir.Min(hi, dim), lo)
        out[axis] = tir.floordiv(hi - lo + i64(stride - 1), i64(stride))
    return [out]


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
    k = int(attrs.k)
    if k >= 1:
        out[axis] = i64(k)
    return [list(out) for _ in outs]


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


def _shape_from_input(index: int):
    """dyn.zeros/ones/full/broadcast_to: the output shape is the values of input ``index``."""
    def rule(attrs, ins, outs, data):
        return [_values_of(data[index], len(outs[0].shape))]

    return rule


def _dyn_reshape(attrs, ins, outs, data):
    """reshape to the run-time values of a newshape tensor (0 copies, -1 infers)."""
    from kiln import tir

    src, codes = ins[0], _values_of(data[1], len(outs[0].shape))
    one, zero, minus_one = i64(1), i64(0), i64(-1)
    resolved = [tir.Select(c == zero, src[k] if k < len(src) else one, c)
                for k, c in enumerate(codes)]
    known = product([tir.Select(r == minus_one, one, r) for r in resolved])
    inferred = tir.floordiv(product(src), known)
    return [[tir.Select(r == minus_one, inferred, r) for r in resolved]]


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
    depth = tir.Cast("int64", data[3]())
    return [indices[:axis] + [depth] + indices[axis:]]


def _dyn_pad(attrs, ins, outs, data):
    from kiln import tir

    widths = data[1]
    return [[d + tir.Cast("int64", widths[k, 0]) + tir.Cast("int64", widths[k, 1])
             for k, d in enumerate(ins[0])]]


def dyn_slice_bounds(dims: list[Any], begin: Any, end: Any, strides: Any) -> list[tuple]:
    """Per axis (start, stride, length) of a strided slice whose bounds are run-time tensors
    (positive strides; NumPy clamping and negative indices)."""
    from kiln import tir

    zero = i64(0)
    result = []
    for k, dim in enumerate(dims):
        b, e = tir.Cast("int64", begin[k]), tir.Cast("int64", end[k])
        step = tir.Cast("int64", strides[k])
        b = tir.Select(b < zero, b + dim, b)
        e = tir.Select(e < zero, e + dim, e)
        lo = tir.Max(tir.Min(b, dim), zero)
        hi = tir.Max(tir.Min(e, dim), lo)
        result.append((lo, step, tir.floordiv(hi - lo + step - i64(1), step)))
    return result


def _dyn_strided_slice(attrs, ins, outs, data):
    bounds = dyn_slice_bounds(list(ins[0]), data[1], data[2], data[3])
    return [[length for _, _, length in bounds]]


def _dyn_expand_dims(attrs, ins, outs, data):
    """num_newaxis ones inserted at the run-time axis (negative counts from the end)."""
    from kiln import tir

    dims, new = list(ins[0]), int(attrs.num_newaxis)
    axis = tir.Cast("int64", data[1]())
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
    return [out]


# Rules that read input values, not only shapes (TVM's TShapeDataDependent).
DATA_DEPENDENT_RULES: dict[str, Any] = {
    "arange": _arange,
    "argwhere": _argwhere,
    "dyn.zeros": _shape_from_input(0),
    "dyn.ones": _shape_from_input(0),
    "dyn.full": _shape_from_input(1),
    "dyn.broadcast_to": _shape_from_input(1),
    "dyn.reshape": _dyn_reshape,
    "dyn.tile": _dyn_tile,
    "dyn.one_hot": _dyn_one_hot,
    "dyn.nn.pad": _dyn_pad,
    "dyn.strided_slice": _dyn_strided_slice,
    "dyn.expand_dims": _dyn_expand_dims,
    "dyn.squeeze": _dyn_squeeze,
}


SHAPE_RULES: dict[str, Any] = {
    "nn.dense": _dense,
    "nn.matmul": _matmul,
    "nn.batch_matmul": _batch_matmul,
    "reshape": _reshape,
    "concatenate": _concatenate,
    "transpose": _transpose,
    "expand_dims": _expand_dims,
    "squeeze": _squeeze,
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
    "gather": _gather,
    "nn.batch_norm": _batch_norm,
    "nn.dropout": _same_for_every_output,
    "broadcast_to": _static_attr_shape,
    "collapse_sum_to": _static_attr_shape,
    "broadcast_to_like": _like_second,
    "reshape_like": _like_second,
    "collapse_sum_like": _like_second,
    **{name: _identity for name in (
        "nn.softmax", "nn.log_softmax", "nn.fast_softmax", "nn.bias_add", "cast", "clip",
        "nn.prelu", "cumsum", "cumprod", "sort", "argsort", "reverse", "sequence_mask",
        "nn.layer_norm", "nn.instance_norm", "nn.group_norm", "nn.lrn", "nn.l2_normalize",
        "scatter_elements", "scatter_nd")},
    **{name: _reduce for name in ("sum", "mean", "max", "min", "prod", "argmax", "argmin",
                                  "all", "any", "variance")},
    **{name: _same_batch for name in ("nn.conv2d", "nn.max_pool2d", "nn.avg_pool2d",
                                      "nn.global_avg_pool2d", "nn.global_max_pool2d",
                                      "nn.conv1d", "nn.max_pool1d", "nn.avg_pool1d",
                                      "nn.conv3d", "nn.avg_pool3d", "nn.max_pool3d",
                                      "nn.conv2d_transpose", "nn.conv1d_transpose",
                                      "nn.adaptive_avg_pool2d", "nn.adaptive_max_pool2d",
                                      "nn.adaptive_avg_pool1d", "nn.adaptive_max_pool1d",
                                      "image.resize2d", "image.resize1d", "nn.upsampling",
                                      "nn.depth_to_space", "nn.space_to_depth")},
}


def _register() -> None:
    from kiln.relay.op.op import register_shape_func

    for table, data_dependent in ((SHAPE_RULES, False), (DATA_DEPENDENT_RULES, True)):
        for name, rule in table.items():
            try:
                op = Op.get(name)
            except Exception:  # noqa: BLE001 - an op this kiln does not define
                continue
            if op.get_attr("FShapeFunc") is None:
                register_shape_func(name, data_dependent, rule)


_register()


def shape_rule(op_name: str) -> Any:
    """The ``FShapeFunc`` of an operator, or None."""
    return Op.get(op_name).get_attr("FShapeFunc")
