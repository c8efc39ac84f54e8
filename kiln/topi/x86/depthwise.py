"""x86 depthwise conv2d NCHW (``depthwise_conv2d_nchw.x86``): vectorized along output rows.

Entry points: :func:`schedule_depthwise_conv2d_nchw`, :data:`DEFAULT_CONFIG` (``tile_ow``:
output columns per vector).

The compute is the general grouped conv (``groups == channels``). Each parallel task is one
(batch, channel, output row); its columns are split into vectors of ``tile_ow`` accumulators
that sum ``KH × KW`` broadcast weights times input row segments. Padding is materialized once,
so the inner loop has no bounds checks.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.topi.utils import get_const_int, traverse_inline

DEFAULT_CONFIG = {"tile_ow": 8}


def schedule_depthwise_conv2d_nchw(outs: Any, config: dict | None = None) -> Any:
    """Schedule the depthwise conv in ``outs`` and its fused epilogue."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])

    def visit(op):
        if op.tag == "depthwise_conv2d_nchw":
            _schedule(sch, op.output(0), outs[0], cfg)

    traverse_inline(sch, outs[0].op, visit)
    return sch


def _schedule(sch: Any, conv: te.Tensor, out: te.Tensor, cfg: dict) -> None:
    padded = conv.op.input_tensors[0]
    if padded.op.name == "pad_temp":
        stage = sch[padded]
        stage.compute_root()
        n, c, h, _ = stage.leaf_iter_vars
        stage.parallel(stage.fuse(n, c, h))
    ow = get_const_int(conv.shape[3])
    t_ow = next(t for t in (cfg["tile_ow"], 7, 14, 6, 4, 2, 1) if ow % t == 0)
    block_tensor = sch.cache_write(conv, "local") if out.op is conv.op else conv
    o = sch[out]
    n, c, y, x = o.leaf_iter_vars[:4]
    xo, xi = o.split(x, factor=t_ow)
    o.parallel(o.fuse(n, c, y))
    o.vectorize(xi)
    block = sch[block_tensor]
    block.compute_at(o, xo)
    leaves = list(block.leaf_iter_vars)
    bx = [iv for iv in leaves if iv.iter_type == 0][3]
    rc, ry, rx = [iv for iv in leaves if iv.iter_type != 0]
    block.reorder(rc, ry, rx, bx)
    block.unroll(ry)
    block.unroll(rx)
    block.vectorize(bx)
