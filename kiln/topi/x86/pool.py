"""x86 pooling: max/avg windows over a padded input, global and adaptive pools as reductions.

Entry points: :func:`pool` (compute), :func:`schedule_pool`, :func:`global_pool` (compute),
:func:`schedule_global_pool` (global and adaptive pools), :data:`DEFAULT_CONFIG`.

The window compute reads a padded input (``-inf`` or 0 around the data) without bounds
checks; the average divides by the count of the window's counted positions, a closed form
per axis instead of a second reduction. The schedule depends on which axis is contiguous:

* ``NCW``/``NCHW``/``NCDHW`` (width innermost): one parallel task per (batch, channel) plane;
  for each output row, the input rows its windows read are first copied into a small padded
  buffer, then the row is computed with the output width split into vectors;
* ``NWC``/``NHWC``/``NCHW8c`` (channels innermost): one parallel task per (batch, [channel
  block,] output row), the channel axis in vectors; a max window reads clamped positions
  instead of padding where that cannot change the max (no branch in the loop).

Knobs: ``vector_lanes`` (output width or channels per vector), ``min_parallel_extent``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln import te
from kiln.arith.analyzer import Analyzer
from kiln.runtime.error import TVMError
from kiln.tir import expr as _e
from kiln.tir import op as _op
from kiln.tir.stmt_functor import post_order_visit, substitute
from kiln.topi import nn, tag
from kiln.topi.nn.conv import get_pad_tuple, int_values
from kiln.topi.nn.pad import clamp, in_bounds
from kiln.topi.utils import get_const_tuple, prod, traverse_inline
from kiln.topi.x86.parallel import static_work, worth_parallel
from kiln.topi.x86.reduction import lanes_dividing
from kiln.topi.x86.reduction import schedule_reduce as _schedule_reduce

DEFAULT_CONFIG = {"vector_lanes": 8, "min_parallel_extent": 2}

_SPATIAL = "DHW"


def _letters(layout: str) -> str:
    """``NCHW8c`` → ``NCHWc``: one letter per tensor axis."""
    return "".join(ch for ch in layout if ch.isalpha())


def _window_count(o: Any, kernel: int, stride: int, dilation: int, before: int, lo: int,
                  hi: int) -> Any:
    """How many window taps ``r`` in ``[0, kernel)`` land in ``[lo, hi)`` for output ``o``."""
    start = o * stride - before
    first = _op.max(_op.floordiv(lo - start + dilation - 1, dilation), 0)
    last = _op.min(_op.floordiv(hi - 1 - start, dilation), kernel - 1)
    return _op.max(last - first + 1, 0)


def pool(data: te.Tensor, kernel: Sequence[int], stride: Any, dilation: Any, padding: Any,
         pool_type: str, ceil_mode: bool = False, layout: str = "NCHW",
         count_include_pad: bool = True) -> te.Tensor:
    """Max or average pooling (the semantics of :func:`kiln.topi.nn.pool`) over a padded
    input read without bounds checks.

    Example
    -------
    >>> from kiln import te, topi
    >>> y = topi.x86.pool.pool(te.placeholder((1, 2, 7, 7)), (3, 3), 2, 1, 1, "avg")
    >>> [int(d) for d in y.shape], y.op.input_tensors[0].op.name
    ([1, 2, 4, 4], 'pool_sum')
    """
    # the generic compute owns the output size rules (ceil_mode, padding) and the checks
    out_shape = list(get_const_tuple(nn.pool(data, kernel, stride, dilation, padding,
                                             pool_type, ceil_mode, layout,
                                             count_include_pad).shape))
    letters = _letters(layout)
    spatial = [k for k, a in enumerate(letters) if a in _SPATIAL]
    nsp = len(spatial)
    kernel = int_values(kernel, nsp, "pool_size")
    stride, dilation = int_values(stride, nsp, "strides"), int_values(dilation, nsp, "dilation")
    before, after = get_pad_tuple(padding, nsp)
    shape = get_const_tuple(data.shape)
    pad_before, pad_after = [0] * data.ndim, [0] * data.ndim
    for k, ax in enumerate(spatial):
        reach = (out_shape[ax] - 1) * stride[k] + (kernel[k] - 1) * dilation[k] + 1
        pad_before[ax] = before[k]
        pad_after[ax] = max(reach - shape[ax] - before[k], 0)
    fill = _op.min_value(data.dtype).value if pool_type == "max" else 0.0
    red = [te.reduce_axis((0, kernel[k]), name=f"rv{k}") for k in range(nsp)]
    # A max window that always overlaps the input (dilation 1, padding below the kernel) may
    # read a clamped position instead of the padding: the clamped element is an input element
    # inside the same window, so the max is unchanged -- and the load needs no branch.
    clamp_only = pool_type == "max" and all(d == 1 for d in dilation) and all(
        pad_before[ax] < kernel[k] and pad_after[ax] < kernel[k] for k, ax in enumerate(spatial))
    if letters[-1] not in _SPATIAL and clamp_only:
        def padded(*src):
            clamped = list(src)
            for k, ax in enumerate(spatial):
                clamped[ax] = clamp(src[ax] - before[k], shape[ax])
            return data(*clamped)
    else:
        # width innermost: the schedule copies the padded rows an output row reads
        padded = _padded_rows(data, pad_before, pad_after, fill)

    def window(*i):
        src = list(i)
        for k, ax in enumerate(spatial):
            src[ax] = i[ax] * stride[k] + red[k].var * dilation[k]
        return padded(*src)

    if pool_type == "max":
        return te.compute(out_shape, lambda *i: te.max(window(*i), axis=red),
                          name="pool_max", tag="pool_max")
    sums = te.compute(out_shape, lambda *i: te.sum(window(*i), axis=red), name="pool_sum",
                      tag="pool_sum")

    def average(*i):
        count = None
        for k, ax in enumerate(spatial):
            lo, hi = (-before[k], shape[ax] + after[k]) if count_include_pad else \
                (0, shape[ax])
            n = _window_count(i[ax], kernel[k], stride[k], dilation[k], before[k], lo, hi)
            count = n if count is None else count * n
        return nn.pooling.window_mean(sums(*i), _op.cast(_op.max(count, 1), data.dtype))

    return te.compute(out_shape, average, name="pool_avg", tag=tag.ELEMWISE)


def _padded_rows(data: te.Tensor, before: list[int], after: list[int], fill: Any) -> te.Tensor:
    """``data`` padded with ``fill`` (``nn.pad``'s values), its innermost (column) bounds check
    marked ``likely``: LoopPartition peels the border columns off the copy of a row, and the
    interior is a plain copy. A clamped read under the check there made GCC emit AVX-512
    gathers for the whole row (the ``c`` target's NCHW pools ran 3-4x llvm's time)."""
    shape = [d + b + a for d, b, a in zip(get_const_tuple(data.shape), before, after)]
    extents = get_const_tuple(data.shape)
    fill = _op.const(fill, data.dtype)

    def body(*i):
        src = [v - b for v, b in zip(i, before)]
        padded = [k for k in range(data.ndim) if before[k] or after[k]]
        inside = [in_bounds(src[k], extents[k]) for k in padded]
        if padded and padded[-1] == data.ndim - 1:
            inside[-1] = _op.likely(inside[-1])
        read = data(*[clamp(v, d) for v, d in zip(src, extents)])
        return _op.if_then_else(_op.all(*inside), read, fill) if inside else read

    return te.compute(shape, body, name="pool_pad", tag=tag.INJECTIVE + ",pad")


def schedule_pool(outs: Any, layout: str = "NCHW", config: dict | None = None) -> Any:
    """Schedule the window pool in ``outs`` (see the module docstring for the recipes).

    Example
    -------
    >>> from kiln import te, topi
    >>> y = topi.x86.pool.pool(te.placeholder((1, 8, 16, 16)), (3, 3), 1, 1, 1, "max")
    >>> s = topi.x86.pool.schedule_pool([y], "NCHW")
    >>> [iv.var.name for iv in s[y].leaf_iter_vars]
    ['i0.i1.fused', 'i2', 'i3.outer', 'rv0', 'rv1', 'i3.inner']
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    out = outs[0]
    traverse_inline(sch, out.op)
    window = _find_window(out.op)
    if window is None:
        raise TVMError(f"schedule_pool: {out.op.name} reads no pool_max/pool_sum window "
                       "(build it with kiln.topi.x86.pool.pool)")
    letters = _letters(layout)
    spatial = [k for k, a in enumerate(letters) if a in _SPATIAL]
    stage = sch[out]
    axes = list(stage.leaf_iter_vars)[:out.ndim]
    dims = get_const_tuple(out.shape)
    lead = axes[:spatial[0] if letters[-1] in _SPATIAL else spatial[-1]] or axes[:1]
    vector_axis = axes[-1]
    lanes = lanes_dividing(dims[-1], cfg["vector_lanes"], least=2)
    if letters[-1] in _SPATIAL and not _unit_stride(window.op):
        # a strided vector load is a slow gather; the scalar loop is several times faster
        lanes = 0
    task = stage.fuse(*lead) if len(lead) > 1 else lead[0]
    window_size = static_work([iv.dom.extent for iv in window.op.reduce_axis])
    outputs = static_work(dims)
    work = None if window_size is None or outputs is None else outputs * window_size
    if prod(dims[:len(lead)]) >= cfg["min_parallel_extent"] and worth_parallel(work):
        stage.parallel(task)
    vec_outer = vector_axis
    if lanes:
        vec_outer, vec_inner = stage.split(vector_axis, factor=lanes)
    if window.op is out.op:
        if lanes:
            stage.reorder(vec_outer, *out.op.reduce_axis, vec_inner)
            stage.vectorize(vec_inner)
    else:
        if lanes:
            stage.vectorize(vec_inner)
        acc = sch[window]
        acc.compute_at(stage, vec_outer)
        acc_axes = list(acc.leaf_iter_vars)
        acc.reorder(*window.op.reduce_axis, acc_axes[len(window.op.axis) - 1])
        if lanes:
            acc.vectorize(acc_axes[len(window.op.axis) - 1])
    padded = window.op.input_tensors[0]
    if letters[-1] in _SPATIAL and padded.op.name == "pool_pad" and padded.op in sch:
        # the padded input rows an output row reads are copied first (a small buffer on the
        # stack), so the window loads are plain vectors instead of clamped gathers
        rows = [iv for iv in axes[spatial[0]:-1]]
        sch[padded].compute_at(stage, rows[-1] if rows else task)
    return sch


def _unit_stride(op: Any) -> bool:
    """Whether consecutive outputs of window ``op`` read consecutive input columns."""
    column = op.axis[-1].var
    loads = []
    post_order_visit(op.body[0], lambda n: loads.append(n)
                     if isinstance(n, _e.ProducerLoad) else None)
    index = loads[0].indices[-1]
    step = substitute(index, {column: column + 1}) - index
    return Analyzer().can_prove_equal(step, 1)


def _find_window(op: Any) -> te.Tensor | None:
    """The window reduction under ``op`` (itself, or under the average / an epilogue)."""
    if op.tag in ("pool_max", "pool_sum"):
        return op.output(0)
    for t in getattr(op, "input_tensors", []):
        found = _find_window(t.op)
        if found is not None:
            return found
    return None


def global_pool(data: te.Tensor, pool_type: str, layout: str = "NCHW") -> te.Tensor:
    """Pooling over all spatial positions as a plain reduction (kept as size-1 axes).

    Example
    -------
    >>> from kiln import te, topi
    >>> y = topi.x86.pool.global_pool(te.placeholder((1, 4, 7, 7)), "avg")
    >>> [int(d) for d in y.shape]
    [1, 4, 1, 1]
    """
    from kiln.topi import reduction

    spatial = [k for k, a in enumerate(_letters(layout)) if a in _SPATIAL]
    if pool_type == "max":
        return reduction.max(data, spatial, keepdims=True)
    return reduction.mean(data, spatial, keepdims=True)


def schedule_global_pool(outs: Any, config: dict | None = None) -> Any:
    """Global and adaptive pools: the reduction schedule (parallel over batch and channels,
    vectorized over channels when they are innermost)."""
    return _schedule_reduce(outs, config)
