"""8-bit depthwise NCHW convolution for x86: C kernels vectorized along the output row, int32
accumulation, the requantize epilogue fused into the output stage.

Entry points: :func:`depthwise_conv2d_nchw_int8` (compute), :func:`depthwise_int8_applies`,
:func:`quads_apply`. The schedule is
:func:`kiln.topi.x86.conv2d_int8.schedule_conv2d_nchw_int8`.

Two kernels, one task per (batch, output channel). With AVX512-VNNI and -VBMI and uint8 data x
int8 weights, the tap-quad kernel (:data:`QUADS_SOURCE`): per input row and 16 outputs, one
masked 64-byte load, one ``vpermb`` that puts each output's 4 taps of the kernel row in its
int32 lane, and one ``vpdpbusd`` with the 4 weights (exact: no 16-bit intermediate sums); no
scratch, padding by the load mask. Otherwise the row kernel: each task widens its input
plane, zero-padded, to int32 in a scratch buffer split into ``stride_w`` column phases (phase
``f`` holds padded columns ``f, f + sw, f + 2 sw, ...``), so that for every tap the outputs
of a row read consecutive int32: any stride and dilation becomes unit-stride vector loads.
The outputs of a row go in register blocks of 4, 2 or 1 vectors of 8 int32 (GCC vector
extensions: ymm with AVX2, two xmm with SSE2 only) that accumulate all ``KH x KW`` taps (one
multiply and one add per tap and vector) before one store. The products of 8-bit values and
their sums are exact in int32 for any filter a model has (``KH * KW * 255 * 128 < 2**31`` up
to 256x256 taps).
"""

from __future__ import annotations

from typing import Any

from kiln import te, tir
from kiln.target.x86 import target_has_features
from kiln.tir import op as _op
from kiln.topi.utils import get_const_tuple

__all__ = ["depthwise_conv2d_nchw_int8", "depthwise_int8_applies", "quads_apply",
           "scratch_size", "MICRO_KERNEL_SOURCE", "QUADS_SOURCE", "MIN_ROW"]

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

QUADS_KERNEL_NAME = "kiln_depthwise_u8s8_plane"

QUADS_SOURCE = r"""
#include <stdint.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#ifndef KILN_DEPTHWISE_U8S8_DEFINED
#define KILN_DEPTHWISE_U8S8_DEFINED
#if defined(__AVX512VNNI__) && defined(__AVX512VBMI__) && defined(__AVX512BW__)
#define KILN_DEPTHWISE_U8S8_SIMD 1
#endif
/* out: [oh][ow] int32 of one output channel; in: [h][wd] uint8 input plane; kernel: [kh][kw]
   int8. Padding pt (top), pl (left); the bottom/right padding is what the output size
   implies. With AVX512-VNNI and -VBMI, per input row and block of 16 output columns: one
   masked load of the 64 input bytes the block reads (bytes outside the row are the zero
   padding), one vpermb gathering each output's 4 taps 4g .. 4g+3 of that kernel row (columns
   x sw + (4g + i) dw) into its int32 lane, and one vpdpbusd with the 4 weights: a 3x3 kernel
   is 3 of each per 16 outputs, at any stride and dilation with 15 sw + 3 dw < 64. */
static int32_t kiln_depthwise_u8s8_plane(
    int32_t* out, const uint8_t* in, const int8_t* kernel, int32_t h, int32_t wd, int32_t kh,
    int32_t kw, int32_t oh, int32_t ow, int32_t sh, int32_t sw, int32_t dh, int32_t dw,
    int32_t pt, int32_t pl) {
#if defined(KILN_DEPTHWISE_U8S8_SIMD)
  if (15 * sw + 3 * dw < 64) {
    const int32_t groups = (kw + 3) / 4, blocks = (ow + 15) / 16;
    int32_t wq[kh * groups]; /* taps 4g .. 4g+3 of kernel row ky as 4 bytes */
    for (int32_t ky = 0; ky < kh; ++ky)
      for (int32_t g = 0; g < groups; ++g) {
        uint32_t v = 0;
        for (int i = 0; i < 4 && 4 * g + i < kw; ++i)
          v |= (uint32_t)(uint8_t)kernel[ky * kw + 4 * g + i] << (8 * i);
        wq[ky * groups + g] = (int32_t)v;
      }
    /* byte i of lane j: j sw + i dw (< 64, so no carries between the bytes) */
    const __m512i idx = _mm512_add_epi32(
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                                             15), _mm512_set1_epi32(sw * 0x01010101)),
        _mm512_set1_epi32(dw * 0x03020100));
    /* per (block, group): the first input column read and the mask of those inside the row */
    int64_t first[blocks * groups];
    __mmask64 valid[blocks * groups];
    for (int32_t b = 0; b < blocks; ++b)
      for (int32_t g = 0; g < groups; ++g) {
        const int64_t start = (int64_t)b * 16 * sw + (int64_t)4 * g * dw - pl;
        const int64_t lo = start < 0 ? -start : 0, hi = wd - start < 64 ? wd - start : 64;
        first[b * groups + g] = start;
        valid[b * groups + g] = hi <= lo ? 0 : (~0ULL >> (64 - (hi - lo))) << lo;
      }
    for (int32_t oy = 0; oy < oh; ++oy) {
      for (int32_t b = 0; b < blocks; ++b) {
        __m512i acc = _mm512_setzero_si512();
        for (int32_t ky = 0; ky < kh; ++ky) {
          const int64_t iy = (int64_t)oy * sh + (int64_t)ky * dh - pt;
          if (iy < 0 || iy >= h) continue; /* a padding row */
          const uintptr_t row = (uintptr_t)(in + iy * wd);
          for (int32_t g = 0; g < groups; ++g) {
            const int32_t k = b * groups + g;
            /* masked-off bytes are neither read nor faulted on, even outside the row */
            const __m512i bytes = _mm512_maskz_loadu_epi8(
                valid[k], (const void*)(row + (uintptr_t)first[k]));
            acc = _mm512_dpbusd_epi32(acc, _mm512_permutexvar_epi8(idx, bytes),
                                      _mm512_set1_epi32(wq[ky * groups + g]));
          }
        }
        const int32_t n = ow - b * 16;
        _mm512_mask_storeu_epi32((void*)(out + (int64_t)oy * ow + b * 16),
                                 n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1), acc);
      }
    }
    return 0;
  }
#endif
  for (int32_t oy = 0; oy < oh; ++oy) /* plain C, exact in int32 */
    for (int32_t ox = 0; ox < ow; ++ox) {
      int32_t acc = 0;
      for (int32_t ky = 0; ky < kh; ++ky) {
        const int64_t iy = (int64_t)oy * sh + (int64_t)ky * dh - pt;
        if (iy < 0 || iy >= h) continue;
        for (int32_t kx = 0; kx < kw; ++kx) {
          const int64_t ix = (int64_t)ox * sw + (int64_t)kx * dw - pl;
          if (ix >= 0 && ix < wd) acc += (int32_t)in[iy * wd + ix] * kernel[ky * kw + kx];
        }
      }
      out[(int64_t)oy * ow + ox] = acc;
    }
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


def quads_apply(data_dtype: str, kernel_dtype: str, target: Any = None) -> bool:
    """Whether the ``vpdpbusd`` tap-quad kernel takes this depthwise convolution on ``target``
    (default: the current one, else the host): uint8 data, int8 kernel and a CPU with
    AVX512-BW, -VNNI and -VBMI (``vpermb``)."""
    return (data_dtype == "uint8" and kernel_dtype == "int8" and target_has_features(
        ["avx512bw", "avx512vnni", "avx512vbmi"], target))


def depthwise_int8_applies(data_shape: Any, kernel_shape: Any, groups: int, data_dtype: str,
                           kernel_dtype: str, out_dtype: str, strides: Any,
                           out_width: int, dilation: Any = (1, 1),
                           quads: bool = False) -> bool:
    """Whether the strategy picks these kernels for an NCHW/OIHW convolution: 8-bit data and
    kernel, an int32 result, one group per input channel (``OC = C x multiplier``, kernel
    ``[OC, 1, ...]``); for the tap-quad kernel (``quads``, see :func:`quads_apply`)
    ``15 stride_w + 3 dilation_w < 64`` (its 64-byte window), at any width: whole int8
    MobileNet, one thread, per layer, quads vs the kernels picked without them: 112x112x32
    0.27 vs 0.36 ms, 56x56x128 0.31 vs 0.42, 28x28x256 0.17 vs 0.37, 14x14x512 0.10 vs 0.11,
    stride 2 from 112x112x64 0.16 vs 0.34, from 28x28x256 0.05 vs 0.05; for the row kernel
    stride 1 and output rows of at least :data:`MIN_ROW` columns.

    The row kernel computes any stride and width, but on short or strided rows its per-plane
    scratch costs more than it saves, and ``depthwise_conv2d_nchw.x86`` (vectorized over 8
    channels) is faster: one thread, 3x3 MobileNet layers, this kernel vs that schedule:
    112x112x32 0.30 vs 0.68 ms, 56x56x128 0.37 vs 0.68, 28x28x256 0.32 vs 0.34, 14x14x512
    0.30 vs 0.10; stride 2 from 56x56x128 0.35 vs 0.06.
    """
    depthwise = (data_dtype in ("int8", "uint8") and kernel_dtype in ("int8", "uint8")
                 and out_dtype == "int32" and int(groups) == int(data_shape[1]) > 1
                 and int(kernel_shape[1]) == 1 and int(kernel_shape[0]) % int(groups) == 0)
    if quads:
        return depthwise and 15 * int(strides[1]) + 3 * int(dilation[1]) < 64
    return (depthwise and all(int(s) == 1 for s in strides)
            and int(out_width) >= MIN_ROW)


def depthwise_conv2d_nchw_int8(data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any,
                               dilation: Any, out_dtype: str = "int32",
                               quads: bool = False) -> te.Tensor:
    """The int32 depthwise convolution of 8-bit NCHW ``data`` and an 8-bit ``[C x m, 1, KH,
    KW]`` kernel (output channel ``o`` reads input channel ``o // m``): the row kernel, or with
    ``quads`` (uint8 data, int8 kernel; AVX512-VNNI targets) the ``vpdpbusd`` tap-quad one."""
    n, c, h, w = get_const_tuple(data.shape)
    oc, _, kh, kw = get_const_tuple(kernel.shape)
    sh, sw = (int(s) for s in strides)
    dh, dw = (int(d) for d in dilation)
    pt, pl, pb, pr = (int(p) for p in padding)
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    mult = oc // c
    in_signed, k_signed = (int(str(t.dtype) == "int8") for t in (data, kernel))

    if quads and (str(data.dtype), str(kernel.dtype)) != ("uint8", "int8"):
        raise ValueError(f"the quad depthwise kernel takes uint8 data and an int8 kernel, got "
                         f"{data.dtype} and {kernel.dtype}")
    scratch = scratch_size(oh, ow, kh, kw, sh, sw, dh, dw)

    def planes(ins, outs):
        d, k = ins
        task = tir.Var("plane", "int32")
        b, o = _op.floordiv(task, oc), _op.floormod(task, oc)
        out = outs[0].access_ptr("w", offset=task * (oh * ow))
        src = d.access_ptr("r", offset=(b * c + _op.floordiv(o, mult)) * (h * w))
        weights = k.access_ptr("r", offset=o * (kh * kw))
        sizes = (h, w, kh, kw, oh, ow, sh, sw, dh, dw, pt, pl)
        if quads:
            name, source = QUADS_KERNEL_NAME, QUADS_SOURCE
            call = tir.call_extern("int32", name, out, src, weights, *sizes)
        else:
            name, source = KERNEL_NAME, MICRO_KERNEL_SOURCE
            call = tir.call_extern("int32", name, out,
                                   outs[1].access_ptr("w", offset=task * scratch), src,
                                   in_signed, weights, k_signed, *sizes)
        loop = tir.For(task, 0, n * oc, tir.ForKind.PARALLEL, tir.Evaluate(call))
        return tir.AttrStmt(tir.StringImm(name), "pragma_import_c", tir.StringImm(source),
                            loop)

    if quads:
        conv = te.extern((n, oc, oh, ow), [data, kernel], planes, name="depthwise_int8",
                         dtype="int32")
    else:  # the second output is each task's scratch (planned memory, not a malloc per plane)
        conv, _ = te.extern([(n, oc, oh, ow), (n * oc, scratch)], [data, kernel], planes,
                            name="depthwise_int8", dtype=["int32", "int32"])
    return te.compute((n, oc, oh, ow), lambda b, o, y, x: _op.cast(conv[b, o, y, x], out_dtype),
                      name="depthwise_conv2d_nchw_int8", tag="depthwise_conv2d_nchw_int8")
