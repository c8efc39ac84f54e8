"""Shape functions: kernels that compute output shapes of dynamic (``Any``) primitives.

Entry points: :func:`emit_shape_function` (used by the VM compiler), :func:`lower_dynamic`
(a primitive function lowered with symbolic shapes), :func:`shape_rule`.

Each operator whose output shape depends on its input shapes has an ``FShapeFunc`` in the op
registry (registered here): ``rule(attrs, in_dims, out_types) -> out_dims``, where ``in_dims``
holds, per flattened input tensor, its dimensions as int64 ``PrimExpr``\\ s and ``out_dims`` the
same for each output. Elementwise and broadcast ops need none (their rule follows from the
pattern kind). For a fused primitive function the rules compose along its body into one
expression per output dimension; the expressions become a small TE kernel:

- inputs: one int64 ``[ndim]`` shape tensor per dynamic input (``ShapeOf`` at run time);
- outputs, per output tensor: its int64 ``[ndim]`` shape and an int64 ``[1]`` byte size.

The kernel is lowered and compiled with the model's other kernels (one library), so shape
computation runs as native code called by ``InvokePacked``, like TVM's shape functions. Static
dimensions known from the types are folded in as constants.

Example
-------
>>> shape_rule("nn.dense") is not None
True
"""

from __future__ import annotations

from typing import Any

from kiln.ir.op import Op
from kiln.ir.structural import structural_equal, structural_hash
from kiln.ir.type import TensorType, TupleType
from kiln.relay import expr as rx
from kiln.relay.op.op import OpPattern
from kiln.runtime.error import TVMError
from kiln.runtime.vm import bytecode as bc

__all__ = ["emit_shape_function", "lower_dynamic", "shape_rule", "SHAPE_RULES"]


def _i64(value: int) -> Any:
    from kiln import tir

    return tir.const(int(value), "int64")


def _broadcast(dims_list: list[list[Any]]) -> list[Any]:
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
            result = d if result is None else tir.Select(result == _i64(1), d, result)
        out.append(result)
    return out


def _prod(dims: list[Any]) -> Any:
    result = _i64(1)
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
    return [_broadcast([a[:-2], b[:-2]]) + [rows, cols]]


def _batch_matmul(attrs, ins, outs):
    a, b = ins
    rows = a[-1] if getattr(attrs, "transpose_a", False) else a[-2]
    cols = b[-2] if getattr(attrs, "transpose_b", True) else b[-1]
    return [_broadcast([a[:1], b[:1]]) + [rows, cols]]


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
            out.append(_i64(code))
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
                out += [tir.floordiv(data[src], _i64(second)), _i64(second)]
            elif second == -1:
                out += [_i64(first), tir.floordiv(data[src], _i64(first))]
            else:
                out += [_i64(first), _i64(second)]
            src += 1
            i += 2
        else:
            raise TVMError(f"reshape: bad newshape code {code}")
        i += 1
    if infer_at >= 0:
        known = _prod([d for d in out if d is not None])
        out[infer_at] = tir.floordiv(_prod(data), known)
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
    return [data[:axis] + [_i64(1)] * int(attrs.num_newaxis) + data[axis:]]


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
    return [[(_i64(1) if k in axes else d) for k, d in enumerate(data)
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
        lo = dim + _i64(b) if b < 0 else _i64(b)
        if getattr(attrs, "slice_mode", "end") == "size":
            hi = dim if e is None or e < 0 else lo + _i64(e)
        else:
            hi = dim if e is None else (dim + _i64(e) if e < 0 else _i64(e))
        lo = tir.Max(tir.Min(lo, dim), _i64(0))
        hi = tir.Max(tir.Min(hi, dim), lo)
        out[axis] = tir.floordiv(hi - lo + _i64(stride - 1), _i64(stride))
    return [out]


def _take(attrs, ins, outs):
    data, indices = ins
    axis = getattr(attrs, "axis", None)
    if axis is None:
        return [list(indices)]
    axis = int(axis) % len(data)
    return [data[:axis] + list(indices) + data[axis + 1:]]


def _batch_flatten(attrs, ins, outs):
    return [[ins[0][0], _prod(ins[0][1:])]]


def _same_batch(attrs, ins, outs):
    """Ops (conv, pooling) whose only dynamic dimension is the batch of input 0."""
    out_type = outs[0]
    return [[ins[0][0]] + [_i64(int(d)) if isinstance(getattr(d, "value", None), int)
                           else None for d in list(out_type.shape)[1:]]]


def _identity(attrs, ins, outs):
    return [list(ins[0])]


def _like_second(attrs, ins, outs):
    return [list(ins[1])]


def _static_attr_shape(attrs, ins, outs):
    return [[_i64(int(d)) for d in attrs.shape]]


def _tile(attrs, ins, outs):
    data, reps = list(ins[0]), [int(r) for r in attrs.reps]
    ndim = max(len(data), len(reps))
    data = [_i64(1)] * (ndim - len(data)) + data
    reps = [1] * (ndim - len(reps)) + reps
    return [[d * _i64(r) for d, r in zip(data, reps)]]


def _repeat(attrs, ins, outs):
    out = list(ins[0])
    axis = int(attrs.axis) % len(out)
    out[axis] = out[axis] * _i64(int(attrs.repeats))
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
            out[axis] = tir.floordiv(data[axis], _i64(sections))
            result.append(out)
        return result
    bounds = [0] + [int(i) for i in sections]
    for k, begin in enumerate(bounds):
        out = list(data)
        end = _i64(bounds[k + 1]) if k + 1 < len(bounds) else data[axis]
        out[axis] = end - _i64(begin)
        result.append(out)
    return result


def _stack(attrs, ins, outs):
    data = list(ins[0])
    axis = int(attrs.axis)
    axis = axis if axis >= 0 else len(data) + axis + 1
    return [data[:axis] + [_i64(len(ins))] + data[axis:]]


def _pad(attrs, ins, outs):
    return [[d + _i64(int(before) + int(after))
             for d, (before, after) in zip(ins[0], attrs.pad_width)]]


def _one_hot(attrs, ins, outs):
    indices = list(ins[0])
    axis = int(attrs.axis)
    axis = len(indices) if axis == -1 else axis
    return [indices[:axis] + [_i64(int(attrs.depth))] + indices[axis:]]


def _topk(attrs, ins, outs):
    out = list(ins[0])
    axis = int(attrs.axis) % len(out)
    k = int(attrs.k)
    if k >= 1:
        out[axis] = _i64(k)
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
    return [[tir.Max(tir.Cast("int64", count), _i64(0))]]


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
    one, zero, minus_one = _i64(1), _i64(0), _i64(-1)
    resolved = [tir.Select(c == zero, src[k] if k < len(src) else one, c)
                for k, c in enumerate(codes)]
    known = _prod([tir.Select(r == minus_one, one, r) for r in resolved])
    inferred = tir.floordiv(_prod(src), known)
    return [[tir.Select(r == minus_one, inferred, r) for r in resolved]]


def _argwhere(attrs, ins, outs, data):
    """(number of non-zero elements, ndim): a counting stage inside the shape kernel."""
    from kiln import te, tir

    cond = data[0]
    axes = [te.reduce_axis((0, d), name=f"r{k}") for k, d in enumerate(cond.shape)]
    count = te.compute((1,), lambda _: te.sum(
        tir.Cast("int64", cond(*axes) != tir.const(0, cond.dtype)), axis=axes),
        name="nonzero_count")
    return [[count[0], _i64(len(cond.shape))]]


def _dyn_tile(attrs, ins, outs, data):
    data_dims = list(ins[0])
    reps = _values_of(data[1], int(ins[1][0].value))  # the reps tensor has a static length
    ndim = max(len(data_dims), len(reps))
    data_dims = [_i64(1)] * (ndim - len(data_dims)) + data_dims
    reps = [_i64(1)] * (ndim - len(reps)) + reps
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

    zero = _i64(0)
    result = []
    for k, dim in enumerate(dims):
        b, e = tir.Cast("int64", begin[k]), tir.Cast("int64", end[k])
        step = tir.Cast("int64", strides[k])
        b = tir.Select(b < zero, b + dim, b)
        e = tir.Select(e < zero, e + dim, e)
        lo = tir.Max(tir.Min(b, dim), zero)
        hi = tir.Max(tir.Min(e, dim), lo)
        result.append((lo, step, tir.floordiv(hi - lo + step - _i64(1), step)))
    return result


def _dyn_strided_slice(attrs, ins, outs, data):
    bounds = dyn_slice_bounds(list(ins[0]), data[1], data[2], data[3])
    return [[length for _, _, length in bounds]]


def _dyn_expand_dims(attrs, ins, outs, data):
    """num_newaxis ones inserted at the run-time axis (negative counts from the end)."""
    from kiln import tir

    dims, new = list(ins[0]), int(attrs.num_newaxis)
    axis = tir.Cast("int64", data[1]())
    axis = tir.Select(axis < _i64(0), axis + _i64(len(dims) + 1), axis)
    out = []
    for j in range(len(dims) + new):
        before = dims[j] if j < len(dims) else _i64(1)
        after = dims[j - new] if j >= new else _i64(1)
        out.append(tir.Select(_i64(j) < axis, before,
                              tir.Select(_i64(j) < axis + _i64(new), _i64(1), after)))
    return [out]


def _dyn_squeeze(attrs, ins, outs, data):
    """The dims left after dropping the run-time axes (each must be 1)."""
    from kiln import tir

    dims = list(ins[0])
    count = int(ins[1][0].value) if ins[1] else 0
    axes = [tir.Cast("int64", data[1][k]) for k in range(count)]
    axes = [tir.Select(a < _i64(0), a + _i64(len(dims)), a) for a in axes]

    def dropped(k):
        flag = tir.const(False, "bool")
        for a in axes:
            flag = tir.any(flag, a == _i64(k))
        return flag

    # output dim j is the j-th kept input dim: kept index = j + (dropped axes at or before it)
    out = []
    for j in range(len(dims) - count):
        value = dims[-1]
        for k in range(len(dims) - 1, -1, -1):
            kept_before = _i64(0)
            for m in range(k):
                kept_before = kept_before + tir.Select(dropped(m), _i64(0), _i64(1))
            is_jth = tir.all(tir.Not(dropped(k)), kept_before == _i64(j))
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


# -- composing the rules over a primitive function ----------------------------------------


def _flat_types(ty: Any) -> list[TensorType]:
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in _flat_types(f)]
    return [ty]


def _with_static(dims: list[Any], ty: TensorType) -> list[Any]:
    """Known dimensions of ``ty`` replace computed ones (constants fold away)."""
    out = []
    for k, d in enumerate(ty.shape):
        value = getattr(d, "value", None)
        out.append(_i64(value) if isinstance(value, int) else dims[k])
    return out


class _ShapeBuilder:
    """Walks a primitive function body; each node maps to dims lists of its flat outputs."""

    def __init__(self) -> None:
        self.memo: dict[int, list[list[Any]]] = {}
        self.data: dict[int, list[Any]] = {}  # param id -> its input data tensors

    def visit(self, node: Any) -> list[list[Any]]:
        key = id(node)
        if key not in self.memo:
            self.memo[key] = self._visit(node)
        return self.memo[key]

    def _visit(self, node: Any) -> list[list[Any]]:
        if isinstance(node, rx.Constant):
            return [[_i64(d) for d in node.data.shape]]
        if isinstance(node, rx.Tuple):
            return [d for f in node.fields for d in self.visit(f)]
        if isinstance(node, rx.TupleGetItem):
            fields = self.visit(node.tuple_value)
            sizes = [len(_flat_types(t)) for t in node.tuple_value.checked_type.fields]
            start = sum(sizes[: node.index])
            return fields[start: start + sizes[node.index]]
        if isinstance(node, rx.Let):
            self.memo[id(node.var)] = self.visit(node.value)
            return self.visit(node.body)
        if isinstance(node, rx.Call) and isinstance(node.op, Op):
            return self._call(node)
        raise TVMError(f"no shape function for {type(node).__name__} in a primitive function")

    def _call(self, call: rx.Call) -> list[list[Any]]:
        ins = [d for a in call.args for d in self.visit(a)]
        out_types = _flat_types(call.checked_type)
        rule = call.op.get_attr("FShapeFunc")
        if rule is not None and call.op.get_attr("TShapeDataDependent"):
            data = [t for a in call.args for t in self.data.get(id(a), [None])]
            if any(t is None for t in data):
                raise TVMError(f"the shape of {call.op.name} depends on input values, which "
                               "must be parameters of its primitive function")
            outs = rule(call.attrs, ins, out_types, data)
        elif rule is not None:
            outs = rule(call.attrs, ins, out_types)
        else:
            pattern = call.op.get_attr("TOpPattern")
            pattern = int(OpPattern.OPAQUE if pattern is None else pattern)
            if (pattern > OpPattern.BROADCAST or call.op.name.startswith("dyn.")) and any(
                    not isinstance(getattr(d, "value", None), int)
                    for t in out_types for d in t.shape):
                raise TVMError(f"operator {call.op.name} has no shape function, so it cannot "
                               "produce a dynamic (Any) shape in the VM")
            outs = [_broadcast(ins) if ins else [] for _ in out_types]
        return [_with_static(d, t) for d, t in zip(outs, out_types)]


def needs_input_data(func: rx.Function) -> bool:
    """Whether an op of ``func`` has a data-dependent shape function."""
    from kiln.relay.expr_functor import post_order_visit

    found = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, rx.Call) and
                     isinstance(n.op, Op) and n.op.get_attr("TShapeDataDependent") else None)
    return bool(found)


def _dynamic_params(func: rx.Function) -> list[tuple[int, TensorType]]:
    """(flat input index, type) of each input the shape function takes.

    Normally the inputs with a dynamic dimension (their shapes are passed); for a
    data-dependent function every input (its values are passed).
    """
    flat = [t for p in func.params for t in _flat_types(p.checked_type)]
    if needs_input_data(func):
        return list(enumerate(flat))
    return [(i, t) for i, t in enumerate(flat)
            if any(not isinstance(getattr(d, "value", None), int) for d in t.shape)]


def _symbolic_shape(ty: TensorType, prefix: str) -> tuple:
    from kiln import te

    return tuple(int(d.value) if isinstance(getattr(d, "value", None), int)
                 else te.var(f"{prefix}_n{k}", "int64") for k, d in enumerate(ty.shape))


def _selector(dims: list[Any]) -> Any:
    """fcompute of a shape tensor: element i is dims[i]."""
    from kiln import tir

    def pick(i):
        value = dims[-1]
        for j in range(len(dims) - 2, -1, -1):
            value = tir.Select(i == j, dims[j], value)
        return value

    return pick


def _constant(value: Any) -> Any:
    return lambda _: value


def _build_shape_kernel(func: rx.Function, name: str) -> tuple[Any, list[bool]]:
    """The PrimFunc computing output shapes and sizes; per output, whether it is dynamic."""
    from kiln import te, tir
    from kiln.runtime.ndarray import DataType
    from kiln.te.lowering import lower

    builder = _ShapeBuilder()
    dynamic_inputs = dict(_dynamic_params(func))
    by_value = needs_input_data(func)
    shape_inputs = []
    flat_index = 0
    for param in func.params:
        dims_list, data = [], []
        for ty in _flat_types(param.checked_type):
            if by_value:
                ph = te.placeholder(_symbolic_shape(ty, f"in{flat_index}"), str(ty.dtype),
                                    name=f"data_{flat_index}")
                shape_inputs.append(ph)
                data.append(ph)
                dims_list.append(_with_static([tir.Cast("int64", d) for d in ph.shape], ty))
            elif flat_index in dynamic_inputs:
                ph = te.placeholder((len(ty.shape),), "int64", name=f"shape_{flat_index}")
                shape_inputs.append(ph)
                dims_list.append(_with_static([ph[k] for k in range(len(ty.shape))], ty))
            else:
                dims_list.append([_i64(int(d.value)) for d in ty.shape])
            flat_index += 1
        builder.memo[id(param)] = dims_list
        if data:
            builder.data[id(param)] = data
    out_dims = builder.visit(func.body)
    out_types = _flat_types(func.body.checked_type)
    outputs, dynamic = [], []
    for k, (dims, ty) in enumerate(zip(out_dims, out_types)):
        is_dynamic = any(not isinstance(getattr(d, "value", None), int) for d in ty.shape)
        dynamic.append(is_dynamic)
        if not is_dynamic:
            continue

        dt = DataType(str(ty.dtype))
        itemsize = (dt.bits * dt.lanes + 7) // 8
        outputs.append(te.compute((len(dims),), _selector(dims), name=f"out_shape_{k}"))
        outputs.append(te.compute((1,), _constant(_prod(dims) * _i64(itemsize)),
                                  name=f"out_bytes_{k}"))
    sch = te.create_schedule([o.op for o in outputs])
    lowered = lower(sch, shape_inputs + outputs, name=name)
    from kiln.ir.module import IRModule

    prim = lowered[name] if isinstance(lowered, IRModule) else lowered
    return prim, dynamic


def _cached(tec: Any, table: str, func: rx.Function, make: Any) -> Any:
    cache = tec.__dict__.setdefault(table, {})
    key = structural_hash(func)
    for seen, value in cache.get(key, ()):
        if structural_equal(seen, func):
            return value
    value = make(f"{key & (2**64 - 1):016x}")
    cache.setdefault(key, []).append((func, value))
    return value


class _SymbolicOutputs:
    """Mixin for the TE compiler's compute builder: ``Any`` output dimensions become shape
    variables (as TVM's lowering does), so computes sized from the output type still work;
    the variables are bound from the output buffers the VM allocates."""

    def visit_Call(self, node: rx.Call) -> list:  # noqa: N802 (the builder's method name)
        from kiln.relay.op.strategy import select_implementation

        if not isinstance(node.op, Op):
            raise TVMError(f"a primitive function may only call operators, found {node.op!r}")
        from kiln.relay.vm.dynamic_compute import DYNAMIC_COMPUTES

        inputs = [t for a in node.args for t in self.visit(a)]
        out_type = _symbolic_type(node.checked_type, f"out{len(self.memo)}")
        compute = DYNAMIC_COMPUTES.get(node.op.name)
        if compute is not None:  # TOPI's compute for this op needs constant shapes
            impl, outs = None, compute(node.attrs, inputs, out_type)
        else:
            impl, outs = select_implementation(node.op, node.attrs, inputs, out_type,
                                               self.target)
        pattern = node.op.get_attr("TOpPattern")
        pattern = int(OpPattern.OPAQUE if pattern is None else pattern)
        if pattern >= OpPattern.COMM_REDUCE and self.anchor is not None \
                and self.anchor[0] >= OpPattern.COMM_REDUCE:
            raise TVMError("Cannot apply TOPI schedule to a primitive function with two "
                           f"complicated ops (in {node.op.name})")
        if self.anchor is None or pattern >= self.anchor[0]:
            self.anchor = (pattern, impl, node.attrs, outs)
        return outs


def _symbolic_type(ty: Any, prefix: str) -> Any:
    if isinstance(ty, TupleType):
        return TupleType([_symbolic_type(f, f"{prefix}_{k}") for k, f in enumerate(ty.fields)])
    return TensorType(_symbolic_shape(ty, prefix), ty.dtype)


def _dynamic_schedule(anchor: Any, outputs: list, target: Any) -> Any:
    """The anchor op's schedule, or the injective one; a schedule tuned for constant shapes
    (packed GEMM tiles …) may reject symbolic ones, and then the plain loop nest is used."""
    from kiln import te
    from kiln.relay.op.strategy import target_schedule

    try:
        if anchor is not None and anchor[0] >= OpPattern.COMM_REDUCE:
            if anchor[1] is None:  # a kiln.relay.vm.dynamic_compute kernel: no tuned schedule
                return te.create_schedule([o.op for o in outputs])
            return anchor[1].schedule(anchor[2], outputs, target)
        return target_schedule("injective", outputs, target)
    except TVMError:
        return te.create_schedule([o.op for o in outputs])


def lower_dynamic(tec: Any, func: rx.Function) -> Any:
    """Lower a primitive function with dynamic dims (symbolic shape variables) into ``tec``."""
    from kiln import te
    from kiln.ir.module import IRModule
    from kiln.relay.backend.te_compiler import LoweredFunc, _ComputeBuilder
    from kiln.relay.transform.fuse_ops import fused_function_name
    from kiln.te.lowering import lower

    def make(hash_text: str) -> Any:
        name = tec._unique(tec.prefix + fused_function_name(func) + "_dyn")
        builder = type("DynamicComputeBuilder", (_SymbolicOutputs, _ComputeBuilder), {})(
            tec.target)
        inputs = []
        for param in func.params:
            tensors = []
            for ty in _flat_types(param.checked_type):
                shape = tuple(
                    int(d.value) if isinstance(getattr(d, "value", None), int)
                    else te.var(f"{param.name_hint}_n{k}_{len(inputs)}", "int64")
                    for k, d in enumerate(ty.shape))
                tensors.append(te.placeholder(shape, str(ty.dtype), name=param.name_hint))
            builder.memo[id(param)] = tensors
            inputs.extend(tensors)
        outputs = builder.visit(func.body)
        outputs = [te.compute(o.shape, lambda *i, o=o: o(*i), name="copy")
                   if any(o is i for i in inputs) else o for o in outputs]
        sch = _dynamic_schedule(builder.anchor, outputs, tec.target)
        lowered = lower(sch, inputs + outputs, name=name)
        prim = lowered[name] if isinstance(lowered, IRModule) else lowered
        kernel = LoweredFunc(name, prim, hash_text, len(inputs), len(outputs))
        tec.lowered.append(kernel)
        return kernel

    return _cached(tec, "_kiln_vm_dynamic", func, make)


def _shape_kernel(tec: Any, func: rx.Function) -> tuple[Any, list[bool]]:
    from kiln.relay.backend.te_compiler import LoweredFunc
    from kiln.relay.transform.fuse_ops import fused_function_name

    def make(hash_text: str) -> Any:
        name = tec._unique(tec.prefix + fused_function_name(func) + "_shape_func")
        prim, dynamic = _build_shape_kernel(func, name)
        tec.lowered.append(LoweredFunc(name, prim, hash_text, 0, 0))
        return name, dynamic

    return _cached(tec, "_kiln_vm_shape_funcs", func, make)


def emit_shape_function(compiler: Any, func: rx.Function,
                        args: list[int]) -> list[tuple[int, int] | None]:
    """Emit ShapeOf + InvokePacked of ``func``'s shape function.

    Returns, per flat output, ``(shape register, byte-size register)``, or None for an output
    whose shape is static.
    """
    name, dynamic = _shape_kernel(compiler.ctx.tec, func)
    flat_args: list[int] = []
    for param, register in zip(func.params, args):
        if isinstance(param.checked_type, TupleType):
            for k in range(len(_flat_types(param.checked_type))):
                flat_args.append(compiler._emit_dst(
                    lambda d, k=k, r=register: bc.GetField(r, k, d)))
        else:
            flat_args.append(register)
    if needs_input_data(func):
        inputs = [flat_args[i] for i, _ in _dynamic_params(func)]
    else:
        inputs = [compiler._emit_dst(lambda d, r=flat_args[i]: bc.ShapeOf(r, d))
                  for i, _ in _dynamic_params(func)]
    out_types = _flat_types(func.body.checked_type)
    results: list[tuple[int, int] | None] = []
    out_registers: list[int] = []
    for ty, is_dynamic in zip(out_types, dynamic):
        if not is_dynamic:
            results.append(None)
            continue
        shape_reg = compiler.alloc.static_tensor((len(ty.shape),), "int64", True)
        size_reg = compiler.alloc.static_tensor((1,), "int64", True)
        out_registers += [shape_reg, size_reg]
        results.append((shape_reg, size_reg))
    packed = compiler.ctx.packed_index(name)
    compiler.emit(bc.InvokePacked(packed, len(out_registers), tuple(inputs + out_registers)))
    return results
