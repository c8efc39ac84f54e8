"""x86 reductions: parallel over the kept axes, vectorized over the contiguous axis.

Entry points: :func:`schedule_reduce` (sum/mean/max/min/prod/argmax/argmin/variance groups),
:func:`schedule_reduction_stage` (one reduction stage, at the root or inside a consumer's
loop; the pools and the softmax/norm schedules reuse it), :func:`innermost_reduced`,
:data:`DEFAULT_CONFIG`.

Knobs: ``vector_lanes`` (lanes of a vectorized kept axis), ``rfactor_lanes`` (the most
partial accumulators of a reduction over the innermost axis), ``min_parallel_extent``,
``min_parallel_work`` (elements read below which a reduction stays on one thread; ``None``,
the default, applies :mod:`kiln.topi.x86.parallel`'s ``"tir.parallel_min_work"`` rule) and
``scalar_chunks`` (parallel partial results of a reduction to a scalar).

Two shapes of reduction, two recipes:

* the reduced axis is *not* the input's innermost (``sum(x, axis=0)``): the reduction loops
  move outside the innermost kept axis, which is split into vectors, so every step adds one
  contiguous vector of the input to a vector of accumulators;
* the reduced axis *is* the innermost (``sum(x, axis=-1)``, or all axes to a scalar): the
  reduction is split by ``L`` lanes and ``rfactor``-ed into ``L`` partial results per output,
  summed by vectors, and the ``L`` partials are combined at the end. A reduction to a scalar
  is first ``rfactor``-ed into chunks along its outermost axis, reduced in parallel.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.tir import expr as _e
from kiln.tir.stmt_functor import post_order_visit
from kiln.topi.utils import divisor_at_most, get_const_tuple, traverse_inline
from kiln.topi.x86.parallel import worth_parallel

DEFAULT_CONFIG = {"vector_lanes": 8, "rfactor_lanes": 32, "min_parallel_extent": 2,
                  "min_parallel_work": None, "scalar_chunks": 16}


def _extent(iv: Any) -> int | None:
    ext = iv.dom.extent
    return int(ext.value) if isinstance(ext, _e.IntImm) else None


def lanes_dividing(extent: int | None, most: int, least: int = 4) -> int:
    """The largest power of two in ``[least, most]`` that divides ``extent`` (0 if none)."""
    lanes = most
    while extent and lanes >= least:
        if extent % lanes == 0:
            return lanes
        lanes //= 2
    return 0


def innermost_reduced(op: Any) -> bool:
    """Whether the last index of some tensor read by reduction ``op`` is a reduction variable
    (the reduction then walks memory contiguously and needs partial sums to vectorize)."""
    red_vars = {id(iv.var) for iv in op.reduce_axis}
    found = []

    def uses_reduce_var(expr: Any) -> bool:
        hit = []
        post_order_visit(expr, lambda n: hit.append(1) if id(n) in red_vars else None)
        return bool(hit)

    def visit(node: Any) -> None:
        if isinstance(node, _e.ProducerLoad) and node.indices and \
                uses_reduce_var(node.indices[-1]):
            found.append(node)

    for body in op.body:
        post_order_visit(body, visit)
    return bool(found)


def _product(extents: list[int | None]) -> int | None:
    total: int | None = 1
    for e in extents:
        total = total * e if e is not None and total is not None else None
    return total


def _worth_parallel(work: int | None, cfg: dict) -> bool:
    """The shared rule (:func:`~kiln.topi.x86.parallel.worth_parallel`), or the schedule's own
    ``min_parallel_work`` when its config sets one."""
    if cfg["min_parallel_work"] is None:
        return worth_parallel(work)
    return work is None or work >= cfg["min_parallel_work"]


def _fuse_parallel(stage: Any, axes: list, extents: list[int | None], work: int | None,
                   cfg: dict) -> Any:
    """Fuse ``axes`` into one loop; run it in parallel when it is long enough and the whole
    reduction reads enough elements to pay for waking the threads."""
    if not axes:
        return None
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    total = _product(extents)
    if total is not None and total >= cfg["min_parallel_extent"] and _worth_parallel(work, cfg):
        stage.parallel(fused)
    return fused


def schedule_reduction_stage(sch: Any, tensor: te.Tensor, config: dict | None = None,
                             attach: tuple[Any, Any] | None = None) -> None:
    """Schedule one reduction stage: vectorized, and parallel over its kept axes when it
    runs at the root. ``attach=(consumer_stage, loop)`` computes it inside that loop instead
    (the consumer's loop then carries the parallelism).

    Example
    -------
    >>> from kiln import te, topi
    >>> x = te.placeholder((64, 1000))
    >>> y = topi.sum(x, axis=1)
    >>> s = te.create_schedule(y.op)
    >>> schedule_reduction_stage(s, y)
    >>> [st.op.name for st in s.stages][-2:]
    ['T_sum.rf', 'T_sum']
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    stage = sch[tensor]
    op = stage.op
    data_axes, red_axes = list(op.axis), list(op.reduce_axis)
    work = _product([_extent(iv) for iv in data_axes + red_axes])
    single = op.num_outputs == 1
    if not data_axes and single and attach is None and _split_into_chunks(sch, tensor, work,
                                                                          cfg):
        return
    if red_axes and single and innermost_reduced(op):
        extent = _extent(red_axes[-1]) or 0
        # each lane accumulates at least 8 values: the final combine of the lanes is serial
        lanes = lanes_dividing(extent, min(cfg["rfactor_lanes"], extent // 8))
        if lanes:
            _rfactor_innermost(sch, tensor, red_axes[-1], lanes, work, cfg, attach)
            return
    outer, extents = data_axes, [_extent(iv) for iv in data_axes]
    if data_axes and red_axes and not innermost_reduced(op):
        outer, extents = data_axes[:-1], extents[:-1]
        inner = data_axes[-1]
        lanes = lanes_dividing(_extent(inner), cfg["vector_lanes"])
        if lanes and single:
            io, ii = stage.split(inner, factor=lanes)
            stage.reorder(*outer, io, *red_axes, ii)
            stage.vectorize(ii)
            if not outer:
                outer, extents = [io], [_extent(inner) // lanes]
        else:
            stage.reorder(*outer, *red_axes, inner)
    if attach is not None:
        stage.compute_at(*attach)
        return
    _fuse_parallel(stage, outer, extents, work, cfg)


def _split_into_chunks(sch: Any, tensor: te.Tensor, work: int | None, cfg: dict) -> bool:
    """A reduction to a scalar: ``rfactor`` its outermost axis into ``scalar_chunks`` partial
    results reduced in parallel (each vectorized as a reduction with one kept axis), then
    combined. False when it is too small to split."""
    red_axes = list(sch[tensor].op.reduce_axis)
    extent = _extent(red_axes[0]) or 0
    chunks = divisor_at_most(extent, cfg["scalar_chunks"])
    if work is None or not _worth_parallel(work, cfg) or chunks < 2:
        return False
    outer, _ = sch[tensor].split(red_axes[0], nparts=chunks)
    partial = sch.rfactor(tensor, outer, factor_axis=0)
    schedule_reduction_stage(sch, partial, cfg)
    return True


def _rfactor_innermost(sch: Any, tensor: te.Tensor, axis: Any, lanes: int, work: int | None,
                       cfg: dict, attach: tuple[Any, Any] | None) -> None:
    """``lanes`` partial reductions per output (vectorized), then one short final sum."""
    ndim = len(sch[tensor].op.axis)
    _, inner = sch[tensor].split(axis, factor=lanes)
    partial = sch.rfactor(tensor, inner, factor_axis=ndim)
    rf = sch[partial]
    leaves = list(rf.leaf_iter_vars)
    # [kept..., lane, outer part of the split axis, the other reduction axes...]: walk memory
    # in order, the other (outer) reduction axes first, the lanes innermost
    data, lane, split_outer, others = leaves[:ndim], leaves[ndim], leaves[ndim + 1], \
        leaves[ndim + 2:]
    rf.reorder(*data, *others, split_outer, lane)
    rf.vectorize(lane)
    final = sch[tensor]
    if attach is not None:
        rf.compute_at(*attach)
        final.compute_at(*attach)
        return
    data_axes = list(final.op.axis)
    extents = [_extent(iv) for iv in data_axes]
    fused = _fuse_parallel(final, data_axes, extents, work, cfg)
    if fused is not None:
        rf.compute_at(final, fused)


def schedule_reduce(outs: Any, config: dict | None = None) -> Any:
    """Reduction groups: each reduction vectorized and parallel over its kept axes; an
    injective epilogue (``mean``'s division, ``argmax``'s index pick) parallel on its own.

    Example
    -------
    >>> from kiln import te, topi
    >>> y = topi.mean(te.placeholder((8, 32)), axis=0)
    >>> s = topi.x86.reduction.schedule_reduce([y])
    >>> [st.op.name for st in s.stages if st.attach_type != "inline"]
    ['placeholder', 'T_sum', 'T_mean']
    """
    from kiln.topi.x86.injective import schedule_injective_from_existing

    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    done: set[int] = set()

    def visit(op: Any) -> None:
        if getattr(op, "reduce_axis", None) and op in sch and id(op) not in done:
            done.add(id(op))
            schedule_reduction_stage(sch, op.output(0), cfg)

    for t in outs:
        traverse_inline(sch, t.op, visit)
        if not t.op.reduce_axis and _static(t.shape):
            # an epilogue is one pass over the (smaller) output: threads only if it is large
            schedule_injective_from_existing(sch, t)
    return sch


def _static(shape: Any) -> bool:
    return all(isinstance(d, int) for d in get_const_tuple(shape))
