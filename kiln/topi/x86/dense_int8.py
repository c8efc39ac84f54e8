"""8-bit dense (``out[m][n] = sum_k data[m][k] * weight[n][k]``, int32) for x86: a C kernel of
dot products along ``k`` that reads both operands as they are (8-bit, row-major), so neither
is packed at run time or compile time; the requantize epilogue is fused into the output stage.

Entry points: :func:`dense_int8` (compute), :func:`schedule_dense_int8`,
:func:`dense_int8_applies`.

A quantized classifier's dense is a matrix-vector product (``m`` = batch, often 1) that
streams its weight once: what counts is reading each weight byte once, at full width. Per step
of 16 ``k``, the kernel widens 16 bytes of each of 4 weight rows and of 2 data rows to int16
(``vpmovsxbw``/``vpmovzxbw``) and multiplies them in pairs into int32 lanes (``vpmaddwd``),
8 accumulators for a 2x4 block of outputs, exact for any mix of int8/uint8; each accumulator
is summed across its lanes at the end. With AVX512-VNNI, uint8 data x int8 weight (what x86
qnn legalization produces) takes 64 bytes per step unwidened: ``vpdpbusd`` sums 4 products
per int32 lane without saturation, the last partial step by masked loads. Without AVX2 the
same function is plain C. Tasks are blocks of 4 weight rows (all data rows) on kiln's thread
pool.
"""

from __future__ import annotations

from typing import Any

from kiln import te, tir
from kiln.tir import op as _op
from kiln.topi.utils import get_const_tuple

__all__ = ["dense_int8", "schedule_dense_int8", "dense_int8_applies", "MICRO_KERNEL_SOURCE"]

KERNEL_NAME = "kiln_dense_i8_rows"
ROWS = 4  # weight rows per task (and per register block)

MICRO_KERNEL_SOURCE = r"""
#include <stdint.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#ifndef KILN_DENSE_I8_DEFINED
#define KILN_DENSE_I8_DEFINED
static inline int32_t kiln_dense_i8_at(const void* p, int32_t is_signed, int64_t i) {
  return is_signed ? ((const int8_t*)p)[i] : ((const uint8_t*)p)[i];
}

#if defined(__AVX2__)
/* 16 bytes at p widened to int16 (signed or not). */
static inline __m256i kiln_dense_i8_widen(const void* p, int32_t is_signed) {
  const __m128i v = _mm_loadu_si128((const __m128i*)p);
  return is_signed ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
}

static inline int32_t kiln_dense_i8_hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}
#endif

/* out[m][n] for all m < rows_m and the weight rows n of [n0, n1) (n1 - n0 <= 4): data [M][k],
   weight [N][k], out [M][N] (row stride nn), 8-bit operands signed when d_signed/w_signed. */
static int32_t kiln_dense_i8_rows(int32_t* out, const void* data, int32_t d_signed,
                                  const void* weight, int32_t w_signed, int32_t rows_m,
                                  int32_t nn, int64_t k, int32_t n0, int32_t n1) {
  const int32_t nr = n1 - n0;
  for (int32_t m0 = 0; m0 < rows_m; m0 += 2) {
    const int32_t mr = rows_m - m0 < 2 ? rows_m - m0 : 2;
    int32_t sums[2][4] = {{0}};
    int64_t kk = 0;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    if (!d_signed && w_signed) { /* uint8 x int8: vpdpbusd on the raw bytes, masked tail */
      __m512i acc[2][4];
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_si512();
      const char* d0 = (const char*)data + (int64_t)m0 * k;
      const char* d1 = (const char*)data + (int64_t)(m0 + mr - 1) * k;
      const char* w[4];
      for (int j = 0; j < 4; ++j)
        w[j] = (const char*)weight + (int64_t)(n0 + (j < nr ? j : 0)) * k;
      for (; kk < k; kk += 64) {
        const __mmask64 m = k - kk >= 64 ? ~0ULL : ~0ULL >> (64 - (k - kk));
        const __m512i x0 = _mm512_maskz_loadu_epi8(m, (const void*)(d0 + kk));
        const __m512i x1 = _mm512_maskz_loadu_epi8(m, (const void*)(d1 + kk));
        for (int j = 0; j < 4; ++j) {
          const __m512i wv = _mm512_maskz_loadu_epi8(m, (const void*)(w[j] + kk));
          acc[0][j] = _mm512_dpbusd_epi32(acc[0][j], x0, wv);
          acc[1][j] = _mm512_dpbusd_epi32(acc[1][j], x1, wv);
        }
      }
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) sums[i][j] = _mm512_reduce_add_epi32(acc[i][j]);
    } else
#endif
    {
#if defined(__AVX2__)
    __m256i acc[2][4];
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_setzero_si256();
    const char* d0 = (const char*)data + (int64_t)m0 * k;
    const char* d1 = (const char*)data + (int64_t)(m0 + mr - 1) * k; /* == d0 when mr is 1 */
    const char* w[4];
    for (int j = 0; j < 4; ++j) w[j] = (const char*)weight + (int64_t)(n0 + (j < nr ? j : 0)) * k;
    for (; kk + 16 <= k; kk += 16) {
      const __m256i x0 = kiln_dense_i8_widen(d0 + kk, d_signed);
      const __m256i x1 = kiln_dense_i8_widen(d1 + kk, d_signed);
      for (int j = 0; j < 4; ++j) {
        const __m256i wv = kiln_dense_i8_widen(w[j] + kk, w_signed);
        acc[0][j] = _mm256_add_epi32(acc[0][j], _mm256_madd_epi16(x0, wv));
        acc[1][j] = _mm256_add_epi32(acc[1][j], _mm256_madd_epi16(x1, wv));
      }
    }
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j) sums[i][j] = kiln_dense_i8_hsum(acc[i][j]);
#endif
    }
    for (int32_t i = 0; i < mr; ++i) {
      for (int32_t j = 0; j < nr; ++j) {
        int32_t s = sums[i][j];
        for (int64_t t = kk; t < k; ++t) /* the tail (all of k without AVX2) */
          s += kiln_dense_i8_at(data, d_signed, (int64_t)(m0 + i) * k + t) *
               kiln_dense_i8_at(weight, w_signed, (int64_t)(n0 + j) * k + t);
        out[(int64_t)(m0 + i) * nn + n0 + j] = s;
      }
    }
  }
  return 0;
}
#endif
"""


def dense_int8_applies(data_shape: Any, weight_shape: Any, data_dtype: str, weight_dtype: str,
                       out_dtype: str) -> bool:
    """Whether the kernel computes this ``nn.dense``: 2-D 8-bit data and weight, int32 result."""
    return (len(data_shape) == 2 and len(weight_shape) == 2
            and data_dtype in ("int8", "uint8") and weight_dtype in ("int8", "uint8")
            and out_dtype == "int32")


def dense_int8(data: te.Tensor, weight: te.Tensor, out_dtype: str = "int32") -> te.Tensor:
    """The int32 product of 8-bit ``data`` ``[M, K]`` and ``weight`` ``[N, K]`` transposed."""
    m, k = get_const_tuple(data.shape)
    n = int(get_const_tuple(weight.shape)[0])
    d_signed, w_signed = (int(str(t.dtype) == "int8") for t in (data, weight))
    blocks = -(-n // ROWS)

    def rows(ins, outs):
        task = tir.Var("block", "int32")
        call = tir.call_extern(
            "int32", KERNEL_NAME, outs[0].access_ptr("w"), ins[0].access_ptr("r"), d_signed,
            ins[1].access_ptr("r"), w_signed, m, n, k, task * ROWS,
            _op.min(task * ROWS + ROWS, n))
        loop = tir.For(task, 0, blocks, tir.ForKind.PARALLEL, tir.Evaluate(call))
        return tir.AttrStmt(tir.StringImm(KERNEL_NAME), "pragma_import_c",
                            tir.StringImm(MICRO_KERNEL_SOURCE), loop)

    product = te.extern((m, n), [data, weight], rows, name="dense_int8_rows", dtype="int32")
    return te.compute((m, n), lambda i, j: _op.cast(product[i, j], out_dtype),
                      name="dense_int8", tag="dense_int8")


def schedule_dense_int8(outs: Any) -> Any:
    """Inline the epilogue (scalar constants too) into the output stage, parallel over rows."""
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    out_ops = [t.op for t in outs]
    seen, todo = set(), list(out_ops)
    while todo:
        op = todo.pop()
        if op in seen or not isinstance(op, te.ComputeOp):
            continue
        seen.add(op)
        if op not in out_ops and not op.reduce_axis:
            sch[op].compute_inline()
        todo.extend(t.op for t in op.input_tensors)
    for out in outs:
        stage = sch[out.op]
        if len(stage.op.axis) == 2 and int(out.shape[0]) > 1:
            stage.parallel(stage.op.axis[0])
    return sch
