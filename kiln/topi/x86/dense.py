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

A symbolic row count (a ``relay.Any`` batch in the VM) keeps constant register blocks: the
rows are computed in full groups of ``tile_y_symbolic`` (4) rows, the block the static
kernel uses from 4 rows, straight into the output through the epilogue; a tail of 3 rows is
one more such group repeating the last row, and a tail of 1 or 2 rows is one pair (the
pair's 2 x 2-block register tile, a batch of 1 computing its row twice), computed first into
a small buffer of its own. The loops are column blocks (parallel when the assumed work is
large) around groups. Measured against the static kernel of each row count (K=256 -> N=1024,
one thread, CPU time, interleaved; ``benchmarks/dense_dynamic.py``): 1.09x at 1 row, 1.06x at
2, 1.04x at 3, 1.00x at 8, 32 and 100 rows (groups of 2 rows throughout: 1.15-1.20x from 3
rows up; groups of 4 alone: 1.3-1.4x at 1-2 rows).
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
                  "parallel_min_flops": DEFAULT_PARALLEL_MIN_FLOPS, "tile_y_symbolic": 4,
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
    ``tile_y_symbolic`` rows and a tail in smaller groups (:func:`_row_groups`): every group
    is a register block of constant extent (unrolled rows, vector accumulators), and the
    ``[M, N]`` result reads each row from the group that computed it.

    Example
    -------
    >>> from kiln import te
    >>> from kiln.topi.x86.dense import dense_packed_weight
    >>> x = te.placeholder((te.var("m", "int64"), 64))
    >>> y = dense_packed_weight(x, te.placeholder((2, 64, 16)))
    >>> [(t.op.tag, len(t.shape)) for t in y.op.input_tensors]
    [('dense_pack', 3), ('dense_pack', 3)]
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
    out = _row_groups(data, packed, rows, k, lanes, out_dtype, cfg["tile_y_symbolic"])
    if bias is not None:
        out = te.compute(out.shape, lambda i, j: out[i, j] + _op.cast(bias[j], out_dtype),
                         name="T_add", tag=tag.BROADCAST)
    return out


def _row_groups(data: te.Tensor, packed: te.Tensor, rows: Any, k: int, lanes: int,
                out_dtype: str, tile_y: int) -> te.Tensor:
    """``data @ W.T`` for a symbolic ``rows``: full groups of ``tile_y`` rows (a tail of
    ``tile_y - 1`` rows as one more, repeating the last row), then what is left in groups
    of ``tile_y // 2``, ``tile_y // 4`` … 2, the last size's last group repeating row
    ``rows - 1`` (for 4: a tail of 1 or 2 rows is one pair). Each group size is its own
    ``[groups, size, N]`` product; the ``[rows, N]`` result picks each row from the product
    that computed it.

    The full groups' product has one more group when a shorter tail follows, its reduction
    guarded by ``likely(g < full groups)``: the output's group loop computes each block in
    place, and LoopPartition peels the guarded last group off (its reduction simplifies
    away, leaving the tail rows to the smaller groups)."""
    columns = packed.shape[0] * lanes
    sizes = [tile_y]
    while sizes[-1] > 2:
        sizes.append(sizes[-1] // 2)
    parts, start, left = [], IntImm("int64", 0), rows
    for i, size in enumerate(sizes):
        first, last = i == 0, i == len(sizes) - 1
        groups, guard = _op.floordiv(left + (size - 1), size), None
        if last:
            count = left
        elif first:
            full = _op.floordiv(left + 1, size)
            count = _op.min(full * size, left)
            guard = (lambda g, full=full: _op.likely(g < full))
        else:
            groups = _op.floordiv(left, size)
            count = groups * size
        product = _group_product(data, packed, start, groups, size, k, lanes, columns,
                                 out_dtype, guard, clamp=first or last)
        parts.append((start, size, product))
        start, left = start + count, left - count

    def pick(y, x):
        def read(first, size, part):
            row = y - first
            return part[_op.floordiv(row, size), _op.floormod(row, size), x]

        value = read(*parts[-1])
        for part, (after, _, _) in zip(reversed(parts[:-1]), reversed(parts[1:])):
            value = _op.if_then_else(y < after, read(*part), value)
        return value

    return te.compute((rows, columns), pick, name="T_dense_rows", tag=tag.INJECTIVE)


def _group_product(data: te.Tensor, packed: te.Tensor, start: Any, extent: Any, size: int,
                   k: int, lanes: int, columns: Any, out_dtype: str, guard: Any,
                   clamp: bool) -> te.Tensor:
    """Rows from ``start`` of ``data @ W.T`` in ``extent`` groups of ``size``, ``[extent,
    size, N]``: with ``clamp`` rows past the data repeat its last row; ``guard(g)``, when
    given, is the condition for group ``g`` to be computed at all (else it stays 0)."""
    rows = data.shape[0]
    red = te.reduce_axis((0, k), name="k")

    def row(g, t):
        index = start + g * size + t
        return _op.min(index, rows - 1) if clamp else index

    return te.compute(
        (extent, size, columns),
        lambda g, t, x: te.sum(
            _op.cast(data[row(g, t), red.var], out_dtype)
            * _op.cast(packed[_op.floordiv(x, lanes), red.var, _op.floormod(x, lanes)],
                       out_dtype), axis=red, where=guard(g) if guard else None),
        name=f"T_dense_pack_rows{size}", tag="dense_pack")


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

    packed_done: set[int] = set()
    row_groups: list[te.Tensor] = []

    def visit(op):
        if op.tag != "dense_pack":
            return
        _schedule_weight_pack(sch, op.input_tensors[1], packed_done)
        if len(op.output(0).shape) == 3:
            row_groups.append(op.output(0))
        else:
            _schedule_block(sch, op.output(0), outs[0], cfg)

    traverse_inline(sch, outs[0].op, visit)
    if row_groups:
        _schedule_row_groups(sch, row_groups, outs[0], cfg)
    return sch


def _schedule_weight_pack(sch: Any, packed: te.Tensor, done: set[int]) -> None:
    """Pack an ``[N, K]`` weight once, before the products (traverse_inline inlined it: that
    would repack per use of each element)."""
    if packed.op.name != "weight_pack" or packed.op not in sch or id(packed.op) in done:
        return
    done.add(id(packed.op))
    stage = sch[packed]
    stage.compute_root()
    z, _, x = stage.leaf_iter_vars
    stage.parallel(z)
    stage.vectorize(x)


def _schedule_block(sch: Any, dense: te.Tensor, out: te.Tensor, cfg: dict) -> None:
    packed = dense.op.input_tensors[1]
    lanes = get_const_int(packed.shape[2])
    column_blocks = get_const_int(packed.shape[0])
    k = get_const_int(dense.op.reduce_axis[0].dom.extent)
    tk = divisor_at_most(k, cfg["tile_k"])
    # When the dense op is itself the output, accumulate each block locally first.
    block = sch[sch.cache_write(dense, "local") if out.op is dense.op else dense]
    task = _schedule_rows(sch[out], get_const_int(dense.shape[0]), column_blocks, lanes, k, cfg)
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


def _schedule_row_groups(sch: Any, products: list[te.Tensor], out: te.Tensor,
                         cfg: dict) -> None:
    """Loops for a symbolic row count: each ``[groups, size, N]`` product (full groups, then
    the tail's smaller ones) runs packed column blocks outside, parallel when
    ``rows_symbolic`` rows are worth it, its groups inside them, each group one register
    block of constant extent accumulated locally.

    The full groups' block goes into the output's group loop, written straight through the
    epilogue; the tail's few rows (at most ``tile_y - 1``) are computed first into small
    buffers of their own. An epilogue reading another ``Any``-batch tensor (a residual add)
    has rows of its own variable: bounds inferred from it would be clamped to the data's
    groups, giving the block a symbolic extent, so then every product is computed first and
    the epilogue runs after them as a vector loop.
    """
    lanes = get_const_int(products[0].op.input_tensors[1].shape[2])
    fused = out.shape[0] is products[0].op.input_tensors[0].shape[0]
    for product in products:
        size = get_const_int(product.shape[1])
        column_blocks = get_const_int(product.op.input_tensors[1].shape[0])
        k = get_const_int(product.op.reduce_axis[0].dom.extent)
        _, blocks = register_block(size, column_blocks, lanes, cfg)
        if fused and product is products[0]:
            block, stage = sch[product], sch[out]
            y, x = stage.leaf_iter_vars[0], stage.leaf_iter_vars[1]
            group, row = stage.split(y, factor=size)
        else:
            block = sch[sch.cache_write(product, "local")]
            stage = sch[product]
            group, row, x = stage.leaf_iter_vars
        xo, xi = stage.split(x, factor=lanes * blocks)
        stage.reorder(xo, group, row, xi)
        if 2 * cfg["rows_symbolic"] * k * lanes * column_blocks >= cfg["parallel_min_flops"]:
            stage.parallel(xo)
        _, xii = stage.split(xi, factor=lanes)
        stage.vectorize(xii)
        block.compute_at(stage, group)
        schedule_register_block(block, divisor_at_most(k, cfg["tile_k"]), lanes)
    if not fused:
        epilogue = sch[out]
        _, columns = epilogue.split(epilogue.leaf_iter_vars[1], factor=lanes)
        epilogue.vectorize(columns)


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
