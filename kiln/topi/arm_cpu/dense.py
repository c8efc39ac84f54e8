"""Dense for Cortex-M: a hand-written C micro-kernel called through ``tensorize``.

Entry points: :func:`dense_micro_kernel` (compute), :func:`schedule_dense_micro_kernel`,
:func:`gemv_intrin`, :func:`gemv_source`.

microTVM's design (seed 002): the schedule attaches the kernel's portable C with
``pragma("import_c", source)`` and replaces the loop nest under a split of the output axis
with a ``call_extern`` to it through ``tensorize``. The micro-kernel computes ``M`` outputs of
one row at once, ``c[j] (+)= sum_k a[k] * b[j * sb0 + k * sb1]``, keeping the ``M`` partial
sums in FPU registers (``M`` is baked into the C, so gcc unrolls over it) and reading each
``a[k]`` once per ``M`` outputs instead of once per output. Serial code, no vector widths:
it suits an in-order core with a scalar FPU.
"""

from __future__ import annotations

from typing import Any

from kiln import te, tir
from kiln.topi.nn.dense import dense
from kiln.topi.utils import divisor_at_most, get_const_tuple

__all__ = ["dense_micro_kernel", "schedule_dense_micro_kernel", "gemv_intrin", "gemv_source",
           "MAX_ROWS"]

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


def gemv_intrin(rows: int, length: int, dtype: str = "float32") -> Any:
    """The tensor intrinsic ``c[j] = sum_k a[k] * b[j, k]`` (``j < rows``, ``k < length``),
    implemented by :func:`gemv_source`'s kernel; ``b`` may have any strides."""
    a = te.placeholder((length,), dtype, name="a")
    b = te.placeholder((rows, length), dtype, name="b")
    k = te.reduce_axis((0, length), name="k")
    c = te.compute((rows,), lambda j: te.sum(a[k] * b[j, k], axis=k), name="c")
    a_buf = tir.decl_buffer(a.shape, dtype, name="a_buf", offset_factor=1, strides=[1])
    b_buf = tir.decl_buffer(b.shape, dtype, name="b_buf", offset_factor=1,
                            strides=[te.var("sb0"), te.var("sb1")])
    c_buf = tir.decl_buffer(c.shape, dtype, name="c_buf", offset_factor=1, strides=[1])
    kernel = f"kiln_gemv_f32_{rows}"

    def intrin_func(ins, outs):
        aa, bb = ins
        cc = outs[0]

        def call(accumulate: int):
            return tir.call_extern("int32", kernel, cc.access_ptr("w"), aa.access_ptr("r"),
                                   bb.access_ptr("r"), length, bb.strides[0], bb.strides[1],
                                   accumulate)

        reset = tir.call_extern("int32", f"{kernel}_reset", cc.access_ptr("w"))
        return call(0), reset, call(1)

    return te.decl_tensor_intrin(c.op, intrin_func, name=kernel,
                                 binds={a: a_buf, b: b_buf, c: c_buf})


def dense_micro_kernel(data: te.Tensor, weight: te.Tensor, bias: te.Tensor | None = None,
                       out_dtype: str | None = None) -> te.Tensor:
    """The dense compute (``topi.nn.dense``) that :func:`schedule_dense_micro_kernel`
    tensorizes."""
    return dense(data, weight, bias, out_dtype)


def schedule_dense_micro_kernel(outs: Any) -> Any:
    """Tensorize the dense stage's output axis by the micro-kernel; inline the epilogue.

    The dense's own inputs stay materialized (the intrinsic reads them through buffers), so
    only stages after the dense (bias, activation) are inlined into the output.
    """
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    dense_op = _find_dense(outs[0].op)
    for op in _epilogue(outs[0].op, dense_op):
        if op not in [t.op for t in outs]:
            sch[op].compute_inline()
    units = get_const_tuple(dense_op.output(0).shape)[1]
    length = get_const_tuple(dense_op.input_tensors[0].shape)[1]
    rows = divisor_at_most(units, MAX_ROWS)
    stage = sch[dense_op]
    i, j = stage.op.axis
    (k,) = stage.op.reduce_axis
    jo, ji = stage.split(j, factor=rows)
    stage.reorder(i, jo, ji, k)
    stage.tensorize(ji, gemv_intrin(rows, length, dense_op.output(0).dtype))
    stage.pragma(i, "import_c", gemv_source(rows))
    return sch


def _find_dense(op: Any) -> Any:
    if op.tag == "dense":
        return op
    for t in op.input_tensors:
        if hasattr(t.op, "body"):
            found = _find_dense(t.op)
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
