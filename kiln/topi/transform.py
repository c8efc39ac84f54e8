"""Data-movement computes (TVM's ``topi.transform``): every one is an injective te.compute.

Entry points: :func:`reshape`, :func:`transpose`, :func:`squeeze`, :func:`expand_dims`,
:func:`concatenate`, :func:`split`, :func:`stack`, :func:`take`, :func:`gather`,
:func:`gather_nd`, :func:`strided_slice`, :func:`slice_like`, :func:`tile`, :func:`repeat`,
:func:`reverse`, :func:`where`, :func:`one_hot`, :func:`arange`, :func:`full`, :func:`zeros`,
:func:`ones`, :func:`layout_transform`, :func:`sequence_mask`, :func:`shape_of`,
:func:`ndarray_size`. Shapes are static: Relay resolves ``reshape``'s special values first.

Example
-------
>>> from kiln import te, topi
>>> A = te.placeholder((2, 3), name="A")
>>> [int(d) for d in topi.transpose(A).shape]
[3, 2]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi import tag
from kiln.topi.utils import (
    get_const_int,
    get_const_tuple,
    normalize_axes,
    prod,
    ravel_index,
    unravel_index,
)


def _inj(shape: Sequence[Any], body: Any, name: str) -> te.Tensor:
    return te.compute(list(shape), body, name=name, tag=tag.INJECTIVE)


def reshape(x: te.Tensor, newshape: Sequence[Any]) -> te.Tensor:
    """``x`` with the static shape ``newshape`` (same element count)."""
    newshape = [get_const_int(d) if not isinstance(d, int) else d for d in newshape]
    old = get_const_tuple(x.shape)
    if all(isinstance(d, int) for d in old) and prod(old) != prod(newshape):
        raise TVMError(f"reshape: cannot reshape {old} ({prod(old)} elements) to "
                       f"{tuple(newshape)} ({prod(newshape)} elements)")
    return _inj(newshape, lambda *i: x(*unravel_index(ravel_index(i, newshape), x.shape)),
                "T_reshape")


def transpose(x: te.Tensor, axes: Sequence[int] | None = None) -> te.Tensor:
    """``x`` with its axes permuted (reversed when ``axes`` is None)."""
    axes = list(range(x.ndim))[::-1] if axes is None else [int(a) % x.ndim for a in axes]
    if sorted(axes) != list(range(x.ndim)):
        raise TVMError(f"transpose: axes {axes} are not a permutation of {x.ndim} axes")
    shape = [x.shape[a] for a in axes]

    def body(*i):
        src = [None] * x.ndim
        for out_pos, a in enumerate(axes):
            src[a] = i[out_pos]
        return x(*src)

    # the permutation travels with the op: the x86 schedule tiles a transpose that moves
    # the innermost axis (kiln.topi.x86.injective)
    return te.compute(list(shape), body, name="T_transpose", tag=tag.INJECTIVE,
                      attrs={"axes": axes})


def squeeze(x: te.Tensor, axis: Any = None) -> te.Tensor:
    """``x`` without the given size-1 axes (all of them when ``axis`` is None)."""
    shape = get_const_tuple(x.shape)
    if axis is None:
        drop = [i for i, d in enumerate(shape) if d == 1]
    else:
        drop = normalize_axes(axis, x.ndim)
        bad = [a for a in drop if shape[a] != 1]
        if bad:
            raise TVMError(f"squeeze: axis {bad[0]} has size {shape[bad[0]]}, not 1")
    keep = [i for i in range(x.ndim) if i not in drop]

    def body(*i):
        src = [0] * x.ndim
        for pos, a in enumerate(keep):
            src[a] = i[pos]
        return x(*src)

    return _inj([x.shape[a] for a in keep], body, "T_squeeze")


def expand_dims(x: te.Tensor, axis: int, num_newaxis: int = 1) -> te.Tensor:
    """``x`` with ``num_newaxis`` size-1 axes inserted at ``axis``."""
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise TVMError(f"expand_dims: axis {axis} is out of range for rank {x.ndim}")
    axis = axis % (x.ndim + 1) if axis < 0 else axis
    shape = list(x.shape[:axis]) + [1] * num_newaxis + list(x.shape[axis:])
    return _inj(shape, lambda *i: x(*(i[:axis] + i[axis + num_newaxis:])), "T_expand_dims")


def concatenate(xs: Sequence[te.Tensor], axis: int = 0) -> te.Tensor:
    """The tensors joined along ``axis``."""
    xs = list(xs)
    if not xs:
        raise TVMError("concatenate: needs at least one tensor")
    axis = normalize_axes(axis, xs[0].ndim)[0]
    sizes = [get_const_int(t.shape[axis]) for t in xs]
    shape = list(xs[0].shape)
    shape[axis] = sum(sizes)
    starts = [sum(sizes[:k]) for k in range(len(xs))]

    parts = [(t, start) for t, start, n in zip(xs, starts, sizes) if n > 0] or \
        [(xs[0], 0)]

    def body(*i):
        pos = i[axis]

        def read(t, start):
            local = list(i)
            local[axis] = pos - start
            return t(*local)

        value = read(*parts[-1])
        for k in range(len(parts) - 2, -1, -1):
            value = _op.if_then_else(pos < parts[k + 1][1], read(*parts[k]), value)
        return value

    return _inj(shape, body, "T_concat")


def split(x: te.Tensor, indices_or_sections: Any, axis: int = 0) -> list[te.Tensor]:
    """``x`` cut along ``axis`` into equal sections (an int) or at the given indices."""
    axis = normalize_axes(axis, x.ndim)[0]
    size = get_const_int(x.shape[axis])
    if isinstance(indices_or_sections, int):
        if indices_or_sections <= 0 or size % indices_or_sections:
            raise TVMError(f"split: axis {axis} of size {size} does not divide into "
                           f"{indices_or_sections} equal sections")
        step = size // indices_or_sections
        bounds = list(range(0, size + 1, step)) if step else [0] * (indices_or_sections + 1)
    else:
        bounds = [0] + [get_const_int(v) for v in indices_or_sections] + [size]
    outs = []
    for part, (begin, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        shape = list(x.shape)
        shape[axis] = max(end - begin, 0)

        def body(*i, begin=begin):
            src = list(i)
            src[axis] = i[axis] + begin
            return x(*src)

        outs.append(_inj(shape, body, f"T_split_{part}" if part else "T_split"))
    return outs


def stack(xs: Sequence[te.Tensor], axis: int = 0) -> te.Tensor:
    """Same-shaped tensors stacked along a new axis."""
    xs = list(xs)
    ndim = xs[0].ndim + 1
    if not -ndim <= axis < ndim:
        raise TVMError(f"stack: axis {axis} is out of range for rank {ndim}")
    axis %= ndim
    shape = list(xs[0].shape[:axis]) + [len(xs)] + list(xs[0].shape[axis:])

    def body(*i):
        src = i[:axis] + i[axis + 1:]
        value = xs[-1](*src)
        for k in range(len(xs) - 2, -1, -1):
            value = _op.if_then_else(i[axis] == k, xs[k](*src), value)
        return value

    return _inj(shape, body, "T_stack")


def _clip_index(idx: Any, size: Any) -> Any:
    return _op.min(_op.max(idx, 0), size - 1)


def _index(value: Any, size: Any, mode: str) -> Any:
    idx = _op.cast(value, "int32") if value.dtype != "int32" else value
    size = _op.cast(size, "int32")
    if mode == "clip":
        return _clip_index(idx, size)
    if mode == "wrap":
        return _op.floormod(idx, size)
    if mode == "fast":
        return _op.if_then_else(idx < 0, idx + size, idx)
    raise TVMError(f"take: mode must be 'clip', 'wrap' or 'fast', got {mode!r}")


def take(a: te.Tensor, indices: Any, axis: int | None = None, batch_dims: int = 0,
         mode: str = "clip") -> te.Tensor:
    """Elements of ``a`` picked by ``indices`` along ``axis`` (the flattened ``a`` if None)."""
    if not isinstance(indices, te.Tensor):
        import numpy as np

        values = np.asarray(indices)
        from kiln.tir.op import const

        data = [int(v) for v in values.reshape(-1)]
        ishape = list(values.shape)
        consts = data

        def read_idx(*i):
            flat = ravel_index(i, ishape) if ishape else 0
            value = const(consts[-1], "int32")
            for k in range(len(consts) - 2, -1, -1):
                value = _op.if_then_else(flat == k, const(consts[k], "int32"), value)
            return value
    else:
        ishape = list(indices.shape)

        def read_idx(*i):
            return indices(*i)
    if axis is None:
        flat_size = prod(a.shape)
        return _inj(ishape, lambda *i: a(*unravel_index(_index(read_idx(*i), flat_size, mode),
                                                        a.shape)), "T_take")
    axis = normalize_axes(axis, a.ndim)[0]
    bd = batch_dims % len(ishape) if batch_dims < 0 else batch_dims
    shape = list(a.shape[:axis]) + ishape[bd:] + list(a.shape[axis + 1:])
    nidx = len(ishape) - bd

    def body(*i):
        lead = i[:axis]
        idx_pos = i[axis:axis + nidx]
        rest = i[axis + nidx:]
        idx = _index(read_idx(*(tuple(lead[:bd]) + tuple(idx_pos))), a.shape[axis], mode)
        return a(*(lead + (idx,) + rest))

    return _inj(shape, body, "T_take")


def gather(data: te.Tensor, axis: int, indices: te.Tensor) -> te.Tensor:
    """``out[..i..] = data[.., indices[..i..], ..]`` along ``axis`` (ONNX GatherElements); a
    negative index counts from the end, one still out of range is clamped into it (run-time
    indices never read outside ``data``)."""
    axis = normalize_axes(axis, data.ndim)[0]

    def body(*i):
        src = list(i)
        idx = _op.cast(indices(*i), "int32")
        size = _op.cast(data.shape[axis], "int32")
        src[axis] = _clip_index(_op.if_then_else(idx < 0, idx + size, idx), size)
        return data(*src)

    return _inj(indices.shape, body, "T_gather")


def gather_nd(data: te.Tensor, indices: te.Tensor, batch_dims: int = 0) -> te.Tensor:
    """``out[y..., x...] = data[b..., indices[:, y...], x...]`` (indices' first axis = depth).

    A negative index counts from the end (ONNX GatherND); indices still out of range are
    clamped into it, so indices known only at run time never read outside ``data``."""
    m = get_const_int(indices.shape[0])
    shape = list(indices.shape[1:]) + list(data.shape[batch_dims + m:])
    nidx = indices.ndim - 1

    def picked_index(k, y):
        idx = _op.cast(indices(*((k,) + tuple(y))), "int32")
        size = _op.cast(data.shape[batch_dims + k], "int32")
        return _clip_index(_op.if_then_else(idx < 0, idx + size, idx), size)

    def body(*i):
        y, x = i[:nidx], i[nidx:]
        lead = list(y[:batch_dims])
        picked = [picked_index(k, y) for k in range(m)]
        return data(*(lead + picked + list(x)))

    return _inj(shape, body, "T_gather_nd")


def _slice_params(shape, begin, end, strides, axes, slice_mode):
    ndim = len(shape)
    axes = list(range(len(begin))) if axes is None else [int(a) % ndim for a in axes]
    starts, steps, sizes = [0] * ndim, [1] * ndim, list(shape)
    for pos, ax in enumerate(axes):
        dim = shape[ax]
        step = int(strides[pos]) if strides is not None and pos < len(strides) else \
            (int(strides[0]) if strides is not None and len(strides) == 1 else 1)
        if step == 0:
            raise TVMError("strided_slice: a stride cannot be 0")
        b = begin[pos] if pos < len(begin) else (0 if step > 0 else dim - 1)
        e = end[pos] if end is not None and pos < len(end) else None
        if slice_mode == "size":
            step = 1
            e = None if e is None or e < 0 else b + e
        b = int(b)
        if b < 0:
            b += dim
        if e is None:
            e = dim if step > 0 else -1
        else:
            e = int(e)
            if e < 0 and not (step < 0 and e == -1 and slice_mode == "size"):
                e += dim
        if step > 0:
            b, e = min(max(b, 0), dim), min(max(e, 0), dim)
            n = max(0, -(-(e - b) // step))
        else:
            b, e = min(max(b, -1), dim - 1), min(max(e, -1), dim - 1)
            n = max(0, -(-(b - e) // -step))
        starts[ax], steps[ax], sizes[ax] = b, step, n
    return starts, steps, sizes


def strided_slice(x: te.Tensor, begin: Sequence[int], end: Sequence[int] | None,
                  strides: Sequence[int] | None = None, axes: Sequence[int] | None = None,
                  slice_mode: str = "end") -> te.Tensor:
    """``x[begin:end:strides]`` per axis, with NumPy's clamping and negative values."""
    shape = get_const_tuple(x.shape)
    starts, steps, sizes = _slice_params(shape, list(begin), None if end is None else list(end),
                                         None if strides is None else list(strides), axes,
                                         slice_mode)
    return _inj(sizes, lambda *i: x(*[b + s * k for b, s, k in zip(starts, steps, i)]),
                "T_strided_slice")


def slice_like(x: te.Tensor, shape_like: te.Tensor, axes: Sequence[int] | None = None):
    """The leading corner of ``x`` with ``shape_like``'s size on ``axes`` (all if None)."""
    axes = list(range(min(x.ndim, shape_like.ndim))) if not axes else \
        [int(a) % x.ndim for a in axes]
    shape = list(x.shape)
    for a in axes:
        shape[a] = shape_like.shape[a]
    return _inj(shape, lambda *i: x(*i), "T_slice_like")


def tile(x: te.Tensor, reps: Sequence[int]) -> te.Tensor:
    """``x`` repeated ``reps`` times per axis (NumPy's ``tile``)."""
    reps = [int(r) for r in reps]
    ndim = max(x.ndim, len(reps))
    reps = [1] * (ndim - len(reps)) + reps
    base = [1] * (ndim - x.ndim) + list(x.shape)
    shape = [b * r for b, r in zip(base, reps)]
    lead = ndim - x.ndim
    return _inj(shape, lambda *i: x(*[_op.floormod(i[lead + k], x.shape[k])
                                      for k in range(x.ndim)]), "T_tile")


def repeat(x: te.Tensor, repeats: int, axis: int) -> te.Tensor:
    """Each element of ``x`` repeated ``repeats`` times along ``axis``."""
    if repeats < 1:
        raise TVMError(f"repeat: repeats must be at least 1, got {repeats}")
    axis = normalize_axes(axis, x.ndim)[0]
    shape = list(x.shape)
    shape[axis] = shape[axis] * repeats

    def body(*i):
        src = list(i)
        src[axis] = _op.floordiv(i[axis], repeats)
        return x(*src)

    return _inj(shape, body, "T_repeat")


def reverse(x: te.Tensor, axis: Any = None) -> te.Tensor:
    """``x`` reversed along ``axis`` (NumPy's ``flip``)."""
    axes = normalize_axes(axis, x.ndim)

    def body(*i):
        return x(*[x.shape[k] - 1 - v if k in axes else v for k, v in enumerate(i)])

    return _inj(x.shape, body, "T_reverse")


def where(condition: te.Tensor, x: Any, y: Any) -> te.Tensor:
    """``x`` where ``condition`` is true, else ``y``, all broadcast together."""
    from kiln.topi.broadcast import broadcast_reader, broadcast_shape

    tensors = [t for t in (condition, x, y) if isinstance(t, te.Tensor)]
    shape = tensors[0].shape
    for t in tensors[1:]:
        shape = broadcast_shape(shape, t.shape)
    dtype = next((t.dtype for t in (x, y) if isinstance(t, te.Tensor)), "float32")

    def reader(v):
        if isinstance(v, te.Tensor):
            return broadcast_reader(v, len(shape), shape)
        const = _op.const(v, dtype)
        return lambda *i: const

    rc, rx, ry = reader(condition), reader(x), reader(y)

    def body(*i):
        c = rc(*i)
        c = c if c.dtype == "bool" else _op.not_equal(c, _op.const(0, c.dtype))
        return _op.if_then_else(c, rx(*i), ry(*i))

    return te.compute(list(shape), body, name="T_where", tag=tag.BROADCAST)


def one_hot(indices: te.Tensor, on_value: Any, off_value: Any, depth: int, axis: int,
            dtype: str) -> te.Tensor:
    """``on_value`` where the new ``axis`` position equals the index, else ``off_value``."""
    ndim = indices.ndim + 1
    axis = ndim - 1 if axis == -1 else axis % ndim
    shape = list(indices.shape[:axis]) + [depth] + list(indices.shape[axis:])

    def value(v):
        return _op.cast(v(), dtype) if isinstance(v, te.Tensor) else _op.const(v, dtype)

    def body(*i):
        idx = _op.cast(indices(*(i[:axis] + i[axis + 1:])), "int32")
        return _op.if_then_else(i[axis] == idx, value(on_value), value(off_value))

    return _inj(shape, body, "T_one_hot")


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: str = "float32"):
    """``start, start + step, …`` below ``stop`` (NumPy's ``arange``)."""
    import math

    if stop is None:
        start, stop = 0, start
    n = max(0, math.ceil((float(stop) - float(start)) / float(step)))
    return _inj([n], lambda i: _op.const(start, dtype) + _op.cast(i, dtype) *
                _op.const(step, dtype), "T_arange")


def full(shape: Sequence[Any], dtype: str, fill_value: Any) -> te.Tensor:
    """A tensor of ``shape`` filled with ``fill_value`` (a number or a scalar tensor)."""
    if isinstance(fill_value, te.Tensor):
        return te.compute(list(shape), lambda *i: _op.cast(fill_value(), dtype), name="T_full",
                          tag=tag.ELEMWISE)
    value = _op.const(fill_value, dtype)
    return te.compute(list(shape), lambda *i: value, name="T_full", tag=tag.ELEMWISE)


def zeros(shape: Sequence[Any], dtype: str = "float32") -> te.Tensor:
    return full(shape, dtype, 0)


def ones(shape: Sequence[Any], dtype: str = "float32") -> te.Tensor:
    return full(shape, dtype, 1)


_LAYOUT_PART = re.compile(r"(\d*)([A-Za-z])")


def parse_layout(layout: str) -> list[tuple[str, int]]:
    """``"NCHW8c"`` → ``[("N", 0), ("C", 0), ("H", 0), ("W", 0), ("c", 8)]``."""
    parts = _LAYOUT_PART.findall(layout)
    if "".join(n + a for n, a in parts) != layout or not parts:
        raise TVMError(f"invalid layout {layout!r}")
    out = []
    for number, letter in parts:
        if letter.isupper() and number:
            raise TVMError(f"layout {layout!r}: primal axis {letter} cannot have a factor")
        if letter.islower() and not number:
            raise TVMError(f"layout {layout!r}: sub-axis {letter} needs a factor")
        if letter.islower() and int(number) == 0:
            raise TVMError(f"layout {layout!r}: sub-axis {letter} has factor 0; a block factor "
                           f"must be positive")
        out.append((letter, int(number) if number else 0))
    return out


def layout_transform_shape(shape: Sequence[Any], src_layout: str,
                           dst_layout: str) -> list[Any]:
    """The shape of a ``shape`` tensor in ``src_layout`` seen in ``dst_layout`` (dims may be
    expressions: the VM's shape function of ``layout_transform`` calls this too).

    Example
    -------
    >>> layout_transform_shape((1, 20, 5, 5), "NCHW", "NCHW8c")
    [1, 3, 5, 5, 8]
    """
    src, dst = parse_layout(src_layout), parse_layout(dst_layout)
    if {a for a, _ in src if a.isupper()} != {a for a, _ in dst if a.isupper()}:
        raise TVMError(f"layout_transform: {src_layout} and {dst_layout} name different axes")
    primal = _primal_extents(src, shape)
    sub_of = {a.upper(): f for a, f in dst if a.islower()}
    return [factor if axis.islower() else (primal[axis] + sub_of.get(axis, 1) - 1) //
            sub_of.get(axis, 1) for axis, factor in dst]


def _primal_extents(src: list[tuple[str, int]], shape: Sequence[Any]) -> dict[str, Any]:
    primal: dict[str, Any] = {}
    for (axis, _), dim in zip(src, shape):
        primal[axis.upper()] = primal.get(axis.upper(), 1) * dim
    return primal


def layout_transform(x: te.Tensor, src_layout: str, dst_layout: str) -> te.Tensor:
    """``x`` from ``src_layout`` to ``dst_layout`` (e.g. ``NCHW`` ↔ ``NCHW8c``, ``OIHW8i8o``);
    extents may be symbolic (the VM's ``Any`` dims)."""
    src, dst = parse_layout(src_layout), parse_layout(dst_layout)
    out_shape = layout_transform_shape(get_const_tuple(x.shape), src_layout, dst_layout)
    primal = _primal_extents(src, get_const_tuple(x.shape))
    sub_of = {a.upper(): f for a, f in dst if a.islower()}
    # a split that does not divide its axis pads the tail; only those reads need a bound check
    ragged = [a for a in primal if sub_of.get(a, 1) > 1 and
              (not isinstance(primal[a], int) or primal[a] % sub_of[a])]

    def value_of(layout, idx, axis):
        total, big_factor = 0, {a.upper(): f for a, f in layout if a.islower()}
        for (a, _), v in zip(layout, idx):
            if a == axis:
                total = total + v * big_factor.get(axis, 1)
            elif a == axis.lower():
                total = total + v
        return total

    def body(*i):
        values = {a: value_of(dst, i, a) for a in primal}
        src_idx = []
        src_sub = {a.upper(): f for a, f in src if a.islower()}
        for a, f in src:
            if a.islower():
                src_idx.append(_op.floormod(values[a.upper()], f))
            elif a in src_sub:
                src_idx.append(_op.floordiv(values[a], src_sub[a]))
            else:
                src_idx.append(values[a])
        inside = [values[a] < primal[a] for a in ragged]
        read = x(*src_idx)
        if inside:
            cond = inside[0]
            for c in inside[1:]:
                cond = _op.logical_and(cond, c)
            return _op.if_then_else(cond, read, _op.const(0, x.dtype))
        return read

    return _inj(out_shape, body, "T_layout_trans")


def sequence_mask(data: te.Tensor, valid_length: te.Tensor, mask_value: float = 0.0,
                  axis: int = 0) -> te.Tensor:
    """``data`` with steps at or past ``valid_length[batch]`` replaced by ``mask_value``.

    ``axis`` (0 or 1) is the time axis; the other of the two is the batch axis.
    """
    if axis not in (0, 1):
        raise TVMError(f"sequence_mask: axis must be 0 or 1, got {axis}")
    batch_axis = 1 - axis

    def body(*i):
        limit = _op.cast(valid_length(i[batch_axis]), "int32")
        return _op.if_then_else(i[axis] >= limit, _op.const(mask_value, data.dtype), data(*i))

    return _inj(data.shape, body, "T_sequence_mask")


def shape_of(x: te.Tensor, dtype: str = "int32") -> te.Tensor:
    """The shape of ``x`` as a 1-D tensor."""
    dims = [_op.cast(d, dtype) for d in x.shape]

    def body(i):
        value = dims[-1] if dims else _op.const(0, dtype)
        for k in range(len(dims) - 2, -1, -1):
            value = _op.if_then_else(i == k, dims[k], value)
        return value

    return _inj([len(dims)], body, "T_shape_of")


def ndarray_size(x: te.Tensor, dtype: str = "int32") -> te.Tensor:
    """The element count of ``x`` as a scalar tensor."""
    size = _op.cast(prod(x.shape), dtype)
    return _inj([], lambda: size, "T_ndarray_size")


def cumulative(data: te.Tensor, axis: int | None, dtype: str | None, exclusive: bool,
               is_sum: bool) -> te.Tensor:
    """Running sum or product along ``axis`` (the flattened input when None)."""
    from kiln.topi.reduction import prod_reducer

    if axis is None:
        data = reshape(data, [prod(get_const_tuple(data.shape))])
        axis = 0
    axis = normalize_axes(axis, data.ndim)[0]
    dtype = dtype or data.dtype
    reducer = te.sum if is_sum else prod_reducer
    k = te.reduce_axis((0, data.shape[axis]), name="k")

    def body(*i):
        src = list(i)
        src[axis] = k.var
        keep = k.var < i[axis] if exclusive else k.var <= i[axis]
        return reducer(_op.cast(data(*src), dtype), axis=k, where=keep)

    return te.compute(data.shape, body, name="T_cumsum" if is_sum else "T_cumprod",
                      tag=tag.COMM_REDUCE)


def cumsum(data: te.Tensor, axis: int | None = None, dtype: str | None = None,
           exclusive: bool = False) -> te.Tensor:
    """Running sum along ``axis``."""
    return cumulative(data, axis, dtype, exclusive, True)


def cumprod(data: te.Tensor, axis: int | None = None, dtype: str | None = None,
            exclusive: bool = False) -> te.Tensor:
    """Running product along ``axis``."""
    return cumulative(data, axis, dtype, exclusive, False)


__all__ = ["reshape", "transpose", "squeeze", "expand_dims", "concatenate", "split", "stack",
           "take", "gather", "gather_nd", "strided_slice", "slice_like", "tile", "repeat",
           "reverse", "where", "one_hot", "arange", "full", "zeros", "ones", "parse_layout",
           "layout_transform", "layout_transform_shape", "sequence_mask", "shape_of",
           "ndarray_size", "cumsum", "cumprod"]
