"""TE computes for ops whose TOPI compute needs constant shapes, used when the VM lowers a
primitive function with ``Any`` dimensions.

Entry point: :data:`DYNAMIC_COMPUTES` (op name → ``compute(attrs, inputs, out_type)``), read
by :func:`kiln.relay.vm.shape_func.lower_dynamic`.

The output type's ``Any`` dimensions arrive as shape variables (bound at run time from the
output buffer the VM allocated from the op's shape function), so each compute only has to
express the indexing with symbolic extents.

Example
-------
>>> sorted(DYNAMIC_COMPUTES)[:2]
['argwhere', 'concatenate']
"""

from __future__ import annotations

from typing import Any

__all__ = ["DYNAMIC_COMPUTES"]


def _shape(out_type: Any) -> list[Any]:
    return [int(d.value) if isinstance(getattr(d, "value", None), int) else d
            for d in out_type.shape]


def _reshape(attrs: Any, inputs: list, out_type: Any) -> list:
    from kiln import te
    from kiln.topi.utils import ravel_index, unravel_index

    data = inputs[0]
    shape = _shape(out_type)
    return [te.compute(shape, lambda *i: data(*unravel_index(ravel_index(i, shape),
                                                             data.shape)),
                       name="T_reshape_dyn", tag="injective")]


def _concatenate(attrs: Any, inputs: list, out_type: Any) -> list:
    from kiln import te, tir

    axis = int(attrs.axis) % len(inputs[0].shape)
    starts, total = [], 0
    for t in inputs:
        starts.append(total)
        total = total + t.shape[axis]

    ends = starts[1:] + [total]

    def pick(*i):
        value = None
        for t, start, end in reversed(list(zip(inputs, starts, ends))):
            index = list(i)
            index[axis] = i[axis] - start
            here = t(*index)
            # lazy select: only the input that owns this position is read
            value = here if value is None else tir.if_then_else(i[axis] < end, here, value)
        return value

    return [te.compute(_shape(out_type), pick, name="T_concat_dyn", tag="injective")]


def _strided_slice(attrs: Any, inputs: list, out_type: Any) -> list:
    from kiln import te, tir

    data = inputs[0]
    ndim = len(data.shape)
    axes = list(attrs.axes) if getattr(attrs, "axes", None) is not None else list(range(ndim))
    strides = list(attrs.strides) if attrs.strides is not None else []
    starts: list[Any] = [0] * ndim
    steps = [1] * ndim
    for n, axis in enumerate(axes[: len(attrs.begin)]):
        dim = data.shape[axis]
        step = int(strides[n]) if n < len(strides) else (int(strides[-1]) if strides else 1)
        begin = int(attrs.begin[n])
        lo = dim + begin if begin < 0 else tir.const(begin, "int64")
        starts[axis] = tir.Max(tir.Min(lo, dim), tir.const(0, "int64"))
        steps[axis] = step
    return [te.compute(_shape(out_type),
                       lambda *i: data(*[b + s * k for b, s, k in zip(starts, steps, i)]),
                       name="T_strided_slice_dyn", tag="injective")]


def _batch_matmul(attrs: Any, inputs: list, out_type: Any) -> list:
    from kiln import te

    x, y = inputs
    transpose_a = bool(getattr(attrs, "transpose_a", False))
    transpose_b = bool(getattr(attrs, "transpose_b", True))
    depth = x.shape[1] if transpose_a else x.shape[2]
    k = te.reduce_axis((0, depth), name="k")
    x_one = isinstance(getattr(x.shape[0], "value", None), int) and x.shape[0].value == 1
    y_one = isinstance(getattr(y.shape[0], "value", None), int) and y.shape[0].value == 1
    dtype = str(out_type.dtype)

    def body(b, i, j):
        xb, yb = (0 if x_one else b), (0 if y_one else b)
        left = x[xb, k, i] if transpose_a else x[xb, i, k]
        right = y[yb, j, k] if transpose_b else y[yb, k, j]
        return te.sum(left.astype(dtype) * right.astype(dtype), axis=k)

    return [te.compute(_shape(out_type), body, name="T_batch_matmul_dyn", tag="batch_matmul")]


def _fill(value_of: Any):
    """dyn.zeros / dyn.ones / dyn.full: a constant (or a scalar input) over a run-time shape."""
    def compute(attrs: Any, inputs: list, out_type: Any) -> list:
        from kiln import te

        dtype = str(out_type.dtype)
        value = value_of(inputs, dtype)
        return [te.compute(_shape(out_type), lambda *i: value, name="T_full_dyn",
                           tag="elemwise")]

    return compute


def _const(number: float):
    def value_of(inputs: list, dtype: str) -> Any:
        from kiln import tir

        return tir.const(number, dtype)

    return value_of


def _scalar_input(inputs: list, dtype: str) -> Any:
    from kiln import tir

    return tir.Cast(dtype, inputs[0]())


def _broadcast_to(attrs: Any, inputs: list, out_type: Any) -> list:
    from kiln import te, tir

    data = inputs[0]
    shape = _shape(out_type)
    lead = len(shape) - len(data.shape)

    def pick(*i):
        index = []
        for k, dim in enumerate(data.shape):
            if isinstance(getattr(dim, "value", None), int):
                index.append(0 if dim.value == 1 else i[lead + k])
            else:
                index.append(tir.if_then_else(dim == 1, 0, i[lead + k]))
        return data(*index)

    return [te.compute(shape, pick, name="T_broadcast_to_dyn", tag="broadcast")]


def _argwhere(attrs: Any, inputs: list, out_type: Any) -> list:
    """Row k holds the coordinates of the k-th non-zero element (row-major order).

    Without a scan primitive this counts in two reduction stages: ``rank[p]`` = non-zeros
    before flat position p, then row k sums the coordinates of the one non-zero position
    whose rank is k. Quadratic in the element count, which suits the masks argwhere sees.
    """
    from kiln import te, tir
    from kiln.topi.utils import unravel_index

    cond = inputs[0]
    dims = list(cond.shape)
    total = 1
    for d in dims:
        total = total * d
    dtype = str(out_type.dtype)

    def nonzero(flat):
        return cond(*unravel_index(flat, dims)) != tir.const(0, cond.dtype)

    q = te.reduce_axis((0, total), name="q")
    rank = te.compute((total,), lambda p: te.sum(
        tir.Cast("int64", tir.all(q < p, nonzero(q))), axis=q), name="nonzero_rank")
    p = te.reduce_axis((0, total), name="p")

    def row(k, d):
        hit = tir.all(nonzero(p), rank[p] == tir.Cast("int64", k))
        coordinate = unravel_index(p, dims)
        value = coordinate[-1]
        for axis in range(len(dims) - 2, -1, -1):
            value = tir.Select(d == axis, coordinate[axis], value)
        return te.sum(tir.Select(hit, tir.Cast(dtype, value), tir.const(0, dtype)), axis=p)

    return [te.compute(_shape(out_type), row, name="T_argwhere_dyn", tag="argwhere")]


def _dyn_tile(attrs: Any, inputs: list, out_type: Any) -> list:
    from kiln import te
    from kiln.tir.op import floormod

    data = inputs[0]
    shape = _shape(out_type)
    lead = len(shape) - len(data.shape)
    return [te.compute(shape, lambda *i: data(*[floormod(i[lead + k], d)
                                                for k, d in enumerate(data.shape)]),
                       name="T_tile_dyn", tag="injective")]


def _dyn_one_hot(attrs: Any, inputs: list, out_type: Any) -> list:
    from kiln import te, tir

    indices, on, off = inputs[0], inputs[1], inputs[2]
    ndim = len(out_type.shape)
    axis = ndim - 1 if int(attrs.axis) == -1 else int(attrs.axis)
    dtype = str(out_type.dtype)

    def body(*i):
        where = list(i[:axis]) + list(i[axis + 1:])
        hit = tir.Cast("int64", indices(*where)) == tir.Cast("int64", i[axis])
        return tir.Select(hit, tir.Cast(dtype, on()), tir.Cast(dtype, off()))

    return [te.compute(_shape(out_type), body, name="T_one_hot_dyn", tag="injective")]


def _dyn_pad(attrs: Any, inputs: list, out_type: Any) -> list:
    from kiln import te, tir

    data, widths, pad_value = inputs[0], inputs[1], inputs[2]

    def body(*i):
        before = [tir.Cast("int64", widths[k, 0]) for k in range(len(i))]
        inside = tir.all(*[tir.all(i[k] >= before[k], i[k] < before[k] + d)
                           for k, d in enumerate(data.shape)])
        source = [i[k] - before[k] for k in range(len(i))]
        return tir.if_then_else(inside, data(*source), tir.Cast(data.dtype, pad_value()))

    return [te.compute(_shape(out_type), body, name="T_pad_dyn", tag="injective")]


def _dyn_strided_slice(attrs: Any, inputs: list, out_type: Any) -> list:
    from kiln import te
    from kiln.relay.vm.shape_rules import dyn_slice_bounds

    data, begin, end, strides = inputs
    bounds = dyn_slice_bounds(list(data.shape), begin, end, strides)
    return [te.compute(_shape(out_type),
                       lambda *i: data(*[lo + step * k for (lo, step, _), k in zip(bounds, i)]),
                       name="T_strided_slice_dyn", tag="injective")]


DYNAMIC_COMPUTES: dict[str, Any] = {
    "dyn.tile": _dyn_tile,
    "dyn.one_hot": _dyn_one_hot,
    "dyn.nn.pad": _dyn_pad,
    "dyn.strided_slice": _dyn_strided_slice,
    "argwhere": _argwhere,
    "dyn.zeros": _fill(_const(0)),
    "dyn.ones": _fill(_const(1)),
    "dyn.full": _fill(_scalar_input),
    "dyn.reshape": _reshape,
    "dyn.expand_dims": _reshape,  # adding or dropping 1-dims keeps the row-major order
    "dyn.squeeze": _reshape,
    "dyn.broadcast_to": _broadcast_to,
    "reshape": _reshape,
    "concatenate": _concatenate,
    "strided_slice": _strided_slice,
    "nn.batch_matmul": _batch_matmul,
}
