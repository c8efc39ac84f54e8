"""Schedules for bare-metal ARM CPUs (TVM's ``topi.arm_cpu``): serial, no threads.

Entry points: :func:`schedule_injective` (vectorizable inner loop, no ``parallel``),
:func:`dense_micro_kernel` + :func:`schedule_dense_micro_kernel` and the pointwise
:func:`conv2d_nhwc_1x1_micro_kernel` (a C micro-kernel through ``import_c`` + ``tensorize``,
:mod:`.dense`), :func:`schedule_conv2d_direct` (other convolutions, no whole intermediate
tensor), the int8 dense and convolution micro-kernels (``SMLAD`` with the DSP extension,
portable C without: :mod:`.gemv_s8`), the int8 depthwise one (``SMLABB``/``SMLATT``:
:mod:`.depthwise_s8`), and the generic schedules for everything else.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.topi.arm_cpu.conv2d import schedule_conv2d_direct
from kiln.topi.arm_cpu.dense import (
    conv2d_1x1_applies,
    conv2d_nhwc_1x1_micro_kernel,
    dense_micro_kernel,
    gemv_intrin,
    gemv_source,
    schedule_conv2d_nhwc_1x1_micro_kernel,
    schedule_dense_micro_kernel,
)
from kiln.topi.utils import get_const_tuple, traverse_inline


def schedule_injective(outs: Any) -> Any:
    """Injective ops inlined; the innermost loop split by 4 lanes when it divides."""
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    for t in outs:
        traverse_inline(sch, t.op)
        dims = get_const_tuple(t.shape)
        if dims and isinstance(dims[-1], int) and dims[-1] % 4 == 0 and dims[-1] > 0:
            _, inner = sch[t].split(sch[t].leaf_iter_vars[-1], factor=4)
            sch[t].unroll(inner)
    return sch


schedule_reduce = schedule_injective

__all__ = ["schedule_injective", "schedule_reduce", "dense_micro_kernel",
           "schedule_dense_micro_kernel", "gemv_intrin", "gemv_source",
           "conv2d_nhwc_1x1_micro_kernel", "schedule_conv2d_nhwc_1x1_micro_kernel",
           "conv2d_1x1_applies", "schedule_conv2d_direct"]
