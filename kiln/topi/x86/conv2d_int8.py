"""8-bit NCHW convolution for x86: a C micro-kernel of 8-bit multiply-adds into int32 lanes,
called from an extern stage (the C arrives through ``pragma import_c``).

Entry points: :func:`conv2d_nchw_int8` (compute), :func:`schedule_conv2d_nchw_int8`,
:func:`conv2d_int8_applies`, :func:`quads_apply`, :func:`pack_kernel`,
:data:`MICRO_KERNEL_SOURCE`.

The micro-kernel takes its operands in lane groups, one group per int32: the padded data as
``[N][C/lanes][H][W][lanes]`` (a pixel's channels of one group adjacent), the kernel as
``OIHW16o{lanes}i`` (``[OC/16][C/lanes][KH][KW][16][lanes]``: the 16 output channels of one
group and tap are one 64-byte line), and computes one (batch, 16-output-channel block) plane;
per (group, ky, kx) it loads the weights once and for each pixel of a block broadcasts the
pixel's group and multiply-adds it into that pixel's accumulator. Two packings:

- ``lanes=4``, uint8 data x int8 kernel on CPUs with AVX512-VNNI (:func:`quads_apply`): the
  raw bytes, ``vpdpbusd`` (4 products per lane and instruction, summed into int32 without
  saturation, unlike ``vpmaddubsw``'s 16-bit pair sums: exact for any uint8 x int8). Eight
  pixels in eight zmm accumulators. int8 data reaches it moved to uint8 by ``relay.qnn``
  legalization (+128 with the zero point, as TVM's x86 legalization does).
- ``lanes=2`` otherwise: both widened to int16 (exact for any mix of int8/uint8), ``vpmaddwd``
  (2 products per lane): AVX-512, eight pixels in zmm (``vpdpwssd`` with AVX512-VNNI); AVX2,
  four pixels in eight ymm (two 32-byte weight loads per tap).

Pixel blocks run across output rows, so 7x7 outputs fill the registers as well as wide ones.
Without the instructions (the C is compiled for the target's ``-mcpu``) the same function is
plain C, exact. The planes run in parallel on kiln's thread pool (a parallel loop in the
extern stage). The result is unpacked to NCHW by the output stage, where the fused requantize
epilogue is inlined. A constant kernel is packed at compile time: AlterOpLayout gives the conv
an ``OIHW16o{lanes}i`` kernel behind a ``layout_transform`` that FoldConstant folds.
"""

from __future__ import annotations

from typing import Any

from kiln import te, tir
from kiln.target.x86 import target_has_features
from kiln.tir import op as _op
from kiln.topi.nn.pad import pad
from kiln.topi.utils import get_const_tuple

__all__ = ["conv2d_nchw_int8", "schedule_conv2d_nchw_int8", "conv2d_int8_applies",
           "quads_apply", "pack_kernel", "packed_kernel_layout", "MICRO_KERNEL_SOURCE",
           "OC_BLOCK", "PACKED_KERNEL_LAYOUT", "PACKED_DTYPES", "QUADS"]

OC_BLOCK = 16  # output channels per block (one zmm, or two ymm, of int32)
QUADS = 4  # input channels per int32 lane of the uint8 x int8 (vpdpbusd) packing
# lanes -> the plane kernel's C function
KERNEL_NAMES = {2: "kiln_conv2d_i16_nchw16c_plane", QUADS: "kiln_conv2d_u8s8_nchw16c_plane"}

MICRO_KERNEL_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#ifndef KILN_CONV2D_I8_NCHW16C_DEFINED
#define KILN_CONV2D_I8_NCHW16C_DEFINED
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define KILN_PIXELS 8
#elif defined(__AVX2__)
#define KILN_PIXELS 4
#else
#define KILN_PIXELS 1
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define KILN_I8_QUADS_SIMD 1 /* vpdpbusd: uint8 x int8 quads */
#else
#define KILN_I8_QUADS_SIMD 0
#endif

#if KILN_PIXELS == 8
/* acc plus the dot products of the lane groups of a and w: uint8 x int8 quads (vpdpbusd; only
   called where KILN_I8_QUADS_SIMD) or int16 pairs (vpdpwssd, or vpmaddwd + add). */
static inline __attribute__((always_inline)) __m512i kiln_i8_madd512(
    __m512i acc, __m512i a, __m512i w, const int quads) {
#if KILN_I8_QUADS_SIMD
  return quads ? _mm512_dpbusd_epi32(acc, a, w) : _mm512_dpwssd_epi32(acc, a, w);
#else
  (void)quads;
  return _mm512_add_epi32(acc, _mm512_madd_epi16(a, w));
#endif
}

/* The 16 output channels of nb (<= 8) pixels whose first taps are at off[] (int32 units, one
   lane group each): a zmm accumulator per pixel. */
static inline __attribute__((always_inline)) void kiln_i8_plane_block512(
    int32_t* o, int nb, const int32_t* data, const int32_t* weight, int32_t cg, int64_t plane,
    int32_t wp, int32_t kh, int32_t kw, int32_t dh, int32_t dw, const int64_t* off,
    const int quads) {
  __m512i acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm512_setzero_si512();
  for (int32_t c = 0; c < cg; ++c) {
    for (int32_t ky = 0; ky < kh; ++ky) {
      const int32_t* row = data + c * plane + (int64_t)ky * dh * wp;
      const int32_t* wrow = weight + ((int64_t)(c * kh + ky) * kw) * 16;
      for (int32_t kx = 0; kx < kw; ++kx) {
        const __m512i w = _mm512_loadu_si512((const void*)(wrow + kx * 16));
        const int32_t* tap = row + kx * dw;
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j)
          acc[j] = kiln_i8_madd512(acc[j], _mm512_set1_epi32(tap[off[j]]), w, quads);
      }
    }
  }
  for (int j = 0; j < nb; ++j) _mm512_storeu_si512((void*)(o + 16 * j), acc[j]);
}
#endif

/* Element i of packed data / weight: uint8 / int8 in quads, int16 in pairs. */
static inline int32_t kiln_i8_data_at(const void* p, int64_t i, int quads) {
  return quads ? ((const uint8_t*)p)[i] : ((const int16_t*)p)[i];
}
static inline int32_t kiln_i8_weight_at(const void* p, int64_t i, int quads) {
  return quads ? ((const int8_t*)p)[i] : ((const int16_t*)p)[i];
}

/* out[p][16] for the output pixels p (row-major over oh x ow) = sum over lane groups c, ky,
   kx of the 16 x lanes weights times the pixel's group. data: [CG][HP][WP][lanes] of one
   batch (uint8 quads or int16 pairs); weight: [CG][KH][KW][16][lanes] of one block (int8
   quads or int16 pairs). Pixels go in blocks of KILN_PIXELS (across rows, so narrow outputs
   fill the registers too); a partial last block repeats its last pixel and stores only the
   real ones. */
static inline __attribute__((always_inline)) int32_t kiln_conv2d_i8_nchw16c_plane(
    int32_t* out, const void* data, const void* weight, const int32_t lanes, int32_t cg,
    int32_t hp, int32_t wp, int32_t kh, int32_t kw, int32_t oh, int32_t ow, int32_t sh,
    int32_t sw, int32_t dh, int32_t dw) {
  const int quads = lanes == 4;
  const int64_t plane = (int64_t)hp * wp, pixels = (int64_t)oh * ow;
  const int32_t* d32 = (const int32_t*)data; /* one lane group per int32 */
  const int32_t* w32 = (const int32_t*)weight;
  for (int64_t p0 = 0; p0 < pixels; p0 += KILN_PIXELS) {
    const int nb = pixels - p0 < KILN_PIXELS ? (int)(pixels - p0) : KILN_PIXELS;
    int64_t off[KILN_PIXELS]; /* each pixel's first tap, in lane groups */
    for (int j = 0; j < KILN_PIXELS; ++j) {
      const int64_t p = p0 + (j < nb ? j : nb - 1);
      off[j] = (p / ow) * sh * wp + (p % ow) * sw;
    }
    int32_t* o = out + p0 * 16;
#if KILN_PIXELS == 8
    if (quads && KILN_I8_QUADS_SIMD) {
      kiln_i8_plane_block512(o, nb, d32, w32, cg, plane, wp, kh, kw, dh, dw, off, 1);
      continue;
    }
    if (!quads) {
      kiln_i8_plane_block512(o, nb, d32, w32, cg, plane, wp, kh, kw, dh, dw, off, 0);
      continue;
    }
#elif KILN_PIXELS == 4
    if (!quads) {
      __m256i lo[4], hi[4];
      for (int j = 0; j < 4; ++j) lo[j] = hi[j] = _mm256_setzero_si256();
      for (int32_t c = 0; c < cg; ++c) {
        for (int32_t ky = 0; ky < kh; ++ky) {
          const int32_t* row = d32 + c * plane + (int64_t)ky * dh * wp;
          const int32_t* wrow = w32 + ((int64_t)(c * kh + ky) * kw) * 16;
          for (int32_t kx = 0; kx < kw; ++kx) {
            const __m256i w0 = _mm256_loadu_si256((const __m256i*)(wrow + kx * 16));
            const __m256i w1 = _mm256_loadu_si256((const __m256i*)(wrow + kx * 16 + 8));
            const int32_t* tap = row + kx * dw;
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) {
              const __m256i a = _mm256_set1_epi32(tap[off[j]]);
              lo[j] = _mm256_add_epi32(lo[j], _mm256_madd_epi16(a, w0));
              hi[j] = _mm256_add_epi32(hi[j], _mm256_madd_epi16(a, w1));
            }
          }
        }
      }
      for (int j = 0; j < nb; ++j) {
        _mm256_storeu_si256((__m256i*)(o + 16 * j), lo[j]);
        _mm256_storeu_si256((__m256i*)(o + 16 * j + 8), hi[j]);
      }
      continue;
    }
#endif
    for (int j = 0; j < nb; ++j) { /* plain C, exact in int32 */
      int32_t acc[16] = {0};
      for (int32_t c = 0; c < cg; ++c)
        for (int32_t ky = 0; ky < kh; ++ky)
          for (int32_t kx = 0; kx < kw; ++kx) {
            const int64_t px = (c * plane + (int64_t)ky * dh * wp + kx * dw + off[j]) * lanes;
            const int64_t wv = (((int64_t)(c * kh + ky) * kw) + kx) * 16 * lanes;
            for (int q = 0; q < 16; ++q)
              for (int i = 0; i < lanes; ++i)
                acc[q] += kiln_i8_data_at(data, px + i, quads) *
                          kiln_i8_weight_at(weight, wv + q * lanes + i, quads);
          }
      memcpy(o + 16 * j, acc, sizeof(acc));
    }
  }
  return 0;
}

/* The entry points, one per packing (a C function called from generated code keeps one
   signature): int16 pairs, uint8 x int8 quads. */
static int32_t kiln_conv2d_i16_nchw16c_plane(
    int32_t* out, const int16_t* data, const int16_t* weight, int32_t cg, int32_t hp,
    int32_t wp, int32_t kh, int32_t kw, int32_t oh, int32_t ow, int32_t sh, int32_t sw,
    int32_t dh, int32_t dw) {
  return kiln_conv2d_i8_nchw16c_plane(out, data, weight, 2, cg, hp, wp, kh, kw, oh, ow, sh, sw,
                                      dh, dw);
}
static int32_t kiln_conv2d_u8s8_nchw16c_plane(
    int32_t* out, const uint8_t* data, const int8_t* weight, int32_t cg, int32_t hp,
    int32_t wp, int32_t kh, int32_t kw, int32_t oh, int32_t ow, int32_t sh, int32_t sw,
    int32_t dh, int32_t dw) {
  return kiln_conv2d_i8_nchw16c_plane(out, data, weight, 4, cg, hp, wp, kh, kw, oh, ow, sh, sw,
                                      dh, dw);
}
#endif
"""


PACKED_KERNEL_LAYOUT = f"OIHW{OC_BLOCK}o2i"  # the int16 kernel_pack, made at compile time
# input channels per int32 lane -> (data, kernel) dtypes of the packed operands: int16 pairs
# for vpmaddwd/vpdpwssd, uint8 x int8 quads for vpdpbusd
PACKED_DTYPES = {2: ("int16", "int16"), QUADS: ("uint8", "int8")}


def quads_apply(data_dtype: str, kernel_dtype: str, target: Any = None) -> bool:
    """Whether the micro-kernels take ``data_dtype`` x ``kernel_dtype`` as raw-byte quads on
    ``target`` (default: the current one, else the host): uint8 data, int8 kernel and a CPU
    with AVX512-BW and AVX512-VNNI (``vpdpbusd``); else they take int16 pairs."""
    return (data_dtype == "uint8" and kernel_dtype == "int8"
            and target_has_features(["avx512bw", "avx512vnni"], target))


def packed_kernel_layout(lanes: int) -> str:
    """The packed kernel layout of the micro-kernels taking ``lanes`` input channels per int32
    lane: ``OIHW16o2i`` (int16) or ``OIHW16o4i`` (int8)."""
    return f"OIHW{OC_BLOCK}o{lanes}i"


def conv2d_int8_applies(attrs: Any, data_dtype: str, kernel_dtype: str, out_dtype: str,
                        host_has_avx2: bool) -> bool:
    """Whether the micro-kernel computes this ``nn.conv2d``: 8-bit NCHW data, an 8-bit OIHW
    kernel (or one already packed: int16 ``OIHW16o2i``, int8 ``OIHW16o4i``), int32 output,
    groups 1, on a CPU with AVX2."""
    kernel_ok = (kernel_dtype in ("int8", "uint8") and attrs.kernel_layout == "OIHW") or any(
        kernel_dtype == dtypes[1] and attrs.kernel_layout == packed_kernel_layout(lanes)
        for lanes, dtypes in PACKED_DTYPES.items())
    return (host_has_avx2 and data_dtype in ("int8", "uint8") and kernel_ok
            and out_dtype == "int32" and attrs.data_layout == "NCHW"
            and attrs.out_layout in ("", "NCHW") and int(attrs.groups) == 1)


def pack_kernel(kernel: te.Tensor, lanes: int = 2) -> te.Tensor:
    """An 8-bit OIHW ``kernel`` as ``OIHW16o{lanes}i`` (``[OC/16][C/lanes][KH][KW][16][lanes]``,
    int16 pairs or int8 quads, see :data:`PACKED_DTYPES`), the output channels and input
    channels zero-padded to whole blocks and lane groups."""
    oc, c, kh, kw = get_const_tuple(kernel.shape)
    dtype = PACKED_DTYPES[lanes][1]
    zero = tir.const(0, dtype)

    def kernel_at(ob, cg, y, x, oi, i):
        o, ch = ob * OC_BLOCK + oi, cg * lanes + i
        value = _op.cast(kernel[_op.min(o, oc - 1), _op.min(ch, c - 1), y, x], dtype)
        if c % lanes == 0 and oc % OC_BLOCK == 0:
            return value
        return tir.Select(tir.all(o < oc, ch < c), value, zero)

    return te.compute((-(-oc // OC_BLOCK), -(-c // lanes), kh, kw, OC_BLOCK, lanes), kernel_at,
                      name="kernel_pack_int8")


def conv2d_nchw_int8(data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any,
                     dilation: Any, out_dtype: str = "int32", lanes: int = 2) -> te.Tensor:
    """The int32 NCHW convolution of 8-bit ``data`` and OIHW ``kernel`` through the
    micro-kernel taking ``lanes`` input channels per int32 lane: 2 (int16 pairs) or 4 (uint8
    x int8 quads for AVX512-VNNI), see the module docstring. A kernel already packed (6-D,
    from AlterOpLayout) brings its own lanes."""
    n, c, h, w = get_const_tuple(data.shape)
    prepacked = len(kernel.shape) == 6
    if prepacked:  # [OC/16][C/lanes][KH][KW][16][lanes]
        ocb_, _, kh, kw, _, lanes = get_const_tuple(kernel.shape)
        oc = ocb_ * OC_BLOCK
    else:
        oc, _, kh, kw = get_const_tuple(kernel.shape)
    data_dtype = PACKED_DTYPES[lanes][0]
    sh, sw = (int(s) for s in strides)
    dh, dw = (int(d) for d in dilation)
    pt, pl, pb, pr = (int(p) for p in padding)
    padded = pad(data, [0, 0, pt, pl], [0, 0, pb, pr], name="data_pad") if any(
        (pt, pl, pb, pr)) else data
    hp, wp = h + pt + pb, w + pl + pr
    oh, ow = (hp - (kh - 1) * dh - 1) // sh + 1, (wp - (kw - 1) * dw - 1) // sw + 1
    cg, ocb = -(-c // lanes), -(-oc // OC_BLOCK)
    zero = tir.const(0, data_dtype)

    def data_at(b, g, y, x, i):
        ch = g * lanes + i
        value = _op.cast(padded[b, _op.min(ch, c - 1), y, x], data_dtype)
        return value if c % lanes == 0 else tir.Select(ch < c, value, zero)

    data_pack = te.compute((n, cg, hp, wp, lanes), data_at, name="data_pack_int8")

    kernel_pack = kernel if prepacked else pack_kernel(kernel, lanes)

    def planes(ins, outs):
        d, k = ins
        o = outs[0]
        plane = tir.Var("plane", "int32")
        b, block = _op.floordiv(plane, ocb), _op.floormod(plane, ocb)
        call = tir.call_extern(
            "int32", KERNEL_NAMES[lanes],
            o.access_ptr("w", offset=plane * (oh * ow * OC_BLOCK)),
            d.access_ptr("r", offset=b * (cg * hp * wp * lanes)),
            k.access_ptr("r", offset=block * (cg * kh * kw * OC_BLOCK * lanes)),
            cg, hp, wp, kh, kw, oh, ow, sh, sw, dh, dw)
        loop = tir.For(plane, 0, n * ocb, tir.ForKind.PARALLEL, tir.Evaluate(call))
        return tir.AttrStmt(tir.StringImm(KERNEL_NAMES[lanes]), "pragma_import_c",
                            tir.StringImm(MICRO_KERNEL_SOURCE), loop)

    blocked = te.extern((n, ocb, oh, ow, OC_BLOCK), [data_pack, kernel_pack], planes,
                        name="conv2d_int8_nchw16c", dtype="int32")
    return te.compute((n, oc, oh, ow), lambda b, o, y, x: _op.cast(
        blocked[b, o // OC_BLOCK, y, x, o % OC_BLOCK], out_dtype),
        name="conv2d_nchw_int8", tag="conv2d_nchw_int8")


def schedule_conv2d_nchw_int8(outs: Any) -> Any:
    """Inline the padding and the epilogue, parallelize the packing and the output stage."""
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    seen = set()

    def visit(op: Any) -> None:
        if op in seen or not isinstance(op, te.ComputeOp):
            return
        seen.add(op)
        # everything elementwise between the packing and the output is inlined, the scalar
        # constants of a fused requantize too (as immediates, so the epilogue vectorizes)
        if op.name == "data_pad" or (op not in [t.op for t in outs] and not op.reduce_axis
                                     and op.name not in ("data_pack_int8", "kernel_pack_int8")):
            sch[op].compute_inline()
        for t in op.input_tensors:
            visit(t.op)

    for out in outs:
        visit(out.op)
    for op in list(seen):
        if op.name in ("data_pack_int8", "kernel_pack_int8"):
            stage = sch[op]
            fused = stage.fuse(*stage.op.axis[:2])
            stage.parallel(fused)
    for out in outs:
        stage = sch[out.op]
        axes = stage.op.axis
        if len(axes) >= 2:
            stage.parallel(stage.fuse(*axes[:2]))
        if len(axes) == 4:
            # an NCHW plane is contiguous: one loop along it (LLVM vectorizes it), not rows
            # that may be short (7 or 14 columns)
            stage.fuse(*axes[2:])
    return sch
