"""Direct convolution for Cortex-M: the generic compute, scheduled so that no intermediate
tensor outlives one output row.

Entry point: :func:`schedule_conv2d_direct`.

On a microcontroller RAM is the scarce resource: the generic schedule materializes the whole
convolution result before the fused epilogue (bias, activation) reads it, an extra tensor the
size of the output in the AOT workspace. Here padding is read in place (inlined) and the
convolution is computed at the epilogue's second-to-last axis, so its scratch is one row of
the innermost dimension (the channels, in NHWC). Loops stay serial and scalar.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.topi.utils import get_const_tuple, traverse_inline

__all__ = ["schedule_conv2d_direct"]


def schedule_conv2d_direct(outs: Any) -> Any:
    """Inline padding and the epilogue's injective stages; compute the convolution per row of
    the output's innermost axis."""
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    convs = []

    def collect(op):
        if "conv" in op.tag and op.reduce_axis:
            convs.append(op)

    traverse_inline(sch, outs[0].op, collect)
    final = sch[outs[0].op]
    for conv in convs:
        if conv is not outs[0].op and len(final.op.axis) >= 2:
            sch[conv].compute_at(final, final.op.axis[-2])
        stage = sch[conv]
        # The window loops outside, the innermost output axis innermost: the padding test
        # depends on the window position only, so it leaves the inner loop.
        *outer, last = stage.op.axis
        stage.reorder(*outer, *stage.op.reduce_axis, last)
        extent = get_const_tuple(conv.output(0).shape)[-1]
        if extent % 4 == 0:  # fewer loop branches per multiply-add
            _, lanes = stage.split(last, factor=4)
            stage.unroll(lanes)
    return sch
