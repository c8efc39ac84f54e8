"""x86 conv3d for NCDHW/OIDHW tensors (``conv3d_ncdhw.x86``), groups 1.

Entry points: :func:`schedule_conv3d_ncdhw`, :data:`DEFAULT_CONFIG` (knobs: ``oc_bn``
output channels and ``tile_ow`` output columns per register block).

The recipe is :func:`kiln.topi.x86.conv1d.schedule_direct_conv`'s: a parallel task per
(batch, output-channel block, output depth), each output row cut into ``oc_bn × tile_ow``
register blocks accumulated over ``C × KD × KH × KW`` (the width taps unrolled), the
padded input materialized once.
"""

from __future__ import annotations

from typing import Any

from kiln.topi.x86.conv1d import DEFAULT_CONFIG as _DIRECT_CONFIG
from kiln.topi.x86.conv1d import schedule_direct_conv

DEFAULT_CONFIG = dict(_DIRECT_CONFIG)


def schedule_conv3d_ncdhw(outs: Any, config: dict | None = None) -> Any:
    """Schedule an NCDHW/OIDHW conv3d (groups 1) and its fused epilogue.

    Example
    -------
    >>> from kiln import te, topi
    >>> y = topi.nn.conv3d(te.placeholder((1, 4, 6, 6, 8)), te.placeholder((8, 4, 3, 3, 3)))
    >>> s = topi.x86.conv3d.schedule_conv3d_ncdhw([y])
    >>> s[y].leaf_iter_vars[0].var.name
    'i0.i1.outer.fused.i2.fused'
    """
    return schedule_direct_conv(outs, 1, {**DEFAULT_CONFIG, **(config or {})})
