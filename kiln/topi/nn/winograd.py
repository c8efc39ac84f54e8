"""Winograd and GEMM convolutions with pre-transformed weights (TVM's ``contrib_conv2d_*``).

Entry points: :func:`winograd_matrices`, :func:`winograd_weight_transform`,
:func:`conv2d_winograd_nchw` (3x3, stride 1, NCHW, weight ``[alpha, alpha, O, I]``),
:func:`gemm_weight_transform`, :func:`conv2d_gemm_nhwc` (NHWC data, HWIO weight interleaved
as ``[N / tile_rows, K / tile_cols, tile_rows, tile_cols]``).

Winograd F(m, 3) computes an ``m × m`` output tile as ``A^T [(G g G^T) ⊙ (B^T d B)] A``.
``A^T`` and ``G`` come from Toom-Cook interpolation points; ``B^T`` is then the unique matrix
making the 1-D identity exact, found by a least-squares solve that is checked to be exact.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any

import numpy as np

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi.nn.pad import pad
from kiln.topi.utils import get_const_tuple

_POINTS = (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0)


@functools.cache
def winograd_matrices(tile: int, kernel: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A^T, G, B^T)`` of F(tile, kernel) as float64 arrays."""
    alpha = tile + kernel - 1
    points = np.array(_POINTS[:alpha - 1])
    if len(points) != alpha - 1:
        raise TVMError(f"winograd: tile size {tile} needs more interpolation points")
    at = np.zeros((tile, alpha))
    g = np.zeros((alpha, kernel))
    for j, p in enumerate(points):
        f = np.prod([p - q for q in points if q != p])
        at[:, j] = p ** np.arange(tile)
        g[j] = p ** np.arange(kernel) / f
    at[tile - 1, alpha - 1] = 1.0
    g[alpha - 1, kernel - 1] = 1.0
    # Unknown B^T[j, t]: sum_j A^T[i, j] G[j, k] B^T[j, t] = [t == i + k].
    rows, rhs = [], []
    for i in range(tile):
        for k in range(kernel):
            for t in range(alpha):
                row = np.zeros((alpha, alpha))
                row[:, t] = at[i] * g[:, k]
                rows.append(row.ravel())
                rhs.append(1.0 if t == i + k else 0.0)
    sol, *_ = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)
    if np.abs(np.array(rows) @ sol - rhs).max() > 1e-8:
        raise TVMError(f"winograd: no exact F({tile}, {kernel}) transform")
    # the solve leaves ~1e-16 noise where B^T holds exact small rationals: snapping them
    # makes the zeros real zeros, which unrolled schedules then drop from the transforms
    bt = np.array([float(Fraction(v).limit_denominator(1024)) for v in sol])
    return at, g, bt.reshape(alpha, alpha)


def _const_matrix(values: np.ndarray, name: str) -> te.Tensor:
    rows, cols = values.shape

    def body(i, j):
        out = _op.const(0.0, "float32")
        for r in range(rows):
            for c in range(cols):
                if values[r, c] != 0:
                    out = _op.if_then_else(_op.logical_and(i == r, j == c),
                                           _op.const(float(values[r, c]), "float32"), out)
        return out

    return te.compute((rows, cols), body, name=name, tag="injective,const_matrix")


def winograd_weight_transform(kernel: te.Tensor, tile_size: int) -> te.Tensor:
    """``U = G g G^T`` per (out, in) channel pair: ``[O, I, 3, 3]`` → ``[alpha, alpha, O, I]``."""
    o, i, kh, kw = get_const_tuple(kernel.shape)
    if kh != kw:
        raise TVMError(f"winograd: the kernel must be square, got {kh}x{kw}")
    _, g, _ = winograd_matrices(tile_size, kh)
    gm = _const_matrix(g, "G")
    alpha = tile_size + kh - 1
    r1 = te.reduce_axis((0, kh), name="r1")
    r2 = te.reduce_axis((0, kw), name="r2")
    return te.compute((alpha, alpha, o, i), lambda a, b, f, c: te.sum(
        gm[a, r1.var] * kernel[f, c, r1.var, r2.var] * gm[b, r2.var], axis=[r1, r2]),
        name="winograd_weight", tag="winograd_weight_transform")


def conv2d_winograd_nchw(data: te.Tensor, weight: te.Tensor, tile_size: int, padding: Any,
                         out_dtype: str | None = None) -> te.Tensor:
    """Stride-1 3x3 conv of NCHW ``data`` with a transformed ``[alpha, alpha, O, I]`` weight."""
    from kiln.topi.nn.conv import get_pad_tuple

    n, c, h, w = get_const_tuple(data.shape)
    alpha, _, oc, ic = get_const_tuple(weight.shape)
    k = alpha - tile_size + 1
    if ic != c:
        raise TVMError(f"winograd: the weight has {ic} input channels, the data {c}")
    at, _, bt = winograd_matrices(tile_size, k)
    (pt, pl), (pb, pr) = get_pad_tuple(padding, 2)
    oh, ow = h + pt + pb - k + 1, w + pl + pr - k + 1
    nh, nw = -(-oh // tile_size), -(-ow // tile_size)
    padded = pad(data, [0, 0, pt, pl], [0, 0, (nh - 1) * tile_size + alpha - h - pt,
                                        (nw - 1) * tile_size + alpha - w - pl],
                 name="winograd_pad")
    btm, atm = _const_matrix(bt, "B_T"), _const_matrix(at, "A_T")
    tiles = n * nh * nw
    s = te.reduce_axis((0, alpha), name="s")
    t = te.reduce_axis((0, alpha), name="t")

    def tile_origin(p):
        b = _op.floordiv(p, nh * nw)
        rest = _op.floormod(p, nh * nw)
        return b, _op.floordiv(rest, nw) * tile_size, _op.floormod(rest, nw) * tile_size

    def v_body(a, b_, ch, p):
        batch, y0, x0 = tile_origin(p)
        return te.sum(btm[a, s.var] * btm[b_, t.var] *
                      padded[batch, ch, y0 + s.var, x0 + t.var], axis=[s, t])

    v = te.compute((alpha, alpha, c, tiles), v_body, name="winograd_V")
    rc = te.reduce_axis((0, c), name="rc")
    m = te.compute((alpha, alpha, oc, tiles), lambda a, b_, f, p: te.sum(
        weight[a, b_, f, rc.var] * v[a, b_, rc.var, p], axis=rc), name="winograd_M")
    ra = te.reduce_axis((0, alpha), name="ra")
    rb = te.reduce_axis((0, alpha), name="rb")
    out_dtype = out_dtype or data.dtype

    def y_body(b_, f, y, x):
        p = (b_ * nh + _op.floordiv(y, tile_size)) * nw + _op.floordiv(x, tile_size)
        return te.sum(_op.cast(atm[_op.floormod(y, tile_size), ra.var] *
                               atm[_op.floormod(x, tile_size), rb.var] *
                               m[ra.var, rb.var, f, p], out_dtype), axis=[ra, rb])

    return te.compute((n, oc, oh, ow), y_body, name="conv2d_winograd",
                      tag="conv2d_winograd")


def gemm_weight_transform(kernel: te.Tensor, tile_rows: int, tile_cols: int) -> te.Tensor:
    """HWIO ``[KH, KW, I, O]`` → ``[ceil(O/tr), ceil(K/tc), tr, tc]`` with ``K = KH*KW*I``."""
    kh, kw, ic, oc = get_const_tuple(kernel.shape)
    big_k = kh * kw * ic
    shape = (-(-oc // tile_rows), -(-big_k // tile_cols), tile_rows, tile_cols)

    def body(nb, kb, ni, ki):
        col, row = nb * tile_rows + ni, kb * tile_cols + ki
        y = _op.floordiv(row, kw * ic)
        x = _op.floordiv(_op.floormod(row, kw * ic), ic)
        c = _op.floormod(row, ic)
        inside = _op.logical_and(col < oc, row < big_k)
        safe = [_op.min(y, kh - 1), x, c, _op.min(col, oc - 1)]
        return _op.if_then_else(inside, kernel(*safe), _op.const(0, kernel.dtype))

    return te.compute(shape, body, name="weight_interleaved", tag="gemm_weight_transform")


def conv2d_gemm_nhwc(data: te.Tensor, weight: te.Tensor, strides: Any, padding: Any,
                     dilation: Any, kernel_size: Any, channels: int,
                     out_dtype: str | None = None) -> te.Tensor:
    """NHWC conv as im2col × an interleaved weight from :func:`gemm_weight_transform`."""
    from kiln.topi.nn.conv import conv_output_size, get_pad_tuple, int_values

    n, h, w, ic = get_const_tuple(data.shape)
    _, _, tr, tc = get_const_tuple(weight.shape)
    kh, kw = int_values(kernel_size, 2, "kernel_size")
    sh, sw = int_values(strides, 2, "strides")
    dh, dw = int_values(dilation, 2, "dilation")
    (pt, pl), (pb, pr) = get_pad_tuple(padding, 2)
    oh = conv_output_size(h, kh, sh, dh, pt, pb)
    ow = conv_output_size(w, kw, sw, dw, pl, pr)
    padded = pad(data, [0, pt, pl, 0], [0, pb, pr, 0], name="gemm_pad")
    k = te.reduce_axis((0, kh * kw * ic), name="k")
    out_dtype = out_dtype or data.dtype

    def body(b, y, x, f):
        ky = _op.floordiv(k.var, kw * ic)
        kx = _op.floordiv(_op.floormod(k.var, kw * ic), ic)
        c = _op.floormod(k.var, ic)
        a = padded[b, y * sh + ky * dh, x * sw + kx * dw, c]
        wv = weight[_op.floordiv(f, tr), _op.floordiv(k.var, tc), _op.floormod(f, tr),
                    _op.floormod(k.var, tc)]
        return te.sum(_op.cast(a, out_dtype) * _op.cast(wv, out_dtype), axis=k)

    return te.compute((n, oh, ow, channels), body, name="conv2d_gemm", tag="conv2d_gemm")
