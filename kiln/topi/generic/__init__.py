"""Schedules that are correct for every target (TVM's ``topi.generic``).

Entry points: :func:`schedule_injective`, :func:`schedule_reduce`, :func:`schedule_extern`,
:func:`default_schedule` and the per-op names TVM's strategies call (``schedule_dense``,
``schedule_conv2d_nchw``, ``schedule_pool``, ``schedule_softmax`` …), all of which inline
injective producers and keep every other stage at the root with serial loops.

Example
-------
>>> from kiln import te, topi
>>> A = te.placeholder((8,), name="A")
>>> s = topi.generic.schedule_injective([topi.exp(A)])
>>> len(s.stages)
2
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.topi.utils import traverse_inline


def _as_list(outs: Any) -> list:
    return list(outs) if isinstance(outs, list | tuple) else [outs]


def default_schedule(outs: Any, auto_inline: bool = True) -> Any:
    """Every stage at the root; injective intermediates inlined when ``auto_inline``."""
    outs = _as_list(outs)
    sch = te.create_schedule([t.op for t in outs])
    if auto_inline:
        for t in outs:
            traverse_inline(sch, t.op)
    return sch


def schedule_injective(outs: Any) -> Any:
    """Injective (elementwise, broadcast, data movement) ops, fused into their consumers."""
    return default_schedule(outs)


schedule_reduce = schedule_injective
schedule_extern = schedule_injective
schedule_elemwise = schedule_injective
schedule_broadcast = schedule_injective

# Per-op names TVM's strategies refer to; the generic versions are all the default recipe.
_PER_OP = (
    "schedule_dense schedule_matmul schedule_batch_matmul schedule_conv1d_ncw "
    "schedule_conv1d_nwc schedule_conv2d_nchw schedule_conv2d_nhwc schedule_conv3d_ncdhw "
    "schedule_conv3d_ndhwc schedule_depthwise_conv2d_nchw schedule_depthwise_conv2d_nhwc "
    "schedule_group_conv2d_nchw schedule_conv2d_transpose_nchw schedule_conv1d_transpose_ncw "
    "schedule_pool schedule_adaptive_pool schedule_softmax schedule_lrn schedule_resize "
    "schedule_layer_norm schedule_group_norm schedule_instance_norm schedule_batch_norm "
    "schedule_argsort schedule_sort schedule_topk schedule_scatter schedule_cumsum "
    "schedule_conv2d_winograd schedule_conv2d_gemm schedule_dense_pack"
).split()
for _name in _PER_OP:
    globals()[_name] = schedule_injective

__all__ = ["default_schedule", "schedule_injective", "schedule_reduce", "schedule_extern",
           "schedule_elemwise", "schedule_broadcast", *_PER_OP]
