"""8-bit pointwise (1x1, stride 1, unpadded) NCHW convolution for x86: a GEMM over pixels
whose C micro-kernel vectorizes along the pixels, so it reads and writes NCHW directly.

Entry points: :func:`conv2d_1x1_nchw_int8` (compute), :func:`pointwise_int8_applies`.
The schedule is :func:`kiln.topi.x86.conv2d_int8.schedule_conv2d_nchw_int8`.

Why not the 3x3 micro-kernel of :mod:`.conv2d_int8`: it vectorizes along output channels and
writes ``NCHW16c``, so a 1x1 layer pays a gather (pixels at stride 16) to return to NCHW and
broadcasts one pixel per multiply-add. Here ``out[o][p] = sum_c w[o][c] * x[c][p]`` takes
vectors of pixels: the data is packed once per layer in lane groups of channels,
``[N][C/lanes][P][lanes]`` (``P`` = H*W padded to a multiple of :data:`PIXEL_TILE`), one group
per int32, and each multiply-add takes 16 (AVX-512) or 8 (AVX2) pixels' groups and one
broadcast weight group. The packings are those of :mod:`.conv2d_int8` with the same packed
kernels (AlterOpLayout packs them at compile time; the 16 output channels of one group are one
64-byte line): uint8 x int8 quads through ``vpdpbusd`` (AVX512-VNNI targets,
:func:`kiln.topi.x86.conv2d_int8.quads_apply`) and int16 pairs through ``vpmaddwd`` (exact for
any mix of int8/uint8; ``vpdpwssd`` with AVX512-VNNI). Register blocks: AVX-512, 8 output
channels x 32 pixels in 16 zmm accumulators; AVX2 (pairs), 4 channels x 16 pixels in 8 ymm.
Without the instructions the same function is plain C. Tasks (batch, pixel chunk, group of
output-channel blocks) run on kiln's thread pool; the int32 NCHW result feeds the output stage,
where the fused requantize epilogue is inlined and vectorizes along the row.
"""

from __future__ import annotations

from typing import Any

from kiln import te, tir
from kiln.tir import op as _op
from kiln.topi.utils import get_const_tuple
from kiln.topi.x86.conv2d_int8 import OC_BLOCK, PACKED_DTYPES, QUADS, pack_kernel

__all__ = ["conv2d_1x1_nchw_int8", "pointwise_int8_applies", "MICRO_KERNEL_SOURCE",
           "PIXEL_TILE"]

PIXEL_TILE = 32  # pixels per register block (AVX-512: 2 zmm of int32; AVX2: 2 x 2 ymm)
PIXEL_CHUNK = 128  # pixels per task: its lane-group rows stay in L1/L2 across the blocks
# lanes -> (pack, GEMM) C functions
KERNEL_NAMES = {2: ("kiln_pack_pairs_i16", "kiln_conv1x1_i16_task"),
                QUADS: ("kiln_pack_quads_u8", "kiln_conv1x1_u8s8_task")}

MICRO_KERNEL_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#ifndef KILN_CONV1X1_I8_DEFINED
#define KILN_CONV1X1_I8_DEFINED
/* Channels 2*cp and 2*cp+1 of one batch (src: [C][p] 8-bit, signed when is_signed) as int16
   pairs dst[p][2], zero-padded to ppad pixels (and the second channel zero when c is odd). */
static int32_t kiln_pack_pairs_i16(int16_t* dst, const void* src, int32_t is_signed, int32_t c,
                                   int32_t cp, int64_t p, int64_t ppad) {
  const int64_t c0 = 2 * (int64_t)cp, c1 = c0 + 1;
  if (is_signed) {
    const int8_t* a = (const int8_t*)src + c0 * p;
    const int8_t* b = a + p;
    for (int64_t i = 0; i < p; ++i) {
      dst[2 * i] = a[i];
      dst[2 * i + 1] = c1 < c ? b[i] : 0;
    }
  } else {
    const uint8_t* a = (const uint8_t*)src + c0 * p;
    const uint8_t* b = a + p;
    for (int64_t i = 0; i < p; ++i) {
      dst[2 * i] = a[i];
      dst[2 * i + 1] = c1 < c ? b[i] : 0;
    }
  }
  memset(dst + 2 * p, 0, (size_t)(ppad - p) * 2 * sizeof(int16_t));
  return 0;
}

/* Channels 4*cq .. 4*cq+3 of one batch (src: [C][p] uint8; is_signed is 0) as quads
   dst[p][4], zero-padded to ppad pixels and channels past c zero. */
static int32_t kiln_pack_quads_u8(uint8_t* dst, const void* src, int32_t is_signed, int32_t c,
                                  int32_t cq, int64_t p, int64_t ppad) {
  (void)is_signed;
  const int64_t c0 = 4 * (int64_t)cq;
  const uint8_t* a = (const uint8_t*)src + c0 * p;
  if (c0 + 4 <= c) { /* a whole quad: byte merges gcc vectorizes */
    uint32_t* d32 = (uint32_t*)dst;
    for (int64_t i = 0; i < p; ++i)
      d32[i] = (uint32_t)a[i] | (uint32_t)a[p + i] << 8 | (uint32_t)a[2 * p + i] << 16 |
               (uint32_t)a[3 * p + i] << 24;
  } else {
    for (int64_t i = 0; i < p; ++i)
      for (int k = 0; k < 4; ++k) dst[4 * i + k] = c0 + k < c ? a[k * p + i] : 0;
  }
  memset(dst + 4 * p, 0, (size_t)(ppad - p) * 4);
  return 0;
}

/* Store the first n (<= lanes) int32 of v at dst. */
#define KILN_STORE_PART(dst, v, n, lanes)                        \
  do {                                                           \
    int32_t tmp_[lanes];                                         \
    memcpy(tmp_, &(v), sizeof(tmp_));                            \
    memcpy((dst), tmp_, (size_t)(n) * sizeof(int32_t));          \
  } while (0)

#if defined(__AVX512F__) && defined(__AVX512BW__)
#if defined(__AVX512VNNI__)
#define KILN_I8_QUADS_SIMD_1X1 1 /* vpdpbusd: uint8 x int8 quads */
#endif
/* acc plus the dot products of the lane groups of a and w: uint8 x int8 quads (vpdpbusd; only
   called with AVX512-VNNI) or int16 pairs (vpdpwssd, or vpmaddwd + add). */
static inline __attribute__((always_inline)) __m512i kiln_i8_madd512_1x1(
    __m512i acc, __m512i a, __m512i w, const int quads) {
#if defined(__AVX512VNNI__)
  return quads ? _mm512_dpbusd_epi32(acc, a, w) : _mm512_dpwssd_epi32(acc, a, w);
#else
  (void)quads;
  return _mm512_add_epi32(acc, _mm512_madd_epi16(a, w));
#endif
}

/* out rows [16 b, 16 b + 16) (< oc) at pixels [q, q + nq) (nq <= 32): 8 rows x 32 pixels in
   16 zmm accumulators at a time. */
static inline __attribute__((always_inline)) void kiln_conv1x1_block512(
    int32_t* out, const int32_t* d32, const int32_t* w32, int32_t cg, int64_t p, int64_t ppad,
    int32_t oc, int32_t b, int64_t q, int64_t nq, const int quads) {
  for (int32_t r0 = 0; r0 < 16; r0 += 8) {
    const int32_t rows = oc - (b * 16 + r0) < 8 ? oc - (b * 16 + r0) : 8;
    if (rows <= 0) break;
    __m512i acc[8][2];
    for (int r = 0; r < 8; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
    for (int32_t c = 0; c < cg; ++c) {
      const int32_t* dp = d32 + (int64_t)c * ppad + q;
      const __m512i x0 = _mm512_loadu_si512((const void*)dp);
      const __m512i x1 = _mm512_loadu_si512((const void*)(dp + 16));
      const int32_t* wp = w32 + (int64_t)c * 16 + r0;
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        const __m512i w = _mm512_set1_epi32(wp[r]);
        acc[r][0] = kiln_i8_madd512_1x1(acc[r][0], x0, w, quads);
        acc[r][1] = kiln_i8_madd512_1x1(acc[r][1], x1, w, quads);
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
}
#endif

/* out[o][q] for the output channels o of blocks [b0, b1) (rows < oc) and pixels q of
   [q0, q1) (q1 <= p, q0 a multiple of 32): sum over lane groups of weight[o][group] times
   data[group][q]. out: [OC][p] int32 of one batch; data: [CG][ppad][lanes] of one batch,
   weight: [OC/16][CG][16][lanes] (uint8 / int8 quads or int16 pairs). */
static inline __attribute__((always_inline)) int32_t kiln_conv1x1_i8_task(
    int32_t* out, const void* data, const void* weight, const int32_t lanes, int32_t cg,
    int64_t p, int64_t ppad, int32_t oc, int32_t b0, int32_t b1, int64_t q0, int64_t q1) {
  const int quads = lanes == 4;
  const int32_t* d32 = (const int32_t*)data; /* one lane group per int32 */
  for (int32_t b = b0; b < b1; ++b) {
    const int32_t* w32 = (const int32_t*)weight + (int64_t)b * cg * 16;
    for (int64_t q = q0; q < q1; q += 32) {
      const int64_t nq = q1 - q < 32 ? q1 - q : 32;
#if defined(__AVX512F__) && defined(__AVX512BW__)
#if defined(KILN_I8_QUADS_SIMD_1X1)
      if (quads) {
        kiln_conv1x1_block512(out, d32, w32, cg, p, ppad, oc, b, q, nq, 1);
        continue;
      }
#endif
      if (!quads) {
        kiln_conv1x1_block512(out, d32, w32, cg, p, ppad, oc, b, q, nq, 0);
        continue;
      }
#elif defined(__AVX2__)
      if (!quads) {
        for (int64_t h = 0; h < nq; h += 16) {
          for (int32_t r0 = 0; r0 < 16; r0 += 4) {
            const int32_t rows = oc - (b * 16 + r0) < 4 ? oc - (b * 16 + r0) : 4;
            if (rows <= 0) break;
            __m256i acc[4][2];
            for (int r = 0; r < 4; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
            for (int32_t c = 0; c < cg; ++c) {
              const int32_t* dp = d32 + (int64_t)c * ppad + q + h;
              const __m256i x0 = _mm256_loadu_si256((const __m256i*)dp);
              const __m256i x1 = _mm256_loadu_si256((const __m256i*)(dp + 8));
              const int32_t* wp = w32 + (int64_t)c * 16 + r0;
#pragma GCC unroll 4
              for (int r = 0; r < 4; ++r) {
                const __m256i w = _mm256_set1_epi32(wp[r]);
                acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(x0, w));
                acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(x1, w));
              }
            }
            const int64_t n = nq - h < 16 ? nq - h : 16;
            for (int r = 0; r < rows; ++r) {
              int32_t* o = out + (int64_t)(b * 16 + r0 + r) * p + q + h;
              if (n == 16) {
                _mm256_storeu_si256((__m256i*)o, acc[r][0]);
                _mm256_storeu_si256((__m256i*)(o + 8), acc[r][1]);
              } else if (n > 8) {
                _mm256_storeu_si256((__m256i*)o, acc[r][0]);
                KILN_STORE_PART(o + 8, acc[r][1], n - 8, 8);
              } else {
                KILN_STORE_PART(o, acc[r][0], n, 8);
              }
            }
          }
        }
        continue;
      }
#endif
      for (int32_t r = 0; r < 16 && b * 16 + r < oc; ++r) {
        int32_t acc[32] = {0}; /* plain C, exact in int32 */
        for (int32_t c = 0; c < cg; ++c) {
          const int64_t x = ((int64_t)c * ppad + q) * lanes;
          const int64_t w = (((int64_t)b * cg + c) * 16 + r) * lanes;
          for (int j = 0; j < 32; ++j)
            for (int i = 0; i < lanes; ++i)
              acc[j] += (quads ? (int32_t)((const uint8_t*)data)[x + lanes * j + i]
                               : (int32_t)((const int16_t*)data)[x + lanes * j + i]) *
                        (quads ? (int32_t)((const int8_t*)weight)[w + i]
                               : (int32_t)((const int16_t*)weight)[w + i]);
        }
        memcpy(out + (int64_t)(b * 16 + r) * p + q, acc, (size_t)nq * sizeof(int32_t));
      }
    }
  }
  return 0;
}

/* The entry points, one per packing (a C function called from generated code keeps one
   signature): int16 pairs, uint8 x int8 quads. */
static int32_t kiln_conv1x1_i16_task(int32_t* out, const int16_t* data, const int16_t* weight,
                                     int32_t cg, int64_t p, int64_t ppad, int32_t oc,
                                     int32_t b0, int32_t b1, int64_t q0, int64_t q1) {
  return kiln_conv1x1_i8_task(out, data, weight, 2, cg, p, ppad, oc, b0, b1, q0, q1);
}
static int32_t kiln_conv1x1_u8s8_task(int32_t* out, const uint8_t* data, const int8_t* weight,
                                      int32_t cg, int64_t p, int64_t ppad, int32_t oc,
                                      int32_t b0, int32_t b1, int64_t q0, int64_t q1) {
  return kiln_conv1x1_i8_task(out, data, weight, 4, cg, p, ppad, oc, b0, b1, q0, q1);
}
#endif
"""


def pointwise_int8_applies(kernel_shape: Any, strides: Any, padding: Any) -> bool:
    """Whether a convolution the 8-bit micro-kernels compute is a pointwise one for this
    module: a 1x1 kernel (OIHW or the packed ``OIHW16o2i``: KH, KW are dims 2, 3 of both),
    stride 1, no padding (dilation is moot)."""
    kh, kw = (kernel_shape[2], kernel_shape[3])
    return (int(kh), int(kw)) == (1, 1) and all(int(s) == 1 for s in strides) and \
        not any(int(p) for p in padding)


def conv2d_1x1_nchw_int8(data: te.Tensor, kernel: te.Tensor, out_dtype: str = "int32",
                         lanes: int = 2) -> te.Tensor:
    """The int32 NCHW 1x1 convolution of 8-bit ``data`` and an OIHW (8-bit) or packed
    (``OIHW16o2i`` int16, ``OIHW16o4i`` int8) ``kernel`` through the pixel-vectorized
    micro-kernel taking ``lanes`` input channels per int32 lane: 2 (int16 pairs) or 4 (uint8
    data x int8 kernel quads); a packed kernel brings its own."""
    n, c, h, w = get_const_tuple(data.shape)
    prepacked = len(kernel.shape) == 6
    if prepacked:
        lanes = int(kernel.shape[5])
    oc = int(kernel.shape[0] * OC_BLOCK if prepacked else kernel.shape[0])
    kernel_pack = kernel if prepacked else pack_kernel(kernel, lanes)
    pack_name, gemm_name = KERNEL_NAMES[lanes]
    cg, ocb = -(-c // lanes), -(-oc // OC_BLOCK)
    p = h * w
    ppad = -(-p // PIXEL_TILE) * PIXEL_TILE
    is_signed = int(str(data.dtype) == "int8")

    def pack(ins, outs):
        task = tir.Var("group", "int32")
        b, g = _op.floordiv(task, cg), _op.floormod(task, cg)
        call = tir.call_extern(
            "int32", pack_name, outs[0].access_ptr("w", offset=task * (ppad * lanes)),
            ins[0].access_ptr("r", offset=b * (c * p)), is_signed, c, g, p, ppad)
        loop = tir.For(task, 0, n * cg, tir.ForKind.PARALLEL, tir.Evaluate(call))
        return tir.AttrStmt(tir.StringImm(gemm_name), "pragma_import_c",
                            tir.StringImm(MICRO_KERNEL_SOURCE), loop)

    data_pack = te.extern((n, cg, ppad, lanes), [data], pack, name="data_pack_int8",
                          dtype=PACKED_DTYPES[lanes][0])
    chunks = -(-p // PIXEL_CHUNK)
    # enough tasks for the thread pool when the image is small (7x7: one pixel chunk)
    groups = max(1, min(ocb, -(-8 // (n * chunks))))
    per_group = -(-ocb // groups)

    def gemm(ins, outs):
        d, k = ins
        task = tir.Var("task", "int32")
        b = _op.floordiv(task, chunks * groups)
        chunk = _op.floormod(_op.floordiv(task, groups), chunks)
        group = _op.floormod(task, groups)
        q0 = chunk * PIXEL_CHUNK
        call = tir.call_extern(
            "int32", gemm_name, outs[0].access_ptr("w", offset=b * (oc * p)),
            d.access_ptr("r", offset=b * (cg * ppad * lanes)), k.access_ptr("r"), cg, p, ppad,
            oc, _op.min(group * per_group, ocb), _op.min((group + 1) * per_group, ocb),
            q0, _op.min(q0 + PIXEL_CHUNK, p))
        loop = tir.For(task, 0, n * chunks * groups, tir.ForKind.PARALLEL, tir.Evaluate(call))
        return tir.AttrStmt(tir.StringImm(gemm_name), "pragma_import_c",
                            tir.StringImm(MICRO_KERNEL_SOURCE), loop)

    conv = te.extern((n, oc, h, w), [data_pack, kernel_pack], gemm, name="conv2d_int8_1x1",
                     dtype="int32")
    return te.compute((n, oc, h, w), lambda b, o, y, x: _op.cast(conv[b, o, y, x], out_dtype),
                      name="conv2d_1x1_nchw_int8", tag="conv2d_nchw_int8")
