"""x86 dense with a packed weight (``dense_pack.x86``): register-blocked, vectorized, parallel.

Entry points: :func:`dense_pack` (compute), :func:`schedule_dense_pack` (schedule),
:func:`register_block`, :data:`DEFAULT_CONFIG` (the knobs: ``tile_y`` rows × ``blocks``
packed column blocks of ``tile_x`` columns per register block, ``accumulators`` the register
budget that sizes ``blocks`` when it is 0, ``tile_k`` reduction steps per unrolled chunk,
``parallel_min_flops`` the work below which one thread runs the op).

The weight ``[N, K]`` is packed as ``[N / tile_x, K, tile_x]`` (Relay folds this at compile
time for constant weights), so the innermost loop reads ``tile_x`` contiguous floats: two AVX2
vectors for ``tile_x = 16``. Each task computes one ``tile_y × blocks·tile_x`` output block
in a local accumulator (``cache_write``), looping ``k`` outside the unrolled rows and column
blocks and the vectorized columns; a bias/activation epilogue is computed in the same task.
With one row (a GEMV) the block spans several packed blocks so that independent FMA chains
hide the FMA latency. Small products run on one thread: waking a pool worker costs tens of
microseconds on a shared machine, more than a sub-millisecond product gains from it.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.topi.nn.dense import dense_pack as _dense_pack_compute
from kiln.topi.nn.dense import pack_weight
from kiln.topi.utils import divisor_at_most, get_const_int, traverse_inline

DEFAULT_CONFIG = {"tile_y": 4, "tile_x": 16, "tile_k": 4, "blocks": 0, "accumulators": 8,
                  "parallel_min_flops": 2_000_000}


def dense_pack(data: te.Tensor, weight: te.Tensor, bias: te.Tensor | None = None,
               out_dtype: str | None = None, config: dict | None = None) -> te.Tensor:
    """``data @ weight.T (+ bias)`` through a ``[N / tile_x, K, tile_x]`` packed weight."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    n = get_const_int(weight.shape[0])
    lanes = divisor_at_most(n, cfg["tile_x"])
    return _dense_pack_compute(data, pack_weight(weight, lanes), bias, out_dtype)


def schedule_dense_pack(outs: Any, config: dict | None = None) -> Any:
    """Schedule every ``dense_pack`` op in ``outs`` (and its fused epilogue).

    Example
    -------
    >>> from kiln import te, topi
    >>> y = topi.nn.relu(topi.x86.dense_pack(te.placeholder((8, 64)), te.placeholder((32, 64))))
    >>> s = topi.x86.schedule_dense_pack([y], {"tile_y": 2})
    >>> [iv.var.name for iv in s[y].leaf_iter_vars]
    ['i1.outer.i0.outer.fused', 'i0.inner', 'i1.inner.outer', 'i1.inner.inner']
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])

    def visit(op):
        if op.tag == "dense_pack":
            _schedule_block(sch, op.output(0), outs[0], cfg)

    traverse_inline(sch, outs[0].op, visit)
    return sch


def _schedule_block(sch: Any, dense: te.Tensor, out: te.Tensor, cfg: dict) -> None:
    packed = dense.op.input_tensors[1]
    if packed.op.name == "weight_pack" and packed.op in sch:
        stage = sch[packed]
        z, _, x = stage.leaf_iter_vars
        stage.parallel(z)
        stage.vectorize(x)
    m = get_const_int(dense.shape[0])
    lanes = get_const_int(packed.shape[2])
    ty, blocks = register_block(m, get_const_int(packed.shape[0]), lanes, cfg)
    k = get_const_int(dense.op.reduce_axis[0].dom.extent)
    tk = divisor_at_most(k, cfg["tile_k"])
    # When the dense op is itself the output, accumulate each block locally first.
    block_tensor = sch.cache_write(dense, "local") if out.op is dense.op else dense
    # The output block loops: (rows / ty) x (cols / (blocks x lanes)) tasks, in parallel.
    o = sch[out]
    y, x = o.leaf_iter_vars[0], o.leaf_iter_vars[1]
    yo, yi = o.split(y, factor=ty)
    xo, xi = o.split(x, factor=lanes * blocks)
    # Column blocks outermost: consecutive tasks reuse one packed weight block from cache.
    o.reorder(xo, yo, yi, xi)
    task = o.fuse(xo, yo)
    if 2 * m * k * lanes * get_const_int(packed.shape[0]) >= cfg["parallel_min_flops"]:
        o.parallel(task)
    xio, xii = o.split(xi, factor=lanes)
    o.vectorize(xii)
    block = sch[block_tensor]
    block.compute_at(o, task)
    _register_block(block, tk, lanes)


def register_block(rows: int, column_blocks: int, lanes: int, cfg: dict) -> tuple[int, int]:
    """``(tile_y, blocks)``: rows and packed column blocks of one register block.

    ``tile_y`` rows (a divisor of ``rows`` up to ``cfg["tile_y"]``) × ``blocks`` packed
    blocks of ``lanes`` columns keep about ``cfg["accumulators"]`` AVX2 accumulators: with
    few rows (M = 1: a GEMV) the block spans several packed blocks, so independent FMA chains
    hide the FMA latency and each data broadcast feeds more of them. ``cfg["blocks"]``, when
    set, forces the count (it must divide ``column_blocks``).

    Example
    -------
    >>> from kiln.topi.x86.dense import DEFAULT_CONFIG, register_block
    >>> register_block(1, 32, 16, DEFAULT_CONFIG), register_block(64, 32, 16, DEFAULT_CONFIG)
    ((1, 4), (4, 1))
    """
    ty = divisor_at_most(rows, cfg["tile_y"])
    if cfg["blocks"]:
        return ty, cfg["blocks"]
    vectors = max(1, -(-lanes // 8))
    return ty, divisor_at_most(column_blocks, max(1, cfg["accumulators"] // (ty * vectors)))


def _register_block(block: Any, tk: int, lanes: int | None = None) -> None:
    """Reduction outside the unrolled rows and (when ``lanes`` splits the block's columns)
    the unrolled column blocks; the ``lanes`` columns vectorized. batch_matmul shares it."""
    leaves = list(block.leaf_iter_vars)
    data_axes = [iv for iv in leaves if iv.iter_type == 0]
    red = [iv for iv in leaves if iv.iter_type != 0]
    if len(data_axes) < 2 or not red:
        return
    yc, xc = data_axes[-2], data_axes[-1]
    ko, ki = block.split(red[0], factor=tk)
    if lanes is None:
        block.reorder(ko, ki, yc, xc)
        block.unroll(yc)
        block.vectorize(xc)
        return
    xco, xci = block.split(xc, factor=lanes)
    block.reorder(ko, ki, yc, xco, xci)
    block.unroll(yc)
    block.unroll(xco)
    block.vectorize(xci)
