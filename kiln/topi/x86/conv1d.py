"""x86 direct convolution for ``NC<spatial>`` data (``conv1d_ncw.x86``; conv3d reuses it).

Entry points: :func:`schedule_conv1d_ncw`, :func:`schedule_direct_conv` (any spatial rank),
:func:`register_block`, :data:`DEFAULT_CONFIG` (knobs: ``oc_bn`` output channels and
``tile_ow`` output columns per register block), :func:`default_config` (per target).

The compute is the general :func:`kiln.topi.nn.conv` (groups 1, ``OI<spatial>`` kernel).
Each parallel task is one (batch, output-channel block[, output depth]); inside it, every
output row is cut into ``oc_bn × tile_ow`` blocks accumulated in registers over the whole
``C × kernel`` reduction: per reduction step, one vector of ``tile_ow`` input columns (a
contiguous load for stride 1) times ``oc_bn`` broadcast weights. The padded input is
materialized once, so the inner loop has no bounds checks; a fused epilogue (bias, relu …)
is applied as the block is written out.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.topi.utils import divisor_at_most, get_const_int, traverse_inline
from kiln.topi.x86.reduction import lanes_dividing

DEFAULT_CONFIG = {"oc_bn": 4, "tile_ow": 16}
# Target ``c``: GCC keeps only vectors that fit an AVX2 register in registers (kiln's C
# vectors of 16 floats live in memory), so the block is 8 channels x one 8-lane vector.
C_TARGET_CONFIG = {"oc_bn": 8, "tile_ow": 8}


def default_config(target: Any) -> dict:
    """The register block for ``target``: :data:`C_TARGET_CONFIG` for ``c``, else
    :data:`DEFAULT_CONFIG`.

    Example
    -------
    >>> default_config("c")["tile_ow"], default_config("llvm")["tile_ow"]
    (8, 16)
    """
    kind = str(target).split()[0] if target is not None else "llvm"
    return dict(C_TARGET_CONFIG if kind == "c" else DEFAULT_CONFIG)

# tags of the direct convolutions these schedules block (groups 1, NC<spatial> data)
DIRECT_CONV_TAGS = ("conv1d_ncw", "conv3d_ncdhw")


def register_block(out_channels: int, out_width: int, cfg: dict) -> tuple[int, int]:
    """``(oc_bn, tile_ow)``: channels per block divide the output channels; the columns are
    the widest power of two up to ``tile_ow`` dividing the width (else its largest divisor)."""
    bn = divisor_at_most(out_channels, cfg["oc_bn"])
    tile = lanes_dividing(out_width, cfg["tile_ow"], least=2) or \
        divisor_at_most(out_width, cfg["tile_ow"])
    return bn, tile


def schedule_direct_conv(outs: Any, parallel_spatial: int, config: dict | None = None) -> Any:
    """Schedule the direct ``NC<spatial>`` convolution in ``outs`` and its epilogue; the
    first ``parallel_spatial`` output spatial axes join the parallel task loop."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    out = outs[0]

    def visit(op: Any) -> None:
        if op.tag in DIRECT_CONV_TAGS:
            _schedule(sch, op.output(0), out, parallel_spatial, cfg)

    traverse_inline(sch, out.op, visit)
    return sch


def _schedule(sch: Any, conv: te.Tensor, out: te.Tensor, parallel_spatial: int,
              cfg: dict) -> None:
    padded = conv.op.input_tensors[0]
    if padded.op.name == "pad_temp":
        stage = sch[padded]
        stage.compute_root()
        leaves = list(stage.leaf_iter_vars)
        stage.parallel(stage.fuse(*leaves[:-1]))
    nsp = conv.ndim - 2
    bn, tile = register_block(get_const_int(conv.shape[1]), get_const_int(conv.shape[-1]), cfg)
    block_tensor = sch.cache_write(conv, "local") if out.op is conv.op else conv
    o = sch[out]
    n, f, *spatial = list(o.leaf_iter_vars)[:conv.ndim]
    fo, fi = o.split(f, factor=bn)
    wo, wi = o.split(spatial[-1], factor=tile)
    outer_spatial = spatial[:-1]
    o.reorder(n, fo, *outer_spatial, wo, fi, wi)
    task = o.fuse(n, fo, *outer_spatial[:parallel_spatial])
    o.parallel(task)
    o.vectorize(wi)
    block = sch[block_tensor]
    block.compute_at(o, wo)
    leaves = list(block.leaf_iter_vars)
    data_axes = leaves[:conv.ndim]
    reduce_axes = leaves[conv.ndim:]
    block.reorder(*reduce_axes, data_axes[1], data_axes[-1])
    block.unroll(data_axes[1])
    block.vectorize(data_axes[-1])
    if nsp > 1:
        block.unroll(reduce_axes[-1])


def schedule_conv1d_ncw(outs: Any, config: dict | None = None) -> Any:
    """Schedule an NCW/OIW conv1d (groups 1) and its fused epilogue.

    Example
    -------
    >>> from kiln import te, topi
    >>> y = topi.nn.conv1d(te.placeholder((1, 8, 64)), te.placeholder((16, 8, 3)), 1, 1)
    >>> s = topi.x86.conv1d.schedule_conv1d_ncw([y])
    >>> [iv.var.name for iv in s[y].leaf_iter_vars]
    ['i0.i1.outer.fused', 'i2.outer', 'i1.inner', 'i2.inner']
    """
    return schedule_direct_conv(outs, 0, config)
