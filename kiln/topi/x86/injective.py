"""x86 schedules for injective ops and reductions: parallel outer loops, vector inner loops.

Entry points: :func:`schedule_injective`, :func:`schedule_reduce`,
:func:`schedule_injective_from_existing`.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.topi import tag
from kiln.topi.utils import get_const_tuple, traverse_inline
from kiln.topi.x86.parallel import static_work, worth_parallel

# Knobs: how many lanes the innermost loop is split into, and the smallest loop worth
# spreading over threads.
DEFAULT_CONFIG = {"vector_lanes": 8, "min_parallel_extent": 2}


def _static(shape: Any) -> list[int] | None:
    dims = get_const_tuple(shape)
    return list(dims) if all(isinstance(d, int) for d in dims) else None


def schedule_injective_from_existing(sch: Any, out: te.Tensor, config: dict | None = None):
    """Fuse the outer loops of ``out`` into one parallel loop; vectorize the innermost."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    stage = sch[out]
    axes = list(stage.leaf_iter_vars)
    dims = _static(out.shape)
    if not axes or dims is None or 0 in dims:
        return sch
    lanes = cfg["vector_lanes"]
    if _tile_transpose(sch, out, dims, lanes):
        return sch
    if dims[-1] % lanes == 0 and dims[-1] >= lanes:
        outer, inner = stage.split(axes[-1], factor=lanes)
        stage.vectorize(inner)
        axes = axes[:-1] + [outer]
    elif len(axes) > 1 and dims[-1] >= lanes and _extent(dims[:-1], 1) >= 4 * lanes:
        # an odd row (a padded image, 226 wide): keep it as the inner loop, which the C/LLVM
        # compiler vectorizes with a tail, rather than fusing it into per-element tasks
        axes = axes[:-1]
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    if _extent(dims, lanes) >= cfg["min_parallel_extent"] and worth_parallel(static_work(dims)):
        stage.parallel(fused)
    return sch


def _moved_innermost(sch: Any, out: te.Tensor, dims: list[int]) -> int | None:
    """The output axis that reads the input's innermost axis, when ``out`` is (an
    elementwise epilogue of) a transpose moving that axis; None otherwise."""
    from kiln.te.tensor import ComputeOp

    stack, seen = [out.op], set()
    while stack:
        op = stack.pop()
        if id(op) in seen or not isinstance(op, ComputeOp):
            continue
        seen.add(id(op))
        axes = (op.attrs or {}).get("axes") if op.name == "T_transpose" else None
        if axes is not None:
            shape = _static(op.output(0).shape)
            last = len(axes) - 1
            if shape == dims and axes[-1] != last:
                return list(axes).index(last)
            return None
        if op is out.op or (op in sch and sch[op].attach_type == "inline"):
            stack.extend(t.op for t in op.input_tensors)
    return None


def _tile_transpose(sch: Any, out: te.Tensor, dims: list[int], lanes: int) -> bool:
    """A transpose moving the innermost axis reads one element per cache line when its
    output is written row by row: tile the two swapped axes so that each tile's input lines
    stay in cache (TILE x TILE elements), vectorizing the output's innermost axis."""
    p = _moved_innermost(sch, out, dims)
    if p is None:
        return False
    tile = next((t for t in (16, 8) if dims[p] % t == 0 and dims[-1] % t == 0), None)
    if tile is None:
        return False
    stage = sch[out]
    axes = list(stage.leaf_iter_vars)
    po, pi = stage.split(axes[p], factor=tile)
    lo, li = stage.split(axes[-1], factor=tile)
    rest = [a for k, a in enumerate(axes[:-1]) if k != p]
    lio, lii = stage.split(li, factor=min(lanes, tile))
    stage.reorder(*rest, po, lo, pi, lio, lii)
    stage.vectorize(lii)
    fused = stage.fuse(*rest, po, lo)
    if worth_parallel(static_work(dims)):
        stage.parallel(fused)
    return True


def _extent(dims: list[int], lanes: int) -> int:
    total = 1
    for d in dims:
        total *= d
    return total // lanes if dims[-1] % lanes == 0 else total


def schedule_injective(outs: Any) -> Any:
    """Injective ops: producers inlined, output loops parallel + vectorized."""
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    for t in outs:
        traverse_inline(sch, t.op)
        schedule_injective_from_existing(sch, t)
    return sch


def schedule_opaque(outs: Any) -> Any:
    """Other ops (pools, softmax, norms, sorts …): every root stage runs its leading
    data-parallel loops (up to two, fused) in parallel; injective producers are inlined."""
    from kiln.te.tensor import ComputeOp
    from kiln.topi.generic import default_schedule

    sch = default_schedule(outs)
    for stage in sch.stages:
        if not isinstance(stage.op, ComputeOp) or stage.attach_type != "root":
            continue
        dims = _static([iv.dom.extent for iv in stage.op.axis])
        if not dims or 0 in dims:
            continue
        lead = stage.leaf_iter_vars[:min(2, len(dims))]
        extent = dims[0] * (dims[1] if len(lead) > 1 else 1)
        work = static_work(dims + [iv.dom.extent for iv in stage.op.reduce_axis])
        if extent >= DEFAULT_CONFIG["min_parallel_extent"] and worth_parallel(work):
            stage.parallel(stage.fuse(*lead) if len(lead) > 1 else lead[0])
    return sch


def schedule_reduce(outs: Any) -> Any:
    """Reductions: the kept (outer) axes fused and run in parallel."""
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])

    def visit(op):
        if op.tag in (tag.COMM_REDUCE, tag.COMM_REDUCE_IDX) and op in sch:
            stage = sch[op]
            data_axes = [iv for iv in stage.leaf_iter_vars if iv.iter_type == 0]
            dims = [iv.dom.extent for iv in op.axis]
            if len(data_axes) == len(stage.leaf_iter_vars) - len(op.reduce_axis) and data_axes:
                static = _static(dims)
                work = static_work(dims + [iv.dom.extent for iv in op.reduce_axis])
                if static and min(static) > 0 and worth_parallel(work):
                    fused = stage.fuse(*data_axes) if len(data_axes) > 1 else data_axes[0]
                    stage.parallel(fused)

    for t in outs:
        traverse_inline(sch, t.op, visit)
    return sch
