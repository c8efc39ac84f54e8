"""Matrix products (TVM's ``topi.nn.dense``, ``matmul``, ``batch_matmul``, ``dense_pack``).

Entry points: :func:`dense` (``data @ weight.T + bias``), :func:`matmul` (optional
transposes), :func:`batch_matmul`, :func:`dense_pack` (weight pre-packed as
``[N / n, K, n]``), :func:`pack_weight`.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi import tag
from kiln.topi.utils import get_const_int


def matmul(a: te.Tensor, b: te.Tensor, bias: te.Tensor | None = None,
           out_dtype: str | None = None, transpose_a: bool = False,
           transpose_b: bool = False) -> te.Tensor:
    """``op(a) @ op(b) (+ bias)`` for 2-D ``a`` and ``b``."""
    out_dtype = out_dtype or a.dtype
    m, k = (a.shape[1], a.shape[0]) if transpose_a else (a.shape[0], a.shape[1])
    kb, n = (b.shape[1], b.shape[0]) if transpose_b else (b.shape[0], b.shape[1])
    if get_const_int(k) != get_const_int(kb):
        raise TVMError(f"matmul: reduction sizes differ ({get_const_int(k)} vs "
                       f"{get_const_int(kb)})")
    r = te.reduce_axis((0, k), name="k")

    def body(i, j):
        av = a[r.var, i] if transpose_a else a[i, r.var]
        bv = b[j, r.var] if transpose_b else b[r.var, j]
        return te.sum(_op.cast(av, out_dtype) * _op.cast(bv, out_dtype), axis=r)

    name = "T_dense" if transpose_b and not transpose_a else "T_matmul"
    out = te.compute((m, n), body, name=name, tag="dense" if name == "T_dense" else "matmul")
    if bias is not None:
        out = te.compute((m, n), lambda i, j: out[i, j] + _op.cast(bias[j], out_dtype),
                         name="T_add", tag=tag.BROADCAST)
    return out


def dense(data: te.Tensor, weight: te.Tensor, bias: te.Tensor | None = None,
          out_dtype: str | None = None) -> te.Tensor:
    """``data @ weight.T (+ bias)``: data ``[M, K]``, weight ``[N, K]``.

    Example
    -------
    >>> from kiln import te, topi
    >>> y = topi.nn.dense(te.placeholder((2, 8)), te.placeholder((4, 8)))
    >>> [int(d) for d in y.shape]
    [2, 4]
    """
    return matmul(data, weight, bias, out_dtype, False, True)


def pack_weight(weight: te.Tensor, lanes: int) -> te.Tensor:
    """``weight [N, K]`` → ``[N / lanes, K, lanes]`` (the layout :func:`dense_pack` reads)."""
    n, k = get_const_int(weight.shape[0]), get_const_int(weight.shape[1])
    if n % lanes:
        raise TVMError(f"pack_weight: {n} rows do not divide into blocks of {lanes}")
    return te.compute((n // lanes, k, lanes), lambda z, y, x: weight[z * lanes + x, y],
                      name="weight_pack", tag=tag.INJECTIVE)


def dense_pack(data: te.Tensor, packed: te.Tensor, bias: te.Tensor | None = None,
               out_dtype: str | None = None) -> te.Tensor:
    """``data [M, K]`` times a packed weight ``[N / n, K, n]``."""
    out_dtype = out_dtype or data.dtype
    if len(data.shape) != 2 or len(packed.shape) != 3:
        raise TVMError(f"dense_pack: needs 2-D data and a [N / n, K, n] packed weight, got "
                       f"ranks {len(data.shape)} and {len(packed.shape)}")
    m, k = data.shape
    nb, packed_k, lanes = packed.shape
    if get_const_int(packed_k) != get_const_int(k):
        raise TVMError(f"dense_pack: data has {get_const_int(k)} columns but the packed weight "
                       f"reduces over {get_const_int(packed_k)}")
    lanes_i = get_const_int(lanes)
    r = te.reduce_axis((0, k), name="k")
    out = te.compute(
        (m, nb * lanes),
        lambda y, x: te.sum(_op.cast(data[y, r.var], out_dtype) *
                            _op.cast(packed[_op.floordiv(x, lanes_i), r.var,
                                                         _op.floormod(x, lanes_i)], out_dtype),
                            axis=r),
        name="T_dense_pack", tag="dense_pack")
    if bias is not None:
        out = te.compute(out.shape, lambda i, j: out[i, j] + _op.cast(bias[j], out_dtype),
                         name="T_add", tag=tag.BROADCAST)
    return out


def batch_matmul(x: te.Tensor, y: te.Tensor, out_dtype: str | None = None,
                 transpose_a: bool = False, transpose_b: bool = True) -> te.Tensor:
    """Batched ``op(x) @ op(y)``; a batch of 1 broadcasts."""
    out_dtype = out_dtype or x.dtype
    bx, by = get_const_int(x.shape[0]), get_const_int(y.shape[0])
    if bx != by and 1 not in (bx, by):
        raise TVMError(f"batch_matmul: batch sizes {bx} and {by} do not broadcast")
    m = x.shape[2] if transpose_a else x.shape[1]
    k = x.shape[1] if transpose_a else x.shape[2]
    n = y.shape[1] if transpose_b else y.shape[2]
    ky = y.shape[2] if transpose_b else y.shape[1]
    if get_const_int(k) != get_const_int(ky):
        raise TVMError(f"batch_matmul: reduction sizes differ ({get_const_int(k)} vs "
                       f"{get_const_int(ky)})")
    r = te.reduce_axis((0, k), name="k")

    def body(b, i, j):
        xb = 0 if bx == 1 else b
        yb = 0 if by == 1 else b
        xv = x[xb, r.var, i] if transpose_a else x[xb, i, r.var]
        yv = y[yb, j, r.var] if transpose_b else y[yb, r.var, j]
        return te.sum(_op.cast(xv, out_dtype) * _op.cast(yv, out_dtype), axis=r)

    return te.compute((max(bx, by), m, n), body, name="T_batch_matmul", tag="batch_matmul")


_ = Any
