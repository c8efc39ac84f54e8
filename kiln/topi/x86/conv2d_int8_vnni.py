"""The AVX512-VNNI micro-kernels of the x86 8-bit convolutions: uint8 data x int8 kernel on the
raw bytes, four multiply-adds per int32 lane and instruction (``vpdpbusd``).

Entry points: :data:`MICRO_KERNEL_SOURCE` (the C), :data:`PLANE_NAME`, :data:`PACK_NAME`,
:data:`GEMM_NAME`, :data:`LANES`, :func:`vnni_applies`. The computes that call them are
:func:`kiln.topi.x86.conv2d_int8.conv2d_nchw_int8` and
:func:`kiln.topi.x86.conv2d_int8_1x1.conv2d_1x1_nchw_int8` with ``lanes=4``.

The int16 kernels of those modules multiply channel pairs (``vpdpwssd``: 2 products per lane);
here the operands stay 8-bit and come in channel quads: the data as ``[C/4][..][4]`` uint8 (a
pixel's 4 channels are one int32), the kernel as ``OIHW16o4i`` int8 (``[OC/16][C/4][KH][KW]
[16][4]``: the 16 output channels of one quad are one 64-byte zmm). ``vpdpbusd`` multiplies
unsigned by signed bytes, adds the 4 products of a lane to its int32 accumulator without
saturation (unlike ``vpmaddubsw``'s 16-bit pair sums), so the result is exact for any uint8
data and int8 weights; int8 data is moved to uint8 by ``relay.qnn`` legalization (+128 with
the zero point), other dtype pairs keep the int16 kernels. Without AVX512-VNNI (a target that
does not have it compiles the same source) the functions are plain C, still exact; the
strategy picks them only for targets with it (:func:`vnni_applies`).

- ``kiln_conv2d_u8s8_nchw16c_plane``: one (batch, 16-output-channel block) plane, eight output
  pixels in eight zmm accumulators, per (quad, ky, kx) one weight load and per pixel a
  broadcast of its quad and a ``vpdpbusd`` (as the int16 kernel, twice the channels).
- ``kiln_pack_quads_u8`` / ``kiln_conv1x1_u8s8_task``: the pointwise GEMM over pixels (NCHW in
  and out): 8 output channels x 32 pixels in 16 zmm, per quad two data loads, 8 broadcast
  weights and 16 ``vpdpbusd``.
"""

from __future__ import annotations

from typing import Any

from kiln.target.x86 import target_has_features

__all__ = ["MICRO_KERNEL_SOURCE", "PLANE_NAME", "PACK_NAME", "GEMM_NAME", "LANES",
           "vnni_applies"]

LANES = 4  # input channels per int32 lane
PLANE_NAME = "kiln_conv2d_u8s8_nchw16c_plane"
PACK_NAME = "kiln_pack_quads_u8"
GEMM_NAME = "kiln_conv1x1_u8s8_task"

MICRO_KERNEL_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#ifndef KILN_CONV_U8S8_DEFINED
#define KILN_CONV_U8S8_DEFINED
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define KILN_U8S8_VNNI 1
#endif

/* out[p][16] for the output pixels p (row-major over oh x ow) = sum over channel quads c, ky,
   kx of the 16x4 weights times the pixel's channel quad. data: [C4][HP][WP][4] uint8 of one
   batch; weight: [C4][KH][KW][16][4] int8 of one block. Pixels go in blocks of 8 across rows;
   a partial last block repeats its last pixel and stores only the real ones. */
static int32_t kiln_conv2d_u8s8_nchw16c_plane(
    int32_t* out, const uint8_t* data, const int8_t* weight, int32_t c4, int32_t hp,
    int32_t wp, int32_t kh, int32_t kw, int32_t oh, int32_t ow, int32_t sh, int32_t sw,
    int32_t dh, int32_t dw) {
  const int64_t plane = (int64_t)hp * wp, pixels = (int64_t)oh * ow;
  for (int64_t p0 = 0; p0 < pixels; p0 += 8) {
    const int nb = pixels - p0 < 8 ? (int)(pixels - p0) : 8;
    int64_t off[8]; /* each pixel's first tap, in int32 (channel quad) units */
    for (int j = 0; j < 8; ++j) {
      const int64_t p = p0 + (j < nb ? j : nb - 1);
      off[j] = (p / ow) * sh * wp + (p % ow) * sw;
    }
    int32_t* o = out + p0 * 16;
#if defined(KILN_U8S8_VNNI)
    __m512i acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_setzero_si512();
    for (int32_t c = 0; c < c4; ++c) {
      for (int32_t ky = 0; ky < kh; ++ky) {
        const int32_t* row = (const int32_t*)data + c * plane + (int64_t)ky * dh * wp;
        const int8_t* wrow = weight + ((int64_t)(c * kh + ky) * kw) * 64;
        for (int32_t kx = 0; kx < kw; ++kx) {
          const __m512i w = _mm512_loadu_si512((const void*)(wrow + kx * 64));
          const int32_t* tap = row + kx * dw;
#pragma GCC unroll 8
          for (int j = 0; j < 8; ++j)
            acc[j] = _mm512_dpbusd_epi32(acc[j], _mm512_set1_epi32(tap[off[j]]), w);
        }
      }
    }
    for (int j = 0; j < nb; ++j) _mm512_storeu_si512((void*)(o + 16 * j), acc[j]);
#else
    for (int j = 0; j < nb; ++j) {
      int32_t acc[16] = {0}; /* plain C, exact in int32 */
      for (int32_t c = 0; c < c4; ++c)
        for (int32_t ky = 0; ky < kh; ++ky)
          for (int32_t kx = 0; kx < kw; ++kx) {
            const uint8_t* px = data + (c * plane + (int64_t)ky * dh * wp + kx * dw + off[j]) * 4;
            const int8_t* wv = weight + (((int64_t)(c * kh + ky) * kw) + kx) * 64;
            for (int q = 0; q < 16; ++q)
              for (int i = 0; i < 4; ++i) acc[q] += (int32_t)px[i] * wv[4 * q + i];
          }
      memcpy(o + 16 * j, acc, sizeof(acc));
    }
#endif
  }
  return 0;
}

/* Channels 4*cq .. 4*cq+3 of one batch (src: [C][p] uint8) as quads dst[p][4], zero-padded to
   ppad pixels and channels past c zero. is_signed must be 0 (the quads are unsigned). */
static int32_t kiln_pack_quads_u8(uint8_t* dst, const void* src, int32_t is_signed, int32_t c,
                                  int32_t cq, int64_t p, int64_t ppad) {
  (void)is_signed;
  const int64_t c0 = 4 * (int64_t)cq;
  const uint8_t* rows[4];
  static const uint8_t none[1] = {0};
  for (int i = 0; i < 4; ++i) rows[i] = c0 + i < c ? (const uint8_t*)src + (c0 + i) * p : none;
  uint32_t* d32 = (uint32_t*)dst;
  if (c0 + 4 <= c) { /* whole quad: one vectorizable loop of byte merges */
    const uint8_t *a = rows[0], *b = rows[1], *g = rows[2], *h = rows[3];
    for (int64_t i = 0; i < p; ++i)
      d32[i] = (uint32_t)a[i] | (uint32_t)b[i] << 8 | (uint32_t)g[i] << 16 |
               (uint32_t)h[i] << 24;
  } else {
    for (int64_t i = 0; i < p; ++i)
      for (int k = 0; k < 4; ++k) dst[4 * i + k] = c0 + k < c ? rows[k][i] : 0;
  }
  memset(dst + 4 * p, 0, (size_t)(ppad - p) * 4);
  return 0;
}

/* out[o][q] for the output channels o of blocks [b0, b1) (rows < oc) and pixels q of
   [q0, q1) (q1 <= p, q0 a multiple of 32): sum over channel quads of weight[o][quad] times
   data[quad][q]. out: [OC][p] int32 of one batch; data: [C4][ppad][4] uint8 of one batch;
   weight: [OC/16][C4][16][4] int8. */
static int32_t kiln_conv1x1_u8s8_task(int32_t* out, const uint8_t* data, const int8_t* weight,
                                      int32_t c4, int64_t p, int64_t ppad, int32_t oc,
                                      int32_t b0, int32_t b1, int64_t q0, int64_t q1) {
  const int32_t* d32 = (const int32_t*)data; /* one channel quad per int32 */
  for (int32_t b = b0; b < b1; ++b) {
    const int32_t* w32 = (const int32_t*)weight + (int64_t)b * c4 * 16;
    for (int64_t q = q0; q < q1; q += 32) {
      const int64_t nq = q1 - q < 32 ? q1 - q : 32;
#if defined(KILN_U8S8_VNNI)
      for (int32_t r0 = 0; r0 < 16; r0 += 8) {
        const int32_t rows = oc - (b * 16 + r0) < 8 ? oc - (b * 16 + r0) : 8;
        if (rows <= 0) break;
        __m512i acc[8][2];
        for (int r = 0; r < 8; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
        for (int32_t c = 0; c < c4; ++c) {
          const int32_t* dp = d32 + (int64_t)c * ppad + q;
          const __m512i x0 = _mm512_loadu_si512((const void*)dp);
          const __m512i x1 = _mm512_loadu_si512((const void*)(dp + 16));
          const int32_t* wp = w32 + (int64_t)c * 16 + r0;
#pragma GCC unroll 8
          for (int r = 0; r < 8; ++r) {
            const __m512i w = _mm512_set1_epi32(wp[r]);
            acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], x0, w);
            acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], x1, w);
          }
        }
        const __mmask16 m0 = nq >= 16 ? 0xFFFF : (__mmask16)((1u << nq) - 1);
        const __mmask16 m1 = nq >= 32 ? 0xFFFF : nq <= 16 ? 0 : (__mmask16)((1u << (nq - 16)) - 1);
        for (int r = 0; r < rows; ++r) {
          int32_t* o = out + (int64_t)(b * 16 + r0 + r) * p + q;
          _mm512_mask_storeu_epi32((void*)o, m0, acc[r][0]);
          _mm512_mask_storeu_epi32((void*)(o + 16), m1, acc[r][1]);
        }
      }
#else
      for (int32_t r = 0; r < 16 && b * 16 + r < oc; ++r) {
        int32_t acc[32] = {0}; /* plain C, exact in int32 */
        for (int32_t c = 0; c < c4; ++c) {
          const uint8_t* x = data + ((int64_t)c * ppad + q) * 4;
          const int8_t* w = weight + (((int64_t)b * c4 + c) * 16 + r) * 4;
          for (int j = 0; j < 32; ++j)
            for (int i = 0; i < 4; ++i) acc[j] += (int32_t)x[4 * j + i] * w[i];
        }
        memcpy(out + (int64_t)(b * 16 + r) * p + q, acc, (size_t)nq * sizeof(int32_t));
      }
#endif
    }
  }
  return 0;
}
#endif
"""


def vnni_applies(data_dtype: str, kernel_dtype: str, target: Any = None) -> bool:
    """Whether the quad kernels compute a convolution of ``data_dtype`` by an 8-bit
    ``kernel_dtype`` for ``target`` (default: the current one, else the host): uint8 data, int8
    kernel, and a CPU with AVX512-BW and AVX512-VNNI."""
    return (data_dtype == "uint8" and kernel_dtype == "int8"
            and target_has_features(["avx512bw", "avx512vnni"], target))
