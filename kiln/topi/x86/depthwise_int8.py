"""8-bit depthwise NCHW convolution for x86: a C kernel vectorized along the output row, int32
accumulation, the requantize epilogue fused into the output stage.

Entry points: :func:`depthwise_conv2d_nchw_int8` (compute), :func:`depthwise_int8_applies`.
The schedule is :func:`kiln.topi.x86.conv2d_int8.schedule_conv2d_nchw_int8`.

Each task (batch, output channel) widens its input plane, zero-padded, to int32 in a scratch
buffer split into ``stride_w`` column phases (phase ``f`` holds padded columns
``f, f + sw, f + 2 sw, ...``), so that for every tap the outputs of a row read consecutive
int32: any stride and dilation becomes unit-stride vector loads. The outputs of a row go in
register blocks of 4, 2 or 1 vectors of 8 int32 (GCC vector extensions: ymm with AVX2, two
xmm with SSE2 only) that accumulate all ``KH x KW`` taps (one multiply and one add per tap
and vector) before one store. The products of 8-bit values and their sums are exact in int32
for any filter a model has (``KH * KW * 255 * 128 < 2**31`` up to 256x256 taps).
"""

from __future__ import annotations

from typing import Any

from kiln import te, tir
from kiln.tir import op as _op
from kiln.topi.utils import get_const_tuple

__all__ = ["depthwise_conv2d_nchw_int8", "depthwise_int8_applies", "scratch_size",
           "MICRO_KERNEL_SOURCE", "MIN_ROW"]

KERNEL_NAME = "kiln_depthwise_i8_plane"
MIN_ROW = 32  # output columns from which the strategy picks this kernel (see the applies rule)

MICRO_KERNEL_SOURCE = r"""
#include <stdint.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#ifndef KILN_DEPTHWISE_I8_DEFINED
#define KILN_DEPTHWISE_I8_DEFINED
typedef int32_t kiln_v8si __attribute__((vector_size(32)));
typedef int32_t kiln_v8si_u __attribute__((vector_size(32), aligned(4)));

/* One output row's columns [x0, x0 + 8 * nv) (stored up to ow): the sum over the taps t of
   w[t] times the scratch at src + toff[t], consecutive int32. Called with constant nv (and
   ntaps 9 for 3x3), so the accumulators stay in registers and the taps unroll. */
static inline __attribute__((always_inline)) void kiln_depthwise_i8_block(
    int32_t* restrict orow, const int32_t* restrict src, const int64_t* restrict toff,
    const int32_t* restrict w, const int ntaps, int32_t ow, int32_t x0, const int nv) {
  kiln_v8si acc[4] = {{0}, {0}, {0}, {0}};
  for (int t = 0; t < ntaps; ++t) {
    const int32_t* tap = src + toff[t];
    for (int j = 0; j < nv; ++j) acc[j] += w[t] * *(const kiln_v8si_u*)(tap + 8 * j);
  }
  const int32_t n = ow - x0 < 8 * nv ? ow - x0 : 8 * nv;
  for (int j = 0; j < nv; ++j) {
    int32_t* dst = orow + x0 + 8 * j;
    const int32_t rem = n - 8 * j;
    if (rem >= 8) {
      *(kiln_v8si_u*)dst = acc[j];
    } else if (rem > 0) { /* the row's last columns: a masked store, not a memcpy call */
#if defined(__AVX2__)
      const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      _mm256_maskstore_epi32((int*)dst, _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), lanes),
                             (__m256i)acc[j]);
#else
      for (int32_t i = 0; i < rem; ++i) dst[i] = acc[j][i];
#endif
    }
  }
}

/* The blocks of output rows [0, oh) for constant nv and ntaps. */
static inline __attribute__((always_inline)) void kiln_depthwise_i8_rows(
    int32_t* out, const int32_t* scratch, const int64_t* toff, const int32_t* w,
    const int ntaps, int32_t oh, int32_t ow, int32_t sh, int64_t wq, const int nv) {
  for (int32_t oy = 0; oy < oh; ++oy)
    for (int32_t x0 = 0; x0 < ow; x0 += 8 * nv)
      kiln_depthwise_i8_block(out + (int64_t)oy * ow, scratch + (int64_t)oy * sh * wq + x0,
                              toff, w, ntaps, ow, x0, nv);
}

/* out: [oh][ow] int32 of one output channel; in: [h][wd] 8-bit input plane (signed when
   in_signed); kernel: [kh][kw] 8-bit (signed when k_signed). Padding pt (top), pl (left);
   the bottom/right padding is what the output size implies. scratch: sw * hp * wq int32, with
   hp and wq as below (:func:`scratch_size` in Python). */
static int32_t kiln_depthwise_i8_plane(
    int32_t* out, int32_t* scratch, const void* in, int32_t in_signed, const void* kernel,
    int32_t k_signed,
    int32_t h, int32_t wd, int32_t kh, int32_t kw, int32_t oh, int32_t ow, int32_t sh,
    int32_t sw, int32_t dh, int32_t dw, int32_t pt, int32_t pl) {
  const int nv = ow > 16 ? 4 : ow > 8 ? 2 : 1;
  const int64_t owp = (ow + 8 * nv - 1) / (8 * nv) * (8 * nv); /* whole blocks */
  const int64_t hp = (int64_t)(oh - 1) * sh + (int64_t)(kh - 1) * dh + 1;
  const int64_t wq = owp + (int64_t)(kw - 1) * dw / sw;
  int32_t w[kh * kw];
  for (int32_t i = 0; i < kh * kw; ++i)
    w[i] = k_signed ? ((const int8_t*)kernel)[i] : ((const uint8_t*)kernel)[i];
  for (int32_t f = 0; f < sw; ++f) {
    for (int64_t y = 0; y < hp; ++y) {
      int32_t* restrict dst = scratch + ((int64_t)f * hp + y) * wq;
      const int64_t iy = y - pt;
      if (iy < 0 || iy >= h) {
        for (int64_t xx = 0; xx < wq; ++xx) dst[xx] = 0;
        continue;
      }
      /* padded column xx * sw + f is input column xx * sw + f - pl: zeros left and right of
         the columns [lo, hi) inside the input, and a widening copy (unit stride when sw is 1,
         so it vectorizes) between */
      int64_t lo = pl - f > 0 ? (pl - f + sw - 1) / sw : 0;
      int64_t hi = wd - 1 + pl - f >= 0 ? (wd - 1 + pl - f) / sw + 1 : 0;
      if (hi > wq) hi = wq;
      if (lo > hi) lo = hi;
      for (int64_t xx = 0; xx < lo; ++xx) dst[xx] = 0; /* a few columns: no memset call */
      for (int64_t xx = hi; xx < wq; ++xx) dst[xx] = 0;
      const int64_t first = lo * sw + f - pl;
      if (in_signed) {
        const int8_t* restrict src = (const int8_t*)in + iy * wd + first;
        if (sw == 1)
          for (int64_t xx = lo; xx < hi; ++xx) dst[xx] = src[xx - lo];
        else
          for (int64_t xx = lo; xx < hi; ++xx) dst[xx] = src[(xx - lo) * sw];
      } else {
        const uint8_t* restrict src = (const uint8_t*)in + iy * wd + first;
        if (sw == 1)
          for (int64_t xx = lo; xx < hi; ++xx) dst[xx] = src[xx - lo];
        else
          for (int64_t xx = lo; xx < hi; ++xx) dst[xx] = src[(xx - lo) * sw];
      }
    }
  }
  /* tap (ky, kx) of output (oy, ox) is phase (kx dw) % sw, row oy sh + ky dh, column
     ox + (kx dw) / sw */
  int64_t toff[kh * kw];
  for (int32_t ky = 0; ky < kh; ++ky)
    for (int32_t kx = 0; kx < kw; ++kx)
      toff[ky * kw + kx] = ((int64_t)(kx * dw % sw) * hp + (int64_t)ky * dh) * wq + kx * dw / sw;
  if (kh * kw == 9 && nv == 4)
    kiln_depthwise_i8_rows(out, scratch, toff, w, 9, oh, ow, sh, wq, 4);
  else if (kh * kw == 9 && nv == 2)
    kiln_depthwise_i8_rows(out, scratch, toff, w, 9, oh, ow, sh, wq, 2);
  else if (kh * kw == 9)
    kiln_depthwise_i8_rows(out, scratch, toff, w, 9, oh, ow, sh, wq, 1);
  else if (nv == 4)
    kiln_depthwise_i8_rows(out, scratch, toff, w, kh * kw, oh, ow, sh, wq, 4);
  else if (nv == 2)
    kiln_depthwise_i8_rows(out, scratch, toff, w, kh * kw, oh, ow, sh, wq, 2);
  else
    kiln_depthwise_i8_rows(out, scratch, toff, w, kh * kw, oh, ow, sh, wq, 1);
  return 0;
}
#endif
"""


def scratch_size(oh: int, ow: int, kh: int, kw: int, sh: int, sw: int, dh: int,
                 dw: int) -> int:
    """int32 elements of one task's scratch: ``sw`` phases of ``hp`` rows of ``wq`` columns,
    the rows the outputs read and the columns of whole vector blocks (as the C kernel)."""
    nv = 4 if ow > 16 else 2 if ow > 8 else 1
    owp = -(-ow // (8 * nv)) * 8 * nv
    hp = (oh - 1) * sh + (kh - 1) * dh + 1
    return sw * hp * (owp + (kw - 1) * dw // sw)


def depthwise_int8_applies(data_shape: Any, kernel_shape: Any, groups: int, data_dtype: str,
                           kernel_dtype: str, out_dtype: str, strides: Any,
                           out_width: int) -> bool:
    """Whether the strategy picks this kernel for an NCHW/OIHW convolution: 8-bit data and
    kernel, an int32 result, one group per input channel (``OC = C x multiplier``, kernel
    ``[OC, 1, ...]``), stride 1 and output rows of at least :data:`MIN_ROW` columns.

    The kernel computes any stride and width, but on short or strided rows its per-plane
    scratch costs more than it saves, and ``depthwise_conv2d_nchw.x86`` (vectorized over 8
    channels) is faster: one thread, 3x3 MobileNet layers, this kernel vs that schedule:
    112x112x32 0.30 vs 0.68 ms, 56x56x128 0.37 vs 0.68, 28x28x256 0.32 vs 0.34, 14x14x512
    0.30 vs 0.10; stride 2 from 56x56x128 0.35 vs 0.06.
    """
    return (data_dtype in ("int8", "uint8") and kernel_dtype in ("int8", "uint8")
            and out_dtype == "int32" and int(groups) == int(data_shape[1]) > 1
            and int(kernel_shape[1]) == 1 and int(kernel_shape[0]) % int(groups) == 0
            and all(int(s) == 1 for s in strides) and int(out_width) >= MIN_ROW)


def depthwise_conv2d_nchw_int8(data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any,
                               dilation: Any, out_dtype: str = "int32") -> te.Tensor:
    """The int32 depthwise convolution of 8-bit NCHW ``data`` and an 8-bit ``[C x m, 1, KH,
    KW]`` kernel (output channel ``o`` reads input channel ``o // m``)."""
    n, c, h, w = get_const_tuple(data.shape)
    oc, _, kh, kw = get_const_tuple(kernel.shape)
    sh, sw = (int(s) for s in strides)
    dh, dw = (int(d) for d in dilation)
    pt, pl, pb, pr = (int(p) for p in padding)
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    mult = oc // c
    in_signed, k_signed = (int(str(t.dtype) == "int8") for t in (data, kernel))

    scratch = scratch_size(oh, ow, kh, kw, sh, sw, dh, dw)

    def planes(ins, outs):
        d, k = ins
        task = tir.Var("plane", "int32")
        b, o = _op.floordiv(task, oc), _op.floormod(task, oc)
        call = tir.call_extern(
            "int32", KERNEL_NAME, outs[0].access_ptr("w", offset=task * (oh * ow)),
            outs[1].access_ptr("w", offset=task * scratch),
            d.access_ptr("r", offset=(b * c + _op.floordiv(o, mult)) * (h * w)), in_signed,
            k.access_ptr("r", offset=o * (kh * kw)), k_signed, h, w, kh, kw, oh, ow, sh, sw,
            dh, dw, pt, pl)
        loop = tir.For(task, 0, n * oc, tir.ForKind.PARALLEL, tir.Evaluate(call))
        return tir.AttrStmt(tir.StringImm(KERNEL_NAME), "pragma_import_c",
                            tir.StringImm(MICRO_KERNEL_SOURCE), loop)

    # the second output is each task's scratch (planned memory, not a malloc per plane)
    conv, _ = te.extern([(n, oc, oh, ow), (n * oc, scratch)], [data, kernel], planes,
                        name="depthwise_int8", dtype=["int32", "int32"])
    return te.compute((n, oc, oh, ow), lambda b, o, y, x: _op.cast(conv[b, o, y, x], out_dtype),
                      name="depthwise_conv2d_nchw_int8", tag="depthwise_conv2d_nchw_int8")
