"""int8 depthwise convolution for Cortex-M: an int8 x int8 -> int32 C micro-kernel through
``tensorize``, with the DSP extension's 16-bit multiply-accumulates where the core has them
and portable C where it does not.

Entry points: :func:`depthwise_s8_applies`, :func:`depthwise_s8_source`,
:func:`depthwise_s8_intrin`, :func:`depthwise_conv2d_nhwc_s8`,
:func:`schedule_depthwise_conv2d_nhwc_s8`.

In a depthwise NHWC convolution (one input channel per group, kernel ``HWIO`` with ``I = 1`` or
``HWOI`` with ``I = 1``) each output channel sums only over the kernel window, and the channels
are the contiguous axis of both the input and the kernel. The kernel computes ``M`` channels of
one output pixel, ``c[j] = sum_{ky, kx} a[ky * AR + kx * AC + j] * b[ky * BR + kx * BC + j]``,
with every stride baked in (so every tap is an immediate offset) and the window unrolled. With
DSP it reads four channels of input and of weights as one word each, widens both to int16
pairs (``SXTB16`` of the word and of the word rotated by 8 bits: channels 0,2 and 1,3) and
multiplies lane by lane with ``SMLABB``/``SMLATT`` (``SMLAD`` would add the two lanes, which
belong to different channels here): four MACs in ten instructions, CMSIS-NN's
``arm_depthwise_conv_s8_opt`` scheme. Without DSP (``-mattr=+nodsp``, or a Cortex-M3) the
portable kernel does one int8 product per step, four channels' sums in registers. A padded
input is materialized once (by the zero-point ``pad`` before a quantized convolution, or the
compute's own ``pad_temp``).
"""

from __future__ import annotations

from typing import Any

from kiln import te, tir
from kiln.topi.arm_cpu.dense import find_tagged, schedule_micro_kernel
from kiln.topi.arm_cpu.gemv_s8 import DSP_HELPERS, KERNEL_ATTRIBUTES, kernel_intrin
from kiln.topi.nn.conv import conv
from kiln.topi.utils import get_const_tuple

__all__ = ["depthwise_s8_applies", "depthwise_s8_source", "depthwise_s8_intrin",
           "depthwise_conv2d_nhwc_s8", "schedule_depthwise_conv2d_nhwc_s8"]

# Windows of at most this many taps are unrolled whole; larger ones keep the row loop (a
# global average pool written as a depthwise convolution has a 25 x 5 window).
UNROLL_TAPS = 16


def depthwise_s8_applies(attrs: Any, data_shape: Any, kernel_shape: Any) -> bool:
    """Whether a conv2d call is a depthwise NHWC one (channel multiplier 1, channels last in
    the kernel) that the micro-kernel computes."""
    channels = int(getattr(data_shape[3], "value", data_shape[3]))
    kshape = [int(getattr(d, "value", d)) for d in kernel_shape]
    if attrs.data_layout != "NHWC" or attrs.out_layout or len(kshape) != 4:
        return False
    if attrs.kernel_layout == "HWIO":
        channels_last = kshape[2] == 1 and kshape[3] == channels
    elif attrs.kernel_layout == "HWOI":
        channels_last = kshape[2] == channels and kshape[3] == 1
    else:
        return False
    return channels_last and int(attrs.groups) == channels and channels > 1


def _name(rows: int, window: tuple, a_strides: tuple, b_strides: tuple, dsp: bool) -> str:
    kh, kw = window
    return (f"kiln_dw_s8_{'dsp_' if dsp else ''}{rows}_{kh}x{kw}"
            f"_a{a_strides[0]}_{a_strides[1]}_b{b_strides[0]}_{b_strides[1]}")


def _tap_loops(window: tuple, body: str) -> str:
    """``body`` inside the ``ky``/``kx`` window loops, unrolled (rows too when small)."""
    kh, kw = window
    rows_unroll = kh if kh * kw <= UNROLL_TAPS else 1
    return f"""#pragma GCC unroll {rows_unroll}
    for (int32_t ky = 0; ky < {kh}; ++ky) {{
#pragma GCC unroll {kw}
      for (int32_t kx = 0; kx < {kw}; ++kx) {{
{body}
      }}
    }}"""


def _groups_of_four(rows: int, window: tuple, a_off: str, b_off: str, dsp: bool) -> str:
    """C for channels ``j .. j + 3`` (``j`` a multiple of four below the rows)."""
    if dsp:
        body = f"""        const int32_t av = kiln_load_s8x4(a + {a_off} + j);
        const int32_t bv = kiln_load_s8x4(b + {b_off} + j);
        const int32_t a02 = kiln_sxtb16(av), a13 = kiln_sxtb16_ror8(av);
        const int32_t b02 = kiln_sxtb16(bv), b13 = kiln_sxtb16_ror8(bv);
        s0 = kiln_smlabb(a02, b02, s0);
        s2 = kiln_smlatt(a02, b02, s2);
        s1 = kiln_smlabb(a13, b13, s1);
        s3 = kiln_smlatt(a13, b13, s3);"""
    else:
        body = f"""        const int8_t* ak = a + {a_off} + j;
        const int8_t* bk = b + {b_off} + j;
        s0 += (int32_t)ak[0] * (int32_t)bk[0];
        s1 += (int32_t)ak[1] * (int32_t)bk[1];
        s2 += (int32_t)ak[2] * (int32_t)bk[2];
        s3 += (int32_t)ak[3] * (int32_t)bk[3];"""
    return f"""  for (int32_t j = 0; j + 4 <= {rows}; j += 4) {{
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    {_tap_loops(window, body)}
    c[j] = s0;
    c[j + 1] = s1;
    c[j + 2] = s2;
    c[j + 3] = s3;
  }}"""


def depthwise_s8_source(rows: int, window: tuple, a_strides: tuple, b_strides: tuple,
                        dsp: bool) -> str:
    """The C of the depthwise kernel for ``rows`` channels of one output pixel: ``window`` is
    ``(KH, KW)``, ``a_strides``/``b_strides`` the input's and the weights' element strides
    between kernel rows and between taps of a row (DSP or portable)."""
    name = _name(rows, window, a_strides, b_strides, dsp)
    a_off = f"ky * {a_strides[0]} + kx * {a_strides[1]}"
    b_off = f"ky * {b_strides[0]} + kx * {b_strides[1]}"
    groups = _groups_of_four(rows, window, a_off, b_off, dsp)
    rest = rows % 4
    tail = "" if not rest else f"""  for (int32_t j = {rows - rest}; j < {rows}; ++j) {{
    int32_t s = 0;
    {_tap_loops(window, f"        s += (int32_t)a[{a_off} + j] * (int32_t)b[{b_off} + j];")}
    c[j] = s;
  }}"""
    return f"""{DSP_HELPERS if dsp else ""}
/* {name}: c[j] = sum over the {window[0]} x {window[1]} window of
   a[{a_off} + j] * b[{b_off} + j]
   for j < {rows}, int8 x int8 -> int32, four channels' sums in registers at a time. */
#ifndef {name.upper()}_DEFINED
#define {name.upper()}_DEFINED
{KERNEL_ATTRIBUTES if dsp else ''}
static int32_t {name}(int32_t* c, const int8_t* a, const int8_t* b, int32_t accumulate) {{
  (void)accumulate;  /* the whole window is summed in one call */
{groups}
{tail}
  return 0;
}}
static int32_t {name}_reset(int32_t* c) {{
  for (int j = 0; j < {rows}; ++j) c[j] = 0;
  return 0;
}}
#endif
"""


def depthwise_s8_intrin(rows: int, window: tuple, a_strides: tuple, b_strides: tuple,
                        dsp: bool) -> Any:
    """The intrinsic ``c[j] = sum_{ky, kx} int32(a[ky, kx, j]) * int32(b[ky, kx, j])`` for
    ``j < rows``, implemented by :func:`depthwise_s8_source`'s kernel, which takes only base
    pointers (tensorize computes them from the region's first element)."""
    kh, kw = window
    a = te.placeholder((kh, kw, rows), "int8", name="a")
    b = te.placeholder((kh, kw, rows), "int8", name="b")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    c = te.compute((rows,), lambda j: te.sum(
        a[ry, rx, j].astype("int32") * b[ry, rx, j].astype("int32"), axis=[ry, rx]), name="c")
    a_buf = tir.decl_buffer(a.shape, "int8", name="a_buf", offset_factor=1,
                            strides=[a_strides[0], a_strides[1], 1])
    b_buf = tir.decl_buffer(b.shape, "int8", name="b_buf", offset_factor=1,
                            strides=[b_strides[0], b_strides[1], 1])
    c_buf = tir.decl_buffer(c.shape, "int32", name="c_buf", offset_factor=1, strides=[1])
    kernel = _name(rows, window, a_strides, b_strides, dsp)
    return kernel_intrin(c.op, kernel, {a: a_buf, b: b_buf, c: c_buf})


def depthwise_conv2d_nhwc_s8(data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any,
                             dilation: Any, kernel_layout: str) -> te.Tensor:
    """Depthwise NHWC convolution (``HWIO``/``HWOI`` kernel, multiplier 1), int8 x int8 ->
    int32: the general compute, tensorized by the schedule below."""
    channels = get_const_tuple(data.shape)[3]
    return conv(data, kernel, strides, padding, dilation, channels, "NHWC", kernel_layout,
                "int32")


def schedule_depthwise_conv2d_nhwc_s8(outs: Any, dilation: Any, dsp: bool,
                                      rows: int | None = None) -> Any:
    """Per output pixel, the depthwise kernel over blocks of up to ``rows`` (8) channels; the
    epilogue (zero-point terms, requantize) inlined after each block."""
    dil_h, dil_w = (int(d) for d in dilation)

    def make(rows: int, length: int, dtype: str, b_order: str,
             row_stride: int) -> tuple[Any, str]:
        padded, weights = main_inputs[0]
        _, _, width, channels = get_const_tuple(padded.shape)
        kh, kw = get_const_tuple(weights.shape)[:2]
        a_strides = (width * channels * dil_h, channels * dil_w)
        b_strides = (kw * channels, channels)
        return (depthwise_s8_intrin(rows, (kh, kw), a_strides, b_strides, dsp),
                depthwise_s8_source(rows, (kh, kw), a_strides, b_strides, dsp))

    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    main_inputs = [find_tagged(outs[0].op, "depthwise_conv2d_nhwc").input_tensors]
    return schedule_micro_kernel(outs, "depthwise_conv2d_nhwc", "jk", make, rows=rows)

