"""x86 dense with a packed weight (``dense_pack.x86``): register-blocked, vectorized, parallel.

Entry points: :func:`dense_pack` (compute from an ``[N, K]`` weight), :func:`pack_lanes`
(the packed block width),
:func:`dense_packed_weight` (compute from a prepacked weight, ``contrib_dense_pack.x86``),
:func:`schedule_dense_pack` (schedule), :func:`register_block`, :data:`DEFAULT_CONFIG` (the
knobs: ``tile_y`` rows × ``blocks`` packed column blocks of ``tile_x`` columns per register
block, ``accumulators`` the register budget that sizes ``blocks`` when it is 0, ``tile_k``
reduction steps per unrolled chunk, ``parallel_min_flops`` the work below which one thread
runs the op; for a symbolic row count, ``tile_y_symbolic`` rows per register block and
``rows_symbolic`` the row count assumed when weighing that work).

The weight ``[N, K]`` is packed as ``[N / tile_x, K, tile_x]`` (Relay folds this at compile
time for constant weights), so the innermost loop reads ``tile_x`` contiguous floats: two AVX2
vectors for ``tile_x = 16``. Each task computes one ``tile_y × blocks·tile_x`` output block
in a local accumulator (``cache_write``), looping ``k`` outside the unrolled rows and column
blocks and the vectorized columns; a bias/activation epilogue is computed in the same task.
With one row (a GEMV) the block spans several packed blocks so that independent FMA chains
hide the FMA latency. Products under ``parallel_min_flops`` (a quarter megaflop by default,
:data:`kiln.topi.x86.parallel.DEFAULT_PARALLEL_MIN_FLOPS`) run on one thread: below that a
launch, even to a worker the executor keeps polling, costs about what the second thread saves.

A symbolic row count (a ``relay.Any`` batch in the VM) keeps the same register block: the
rows are computed in groups of ``tile_y_symbolic`` (the last group repeating the last row),
so the block's extent stays constant whatever the batch; the loops are column blocks (the
parallel loop when the assumed work is large) around row groups. Two rows per group: a
batch of 1 computes its row twice, which costs little in a GEMV bound by streaming the
weight (four rows would double the FMAs again), and larger batches still share each weight
load between two rows.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.tir.expr import IntImm
from kiln.topi import tag
from kiln.topi.nn.dense import dense_pack as _dense_pack_compute
from kiln.topi.nn.dense import pack_weight
from kiln.topi.utils import divisor_at_most, get_const_int, traverse_inline
from kiln.topi.x86.parallel import DEFAULT_PARALLEL_MIN_FLOPS

DEFAULT_CONFIG = {"tile_y": 4, "tile_x": 16, "tile_k": 4, "blocks": 0, "accumulators": 8,
                  "parallel_min_flops": DEFAULT_PARALLEL_MIN_FLOPS, "tile_y_symbolic": 2,
                  "rows_symbolic": 1}


def dense_pack(data: te.Tensor, weight: te.Tensor, bias: te.Tensor | None = None,
               out_dtype: str | None = None, config: dict | None = None) -> te.Tensor:
    """``data @ weight.T (+ bias)`` through a ``[N / tile_x, K, tile_x]`` packed weight."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    lanes = pack_lanes(get_const_int(weight.shape[0]), cfg["tile_x"])
    return dense_packed_weight(data, pack_weight(weight, lanes), bias, out_dtype, cfg)


def pack_lanes(units: int, tile_x: int) -> int:
    """Columns per packed weight block for ``units`` output columns: ``tile_x`` itself when
    it divides them (a tuning record's block is what was measured), else the largest power
    of two up to ``tile_x`` that divides them when it is at least 4 (a vector), else the
    largest divisor up to ``tile_x``. Untuned (``tile_x`` 16), a block of another width (10
    of 1000 units) is a loop the vectorizer leaves scalar (measured, 1 thread: MobileNet's
    1024 x 1000 classifier at batch 1 took 5.9x ORT's time in blocks of 10, 0.88x in blocks
    of 8).

    Example
    -------
    >>> from kiln.topi.x86.dense import pack_lanes
    >>> pack_lanes(1000, 16), pack_lanes(1024, 16), pack_lanes(10, 16), pack_lanes(12, 16)
    (8, 16, 10, 4)
    >>> pack_lanes(1000, 10)  # a tuned block that divides the units
    10
    """
    if tile_x >= 1 and units % tile_x == 0:
        return tile_x
    power = max(d for d in (1, 2, 4, 8, 16, 32, 64) if d <= max(tile_x, 1) and units % d == 0)
    return power if power >= 4 else divisor_at_most(units, tile_x)


def dense_packed_weight(data: te.Tensor, packed: te.Tensor, bias: te.Tensor | None = None,
                        out_dtype: str | None = None, config: dict | None = None) -> te.Tensor:
    """``data [M, K]`` times a weight packed as ``[N / n, K, n]``; ``M`` may be symbolic.

    With a symbolic ``M`` (a ``relay.Any`` batch) the product is computed in groups of
    ``tile_y`` rows, ``[ceil(M / tile_y), tile_y, N]``, the rows past ``M`` in the last
    group repeating row ``M - 1``: every group is a full register block of constant extent
    (unrolled rows, vector accumulators), and the ``[M, N]`` result reads the groups back.

    Example
    -------
    >>> from kiln import te
    >>> from kiln.topi.x86.dense import dense_packed_weight
    >>> x = te.placeholder((te.var("m", "int64"), 64))
    >>> y = dense_packed_weight(x, te.placeholder((2, 64, 16)))
    >>> y.op.input_tensors[0].op.tag, len(y.op.input_tensors[0].shape)
    ('dense_pack', 3)
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    rows = data.shape[0] if len(data.shape) == 2 else 0
    if isinstance(rows, int | IntImm):
        return _dense_pack_compute(data, packed, bias, out_dtype)
    out_dtype = out_dtype or data.dtype
    k, lanes = get_const_int(data.shape[1]), get_const_int(packed.shape[2])
    if get_const_int(packed.shape[1]) != k:
        raise TVMError(f"dense_pack: data has {k} columns but the packed weight reduces over "
                       f"{get_const_int(packed.shape[1])}")
    ty = cfg["tile_y_symbolic"]
    red = te.reduce_axis((0, k), name="k")
    grouped = te.compute(
        (_op.floordiv(rows + (ty - 1), ty), ty, packed.shape[0] * lanes),
        lambda g, t, x: te.sum(
            _op.cast(data[_op.min(g * ty + t, rows - 1), red.var], out_dtype)
            * _op.cast(packed[_op.floordiv(x, lanes), red.var, _op.floormod(x, lanes)],
                       out_dtype), axis=red),
        name="T_dense_pack", tag="dense_pack")
    out = te.compute((rows, grouped.shape[2]),
                     lambda y, x: grouped[_op.floordiv(y, ty), _op.floormod(y, ty), x],
                     name="T_dense_rows", tag=tag.INJECTIVE)
    if bias is not None:
        out = te.compute(out.shape, lambda i, j: out[i, j] + _op.cast(bias[j], out_dtype),
                         name="T_add", tag=tag.BROADCAST)
    return out


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
        stage.compute_root()  # traverse_inline inlined it: packing per use of each element
        z, _, x = stage.leaf_iter_vars
        stage.parallel(z)
        stage.vectorize(x)
    lanes = get_const_int(packed.shape[2])
    column_blocks = get_const_int(packed.shape[0])
    k = get_const_int(dense.op.reduce_axis[0].dom.extent)
    tk = divisor_at_most(k, cfg["tile_k"])
    if len(dense.shape) == 3:  # groups of rows: a symbolic row count
        block, task = _schedule_row_groups(sch, dense, out, column_blocks, lanes, k, cfg)
    else:
        # When the dense op is itself the output, accumulate each block locally first.
        block = sch[sch.cache_write(dense, "local") if out.op is dense.op else dense]
        task = _schedule_rows(sch[out], get_const_int(dense.shape[0]), column_blocks, lanes,
                              k, cfg)
    block.compute_at(task[0], task[1])
    schedule_register_block(block, tk, lanes)


def _schedule_rows(o: Any, m: int, column_blocks: int, lanes: int, k: int,
                   cfg: dict) -> tuple[Any, Any]:
    """Output loops over tasks of ``tile_y`` rows × ``blocks`` packed blocks (one parallel
    loop); returns where the register block goes: ``(stage, task loop)``."""
    ty, blocks = register_block(m, column_blocks, lanes, cfg)
    y, x = o.leaf_iter_vars[0], o.leaf_iter_vars[1]
    yo, yi = o.split(y, factor=ty)
    xo, xi = o.split(x, factor=lanes * blocks)
    # Column blocks outermost: consecutive tasks reuse one packed weight block from cache.
    o.reorder(xo, yo, yi, xi)
    task = o.fuse(xo, yo)
    if 2 * m * k * lanes * column_blocks >= cfg["parallel_min_flops"]:
        o.parallel(task)
    _, xii = o.split(xi, factor=lanes)
    o.vectorize(xii)
    return o, task


def _schedule_row_groups(sch: Any, grouped: te.Tensor, out: te.Tensor, column_blocks: int,
                         lanes: int, k: int, cfg: dict) -> tuple[Any, tuple[Any, Any]]:
    """Loops for a symbolic row count (``grouped`` is ``[groups, tile_y, N]``): packed column
    blocks outside, parallel when ``rows_symbolic`` rows are worth it, groups inside them
    (not fused: a fused index would divide by the symbolic group count).

    The register block goes into the output's group loop when the output has the data's
    row count. An epilogue reading another ``Any``-batch tensor (a residual add) has rows of
    its own variable: bounds inferred from it would be clamped to the data's groups, giving
    the block a symbolic extent, so then the groups are computed first, into a buffer of
    their own, and the epilogue runs after them as a vector loop.
    Returns ``(register block stage, (stage, group loop))``.
    """
    ty = get_const_int(grouped.shape[1])
    _, blocks = register_block(ty, column_blocks, lanes, cfg)
    rows = grouped.op.input_tensors[0].shape[0]
    if out.shape[0] is rows:
        block, stage = sch[grouped], sch[out]
        y, x = stage.leaf_iter_vars[0], stage.leaf_iter_vars[1]
        group, row = stage.split(y, factor=ty)
    else:
        block = sch[sch.cache_write(grouped, "local")]
        stage = sch[grouped]
        group, row, x = stage.leaf_iter_vars
        epilogue = sch[out]
        _, columns = epilogue.split(epilogue.leaf_iter_vars[1], factor=lanes)
        epilogue.vectorize(columns)
    xo, xi = stage.split(x, factor=lanes * blocks)
    stage.reorder(xo, group, row, xi)
    if 2 * cfg["rows_symbolic"] * k * lanes * column_blocks >= cfg["parallel_min_flops"]:
        stage.parallel(xo)
    _, xii = stage.split(xi, factor=lanes)
    stage.vectorize(xii)
    return block, (stage, group)


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


def schedule_register_block(block: Any, tk: int, lanes: int | None = None) -> None:
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
