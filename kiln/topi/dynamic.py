"""Computes over run-time extents: the kernels of ``dyn.*`` ops, ``argwhere``, and the shape
ops whose static compute folds constant shapes.

Entry points: :func:`tensor_values`, :func:`reshape`, :func:`broadcast_to`, :func:`full`,
:func:`tile`, :func:`one_hot`, :func:`pad`, :func:`slice_bounds`, :func:`attr_slice_spec`,
:func:`strided_slice`, :func:`concatenate`, :func:`split`, :func:`batch_matmul`,
:func:`argwhere`, :func:`topk`, :func:`is_static`.

Every compute takes its output shape ``out_shape`` explicitly: dims are ints or int64
``PrimExpr``\\ s (the VM passes shape variables, bound at run time from the output buffers
it allocated from the op's shape function, as TVM's lowering does). The inputs that carry
shapes (a ``newshape`` tensor, ``begin``/``end``/``strides`` …) are read only where the
indexing needs their values, never to size the output. The resize family lives with the
static computes it generalizes (:mod:`kiln.topi.image.resize`), as does ``layout_transform``.

Example
-------
>>> from kiln import te
>>> n = te.var("n", "int64")
>>> x = te.placeholder((n, 6), name="x")
>>> y = reshape(x, [n * 2, 3])
>>> len(y.shape), is_static(y.shape)
(2, False)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln import te, tir
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi import tag
from kiln.topi.nn.pad import source_index
from kiln.topi.sort import argsort
from kiln.topi.utils import ravel_index, unravel_index

__all__ = ["is_static", "tensor_values", "reshape", "broadcast_to", "full", "tile", "one_hot",
           "pad", "slice_bounds", "attr_slice_spec", "strided_slice", "concatenate", "split",
           "batch_matmul", "argwhere", "topk"]


def is_static(shape: Sequence[Any]) -> bool:
    """Whether every dimension of ``shape`` is a constant."""
    return all(isinstance(d, int) or isinstance(getattr(d, "value", None), int) for d in shape)


def _is_one(dim: Any) -> bool:
    return dim == 1 if isinstance(dim, int) else getattr(dim, "value", None) == 1


def _i64(value: Any) -> Any:
    return _op.cast(value, "int64")


def _select(cond: Any, then: Any, otherwise: Any) -> Any:
    """``cond ? then : otherwise``, folded when ``cond`` is a constant."""
    return _op.if_then_else(cond, then, otherwise)


def tensor_values(tensor: te.Tensor, count: int, dtype: str = "int64") -> list[Any]:
    """``count`` values of a 1-D tensor read at run time (a 1-element tensor repeats), as
    ``dtype`` expressions: how computes and shape functions read shape-carrying inputs.

    Example
    -------
    >>> from kiln import te
    >>> len(tensor_values(te.placeholder((1,), "int64", name="s"), 3))
    3
    """
    if len(tensor.shape) != 1 or not is_static(tensor.shape):
        raise TVMError(f"expected a 1-D tensor of static length, got shape {list(tensor.shape)}")
    length = int(tensor.shape[0].value if hasattr(tensor.shape[0], "value") else tensor.shape[0])
    if length not in (1, count):
        raise TVMError(f"expected {count} values (one per axis), got a tensor of {length}")
    return [_op.cast(tensor[k if length > 1 else 0], dtype) for k in range(count)]


def reshape(data: te.Tensor, out_shape: Sequence[Any]) -> te.Tensor:
    """``data``'s elements, in row-major order, as ``out_shape``.

    Example
    -------
    >>> from kiln import te
    >>> n = te.var("n", "int64")
    >>> reshape(te.placeholder((n, 4)), [n * 2, 2]).op.tag
    'injective'
    """
    return te.compute(list(out_shape),
                      lambda *i: data(*unravel_index(ravel_index(i, out_shape), data.shape)),
                      name="T_reshape", tag=tag.INJECTIVE)


def broadcast_to(data: te.Tensor, out_shape: Sequence[Any]) -> te.Tensor:
    """``data`` broadcast to ``out_shape`` (NumPy rules; a run-time extent of 1 broadcasts).

    Example
    -------
    >>> from kiln import te
    >>> n = te.var("n", "int64")
    >>> broadcast_to(te.placeholder((n, 1)), [2, n, 4]).op.tag
    'broadcast'
    """
    lead = len(out_shape) - data.ndim

    def body(*i):
        index = []
        for k, dim in enumerate(data.shape):
            if _is_one(dim):
                index.append(0)
            elif is_static([dim]):
                index.append(i[lead + k])
            else:
                index.append(_op.if_then_else(dim == 1, _op.const(0, i[lead + k].dtype),
                                              i[lead + k]))
        return data(*index)

    return te.compute(list(out_shape), body, name="T_broadcast_to", tag=tag.BROADCAST)


def full(out_shape: Sequence[Any], dtype: str, fill_value: Any) -> te.Tensor:
    """A tensor of ``out_shape`` filled with ``fill_value`` (a number or a 0-d tensor).

    Example
    -------
    >>> from kiln import te
    >>> full([te.var("n", "int64"), 2], "int32", 7).dtype
    'int32'
    """
    value = _op.cast(fill_value() if isinstance(fill_value, te.Tensor) else fill_value, dtype)
    return te.compute(list(out_shape), lambda *i: value, name="T_full", tag=tag.ELEMWISE)


def tile(data: te.Tensor, out_shape: Sequence[Any]) -> te.Tensor:
    """``data`` repeated along each axis to fill ``out_shape`` (NumPy's ``tile``).

    Example
    -------
    >>> from kiln import te
    >>> n = te.var("n", "int64")
    >>> len(tile(te.placeholder((n, 3)), [2, n * 2, 6]).shape)
    3
    """
    lead = len(out_shape) - data.ndim
    return te.compute(list(out_shape),
                      lambda *i: data(*[_op.floormod(i[lead + k], d)
                                        for k, d in enumerate(data.shape)]),
                      name="T_tile", tag=tag.INJECTIVE)


def one_hot(indices: te.Tensor, on_value: te.Tensor, off_value: te.Tensor,
            out_shape: Sequence[Any], axis: int, dtype: str) -> te.Tensor:
    """``on_value`` where the position along ``axis`` equals the index, else ``off_value``.

    Example
    -------
    >>> from kiln import te
    >>> n, depth = te.var("n", "int64"), te.var("depth", "int64")
    >>> on, off = te.placeholder((), name="on"), te.placeholder((), name="off")
    >>> one_hot(te.placeholder((n,), "int32"), on, off, [n, depth], -1, "float32").dtype
    'float32'
    """
    axis = len(out_shape) - 1 if axis == -1 else axis

    def body(*i):
        where = list(i[:axis]) + list(i[axis + 1:])
        hit = _i64(indices(*where)) == _i64(i[axis])
        return _op.if_then_else(hit, _op.cast(on_value(), dtype), _op.cast(off_value(), dtype))

    return te.compute(list(out_shape), body, name="T_one_hot", tag=tag.INJECTIVE)


def pad(data: te.Tensor, pad_width: te.Tensor, pad_value: te.Tensor,
        out_shape: Sequence[Any], pad_mode: str = "constant") -> te.Tensor:
    """``data`` padded by the run-time ``[ndim, 2]`` widths: with the 0-d ``pad_value``
    (``constant``) or with its own border (``edge``, ``reflect``, as :func:`topi.nn.pad`).

    Example
    -------
    >>> from kiln import te
    >>> h, w = te.var("h", "int64"), te.var("w", "int64")
    >>> widths = te.placeholder((2, 2), "int64", name="widths")
    >>> pad(te.placeholder((3, 3)), widths, te.placeholder(()), [h, w]).op.name
    'T_pad'
    """
    if pad_mode not in ("constant", "edge", "reflect"):
        raise TVMError(f"pad: pad_mode must be constant, edge or reflect, got {pad_mode!r}")

    def mirrored(*i):
        return data(*[source_index(i[k] - _i64(pad_width[k, 0]), _i64(d), pad_mode.upper())
                      for k, d in enumerate(data.shape)])

    def body(*i):
        before = [_i64(pad_width[k, 0]) for k in range(len(i))]
        inside = [_op.logical_and(i[k] >= before[k], i[k] < before[k] + d)
                  for k, d in enumerate(data.shape)]
        cond = inside[0]
        for c in inside[1:]:
            cond = _op.logical_and(cond, c)
        source = [i[k] - before[k] for k in range(len(i))]
        return _op.if_then_else(cond, data(*source), _op.cast(pad_value(), data.dtype))

    return te.compute(list(out_shape), body if pad_mode == "constant" else mirrored,
                      name="T_pad", tag=tag.INJECTIVE)


def slice_bounds(dims: Sequence[Any], begin: Sequence[Any], end: Sequence[Any],
                 strides: Sequence[Any]) -> list[tuple[Any, Any, Any]]:
    """Per axis ``(start, stride, length)`` of ``x[begin:end:stride]`` with NumPy's negative
    indices and clamping, for int64 expressions (values read at run time).

    A zero stride has no meaning; it gives length -1, which the VM rejects when it allocates.

    Example
    -------
    >>> from kiln import tir
    >>> c = lambda v: tir.const(v, "int64")
    >>> [int(p) for p in slice_bounds([c(10)], [c(-2)], [c(1)], [c(-3)])[0]]
    [8, -3, 3]
    """
    zero, one = _op.const(0, "int64"), _op.const(1, "int64")
    result = []
    for dim, b, e, step in zip(dims, begin, end, strides):
        dim, b, e, step = _i64(dim), _i64(b), _i64(e), _i64(step)
        b = _select(b < zero, b + dim, b)
        e = _select(e < zero, e + dim, e)
        # forward: clamp into [0, dim]; backward: into [-1, dim - 1]
        low, high = _select(step > zero, zero, -one), _select(step > zero, dim, dim - one)
        lo = _op.max(_op.min(b, high), low)
        hi = _op.max(_op.min(e, high), low)
        span = _select(step > zero, hi - lo, lo - hi)
        magnitude = _op.max(_select(step > zero, step, zero - step), one)
        length = _op.max((span + magnitude - one) // magnitude, zero)
        result.append((lo, step, _select(step == zero, -one, length)))
    return result


def attr_slice_spec(dims: Sequence[Any], begin: Sequence[int], end: Sequence[Any] | None,
                    strides: Sequence[int] | None, axes: Sequence[int] | None = None,
                    slice_mode: str = "end") -> tuple[list, list, list]:
    """``strided_slice``'s attributes as per-axis ``(begins, ends, strides)`` over all
    ``len(dims)`` axes, ready for :func:`slice_bounds` when the dims are run-time values.

    Example
    -------
    >>> b, e, s = attr_slice_spec([5, 6], [1], [-1], None, axes=[1])
    >>> [int(v) for v in b + e + s]
    [0, 1, 5, -1, 1, 1]
    """
    ndim = len(dims)
    axes = list(range(len(begin))) if axes is None else [int(a) % ndim for a in axes]
    strides = list(strides or [])
    begins = [_op.const(0, "int64")] * ndim
    ends = [_i64(d) for d in dims]
    steps = [_op.const(1, "int64")] * ndim
    for pos, axis in enumerate(axes):
        step = int(strides[pos]) if pos < len(strides) else (int(strides[0]) if
                                                             len(strides) == 1 else 1)
        b = int(begin[pos]) if pos < len(begin) else (0 if step > 0 else -1)
        e = None if end is None or pos >= len(end) or end[pos] is None else int(end[pos])
        if slice_mode == "size":
            step = 1
            e = None if e is None or e < 0 else b + e
        begins[axis], steps[axis] = _op.const(b, "int64"), _op.const(step, "int64")
        # an open end runs to the last element in the stride's direction
        ends[axis] = _op.const(e, "int64") if e is not None else \
            (_i64(dims[axis]) if step > 0 else _op.const(-1, "int64") - _i64(dims[axis]))
    return begins, ends, steps


def strided_slice(data: te.Tensor, begin: Sequence[Any], end: Sequence[Any],
                  strides: Sequence[Any], out_shape: Sequence[Any]) -> te.Tensor:
    """``data[begin:end:strides]`` with per-axis bounds given as expressions (or read from
    run-time tensors by the caller); ``out_shape`` holds the lengths.

    Example
    -------
    >>> from kiln import te
    >>> n, m = te.var("n", "int64"), te.var("m", "int64")
    >>> begin = te.placeholder((1,), "int64", name="begin")
    >>> x = te.placeholder((n,))
    >>> strided_slice(x, tensor_values(begin, 1), [n], [1], [m]).op.name
    'T_strided_slice'
    """
    bounds = slice_bounds(list(data.shape), begin, end, strides)
    return te.compute(list(out_shape),
                      lambda *i: data(*[lo + step * k for (lo, step, _), k in zip(bounds, i)]),
                      name="T_strided_slice", tag=tag.INJECTIVE)


def concatenate(inputs: Sequence[te.Tensor], axis: int,
                out_shape: Sequence[Any]) -> te.Tensor:
    """The inputs joined along ``axis`` when some of their extents are run-time values.

    Example
    -------
    >>> from kiln import te
    >>> n, m = te.var("n", "int64"), te.var("m", "int64")
    >>> xs = [te.placeholder((n, 2)), te.placeholder((m, 2))]
    >>> str(concatenate(xs, 0, [n + m, 2]).shape[0])
    'n + m'
    """
    axis = axis % inputs[0].ndim
    starts, total = [], 0
    for t in inputs:
        starts.append(total)
        total = total + t.shape[axis]
    ends = starts[1:] + [total]

    def body(*i):
        value = None
        for t, start, stop in reversed(list(zip(inputs, starts, ends))):
            index = list(i)
            index[axis] = i[axis] - start
            here = t(*index)
            # lazy select: only the input that owns this position is read
            value = here if value is None else _op.if_then_else(i[axis] < stop, here, value)
        return value

    return te.compute(list(out_shape), body, name="T_concat", tag=tag.INJECTIVE)


def split(data: te.Tensor, out_shapes: Sequence[Sequence[Any]], axis: int) -> list[te.Tensor]:
    """Consecutive pieces of ``data`` along ``axis``, each as long as its shape in
    ``out_shapes`` says (the VM computes them from the split's sections at run time).

    Example
    -------
    >>> from kiln import te
    >>> n, m = te.var("n", "int64"), te.var("m", "int64")
    >>> [str(p.shape[0]) for p in split(te.placeholder((n, 2)), [[m, 2], [n - m, 2]], 0)]
    ['m', 'n - m']
    """
    axis = axis % data.ndim
    pieces, start = [], 0
    for k, shape in enumerate(out_shapes):
        def body(*i, start=start):
            return data(*[i[d] + start if d == axis else i[d] for d in range(len(i))])

        pieces.append(te.compute(list(shape), body, name=f"T_split_{k}", tag=tag.INJECTIVE))
        start = start + shape[axis]
    return pieces


def batch_matmul(x: te.Tensor, y: te.Tensor, out_shape: Sequence[Any], out_dtype: str,
                 transpose_a: bool = False, transpose_b: bool = True) -> te.Tensor:
    """Batched ``op(x) @ op(y)`` with run-time batch/row/column extents (a batch of 1
    broadcasts).

    Example
    -------
    >>> from kiln import te
    >>> b = te.var("b", "int64")
    >>> x, y = te.placeholder((b, 2, 3)), te.placeholder((1, 4, 3))
    >>> batch_matmul(x, y, [b, 2, 4], "float32").op.tag
    'batch_matmul'
    """
    depth = x.shape[1] if transpose_a else x.shape[2]
    k = te.reduce_axis((0, depth), name="k")
    x_one, y_one = _is_one(x.shape[0]), _is_one(y.shape[0])

    def body(b, i, j):
        xb, yb = (0 if x_one else b), (0 if y_one else b)
        left = x[xb, k, i] if transpose_a else x[xb, i, k]
        right = y[yb, j, k] if transpose_b else y[yb, k, j]
        return te.sum(_op.cast(left, out_dtype) * _op.cast(right, out_dtype), axis=k)

    return te.compute(list(out_shape), body, name="T_batch_matmul", tag="batch_matmul")


def argwhere(condition: te.Tensor, out_shape: Sequence[Any], dtype: str = "int32"):
    """Row k holds the coordinates of the k-th non-zero element of ``condition``
    (row-major order); ``out_shape[0]`` is the number of non-zeros (from the shape function).

    One serial pass (a ``te.extern`` loop): each non-zero element writes its coordinates to
    the next row. The VM sized the output from the same count, so every write is in bounds.

    Example
    -------
    >>> from kiln import te
    >>> n, count = te.var("n", "int64"), te.var("count", "int64")
    >>> [str(d) for d in argwhere(te.placeholder((n, 3)), [count, 2]).shape]
    ['count', '2']
    """
    dims = list(condition.shape)
    zero = _op.const(0, "int64")

    def scan(ins, outs):
        cond, out = ins[0], outs[0]
        row = tir.decl_buffer((1,), "int64", name="argwhere_row")
        flat = tir.Var("flat", "int64")
        coordinates = unravel_index(flat, dims)
        here = row[0]
        write = tir.SeqStmt([tir.BufferStore(out, _op.cast(c, dtype), [here, _op.const(k, "int64")])
                             for k, c in enumerate(coordinates)] +
                            [tir.BufferStore(row, here + 1, [zero])])
        nonzero = cond[tuple(coordinates)] != _op.const(0, condition.dtype)
        total = zero + 1
        for d in dims:
            total = total * _i64(d)
        loop = tir.For(flat, zero, total, tir.ForKind.SERIAL, tir.IfThenElse(nonzero, write))
        return tir.Allocate(row.data, "int64", [1], tir.const(True, "bool"),
                            tir.SeqStmt([tir.BufferStore(row, zero, [zero]), loop]))

    return te.extern([list(out_shape)], [condition], scan, name="T_argwhere", dtype=[dtype],
                     tag="argwhere")


def topk(data: te.Tensor, out_shape: Sequence[Any], axis: int = -1, ret_type: str = "both",
         is_ascend: bool = False, dtype: str = "int32") -> list[te.Tensor]:
    """The first ``out_shape[axis]`` elements of ``data`` sorted along ``axis`` (largest first
    unless ``is_ascend``) and/or their indices, as :func:`kiln.topi.topk` returns them; the
    count k is a run-time value (the VM sizes ``out_shape`` from ``dyn.topk``'s k tensor).

    Example
    -------
    >>> from kiln import te
    >>> n, k = te.var("n", "int64"), te.var("k", "int64")
    >>> [t.dtype for t in topk(te.placeholder((n, 8)), [n, k], axis=1)]
    ['float32', 'int32']
    """
    axis = axis % data.ndim
    order = argsort(data, axis, is_ascend, "int32")
    indices = te.compute(list(out_shape), lambda *i: _op.cast(order(*i), dtype),
                         name="T_topk_indices", tag=tag.INJECTIVE)

    def value(*i):
        index = list(i)
        index[axis] = order(*i)
        return data(*index)

    values = te.compute(list(out_shape), value, name="T_topk_values", tag=tag.INJECTIVE)
    return {"both": [values, indices], "values": [values], "indices": [indices]}[ret_type]
