"""x86 ``nn.matmul`` with either operand transposed (``matmul_pack.x86``).

Entry points: :func:`matmul_pack` (compute), :func:`schedule_matmul_pack` (schedule),
:data:`DEFAULT_CONFIG` (the knobs of :mod:`kiln.topi.x86.dense`).

``op(a) @ op(b)`` runs the register-blocked micro-kernel of ``dense_pack.x86`` without a
transpose kernel in front of it. The micro-kernel reads ``op(b)`` as ``[N / lanes, K, lanes]``
blocks: a ``[K, N]`` operand (no ``transpose_b``: the layout of ``x @ W``) already has each
block row's ``lanes`` columns contiguous, so it is read in place through an inlined view
(packing it first measured 1.2-1.8x slower at 64x784x256, where each column block is reused
by only 16 row tasks); a ``[N, K]`` operand is packed as dense packs its weight. A transposed
``a`` (``a.T @ g``, the weight gradient of a dense layer) is read in place too: per reduction
step the micro-kernel loads ``tile_y`` consecutive rows of ``op(a)``, which are consecutive
elements of ``a``'s row ``k``.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.topi import tag
from kiln.topi.nn.dense import dense_pack as _dense_pack_compute
from kiln.topi.nn.dense import pack_weight
from kiln.topi.utils import divisor_at_most, get_const_int
from kiln.topi.x86.dense import DEFAULT_CONFIG, schedule_dense_pack

__all__ = ["matmul_pack", "schedule_matmul_pack", "DEFAULT_CONFIG"]


def matmul_pack(a: te.Tensor, b: te.Tensor, bias: te.Tensor | None = None,
                out_dtype: str | None = None, transpose_a: bool = False,
                transpose_b: bool = False, config: dict | None = None) -> te.Tensor:
    """``op(a) @ op(b) (+ bias)`` for static 2-D operands, ``op`` transposing where asked.

    Example
    -------
    >>> from kiln import te
    >>> from kiln.topi.x86.matmul import matmul_pack
    >>> y = matmul_pack(te.placeholder((8, 4)), te.placeholder((8, 32)), transpose_a=True)
    >>> [int(d) for d in y.shape], y.op.tag
    ([4, 32], 'dense_pack')
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise TVMError(f"matmul_pack: needs 2-D operands, got ranks {len(a.shape)} and "
                       f"{len(b.shape)}")
    m, k = (get_const_int(d) for d in (a.shape[::-1] if transpose_a else a.shape))
    kb, n = (get_const_int(d) for d in (b.shape[::-1] if transpose_b else b.shape))
    if k != kb:
        raise TVMError(f"matmul_pack: reduction sizes differ ({k} vs {kb})")
    lanes = divisor_at_most(n, cfg["tile_x"])
    if transpose_b:
        packed = pack_weight(b, lanes)
    else:
        # a view, inlined into the loads: each row's ``lanes`` columns are contiguous already
        packed = te.compute((n // lanes, k, lanes), lambda z, r, x: b[r, z * lanes + x],
                            name="weight_view", tag=tag.INJECTIVE)
    data = a
    if transpose_a:  # inlined into the micro-kernel's loads by the schedule
        data = te.compute((m, k), lambda i, r: a[r, i], name="T_transpose_a",
                          tag=tag.INJECTIVE)
    return _dense_pack_compute(data, packed, bias, out_dtype)


def schedule_matmul_pack(outs: Any, config: dict | None = None) -> Any:
    """Schedule ``matmul_pack`` (and its fused epilogue): dense_pack.x86's recipe."""
    return schedule_dense_pack(outs, config)
