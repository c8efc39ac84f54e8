"""x86 conv2d for NCHW tensors (``conv2d_nchw.x86``), computed in a channel-blocked layout.

Entry points: :func:`conv2d_nchw` (compute), :func:`conv2d_nchwc` (the blocked core, for a
kernel already packed by :func:`pack_kernel`), :func:`schedule_conv2d_nchw`,
:data:`DEFAULT_CONFIG` (knobs: ``oc_bn`` output channels per vector block, ``tile_ow`` output
columns per register block, ``unroll_kw``).

The kernel ``[O, C, KH, KW]`` is packed as ``[O / oc_bn, C, KH, KW, oc_bn]`` and the output is
computed as ``[N, O / oc_bn, OH, OW, oc_bn]`` (TVM's NCHW[x]c idea): the innermost loop is
``oc_bn`` output channels, one contiguous vector of packed weights times one broadcast input
value. Each parallel task (batch, channel block, output row) keeps ``tile_ow × oc_bn``
accumulators in registers across the whole ``C × KH × KW`` reduction. A final injective stage
returns to NCHW and carries any fused epilogue (bias, relu …).
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.tir import op as _op
from kiln.topi.nn.conv import _tuple, conv_output_size, get_pad_tuple
from kiln.topi.nn.pad import pad
from kiln.topi.utils import divisor_at_most, get_const_int, get_const_tuple, traverse_inline
from kiln.topi.x86.injective import schedule_injective_from_existing

DEFAULT_CONFIG = {"oc_bn": 16, "tile_ow": 4, "unroll_kw": True}


def block_shape(out_channels: int, out_width: int, cfg: dict) -> tuple[int, int]:
    """``(oc_bn, tile_ow)``: the preferred block if it divides the output, else the widest
    block whose ``tile_ow × oc_bn / 8`` vector accumulators still fit in 12 AVX2 registers."""
    candidates = [(cfg["oc_bn"], cfg["tile_ow"]), (16, 4), (16, 6), (16, 5), (16, 3), (8, 7),
                  (8, 6), (8, 5), (16, 2), (8, 3), (8, 2), (4, 7), (4, 3), (4, 2)]
    for bn, tile in candidates:
        if out_channels % bn == 0 and out_width % tile == 0:
            return bn, tile
    return divisor_at_most(out_channels, cfg["oc_bn"]), 1


def pack_kernel(kernel: te.Tensor, oc_bn: int) -> te.Tensor:
    """``[O, C, KH, KW]`` → ``[O / oc_bn, C, KH, KW, oc_bn]``."""
    o, c, kh, kw = get_const_tuple(kernel.shape)
    return te.compute((o // oc_bn, c, kh, kw, oc_bn),
                      lambda ob, ic, y, x, oi: kernel[ob * oc_bn + oi, ic, y, x],
                      name="kernel_pack", tag="kernel_pack")


def conv2d_nchwc(data: te.Tensor, packed: te.Tensor, strides: Any, padding: Any,
                 dilation: Any, out_dtype: str | None = None) -> te.Tensor:
    """NCHW data × packed kernel → ``[N, O / oc_bn, OH, OW, oc_bn]``."""
    n, c, h, w = get_const_tuple(data.shape)
    ob, _, kh, kw, bn = get_const_tuple(packed.shape)
    sh, sw = _tuple(strides, 2, "strides")
    dh, dw = _tuple(dilation, 2, "dilation")
    (pt, pl), (pb, pr) = get_pad_tuple(padding, 2)
    oh = conv_output_size(h, kh, sh, dh, pt, pb)
    ow = conv_output_size(w, kw, sw, dw, pl, pr)
    padded = pad(data, [0, 0, pt, pl], [0, 0, pb, pr], name="pad_temp")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    out_dtype = out_dtype or data.dtype
    return te.compute(
        (n, ob, oh, ow, bn),
        lambda b, f, y, x, fi: te.sum(
            _op.cast(padded[b, rc.var, y * sh + ry.var * dh, x * sw + rx.var * dw], out_dtype)
            * _op.cast(packed[f, rc.var, ry.var, rx.var, fi], out_dtype), axis=[rc, ry, rx]),
        name="conv2d_nchwc", tag="conv2d_nchwc")


def conv2d_nchw(data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any,
                dilation: Any, out_dtype: str | None = None,
                config: dict | None = None) -> te.Tensor:
    """NCHW/OIHW conv2d (groups 1) through the channel-blocked core."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    _, _, _, w = get_const_tuple(data.shape)
    _, _, _, kw = get_const_tuple(kernel.shape)
    sw = _tuple(strides, 2, "strides")[1]
    dw = _tuple(dilation, 2, "dilation")[1]
    (_, pl), (_, pr) = get_pad_tuple(padding, 2)
    ow = conv_output_size(w, kw, sw, dw, pl, pr)
    bn, _ = block_shape(get_const_int(kernel.shape[0]), ow, cfg)
    return conv2d_nchw_packed(data, pack_kernel(kernel, bn), strides, padding, dilation,
                              out_dtype)


def conv2d_nchw_packed(data: te.Tensor, packed: te.Tensor, strides: Any, padding: Any,
                       dilation: Any, out_dtype: str | None = None) -> te.Tensor:
    """NCHW conv2d with a kernel packed by :func:`pack_kernel` (e.g. folded at compile time)."""
    bn = get_const_int(packed.shape[4])
    o = get_const_int(packed.shape[0]) * bn
    blocked = conv2d_nchwc(data, packed, strides, padding, dilation, out_dtype)
    shape = [data.shape[0], o, blocked.shape[2], blocked.shape[3]]
    return te.compute(shape, lambda b, f, y, x: blocked[b, _op.floordiv(f, bn), y, x,
                                                        _op.floormod(f, bn)],
                      name="conv2d_nchw_out", tag="injective,conv_unpack")


def schedule_conv2d_nchw(outs: Any, config: dict | None = None) -> Any:
    """Schedule the blocked conv2d in ``outs`` and the NCHW output with its epilogue."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])

    def visit(op):
        if op.tag == "conv2d_nchwc":
            _schedule_blocked(sch, op.output(0), cfg)
        elif op.tag == "kernel_pack":
            stage = sch[op]
            stage.compute_root()
            ob, _, _, _, oi = stage.leaf_iter_vars
            stage.parallel(ob)
            stage.vectorize(oi)

    for t in outs:
        traverse_inline(sch, t.op, visit)
        if t.op.tag != "conv2d_nchwc":
            _schedule_output(sch, t, cfg)
    return sch


def _schedule_output(sch: Any, out: te.Tensor, cfg: dict) -> None:
    """NCHW output (+ epilogue): split channels by the block so reads stay contiguous."""
    if len(out.shape) != 4:
        schedule_injective_from_existing(sch, out)
        return
    blocked = _find_blocked(out.op)
    bn = get_const_int(blocked.shape[4]) if blocked is not None else 1
    stage = sch[out]
    n, f, y, x = stage.leaf_iter_vars
    fo, fi = stage.split(f, factor=bn)
    stage.reorder(n, fo, y, x, fi)
    stage.parallel(stage.fuse(n, fo, y))


def _find_blocked(op: Any) -> Any:
    for t in op.input_tensors:
        if t.op.tag == "conv2d_nchwc":
            return t
        found = _find_blocked(t.op) if hasattr(t.op, "body") else None
        if found is not None:
            return found
    return None


def _schedule_blocked(sch: Any, conv: te.Tensor, cfg: dict) -> None:
    padded = conv.op.input_tensors[0]
    if padded.op.name == "pad_temp":
        stage = sch[padded]
        stage.compute_root()
        n, c, h, _ = stage.leaf_iter_vars
        stage.parallel(stage.fuse(n, c, h))
    ow, bn = get_const_int(conv.shape[3]), get_const_int(conv.shape[4])
    t_ow = next((t for b, t in [block_shape(bn, ow, cfg)] if b == bn), 1)
    if t_ow == 1:
        t_ow = max(t for t in range(1, 8) if ow % t == 0 and t * bn <= 96)
    acc = sch.cache_write(conv, "local")
    o = sch[conv]
    n, f, y, x, fi = o.leaf_iter_vars
    xo, xi = o.split(x, factor=t_ow)
    o.reorder(n, f, y, xo, xi, fi)
    task = o.fuse(n, f, y)
    o.parallel(task)
    o.vectorize(fi)
    block = sch[acc]
    block.compute_at(o, xo)
    leaves = list(block.leaf_iter_vars)
    data_axes = [iv for iv in leaves if iv.iter_type == 0]
    rc, ry, rx = [iv for iv in leaves if iv.iter_type != 0]
    bx, bfi = data_axes[3], data_axes[4]
    block.reorder(rc, ry, rx, bx, bfi)
    if cfg["unroll_kw"]:
        block.unroll(rx)
    block.unroll(bx)
    block.vectorize(bfi)
