"""x86 conv2d NCHW (``conv2d_nchw.x86``): register-blocked over output channels × columns.

Entry points: :func:`conv2d_nchw` (compute: the general conv with a separate padding stage),
:func:`schedule_conv2d_nchw`, :data:`DEFAULT_CONFIG` (knobs: ``tile_oc`` output channels and
up to ``tile_ow`` output columns per register block; ``unroll_kw`` unrolls the kernel width).

Each parallel task computes a ``tile_oc × tile_ow`` block of one output row in a local
accumulator: for every input channel and kernel tap it broadcasts ``tile_oc`` weights and
multiplies them with one ``tile_ow``-wide input row segment (a vector load for stride 1).
The padded input is materialized once (in parallel) so the inner loop has no bounds checks.
Fused epilogues (bias, relu …) run in the same task.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.topi.nn.conv import conv2d as _conv2d
from kiln.topi.utils import divisor_at_most, get_const_int, traverse_inline

DEFAULT_CONFIG = {"tile_oc": 4, "tile_ow": 16, "unroll_kw": True}


def conv2d_nchw(data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any,
                dilation: Any, out_dtype: str | None = None) -> te.Tensor:
    """NCHW/OIHW conv2d (groups = 1), the compute :func:`schedule_conv2d_nchw` expects."""
    return _conv2d(data, kernel, strides, padding, dilation, 1, "NCHW", "OIHW", out_dtype)


def schedule_conv2d_nchw(outs: Any, config: dict | None = None) -> Any:
    """Schedule the NCHW conv2d in ``outs`` (and its fused epilogue)."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])

    def visit(op):
        if op.tag == "conv2d_nchw":
            _schedule_conv(sch, op.output(0), outs[0], cfg)

    traverse_inline(sch, outs[0].op, visit)
    return sch


def _schedule_conv(sch: Any, conv: te.Tensor, out: te.Tensor, cfg: dict) -> None:
    padded = conv.op.input_tensors[0]
    if padded.op.name == "pad_temp":
        stage = sch[padded]
        stage.compute_root()
        n, c, h, w = stage.leaf_iter_vars
        stage.parallel(stage.fuse(n, c, h))
    oc = get_const_int(conv.shape[1])
    ow = get_const_int(conv.shape[3])
    t_oc = divisor_at_most(oc, cfg["tile_oc"])
    t_ow = divisor_at_most(ow, cfg["tile_ow"])
    block_tensor = sch.cache_write(conv, "local") if out.op is conv.op else conv
    o = sch[out]
    n, f, y, x = o.leaf_iter_vars[:4]
    fo, fi = o.split(f, factor=t_oc)
    xo, xi = o.split(x, factor=t_ow)
    o.reorder(n, fo, y, xo, fi, xi)
    task = o.fuse(n, fo, y)
    o.parallel(task)
    o.vectorize(xi)
    block = sch[block_tensor]
    block.compute_at(o, xo)
    leaves = list(block.leaf_iter_vars)
    data_axes = [iv for iv in leaves if iv.iter_type == 0]
    rc, ry, rx = [iv for iv in leaves if iv.iter_type != 0]
    bf, bx = data_axes[1], data_axes[3]
    block.reorder(rc, ry, rx, bf, bx)
    if cfg["unroll_kw"]:
        block.unroll(rx)
    block.unroll(bf)
    block.vectorize(bx)
