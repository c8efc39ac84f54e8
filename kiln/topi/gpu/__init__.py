"""GPU schedules (TVM's ``topi.cuda``/``topi.gpu`` injective recipe), for targets with the
``gpu`` key (OpenCL here).

Entry points: :func:`schedule_injective`, :data:`NUM_THREADS`.

The recipe: inline injective producers, then per output fuse all axes into one, split it by
the work-group size and bind the outer part to ``blockIdx.x`` (work-groups) and the inner part
to ``threadIdx.x`` (work-items). A size that does not divide the extent keeps a bounds guard.

Example
-------
>>> import kiln
>>> from kiln import te, topi
>>> A = te.placeholder((1000,), name="A")
>>> B = topi.exp(A)
>>> text = str(kiln.lower(schedule_injective([B]), [A, B], simple_mode=True))
>>> "T.thread_binding(16)" in text and "T.thread_binding(64)" in text
True
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.topi.generic import default_schedule

__all__ = ["schedule_injective", "NUM_THREADS"]

NUM_THREADS = 64  # work-items per work-group (a multiple of every GPU's SIMD width)


def schedule_injective(outs: Any) -> Any:
    """Injective groups: one work-item per output element, in work-groups of NUM_THREADS."""
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = default_schedule(outs)
    for out in outs:
        axes = list(sch[out].op.axis)
        if not axes:
            continue  # a scalar: one work-item
        fused = sch[out].fuse(*axes) if len(axes) > 1 else axes[0]
        block, thread = sch[out].split(fused, factor=NUM_THREADS)
        sch[out].bind(block, te.thread_axis("blockIdx.x"))
        sch[out].bind(thread, te.thread_axis("threadIdx.x"))
    return sch
