"""int8 dense and convolution for Cortex-M: an int8 x int8 -> int32 C micro-kernel
through ``tensorize``, with the DSP extension's dual 16-bit multiply-accumulate (``SMLAD``) where
the core has it and portable C where it does not.

Entry points: :func:`gemv_s8_source`, :func:`gemv_s8_intrin`, :func:`has_dsp`,
:func:`dense_s8_micro_kernel`, :func:`schedule_dense_s8_micro_kernel`,
:func:`conv2d_nhwc_ohwi_s8`, :func:`schedule_conv2d_nhwc_ohwi_s8`,
:data:`DSP_CPUS`, and what :mod:`.depthwise_s8` shares (:data:`DSP_HELPERS`,
:data:`KERNEL_ATTRIBUTES`, :func:`kernel_intrin`).

The kernel computes ``M`` outputs ``c[j] (+)= sum_k a[k] * b[j * S + k]`` with ``a`` and each
row of ``b`` contiguous: a dense weight row, or the ``KW x C`` weights of one kernel row of an
OHWI convolution kernel (rows ``S = KH x KW x C`` apart; the arm_cpu AlterOpLayout hook makes
OHWI from HWIO at compile time) against the ``KW x C`` contiguous NHWC inputs they multiply.
With DSP it reads four int8 of ``a`` and of each weight row as one word, widens them to two
pairs of int16 (``SXTB16`` of the word and of the word rotated by 8 bits: elements 0,2 and
1,3) and accumulates both pairs with two ``SMLAD``s: four MACs in five instructions per row,
the ``a`` pairs shared by the rows (CMSIS-NN's scheme, in passes of four rows so that the sums
stay in registers). Without DSP (``-mattr=+nodsp``, or a core such as the Cortex-M3) the
portable kernel multiplies one int8 pair per step. Lengths and strides are baked into each
kernel, so rows are immediate offsets. The DSP kernel also compiles for hosts: it then uses C
versions of the two instructions, so one Model Library Format archive builds everywhere.
"""

from __future__ import annotations

from typing import Any

from kiln import te, tir
from kiln.topi.arm_cpu.dense import find_tagged, schedule_micro_kernel
from kiln.topi.nn.conv import conv
from kiln.topi.nn.dense import dense
from kiln.topi.utils import get_const_tuple

__all__ = ["DSP_HELPERS", "KERNEL_ATTRIBUTES", "kernel_intrin", "gemv_s8_source",
           "gemv_s8_intrin", "has_dsp",
           "DSP_CPUS", "dense_s8_micro_kernel", "schedule_dense_s8_micro_kernel",
           "conv2d_nhwc_ohwi_s8", "schedule_conv2d_nhwc_ohwi_s8"]

# Cortex-M cores with the DSP extension (Armv7E-M and Armv8-M Mainline with DSP)
DSP_CPUS = ("cortex-m4", "cortex-m7", "cortex-m33", "cortex-m35p", "cortex-m55", "cortex-m85")

# The DSP instructions the int8 kernels use, as inline assembly where the compiler defines
# __ARM_FEATURE_DSP and as C everywhere else (shared by :mod:`.depthwise_s8`).
DSP_HELPERS = r"""
#ifndef KILN_S8_DSP_HELPERS
#define KILN_S8_DSP_HELPERS
#include <string.h>
/* one unaligned 32-bit load (LDR allows it on Armv7E-M) */
static inline int32_t kiln_load_s8x4(const int8_t* p) { int32_t v; memcpy(&v, p, 4); return v; }
#if defined(__ARM_FEATURE_DSP)
/* SXTB16: bytes 0 and 2 sign-extended into two int16 halves; with ror #8, bytes 1 and 3 */
static inline int32_t kiln_sxtb16(int32_t x) {
  int32_t r; __asm__("sxtb16 %0, %1" : "=r"(r) : "r"(x)); return r; }
static inline int32_t kiln_sxtb16_ror8(int32_t x) {
  int32_t r; __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x)); return r; }
/* SMLAD: acc + lo(x) * lo(y) + hi(x) * hi(y) */
static inline int32_t kiln_smlad(int32_t x, int32_t y, int32_t acc) {
  int32_t r; __asm__("smlad %0, %1, %2, %3" : "=r"(r) : "r"(x), "r"(y), "r"(acc)); return r; }
/* SMLABB / SMLATT: acc + lo(x) * lo(y), acc + hi(x) * hi(y) (one 16-bit lane each) */
static inline int32_t kiln_smlabb(int32_t x, int32_t y, int32_t acc) {
  int32_t r; __asm__("smlabb %0, %1, %2, %3" : "=r"(r) : "r"(x), "r"(y), "r"(acc)); return r; }
static inline int32_t kiln_smlatt(int32_t x, int32_t y, int32_t acc) {
  int32_t r; __asm__("smlatt %0, %1, %2, %3" : "=r"(r) : "r"(x), "r"(y), "r"(acc)); return r; }
#else
static inline int32_t kiln_pack16(int32_t lo, int32_t hi) {
  return (int32_t)(((uint32_t)(uint16_t)(int16_t)lo) | ((uint32_t)(uint16_t)(int16_t)hi << 16)); }
static inline int32_t kiln_sxtb16(int32_t x) {
  return kiln_pack16((int8_t)(x & 0xff), (int8_t)((x >> 16) & 0xff)); }
static inline int32_t kiln_sxtb16_ror8(int32_t x) {
  return kiln_pack16((int8_t)((x >> 8) & 0xff), (int8_t)((x >> 24) & 0xff)); }
static inline int32_t kiln_smlad(int32_t x, int32_t y, int32_t acc) {
  return acc + (int16_t)(x & 0xffff) * (int16_t)(y & 0xffff)
             + (int16_t)((uint32_t)x >> 16) * (int16_t)((uint32_t)y >> 16); }
static inline int32_t kiln_smlabb(int32_t x, int32_t y, int32_t acc) {
  return acc + (int16_t)(x & 0xffff) * (int16_t)(y & 0xffff); }
static inline int32_t kiln_smlatt(int32_t x, int32_t y, int32_t acc) {
  return acc + (int16_t)((uint32_t)x >> 16) * (int16_t)((uint32_t)y >> 16); }
#endif
#endif
"""


# gcc's scheduler before register allocation hoists a fully unrolled kernel's loads ahead of
# their uses and spills the sums to the stack (71 stack accesses in a 3x3 depthwise kernel,
# none without it); the kernels are written in the order they should run.
KERNEL_ATTRIBUTES = """#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-schedule-insns")))
#endif"""


def has_dsp(target: Any) -> bool:
    """Whether ``target`` is a Cortex-M with the DSP extension (``-mattr=+nodsp`` opts out)."""
    mcpu = str(getattr(target, "mcpu", "") or "")
    mattr = [str(a) for a in (getattr(target, "mattr", None) or [])]
    return mcpu in DSP_CPUS and "+nodsp" not in mattr and "-dsp" not in mattr


def _name(rows: int, length: int, stride: int, dsp: bool, segments: int = 1,
          a_stride: int = 0) -> str:
    tail = "" if stride == length else f"s{stride}"
    if segments > 1:
        tail += f"x{segments}a{a_stride}"
    return f"kiln_gemv_s8_{'dsp_' if dsp else ''}{rows}x{length}{tail}"


# Rows per pass over k, so that the sums stay in the 13 usable core registers: the DSP loop
# also holds two int16 pairs of ``a`` and two unpacked pairs of ``b`` (8 sums spill there).
PASS_ROWS = {True: 4, False: 8}


def _row_pass(first: int, rows: int, dsp: bool) -> str:
    """C for output rows ``first .. first + rows - 1``: one pass over the segments and ``k``.
    The length and the strides are constants, so each row's weights are an immediate offset
    from one pointer (an array of row pointers would take a register per row)."""
    if dsp:
        inner = f"""      int32_t k = 0;
      for (; k + 4 <= l; k += 4) {{
        const int32_t av = kiln_load_s8x4(ar + k);
        const int32_t a02 = kiln_sxtb16(av), a13 = kiln_sxtb16_ror8(av);
#pragma GCC unroll {rows}
        for (int j = 0; j < {rows}; ++j) {{
          const int32_t bv = kiln_load_s8x4(br + j * row_stride + k);
          acc[j] = kiln_smlad(a02, kiln_sxtb16(bv), acc[j]);
          acc[j] = kiln_smlad(a13, kiln_sxtb16_ror8(bv), acc[j]);
        }}
      }}
      for (; k < l; ++k) {{
#pragma GCC unroll {rows}
        for (int j = 0; j < {rows}; ++j)
          acc[j] += (int32_t)ar[k] * (int32_t)br[j * row_stride + k];
      }}"""
    else:
        inner = f"""      for (int32_t k = 0; k < l; ++k) {{
        const int32_t ak = ar[k];
#pragma GCC unroll {rows}
        for (int j = 0; j < {rows}; ++j) acc[j] += ak * (int32_t)br[j * row_stride + k];
      }}"""
    return f"""  {{
    int32_t acc[{rows}];
#pragma GCC unroll {rows}
    for (int j = 0; j < {rows}; ++j) acc[j] = accumulate ? c[{first} + j] : 0;
    for (int32_t r = 0; r < segments; ++r) {{
      const int8_t* ar = a + r * a_stride;
      const int8_t* br = b + {first} * row_stride + r * l;
{inner}
    }}
#pragma GCC unroll {rows}
    for (int j = 0; j < {rows}; ++j) c[{first} + j] = acc[j];
  }}"""


def gemv_s8_source(rows: int, length: int, dsp: bool, stride: int | None = None,
                   segments: int = 1, a_stride: int = 0) -> str:
    """The C of the ``rows``-output int8 micro-kernel over rows of ``length`` int8 that start
    ``stride`` (default ``length``) apart (DSP or portable). With ``segments`` > 1 it sums
    that many segments: segment ``r`` of ``a`` starts ``r * a_stride`` in, of each row of
    ``b`` ``r * length`` in (the kernel rows of a convolution window: one call per output
    pixel instead of one per kernel row)."""
    stride = length if stride is None else stride
    name = _name(rows, length, stride, dsp, segments, a_stride)
    guard = name.upper() + "_DEFINED"
    step = PASS_ROWS[dsp]
    passes = "\n".join(_row_pass(first, min(step, rows - first), dsp)
                        for first in range(0, rows, step))
    return f"""{DSP_HELPERS if dsp else ""}
/* {name}: c[j] (+)= sum_r sum_k a[r * {a_stride} + k] * b[j * {stride} + r * {length} + k]
   for j < {rows}, r < {segments}, k < {length}, int8 x int8 -> int32, in passes of up to
   {step} rows so the sums stay in registers. */
#ifndef {guard}
#define {guard}
{KERNEL_ATTRIBUTES if dsp else ''}
static int32_t {name}(int32_t* c, const int8_t* a, const int8_t* b, int32_t accumulate) {{
  const int32_t l = {length}, row_stride = {stride}, segments = {segments};
  const int32_t a_stride = {a_stride};
{passes}
  return 0;
}}
static int32_t {name}_reset(int32_t* c) {{
  for (int j = 0; j < {rows}; ++j) c[j] = 0;
  return 0;
}}
#endif
"""


def gemv_s8_intrin(rows: int, length: int, dsp: bool, stride: int | None = None,
                   segments: int = 1, a_stride: int = 0) -> Any:
    """``c[j] = sum_k int32(a[k]) * int32(b[j, k])`` (``j < rows``, ``k < length``) with ``a``
    and each row of ``b`` contiguous, rows ``stride`` apart, implemented by
    :func:`gemv_s8_source`'s kernel (which takes only base pointers: tensorize computes them
    from the region's first element)."""
    stride = length if stride is None else stride
    a = te.placeholder((length,), "int8", name="a")
    b = te.placeholder((rows, length), "int8", name="b")
    k = te.reduce_axis((0, length), name="k")
    c = te.compute((rows,), lambda j: te.sum(a[k].astype("int32") * b[j, k].astype("int32"),
                                             axis=k), name="c")
    a_buf = tir.decl_buffer(a.shape, "int8", name="a_buf", offset_factor=1, strides=[1])
    # the kernel bakes in the row stride
    b_buf = tir.decl_buffer(b.shape, "int8", name="b_buf", offset_factor=1,
                            strides=[stride, 1])
    c_buf = tir.decl_buffer(c.shape, "int32", name="c_buf", offset_factor=1, strides=[1])
    kernel = _name(rows, length, stride, dsp, segments, a_stride)
    return kernel_intrin(c.op, kernel, {a: a_buf, b: b_buf, c: c_buf})


def kernel_intrin(op: Any, kernel: str, binds: dict) -> Any:
    """The tensor intrinsic for ``op`` (inputs ``a``, ``b``, output ``c``) implemented by the
    C kernel ``kernel(c, a, b, accumulate)`` and its ``kernel_reset(c)``."""

    def intrin_func(ins, outs):
        aa, bb = ins
        cc = outs[0]

        def call(accumulate: int):
            return tir.call_extern("int32", kernel, cc.access_ptr("w"), aa.access_ptr("r"),
                                   bb.access_ptr("r"), accumulate)

        reset = tir.call_extern("int32", f"{kernel}_reset", cc.access_ptr("w"))
        return call(0), reset, call(1)

    return te.decl_tensor_intrin(op, intrin_func, name=kernel, binds=binds)


def dense_s8_micro_kernel(data: te.Tensor, weight: te.Tensor) -> te.Tensor:
    """int8 x int8 -> int32 dense (``topi.nn.dense``), tensorized by the schedule below."""
    return dense(data, weight, None, "int32")


def _kernel_pair(dsp: bool):
    def make(rows: int, length: int, dtype: str, b_order: str,
             row_stride: int) -> tuple[Any, str]:
        return (gemv_s8_intrin(rows, length, dsp, row_stride),
                gemv_s8_source(rows, length, dsp, row_stride))
    return make


def schedule_dense_s8_micro_kernel(outs: Any, dsp: bool, rows: int | None = None) -> Any:
    """The dense's output axis in blocks of up to ``rows`` (8) through the int8 kernel;
    epilogue inlined."""
    return schedule_micro_kernel(outs, "dense", "jk", _kernel_pair(dsp), rows=rows)


def conv2d_nhwc_ohwi_s8(data: te.Tensor, kernel: te.Tensor, strides: Any,
                        padding: Any) -> te.Tensor:
    """NHWC convolution with an OHWI kernel (groups 1, no dilation), int8 x int8 -> int32."""
    return conv(data, kernel, strides, padding, 1, 1, "NHWC", "OHWI", "int32")


def schedule_conv2d_nhwc_ohwi_s8(outs: Any, dsp: bool, rows: int | None = None) -> Any:
    """Per output pixel, the int8 kernel over blocks of up to ``rows`` (8) output channels,
    summing the whole window in one call: a kernel row's ``KW x C`` inputs are contiguous in
    NHWC, as are each output channel's ``KW x C`` weights in OHWI; the kernel steps over the
    ``KH`` kernel rows (segments) by the padded input's row stride. A padded input is
    materialized once (the kernel reads plain memory)."""
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    padded, weights = find_tagged(outs[0].op, "conv2d_nhwc").input_tensors
    _, _, width, channels = get_const_tuple(padded.shape)
    kh, kw = get_const_tuple(weights.shape)[1:3]

    def make(rows: int, length: int, dtype: str, b_order: str,
             row_stride: int) -> tuple[Any, str]:
        geometry = (rows, kw * channels, dsp, row_stride, kh, width * channels)
        return gemv_s8_intrin(*geometry), gemv_s8_source(*geometry)

    return schedule_micro_kernel(outs, "conv2d_nhwc", "jk", make, rows=rows)
