"""Fast CPU schedules for x86 (TVM's ``topi.x86``).

Entry points: :func:`schedule_injective`, :func:`schedule_reduce` (:mod:`.injective`),
:func:`dense_pack` / :func:`schedule_dense_pack` (:mod:`.dense`), :func:`conv2d_nchw` /
:func:`schedule_conv2d_nchw` (:mod:`.conv2d`).
"""

from __future__ import annotations

from kiln.topi.x86.conv2d import conv2d_nchw, schedule_conv2d_nchw
from kiln.topi.x86.dense import dense_pack, schedule_dense_pack
from kiln.topi.x86.depthwise import schedule_depthwise_conv2d_nchw
from kiln.topi.x86.injective import (
    schedule_injective,
    schedule_injective_from_existing,
    schedule_opaque,
    schedule_reduce,
)

__all__ = ["schedule_injective", "schedule_injective_from_existing", "schedule_reduce",
           "dense_pack", "schedule_dense_pack", "conv2d_nchw", "schedule_conv2d_nchw",
           "schedule_depthwise_conv2d_nchw", "schedule_opaque"]
