"""x86 conv2d for NCHW tensors (``conv2d_nchw.x86``), computed in a channel-blocked layout.

Entry points: :func:`conv2d_nchw` (compute), :func:`conv2d_nchw_packed` (for a kernel
already packed by :func:`pack_kernel`, e.g. folded at compile time), :func:`conv2d_nchwc`
(the blocked core), :func:`schedule_conv2d_nchw`, :func:`block_shape` / :func:`tile_width`
(the register block), :data:`DEFAULT_CONFIG` (knobs: ``oc_bn`` output channels per vector
block and ``tile_ow`` output columns per register block, 0 for the modelled choice;
``unroll_kw``; ``ic_bn``, input channels per reduction block (0: none; TVM's ``tile_ic``);
``blocked_unroll_kw``, for blocked (``NCHW{ic}c``) data: the kernel columns unrolled inside
the input channel block (TVM's ``unroll_kw`` order) rather than the block innermost;
``tile_oh``, for blocked data: output rows per register block (TVM's 1x1 ``tile_oh``; it
must divide the output height, else 1 is used);
``parallel_min_flops``, the work below which one thread runs the conv;
``parallel_pad``, whether the padded input copy is a parallel loop of its own).

The kernel ``[O, C, KH, KW]`` is packed as ``[O / oc_bn, C, KH, KW, oc_bn]`` and the output is
computed as ``[N, O / oc_bn, OH, OWp, oc_bn]`` (TVM's NCHW[x]c idea): the innermost loop is
``oc_bn`` output channels, one contiguous vector of packed weights times one broadcast input
value, so a stride only changes which input is broadcast (no gather). Each parallel task
(batch, channel block, output row) keeps ``tile_ow × oc_bn`` accumulators in registers across
the whole ``C × KH × KW`` reduction; the row is padded to ``OWp``, a whole number of blocks
(awkward widths keep a wide block). A final injective stage returns to NCHW, dropping the
padding columns, and carries any fused epilogue (bias, relu, residual add …); each of its row
tasks computes its conv row first, so the conv is one parallel launch. The padded input copy
runs on the calling thread by default (it costs ~0.1 ms at most in ResNet-18, while each pool
launch waits for its slowest worker: milliseconds when other processes share the cores).
"""

from __future__ import annotations

import math
from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.target.x86 import simd_32bit_lanes
from kiln.tir import op as _op
from kiln.topi.nn.conv import conv_output_size, get_pad_tuple, int_values
from kiln.topi.nn.pad import pad
from kiln.topi.utils import divisor_at_most, get_const_int, get_const_tuple, traverse_inline
from kiln.topi.x86.injective import schedule_injective_from_existing
from kiln.topi.x86.parallel import DEFAULT_PARALLEL_MIN_FLOPS

DEFAULT_CONFIG = {"oc_bn": 0, "tile_ow": 0, "unroll_kw": True, "ic_bn": 0,
                  "blocked_unroll_kw": False, "tile_oh": 1,
                  "parallel_min_flops": DEFAULT_PARALLEL_MIN_FLOPS, "parallel_pad": False}

# Measured relative speed of (oc_bn, tile_ow) register blocks on AVX2 (16 ymm registers):
# ``tile_ow × oc_bn / 8`` accumulators, ``oc_bn / 8`` weight vectors and the input broadcasts
# of a row segment (``tile_ow + KW - 1`` of them, shared by the unrolled kernel columns) must
# fit, so with KW > 1 the 12-accumulator 16 × 6 and 32 × 3 blocks spill and are left out.
_BLOCK_SPEED = {(16, 4): 1.0, (8, 7): 0.95, (8, 6): 0.9, (16, 3): 0.9, (8, 5): 0.85,
                (32, 2): 0.8, (16, 2): 0.8, (8, 4): 0.8, (8, 3): 0.7, (8, 2): 0.6,
                (16, 1): 0.5, (32, 1): 0.5, (8, 1): 0.35}
# A 1-column kernel (1x1 conv: a GEMM over the packed layout) broadcasts each input once, so
# 12 accumulators fit: 16 × 6 blocks (measured ~15% faster than 16 × 4 where 6 divides).
_BLOCK_SPEED_1X1 = {**_BLOCK_SPEED, (16, 6): 1.1, (16, 5): 1.0}
# AVX-512 (32 zmm registers, the input broadcast folded into the FMA): up to 16 accumulators
# fit beside the weight vectors, and ~14 keep the FMA pipes busy; a row narrower than that is
# one whole-row block (measured on Zen 4: 16 × 14 blocks over 56/28/14-wide rows and 16 × 7
# over 7-wide ones run 3x3 and 1x1 convs at ORT's speed, where AVX2's 16 × 4 and 8 × 7 blocks
# are 1.2-1.9x slower).
_AVX512_ACCUMULATORS = 16
# ... but a wide kernel's unrolled columns share a longer row of input broadcasts, which then
# spill (measured: ResNet's 7x7 stride-2 stem at 16 x 14 is 1.2x ORT, at 16 x 8 1.07x)
_AVX512_WIDE_KERNEL_ACCUMULATORS = 8
_AVX512_FULL_SPEED = 14


def _block_speed(oc_bn: int, tile: int, kernel_width: int, lanes: int = 8,
                 out_width: int = 0) -> float:
    """The table's speed (AVX2), else one modelled from the accumulators (8 hide the FMA
    latency on AVX2, 14 or the whole row on AVX-512) and the unused lanes of a last partial
    vector."""
    vectors = -(-oc_bn // lanes)
    if lanes >= 16:
        full = min(_AVX512_FULL_SPEED, max(out_width, 1) * vectors)
        return min(1.0, tile * vectors / full) * oc_bn / (lanes * vectors)
    table = _BLOCK_SPEED_1X1 if kernel_width == 1 else _BLOCK_SPEED
    if (oc_bn, tile) in table:
        return table[oc_bn, tile]
    return min(1.0, tile * vectors / 8) * oc_bn / (8 * vectors) * 0.9


def max_tile_width(oc_bn: int, kernel_width: int, lanes: int | None = None) -> int:
    """The widest register block (output columns) whose accumulators fit the vector
    registers: 8 accumulators on AVX2 (7 for one vector per column, 12 for a 1-column
    kernel), 16 on AVX-512 (8 for kernels wider than 3 columns)."""
    lanes = lanes or simd_32bit_lanes()
    vectors = -(-oc_bn // lanes)
    if lanes >= 16:
        budget = (_AVX512_ACCUMULATORS if kernel_width <= 3
                  else _AVX512_WIDE_KERNEL_ACCUMULATORS)
    else:
        budget = 12 if kernel_width == 1 else 7 if vectors == 1 else 8
    return max(1, budget // vectors)


# A 1x1 conv usually has no padding, so a row padded to whole blocks would add a padded copy
# of its input (measured: 16 x 6 blocks over a 28-wide 1x1 row are 30% slower than 16 x 4).
_PADDED_1X1_PENALTY = 1.3


def _row_cost(oc_bn: int, out_width: int, tile: int, kernel_width: int,
              lanes: int = 8) -> float:
    """Modelled time of an output row (per output channel), the width padded to whole
    blocks."""
    cost = -(-out_width // tile) * tile / _block_speed(oc_bn, tile, kernel_width, lanes,
                                                       out_width)
    if kernel_width == 1 and out_width % tile:
        cost *= _PADDED_1X1_PENALTY
    return cost


def block_shape(out_channels: int, out_width: int, cfg: dict,
                kernel_width: int = 3, lanes: int | None = None) -> tuple[int, int]:
    """``(oc_bn, tile_ow)``: output channels per packed block (a divisor of
    ``out_channels``) and output columns per register block (:func:`tile_width`), chosen
    together by the cheapest modelled row; ``cfg["oc_bn"]`` forces the block when it divides.
    ``lanes``: float32 lanes per vector register (default: the current target's, 16 with
    AVX-512, 8 with AVX2).

    Example
    -------
    >>> from kiln.topi.x86.conv2d import DEFAULT_CONFIG, block_shape
    >>> block_shape(64, 56, DEFAULT_CONFIG, lanes=8), block_shape(512, 7, DEFAULT_CONFIG, lanes=8)
    ((16, 4), (8, 7))
    >>> block_shape(256, 48, DEFAULT_CONFIG, kernel_width=1, lanes=8)
    (16, 6)
    >>> block_shape(64, 56, DEFAULT_CONFIG, lanes=16), block_shape(512, 7, DEFAULT_CONFIG, lanes=16)
    ((16, 14), (16, 7))
    """
    lanes = lanes or simd_32bit_lanes()
    bns = [b for b in (cfg["oc_bn"] or 16, 16, 8, 32) if out_channels % b == 0]
    if cfg["oc_bn"] and out_channels % cfg["oc_bn"] == 0:
        bns = [cfg["oc_bn"]]
    bns = bns or [divisor_at_most(out_channels, 16)]

    def cost(bn: int) -> float:
        return _row_cost(bn, out_width, tile_width(bn, out_width, cfg, kernel_width, lanes),
                         kernel_width, lanes)

    bn = min(bns, key=cost)
    return bn, tile_width(bn, out_width, cfg, kernel_width, lanes)


def tile_width(oc_bn: int, out_width: int, cfg: dict, kernel_width: int = 3,
               lanes: int | None = None) -> int:
    """Output columns per register block: ``cfg["tile_ow"]`` when set, else the cheapest
    modelled block for the row (the row is padded to whole blocks)."""
    if cfg["tile_ow"]:
        return cfg["tile_ow"]
    lanes = lanes or simd_32bit_lanes()
    return min(range(1, max_tile_width(oc_bn, kernel_width, lanes) + 1),
               key=lambda t: (round(_row_cost(oc_bn, out_width, t, kernel_width, lanes), 6),
                              -(-out_width // t) * t))


def channel_block(channels: int) -> int:
    """Channels per block of an ``NCHW{c}`` activation (the untuned ``conv2d_NCHWc``
    layouts): 16 or 8 when they divide (one AVX-512 or AVX2 vector of float32), else the
    largest divisor up to 16, so every conv of a chain picks the same block for the same
    channel count and none repacks."""
    return next((b for b in (16, 8) if channels % b == 0), divisor_at_most(channels, 16))


# fewer output channels than an AVX2 vector gain nothing from blocked activations: such a
# conv stays NCHW (its kernel alone prepacked)
MIN_BLOCKED_CHANNELS = 8


def pack_kernel(kernel: te.Tensor, oc_bn: int) -> te.Tensor:
    """``[O, C, KH, KW]`` → ``[O / oc_bn, C, KH, KW, oc_bn]``."""
    o, c, kh, kw = get_const_tuple(kernel.shape)
    if oc_bn < 1 or o % oc_bn:
        raise TVMError(f"conv2d x86: {o} output channels do not split into blocks of {oc_bn}")
    return te.compute((o // oc_bn, c, kh, kw, oc_bn),
                      lambda ob, ic, y, x, oi: kernel[ob * oc_bn + oi, ic, y, x],
                      name="kernel_pack", tag="kernel_pack")


def conv2d_nchwc(data: te.Tensor, packed: te.Tensor, strides: Any, padding: Any,
                 dilation: Any, out_dtype: str | None = None, tile_ow: int = 1) -> te.Tensor:
    """NCHW (or channel-blocked ``NCHW{ic}c``) data × packed kernel →
    ``[N, O / oc_bn, OH, OWp, oc_bn]``.

    The kernel is ``[O / oc_bn, C, KH, KW, oc_bn]`` for NCHW data and
    ``[O / oc_bn, C / ic, KH, KW, ic, oc_bn]`` (``OIHW{ic}i{oc}o``) for blocked data.
    ``OWp`` is the output width rounded up to a multiple of ``tile_ow`` (the register block's
    width), so every block is whole; the input gets the matching extra right padding and the
    stage after reads only the first ``OW`` columns."""
    dshape, kshape = get_const_tuple(data.shape), get_const_tuple(packed.shape)
    blocked_in = len(dshape) == 5
    n, c, h, w = dshape[:4]
    want = [c, *dshape[4:]]
    if len(kshape) != 5 + blocked_in or [kshape[1], *kshape[4:4 + blocked_in]] != want:
        layout = f"[O / oc_bn, {c}, KH, KW, {dshape[4]}, oc_bn]" if blocked_in else \
            f"[O / oc_bn, {c}, KH, KW, oc_bn]"
        channels = c * (dshape[4] if blocked_in else 1)
        raise TVMError(f"conv2d x86: the packed kernel {list(kshape)} does not match "
                       f"{channels} input channels of the data {list(dshape)} "
                       f"(expected {layout})")
    ob, _, kh, kw = kshape[:4]
    bn = kshape[-1]
    sh, sw = int_values(strides, 2, "strides")
    dh, dw = int_values(dilation, 2, "dilation")
    (pt, pl), (pb, pr) = get_pad_tuple(padding, 2)
    oh = conv_output_size(h, kh, sh, dh, pt, pb)
    ow = conv_output_size(w, kw, sw, dw, pl, pr)
    ow_padded = -(-ow // tile_ow) * tile_ow
    needed_width = (ow_padded - 1) * sw + (kw - 1) * dw + 1
    pr = max(pr, needed_width - w - pl)
    if blocked_in:
        padded = pad(data, [0, 0, pt, pl, 0], [0, 0, pb, pr, 0], name="pad_temp")
    else:
        padded = _pad_likely(data, pt, pl, pb, pr)
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    out_dtype = out_dtype or data.dtype
    if blocked_in:
        rci = te.reduce_axis((0, dshape[4]), name="rci")

        def product(b, f, y, x, fi):
            return (_op.cast(padded[b, rc.var, y * sh + ry.var * dh, x * sw + rx.var * dw,
                                    rci.var], out_dtype)
                    * _op.cast(packed[f, rc.var, ry.var, rx.var, rci.var, fi], out_dtype))

        axes = [rc, ry, rx, rci]
    else:
        def product(b, f, y, x, fi):
            return (_op.cast(padded[b, rc.var, y * sh + ry.var * dh, x * sw + rx.var * dw],
                             out_dtype)
                    * _op.cast(packed[f, rc.var, ry.var, rx.var, fi], out_dtype))

        axes = [rc, ry, rx]
    return te.compute(
        (n, ob, oh, ow_padded, bn),
        lambda b, f, y, x, fi: te.sum(product(b, f, y, x, fi), axis=axes),
        name="conv2d_nchwc", tag="conv2d_nchwc", attrs={"tile_ow": tile_ow})


def _pad_likely(data: te.Tensor, top: int, left: int, bottom: int, right: int) -> te.Tensor:
    """The NCHW input zero-padded (``pad_temp``), its bounds check marked ``likely``: the
    loop partitioner peels the border columns off the vectorized row copy, which is then a
    plain vector copy (a clamped read made it a gather)."""
    if not top + left + bottom + right:
        return data
    n, c, h, w = data.shape

    def body(b, ch, y, x):
        row, col = y - top, x - left
        inside = _op.likely(_op.all(row >= 0, row < h, col >= 0, col < w))
        return _op.if_then_else(inside, data[b, ch, row, col], _op.const(0, data.dtype))

    return te.compute((n, c, h + top + bottom, w + left + right), body, name="pad_temp",
                      tag="injective,pad")


def conv2d_NCHWc(data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any,  # noqa: N802
                 dilation: Any, layout: str, out_layout: str, out_dtype: str | None = None,
                 config: dict | None = None) -> te.Tensor:
    """TVM's ``conv2d_NCHWc``: ``NCHW{ic}c`` data (or plain NCHW, kiln's extension for a conv
    whose producer is not blocked) × ``OIHW{ic}i{oc}o`` kernel (``OIHW{oc}o`` for NCHW data)
    → ``NCHW{oc}c`` output, so consecutive convs pass blocked activations without repacking;
    ``out_layout="NCHW"`` unpacks instead (a last conv, whose consumer needs NCHW).

    Example
    -------
    >>> from kiln import te
    >>> from kiln.topi.x86.conv2d import conv2d_NCHWc, schedule_conv2d_nchw
    >>> y = conv2d_NCHWc(te.placeholder((1, 2, 14, 14, 8)), te.placeholder((2, 2, 3, 3, 8, 16)),
    ...                  2, 1, 1, "NCHW8c", "NCHW16c")
    >>> [int(d) for d in y.shape]
    [1, 2, 7, 7, 16]
    >>> s = schedule_conv2d_nchw([y])
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    bn = get_const_int(kernel.shape[-1])
    kw = get_const_int(kernel.shape[3])
    if out_layout not in ("NCHW", f"NCHW{bn}c") or \
            layout not in ("NCHW", f"NCHW{get_const_int(data.shape[-1])}c"):
        raise TVMError(f"conv2d_NCHWc x86: layouts {layout} -> {out_layout} do not match the "
                       f"data {list(get_const_tuple(data.shape))} and kernel "
                       f"{list(get_const_tuple(kernel.shape))}")
    ow = _output_width(data, kw, strides, padding, dilation)
    blocked = conv2d_nchwc(data, kernel, strides, padding, dilation, out_dtype,
                           tile_width(bn, ow, cfg, kw))
    if out_layout == "NCHW":
        return _unpack(blocked, ow, "conv2d_nchw_out")
    shape = [*blocked.shape[:3], ow, bn]
    return te.compute(shape, lambda *i: blocked(*i), name="conv2d_NCHWc_out",
                      tag="injective,conv_crop")


def conv2d_nchw(data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any,
                dilation: Any, out_dtype: str | None = None,
                config: dict | None = None) -> te.Tensor:
    """NCHW/OIHW conv2d (groups 1) through the channel-blocked core.

    Example
    -------
    >>> from kiln import te
    >>> from kiln.target import Target
    >>> from kiln.topi.x86.conv2d import conv2d_nchw, schedule_conv2d_nchw
    >>> with Target("llvm -mcpu=znver3"):  # AVX2: 8 × 7 register blocks over 7-wide rows
    ...     y = conv2d_nchw(te.placeholder((1, 8, 14, 14)), te.placeholder((32, 8, 3, 3)),
    ...                     2, 1, 1)
    >>> [int(d) for d in y.shape], y.op.input_tensors[0].op.attrs["tile_ow"]
    ([1, 32, 7, 7], 7)
    >>> s = schedule_conv2d_nchw([y])
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    o, _, _, kw = get_const_tuple(kernel.shape)
    bn, _ = block_shape(o, _output_width(data, kw, strides, padding, dilation), cfg, kw)
    return conv2d_nchw_packed(data, pack_kernel(kernel, bn), strides, padding, dilation,
                              out_dtype, cfg)


def conv2d_nchw_packed(data: te.Tensor, packed: te.Tensor, strides: Any, padding: Any,
                       dilation: Any, out_dtype: str | None = None,
                       config: dict | None = None) -> te.Tensor:
    """NCHW conv2d with a kernel packed by :func:`pack_kernel` (e.g. folded at compile time)."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    bn = get_const_int(packed.shape[4])
    kw = get_const_int(packed.shape[3])
    ow = _output_width(data, kw, strides, padding, dilation)
    tile = tile_width(bn, ow, cfg, kw)
    blocked = conv2d_nchwc(data, packed, strides, padding, dilation, out_dtype, tile)
    return _unpack(blocked, ow, "conv2d_nchw_out")


def _unpack(blocked: te.Tensor, out_width: int, name: str) -> te.Tensor:
    """``[N, O / bn, OH, OWp, bn]`` → ``[N, O, OH, OW]``."""
    n, ob, oh, _, bn = blocked.shape
    bn = get_const_int(bn)
    return te.compute((n, get_const_int(ob) * bn, oh, out_width),
                      lambda b, f, y, x: blocked[b, _op.floordiv(f, bn), y, x,
                                                 _op.floormod(f, bn)],
                      name=name, tag="injective,conv_unpack")


def _output_width(data: te.Tensor, kernel_width: int, strides: Any, padding: Any,
                  dilation: Any) -> int:
    (_, left), (_, right) = get_pad_tuple(padding, 2)
    return conv_output_size(get_const_int(data.shape[3]), kernel_width,
                            int_values(strides, 2, "strides")[1],
                            int_values(dilation, 2, "dilation")[1], left, right)


def schedule_conv2d_nchw(outs: Any, config: dict | None = None) -> Any:
    """Schedule the blocked conv2d in ``outs`` and the NCHW output with its epilogue.

    With one NCHW output, each of its (batch, channel block, row) tasks first computes that
    row of the blocked conv into a small buffer (``compute_at``), so conv, unpacking and
    epilogue are one pass on the thread pool, with no blocked tensor in memory.
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    blocked: list = []
    seen: set[int] = set()

    def visit(op):
        if id(op) in seen:  # reached again from another output
            return
        seen.add(id(op))
        if op.tag == "conv2d_nchwc":
            blocked.append(op.output(0))
        elif op.tag == "kernel_pack":
            stage = sch[op]
            stage.compute_root()
            ob, _, _, _, oi = stage.leaf_iter_vars
            stage.parallel(ob)
            stage.vectorize(oi)

    for t in outs:
        traverse_inline(sch, t.op, visit)
    unpacked = [t for t in outs if t.op.tag != "conv2d_nchwc"]
    for t in unpacked:
        if len(t.shape) not in (4, 5) or _find_blocked(t.op) is None:
            schedule_injective_from_existing(sch, t)
    for conv in blocked:
        threads = worth_threads(conv, cfg)
        readers = [t for t in unpacked if len(t.shape) in (4, 5) and _find_blocked(t.op) is conv]
        attach = len(readers) == 1 and len(outs) == 1
        rows = _rows_per_block(conv, cfg)
        for t in readers:
            schedule_unblocked_output(sch, t, conv, threads, rows if attach else 1)
        if attach:
            stage = sch[readers[0]]
            _schedule_blocked(sch, conv, cfg, threads, (stage, stage.leaf_iter_vars[0]), rows)
        else:
            _schedule_blocked(sch, conv, cfg, threads, None, rows)
    return sch


def _rows_per_block(conv: te.Tensor, cfg: dict) -> int:
    """Output rows per register block: ``cfg["tile_oh"]`` for blocked data where it divides
    the height (a partial block would compute rows past the end), else 1."""
    rows = int(cfg["tile_oh"])
    blocked_in = len(conv.op.reduce_axis) == 4
    height = get_const_int(conv.shape[2])
    return rows if rows > 1 and blocked_in and height % rows == 0 else 1



def schedule_unblocked_output(sch: Any, out: te.Tensor, blocked: te.Tensor | None,
                              threads: bool, rows_per_task: int = 1) -> None:
    """The NCHW or ``NCHW{bn}c`` output (+ epilogue) of a channel-blocked
    ``[N, C / bn, H, W, bn]`` result: NCHW channels split by the block so the blocked reads
    stay contiguous, the (batch, channel block, ``rows_per_task`` rows) tasks fused first and
    on the thread pool when ``threads``; a blocked output's lanes vectorized. Shared by the
    conv2d and depthwise schedules."""
    stage = sch[out]
    if len(out.shape) == 5:
        n, f, y, x, lanes = stage.leaf_iter_vars
        stage.vectorize(lanes)
    else:
        bn = get_const_int(blocked.shape[4]) if blocked is not None else 1
        n, f, y, x = stage.leaf_iter_vars
        f, lanes = stage.split(f, factor=bn)
        stage.reorder(n, f, y, x, lanes)
    if rows_per_task > 1:
        y, rows_inner = stage.split(y, factor=rows_per_task)
        stage.reorder(n, f, y, rows_inner, x, lanes)
    rows = stage.fuse(n, f, y)
    if threads:
        stage.parallel(rows)


def worth_threads(conv: te.Tensor, cfg: dict) -> bool:
    """Whether a reduction stage has the work (``cfg["parallel_min_flops"]``) to pay for
    waking the thread pool; a smaller op runs all its stages on the calling thread."""
    flops = 2 * math.prod(get_const_tuple(conv.shape))
    for axis in conv.op.reduce_axis:
        flops *= get_const_int(axis.dom.extent)
    return flops >= cfg["parallel_min_flops"]


def split_blocked_rows(sch: Any, blocked: te.Tensor, per_row: bool,
                       threads: bool, rows: int = 1) -> tuple[te.Tensor, Any, Any, Any]:
    """Loops of a ``[N, C / bn, H, W, bn]`` result computed in register blocks of
    ``rows`` × ``attrs["tile_ow"]`` columns: one task per (batch, block, ``rows`` rows) if
    ``per_row`` else per (batch, block), on the thread pool when ``threads``; the ``bn``
    lanes vectorized. Returns the local accumulator tensor, the stage, its task axis and the
    column-block axis. Shared by the conv2d and depthwise schedules."""
    acc = sch.cache_write(blocked, "local")
    stage = sch[blocked]
    n, f, y, x, lanes = stage.leaf_iter_vars
    xo, xi = stage.split(x, factor=int(blocked.op.attrs.get("tile_ow", 1)))
    if rows > 1:  # the block's rows inside the column blocks: one accumulator block
        y, yi = stage.split(y, factor=rows)
        stage.reorder(n, f, y, xo, yi, xi, lanes)
    else:
        stage.reorder(n, f, y, xo, xi, lanes)
    task = stage.fuse(n, f, y) if per_row else stage.fuse(n, f)
    if threads:
        stage.parallel(task)
    stage.vectorize(lanes)
    return acc, stage, task, xo


def _find_blocked(op: Any) -> Any:
    for t in op.input_tensors:
        if t.op.tag == "conv2d_nchwc":
            return t
        found = _find_blocked(t.op) if hasattr(t.op, "body") else None
        if found is not None:
            return found
    return None


def _schedule_blocked(sch: Any, conv: te.Tensor, cfg: dict, threads: bool,
                      attach: tuple[Any, Any] | None, rows: int = 1) -> None:
    padded = conv.op.input_tensors[0]
    if padded.op.name == "pad_temp":
        stage = sch[padded]
        stage.compute_root()
        n, c, h = stage.leaf_iter_vars[:3]
        pad_rows = stage.fuse(n, c, h)
        if threads and cfg["parallel_pad"]:
            stage.parallel(pad_rows)
        if len(padded.shape) == 4:
            # an NCHW input (a stem conv): its rows copied in vectors (a scalar copy of the
            # padded 224 x 224 image was a quarter of MobileNet's stem)
            _, lanes = stage.split(stage.leaf_iter_vars[-1], factor=simd_32bit_lanes())
            stage.vectorize(lanes)
    if attach is None:
        acc, o, _, xo = split_blocked_rows(sch, conv, True, threads, rows)
    else:
        # ``rows`` rows of the blocked conv per task of the output stage, in a task-local
        # buffer
        o = sch[conv]
        o.compute_at(*attach)
        acc = sch.cache_write(conv, "local")
        n, f, y, x, lanes = o.leaf_iter_vars
        xo, xi = o.split(x, factor=int(conv.op.attrs.get("tile_ow", 1)))
        if rows > 1:
            o.reorder(n, f, xo, y, xi, lanes)
        o.vectorize(lanes)
    block = sch[acc]
    block.compute_at(o, xo)
    leaves = list(block.leaf_iter_vars)
    data_axes = [iv for iv in leaves if iv.iter_type == 0]
    reduce_axes = [iv for iv in leaves if iv.iter_type != 0]
    by, bx, bfi = data_axes[2:5]
    if len(reduce_axes) == 4:
        # blocked input: the kernel (OIHW{ic}i{oc}o) read in order, one weight vector per
        # input channel, its broadcasts folded into the FMAs (measured on Zen 4: 0.9-1.0x the
        # NCHW conv's time on ResNet's 3x3 layers, where TVM's channel block inside the
        # unrolled kernel row was 1.05-1.2x on the 14- and 7-wide ones)
        rco, ry, rx, rci = reduce_axes
        block_rows = [by] if rows > 1 else []
        if cfg["blocked_unroll_kw"]:  # TVM's unroll_kw order: the columns inside the block
            block.reorder(rco, ry, rci, rx, *block_rows, bx, bfi)
            block.unroll(rx)
        else:
            block.reorder(rco, ry, rx, rci, *block_rows, bx, bfi)
        if rows > 1:
            block.unroll(by)
        block.unroll(bx)
        block.vectorize(bfi)
        return
    rc, ry, rx = reduce_axes
    # an input channel block (TVM's tile_ic) runs innermost of the kernel window
    rco, rci = block.split(rc, factor=cfg["ic_bn"]) if cfg["ic_bn"] > 1 else (rc, None)
    inner = [rci] if rci is not None else []
    if cfg["unroll_kw"]:
        block.reorder(rco, ry, rx, *inner, bx, bfi)
        block.unroll(rx)
    else:
        # kernel columns outermost: an unrolled body is one input row segment, whose
        # broadcasts are not shared with the neighbouring columns' (no register pressure)
        block.reorder(rx, rco, ry, *inner, bx, bfi)
    block.unroll(bx)
    block.vectorize(bfi)
