"""Dense and 1x1 convolution for Cortex-M: a hand-written C micro-kernel through
``tensorize``.

Entry points: :func:`dense_micro_kernel` (compute), :func:`schedule_dense_micro_kernel`,
:func:`conv2d_nhwc_1x1_micro_kernel`, :func:`schedule_conv2d_nhwc_1x1_micro_kernel`,
:func:`conv2d_1x1_applies`, :func:`gemv_intrin`, :func:`gemv_source`.

microTVM's design (seed 002): the schedule attaches the kernel's portable C with
``pragma("import_c", source)`` and replaces the loop nest under a split of the output axis
with a ``call_extern`` to it through ``tensorize``. The micro-kernel computes ``M`` outputs of
one row at once, ``c[j] (+)= sum_k a[k] * b[j * sb0 + k * sb1]``, keeping the ``M`` partial
sums in FPU registers (``M`` is baked into the C, so gcc unrolls over it) and reading each
``a[k]`` once per ``M`` outputs instead of once per output. Serial code, no vector widths:
it suits an in-order core with a scalar FPU. A pointwise (1x1) NHWC convolution with an HWIO
kernel is the same product per pixel (``b`` is then ``[k, j]``: the weights of consecutive
output channels are adjacent), so it uses the same kernel.
"""

from __future__ import annotations

from typing import Any

from kiln import te, tir
from kiln.topi.nn.conv import conv
from kiln.topi.nn.dense import dense
from kiln.topi.utils import divisor_at_most, get_const_int, get_const_tuple

__all__ = ["dense_micro_kernel", "schedule_dense_micro_kernel", "gemv_intrin", "gemv_source",
           "conv2d_nhwc_1x1_micro_kernel", "schedule_conv2d_nhwc_1x1_micro_kernel",
           "conv2d_1x1_applies", "schedule_micro_kernel", "find_tagged", "MAX_ROWS"]

# Outputs per micro-kernel call: 8 accumulators + operands fit the M4F's 32 s-registers.
MAX_ROWS = 8


def gemv_source(rows: int) -> str:
    """The C of the ``rows``-output micro-kernel ``kiln_gemv_f32_<rows>``."""
    name = f"kiln_gemv_f32_{rows}"
    return f"""
/* {name}: c[j] (+)= sum_k a[k] * b[j * sb0 + k * sb1] for j < {rows}. */
#ifndef KILN_GEMV_F32_{rows}_DEFINED
#define KILN_GEMV_F32_{rows}_DEFINED
static int32_t {name}(float* c, const float* a, const float* b, int32_t l, int32_t sb0,
                      int32_t sb1, int32_t accumulate) {{
  float acc[{rows}];
#pragma GCC unroll {rows}
  for (int j = 0; j < {rows}; ++j) acc[j] = accumulate ? c[j] : 0.0f;
  for (int32_t k = 0; k < l; ++k) {{
    const float ak = a[k];
    const float* bk = b + k * sb1;
#pragma GCC unroll {rows}
    for (int j = 0; j < {rows}; ++j) acc[j] += ak * bk[j * sb0];
  }}
#pragma GCC unroll {rows}
  for (int j = 0; j < {rows}; ++j) c[j] = acc[j];
  return 0;
}}
static int32_t {name}_reset(float* c) {{
  for (int j = 0; j < {rows}; ++j) c[j] = 0.0f;
  return 0;
}}
#endif
"""


def gemv_intrin(rows: int, length: int, dtype: str = "float32", b_order: str = "jk") -> Any:
    """The tensor intrinsic ``c[j] = sum_k a[k] * b[j, k]`` (``j < rows``, ``k < length``),
    implemented by :func:`gemv_source`'s kernel; ``b`` may have any strides. With
    ``b_order="kj"`` the weights are indexed ``b[k, j]`` (an HWIO convolution kernel)."""
    a = te.placeholder((length,), dtype, name="a")
    k = te.reduce_axis((0, length), name="k")
    if b_order == "jk":
        b = te.placeholder((rows, length), dtype, name="b")
        c = te.compute((rows,), lambda j: te.sum(a[k] * b[j, k], axis=k), name="c")
    else:
        b = te.placeholder((length, rows), dtype, name="b")
        c = te.compute((rows,), lambda j: te.sum(a[k] * b[k, j], axis=k), name="c")
    a_buf = tir.decl_buffer(a.shape, dtype, name="a_buf", offset_factor=1, strides=[1])
    b_buf = tir.decl_buffer(b.shape, dtype, name="b_buf", offset_factor=1,
                            strides=[te.var("s0"), te.var("s1")])
    c_buf = tir.decl_buffer(c.shape, dtype, name="c_buf", offset_factor=1, strides=[1])
    kernel = f"kiln_gemv_f32_{rows}"

    def intrin_func(ins, outs):
        aa, bb = ins
        cc = outs[0]
        # the kernel takes (stride along j, stride along k)
        sj, sk = bb.strides if b_order == "jk" else bb.strides[::-1]

        def call(accumulate: int):
            return tir.call_extern("int32", kernel, cc.access_ptr("w"), aa.access_ptr("r"),
                                   bb.access_ptr("r"), length, sj, sk, accumulate)

        reset = tir.call_extern("int32", f"{kernel}_reset", cc.access_ptr("w"))
        return call(0), reset, call(1)

    return te.decl_tensor_intrin(c.op, intrin_func, name=kernel,
                                 binds={a: a_buf, b: b_buf, c: c_buf})


def dense_micro_kernel(data: te.Tensor, weight: te.Tensor, bias: te.Tensor | None = None,
                       out_dtype: str | None = None) -> te.Tensor:
    """The dense compute (``topi.nn.dense``) that :func:`schedule_dense_micro_kernel`
    tensorizes."""
    return dense(data, weight, bias, out_dtype)


def schedule_dense_micro_kernel(outs: Any, rows: int | None = None) -> Any:
    """Tensorize the dense stage's output axis by the micro-kernel (``rows`` outputs per
    call, default up to ``MAX_ROWS``); inline the epilogue.

    The dense's own inputs stay materialized (the intrinsic reads them through buffers), so
    only stages after the dense (bias, activation) are inlined into the output.
    """
    return schedule_micro_kernel(outs, "dense", "jk", rows=rows)


def conv2d_1x1_applies(attrs: Any, data_shape, kernel_shape) -> bool:
    """Whether a conv2d call is a pointwise NHWC/HWIO one the micro-kernel computes."""
    return (attrs.data_layout == "NHWC" and attrs.kernel_layout == "HWIO" and attrs.groups == 1
            and tuple(kernel_shape[:2]) == (1, 1)
            and all(int(p) == 0 for p in attrs.padding)
            and all(int(d) == 1 for d in attrs.dilation))


def conv2d_nhwc_1x1_micro_kernel(data: te.Tensor, kernel: te.Tensor, strides: Any,
                                 out_dtype: str | None = None) -> te.Tensor:
    """The pointwise NHWC convolution (``topi.nn.conv``, HWIO kernel, no padding)."""
    return conv(data, kernel, strides, 0, 1, 1, "NHWC", "HWIO", out_dtype)


def schedule_conv2d_nhwc_1x1_micro_kernel(outs: Any, rows: int | None = None) -> Any:
    """Per output pixel, the micro-kernel over blocks of (``rows``) output channels."""
    return schedule_micro_kernel(outs, "conv2d_nhwc", "kj", rows=rows)


def _float_kernel(rows: int, length: int, dtype: str, b_order: str,
                  row_stride: int) -> tuple[Any, str]:
    return gemv_intrin(rows, length, dtype, b_order), gemv_source(rows)


def schedule_micro_kernel(outs: Any, main_tag: str, b_order: str,
                          kernel: Any = _float_kernel, outer_reduce: int = 0,
                          rows: int | None = None) -> Any:
    """Tensorize the ``main_tag`` stage's output axis in blocks of up to ``rows`` (default
    ``MAX_ROWS``; the largest divisor of the output channels up to it) with
    ``kernel(rows, length, dtype, b_order, row_stride) -> (intrinsic, C source)``; inline the
    epilogue.

    ``outer_reduce`` reduce axes (counted from the second one; for an NHWC convolution,
    whose reduce axes are ``rc, ry, rx``, 1 keeps ``ry`` outside) stay loops around the call,
    which then accumulates; ``length`` is the extent of the reduce axes inside it and
    ``row_stride`` the extent of all of them (the distance between two outputs' weights)."""
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    main = find_tagged(outs[0].op, main_tag)
    for op in _epilogue(outs[0].op, main):
        if op not in [t.op for t in outs]:
            sch[op].compute_inline()
    out = main.output(0)
    channels = get_const_tuple(out.shape)[-1]
    rows = divisor_at_most(channels, rows or MAX_ROWS)
    final = sch[outs[0].op]
    if outs[0].op is not main:
        # Compute each block of `rows` results right before the epilogue reads it: the
        # product needs `rows` floats of scratch instead of a whole intermediate tensor.
        *_, last = final.op.axis
        block, _ = final.split(last, factor=rows)
        sch[main].compute_at(final, block)
    stage = sch[main]
    *outer, j = stage.op.axis
    jo, ji = stage.split(j, factor=rows)
    first, *rest = stage.op.reduce_axis
    outside, inside = rest[:outer_reduce], rest[outer_reduce:] + [first]
    if not outer_reduce:
        inside = list(stage.op.reduce_axis)
    stage.reorder(*outer, jo, *outside, ji, *inside)
    length = 1
    for axis in inside:
        length *= get_const_int(axis.dom.extent)
    intrin, source = kernel(rows, length, out.dtype, b_order, _reduce_extent(main))
    stage.tensorize(ji, intrin)
    final.pragma(final.leaf_iter_vars[0], "import_c", source)
    return sch


def _reduce_extent(op: Any) -> int:
    """Elements summed per output: the product of the reduce axes' extents."""
    extent = 1
    for axis in op.reduce_axis:
        extent *= get_const_int(axis.dom.extent)
    return extent


def find_tagged(op: Any, tag: str) -> Any:
    """The compute op tagged ``tag`` at or above ``op`` (None when there is none)."""
    if op.tag == tag:
        return op
    for t in op.input_tensors:
        if hasattr(t.op, "body"):
            found = find_tagged(t.op, tag)
            if found is not None:
                return found
    return None


def _epilogue(op: Any, dense_op: Any) -> list:
    """The compute stages between ``dense_op`` and ``op`` (exclusive of the dense)."""
    if op is dense_op or not hasattr(op, "body"):
        return []
    stages = [op]
    for t in op.input_tensors:
        if _depends_on(t.op, dense_op):
            stages += _epilogue(t.op, dense_op)
    return stages


def _depends_on(op: Any, target: Any) -> bool:
    return op is target or any(_depends_on(t.op, target) for t in op.input_tensors)
