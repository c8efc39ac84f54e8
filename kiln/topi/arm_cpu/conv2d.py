"""Direct convolution for Cortex-M: the generic compute, scheduled so that no intermediate
tensor outlives one output row.

Entry point: :func:`schedule_conv2d_direct`.

On a microcontroller RAM is the scarce resource: the generic schedule materializes the whole
convolution result before the fused epilogue (bias, activation) reads it, an extra tensor the
size of the output in the AOT workspace. Here padding is read in place (inlined) and the
convolution is computed in blocks of up to 8 results along the innermost axis (the channels,
in NHWC) right where the epilogue reads them, so its scratch is one block, which gcc keeps in
registers. Loops stay serial and scalar.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.topi.utils import divisor_at_most, get_const_tuple, traverse_inline

# Results per block: 8 partial sums + operands fit the M4F's 32 single-precision registers.
BLOCK = 8

__all__ = ["schedule_conv2d_direct", "DEFAULT_CONFIG"]

# The knobs AutoTVM tunes (``kiln.autotvm.topi_arm_cpu``): results per block (the largest
# divisor of the innermost extent up to it) and whether the block's loop is unrolled.
DEFAULT_CONFIG = {"block": BLOCK, "unroll": True}


def schedule_conv2d_direct(outs: Any, config: dict | None = None) -> Any:
    """Inline padding and the epilogue's injective stages; compute the convolution in blocks
    of up to ``config["block"]`` (8) results along the output's innermost axis, right where
    the epilogue reads them."""
    config = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    convs = []

    def collect(op):
        if "conv" in op.tag and op.reduce_axis:
            convs.append(op)

    traverse_inline(sch, outs[0].op, collect)
    final = sch[outs[0].op]
    for conv in convs:
        shape = get_const_tuple(conv.output(0).shape)
        rows = divisor_at_most(shape[-1], config["block"])
        stage = sch[conv]
        if conv is outs[0].op:
            *outer, last = stage.op.axis
            block, lanes = stage.split(last, factor=rows)
            stage.reorder(*outer, block, *stage.op.reduce_axis, lanes)
        else:
            if get_const_tuple(outs[0].shape) == shape:
                block, _ = final.split(final.op.axis[-1], factor=rows)
                stage.compute_at(final, block)
            elif len(final.op.axis) >= 2:  # a reshaping epilogue: one output row at a time
                stage.compute_at(final, final.op.axis[-2])
            *outer, last = stage.op.axis
            _, lanes = stage.split(last, factor=rows)
            stage.reorder(*outer, *stage.op.reduce_axis, lanes)
        # The window loops outside the block: the padding test leaves the inner loop, and
        # the block's partial sums, indexed by constants once unrolled, stay in registers.
        if config["unroll"]:
            stage.unroll(lanes)
    return sch
