"""8-bit NCHW convolution for x86 with AVX2: a C micro-kernel of ``vpmaddwd`` dual 16-bit
multiply-adds, called from an extern stage (the C arrives through ``pragma import_c``).

Entry points: :func:`conv2d_nchw_int8` (compute), :func:`schedule_conv2d_nchw_int8`,
:func:`conv2d_int8_applies`, :data:`MICRO_KERNEL_SOURCE`.

Layout: the padded data is widened to int16 and packed as ``[N][C/2][H][W][2]`` (channel
pairs adjacent), the kernel as ``[OC/16][C/2][KH][KW][16][2]``; the micro-kernel computes one
(batch, 16-output-channel block) plane. With AVX2: four output pixels at a time in eight ymm
accumulators; for each (channel pair, ky, kx) two 32-byte weight loads, and per pixel a
broadcast of its channel pair and two ``vpmaddwd`` (8 outputs x 2 channels) + adds. With
AVX-512 (the code is compiled for the build machine, ``-march``): eight pixels in eight zmm
accumulators, and with AVX512-VNNI the multiply-add and the add are one ``vpdpwssd``. Pixel
blocks run across output rows, so 7x7 outputs fill the registers as well as wide ones.
int16 operands make the products and their pairwise sums exact for any mix of int8/uint8
(``vpmaddubsw`` on raw bytes would saturate its 16-bit pair sums, e.g. 2 * 255 * 127).
Without AVX2 the same function is plain C. The planes run
in parallel on kiln's thread pool (a parallel loop in the extern stage). The result is
unpacked to NCHW by the output stage, where the fused requantize epilogue is inlined. A
constant kernel is packed at compile time: AlterOpLayout gives the conv an int16
``OIHW16o2i`` kernel behind a ``layout_transform`` that FoldConstant folds.
"""

from __future__ import annotations

from typing import Any

from kiln import te, tir
from kiln.tir import op as _op
from kiln.topi.nn.pad import pad
from kiln.topi.utils import get_const_tuple
from kiln.topi.x86 import conv2d_int8_vnni as vnni

__all__ = ["conv2d_nchw_int8", "schedule_conv2d_nchw_int8", "conv2d_int8_applies",
           "pack_kernel", "packed_kernel_layout", "MICRO_KERNEL_SOURCE", "OC_BLOCK",
           "PACKED_KERNEL_LAYOUT", "PACKED_DTYPES"]

OC_BLOCK = 16  # output channels per block (one zmm, or two ymm, of int32)
KERNEL_NAME = "kiln_conv2d_i16_nchw16c_plane"

MICRO_KERNEL_SOURCE = r"""
#include <stdint.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#ifndef KILN_CONV2D_I16_NCHW16C_DEFINED
#define KILN_CONV2D_I16_NCHW16C_DEFINED
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define KILN_PIXELS 8
#elif defined(__AVX2__)
#define KILN_PIXELS 4
#else
#define KILN_PIXELS 1
#endif
/* out[p][16] for the output pixels p (row-major over oh x ow) = sum over channel pairs c, ky,
   kx of the 16x2 weights times the pixel's channel pair. data: [C2][HP][WP][2] int16 of one
   batch; weight: [C2][KH][KW][16][2] int16 of one block. Pixels go in blocks of KILN_PIXELS
   (across rows, so narrow outputs fill the registers too); a partial last block repeats its
   last pixel and stores only the real ones. */
static int32_t kiln_conv2d_i16_nchw16c_plane(
    int32_t* out, const int16_t* data, const int16_t* weight, int32_t c2, int32_t hp,
    int32_t wp, int32_t kh, int32_t kw, int32_t oh, int32_t ow, int32_t sh, int32_t sw,
    int32_t dh, int32_t dw) {
  const int64_t plane = (int64_t)hp * wp, pixels = (int64_t)oh * ow;
  for (int64_t p0 = 0; p0 < pixels; p0 += KILN_PIXELS) {
    const int nb = pixels - p0 < KILN_PIXELS ? (int)(pixels - p0) : KILN_PIXELS;
    int64_t off[KILN_PIXELS]; /* each pixel's first tap, in int32 (channel pair) units */
    for (int j = 0; j < KILN_PIXELS; ++j) {
      const int64_t p = p0 + (j < nb ? j : nb - 1);
      off[j] = (p / ow) * sh * wp + (p % ow) * sw;
    }
    int32_t* o = out + p0 * 16;
#if defined(__AVX512F__) && defined(__AVX512BW__)
#if defined(__AVX512VNNI__)
#define KILN_MADD(acc, a, w) _mm512_dpwssd_epi32((acc), (a), (w))
#else
#define KILN_MADD(acc, a, w) _mm512_add_epi32((acc), _mm512_madd_epi16((a), (w)))
#endif
    __m512i acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_setzero_si512();
    for (int32_t c = 0; c < c2; ++c) {
      for (int32_t ky = 0; ky < kh; ++ky) {
        const int32_t* row = (const int32_t*)data + c * plane + (int64_t)ky * dh * wp;
        const int16_t* wrow = weight + ((int64_t)(c * kh + ky) * kw) * 32;
        for (int32_t kx = 0; kx < kw; ++kx) {
          const __m512i w = _mm512_loadu_si512((const void*)(wrow + kx * 32));
          const int32_t* tap = row + kx * dw;
#pragma GCC unroll 8
          for (int j = 0; j < 8; ++j)
            acc[j] = KILN_MADD(acc[j], _mm512_set1_epi32(tap[off[j]]), w);
        }
      }
    }
    for (int j = 0; j < nb; ++j) _mm512_storeu_si512((void*)(o + 16 * j), acc[j]);
#undef KILN_MADD
#elif defined(__AVX2__)
    __m256i lo[4], hi[4];
    for (int j = 0; j < 4; ++j) lo[j] = hi[j] = _mm256_setzero_si256();
    for (int32_t c = 0; c < c2; ++c) {
      for (int32_t ky = 0; ky < kh; ++ky) {
        const int32_t* row = (const int32_t*)data + c * plane + (int64_t)ky * dh * wp;
        const int16_t* wrow = weight + ((int64_t)(c * kh + ky) * kw) * 32;
        for (int32_t kx = 0; kx < kw; ++kx) {
          const __m256i w0 = _mm256_loadu_si256((const __m256i*)(wrow + kx * 32));
          const __m256i w1 = _mm256_loadu_si256((const __m256i*)(wrow + kx * 32 + 16));
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
#else
    int32_t acc[16] = {0}; /* plain C, exact in int32 */
    for (int32_t c = 0; c < c2; ++c)
      for (int32_t ky = 0; ky < kh; ++ky)
        for (int32_t kx = 0; kx < kw; ++kx) {
          const int16_t* px = data + (c * plane + (int64_t)ky * dh * wp + kx * dw + off[0]) * 2;
          const int16_t* wv = weight + (((int64_t)(c * kh + ky) * kw) + kx) * 32;
          for (int q = 0; q < 16; ++q)
            acc[q] += (int32_t)px[0] * wv[2 * q] + (int32_t)px[1] * wv[2 * q + 1];
        }
    for (int q = 0; q < 16; ++q) o[q] = acc[q];
#endif
  }
  return 0;
}
#endif
"""


PACKED_KERNEL_LAYOUT = f"OIHW{OC_BLOCK}o2i"  # the int16 kernel_pack, made at compile time
# input channels per int32 lane -> (data, kernel) dtypes of the packed operands: int16 pairs
# for vpmaddwd/vpdpwssd, uint8 x int8 quads for vpdpbusd (:mod:`.conv2d_int8_vnni`)
PACKED_DTYPES = {2: ("int16", "int16"), vnni.LANES: ("uint8", "int8")}
# lanes -> (plane kernel name, its C source)
_PLANE_KERNELS = {2: (KERNEL_NAME, MICRO_KERNEL_SOURCE),
                  vnni.LANES: (vnni.PLANE_NAME, vnni.MICRO_KERNEL_SOURCE)}


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
    micro-kernel taking ``lanes`` input channels per int32 lane: 2 (int16 pairs, the module
    docstring) or 4 (uint8 x int8 quads for AVX512-VNNI, :mod:`.conv2d_int8_vnni`). A kernel
    already packed (6-D, from AlterOpLayout) brings its own lanes."""
    n, c, h, w = get_const_tuple(data.shape)
    prepacked = len(kernel.shape) == 6
    if prepacked:  # [OC/16][C/lanes][KH][KW][16][lanes]
        ocb_, _, kh, kw, _, lanes = get_const_tuple(kernel.shape)
        oc = ocb_ * OC_BLOCK
    else:
        oc, _, kh, kw = get_const_tuple(kernel.shape)
    data_dtype = PACKED_DTYPES[lanes][0]
    kernel_name, source = _PLANE_KERNELS[lanes]
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
            "int32", kernel_name,
            o.access_ptr("w", offset=plane * (oh * ow * OC_BLOCK)),
            d.access_ptr("r", offset=b * (cg * hp * wp * lanes)),
            k.access_ptr("r", offset=block * (cg * kh * kw * OC_BLOCK * lanes)),
            cg, hp, wp, kh, kw, oh, ow, sh, sw, dh, dw)
        loop = tir.For(plane, 0, n * ocb, tir.ForKind.PARALLEL, tir.Evaluate(call))
        return tir.AttrStmt(tir.StringImm(kernel_name), "pragma_import_c",
                            tir.StringImm(source), loop)

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
        if len(stage.op.axis) >= 2:
            stage.parallel(stage.fuse(*stage.op.axis[:2]))
    return sch
