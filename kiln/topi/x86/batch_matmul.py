"""x86 batched matmul through a packed right operand (``batch_matmul_pack.x86``).

Entry points: :func:`batch_matmul_pack` (compute), :func:`schedule_batch_matmul_pack`
(schedule), :data:`DEFAULT_CONFIG` (the knobs of :mod:`kiln.topi.x86.dense`).

``y`` is repacked per batch as ``[B, N / lanes, K, lanes]`` so the innermost loop reads
``lanes`` contiguous values whatever ``transpose_b`` is; each parallel task (batch, column
block, row block) then runs the register-blocked micro-kernel of ``dense_pack.x86``.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.tir import op as _op
from kiln.topi.utils import divisor_at_most, get_const_int, traverse_inline
from kiln.topi.x86.dense import DEFAULT_CONFIG, schedule_register_block

__all__ = ["batch_matmul_pack", "schedule_batch_matmul_pack", "DEFAULT_CONFIG"]


def batch_matmul_pack(x: te.Tensor, y: te.Tensor, out_dtype: str | None = None,
                      transpose_b: bool = True, config: dict | None = None) -> te.Tensor:
    """``x [B, M, K] @ op(y)`` with ``y`` ``[B, N, K]`` (transpose_b) or ``[B, K, N]``; a batch
    of 1 on either side broadcasts."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    out_dtype = out_dtype or x.dtype
    bx, m, k = (get_const_int(d) for d in x.shape)
    by = get_const_int(y.shape[0])
    n = get_const_int(y.shape[1] if transpose_b else y.shape[2])
    lanes = divisor_at_most(n, cfg["tile_x"])
    packed = te.compute(
        (by, n // lanes, k, lanes),
        lambda b, z, r, c: y[b, z * lanes + c, r] if transpose_b else y[b, r, z * lanes + c],
        name="batch_weight_pack", tag="injective")
    red = te.reduce_axis((0, k), name="k")
    return te.compute(
        (max(bx, by), m, n),
        lambda b, i, j: te.sum(
            _op.cast(x[0 if bx == 1 else b, i, red.var], out_dtype)
            * _op.cast(packed[0 if by == 1 else b, _op.floordiv(j, lanes), red.var,
                              _op.floormod(j, lanes)], out_dtype), axis=red),
        name="T_batch_matmul_pack", tag="batch_matmul_pack")


def schedule_batch_matmul_pack(outs: Any, config: dict | None = None) -> Any:
    """Schedule every ``batch_matmul_pack`` op in ``outs`` (and a fused epilogue)."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])

    def visit(op: Any) -> None:
        if op.tag == "batch_matmul_pack":
            _schedule_block(sch, op.output(0), outs[0], cfg)

    traverse_inline(sch, outs[0].op, visit)
    return sch


def _schedule_block(sch: Any, bmm: te.Tensor, out: te.Tensor, cfg: dict) -> None:
    packed = bmm.op.input_tensors[1]
    if packed.op.name == "batch_weight_pack" and packed.op in sch:
        stage = sch[packed]
        stage.compute_root()  # traverse_inline inlined it: packing per use of each element
        b, z, _, c = stage.leaf_iter_vars
        stage.parallel(stage.fuse(b, z))
        stage.vectorize(c)
    m = get_const_int(bmm.shape[1])
    lanes = get_const_int(packed.shape[3])
    ty = divisor_at_most(m, cfg["tile_y"])
    k = get_const_int(bmm.op.reduce_axis[0].dom.extent)
    tk = divisor_at_most(k, cfg["tile_k"])
    block_tensor = sch.cache_write(bmm, "local") if out.op is bmm.op else bmm
    o = sch[out]
    b, y, x = o.leaf_iter_vars[:3]
    yo, yi = o.split(y, factor=ty)
    xo, xi = o.split(x, factor=lanes)
    o.reorder(b, xo, yo, yi, xi)
    task = o.fuse(b, xo, yo)
    o.parallel(task)
    o.vectorize(xi)
    sch[block_tensor].compute_at(o, task)
    schedule_register_block(sch[block_tensor], tk)
