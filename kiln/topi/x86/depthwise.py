"""x86 depthwise conv2d NCHW (``depthwise_conv2d_nchw.x86``) and NCHW{c}
(``depthwise_conv2d_NCHWc.x86``), vectorized over channels.

Entry points: :func:`depthwise_conv2d_nchw` and :func:`depthwise_conv2d_NCHWc` (computes),
:func:`schedule_depthwise_conv2d_nchw` (both),
:func:`tile_width`, :data:`DEFAULT_CONFIG` (knobs: ``c_bn`` channels per vector block,
``tile_ow`` output columns per register block (0: the widest of at most ``accumulators``
that pads the row least), ``parallel_min_flops``, the work below which one thread runs it;
``rows_per_task``, output rows per task (at most; a divisor of the height) when the conv is
computed inside its output stage).

Each output channel ``o`` reads input channel ``o // multiplier``. The input is repacked,
padded, by *output* channel into ``[N, O / c_bn, Hp, Wp, c_bn]`` (a channel multiplier above 1
repeats input channels), the kernel into ``[O / c_bn, KH, KW, c_bn]``, and the output is
computed as ``[N, O / c_bn, OH, OWp, c_bn]``: the innermost loop is ``c_bn`` channels, one
contiguous vector of input times one of weights, for any stride or dilation (no gather and
no per-row bounds checks). Each parallel task (batch, channel block) keeps
``tile_ow`` vector accumulators across the ``KH × KW`` taps; the row is padded to ``OWp``, a
whole number of blocks. Each task packs its channel block's padded planes just before it reads
them (still in cache). A final injective stage returns to NCHW (NCHW{c} keeps the blocks),
dropping the padding columns, and carries any fused epilogue (bias, relu …).
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi.nn.conv import conv_output_size, get_pad_tuple, int_values
from kiln.topi.utils import divisor_at_most, get_const_tuple, traverse_inline
from kiln.topi.x86.conv2d import schedule_unblocked_output, split_blocked_rows, worth_threads
from kiln.topi.x86.parallel import DEFAULT_PARALLEL_MIN_FLOPS

DEFAULT_CONFIG = {"c_bn": 8, "tile_ow": 0, "accumulators": 8,
                  "parallel_min_flops": DEFAULT_PARALLEL_MIN_FLOPS, "rows_per_task": 4}


def tile_width(out_width: int, cfg: dict) -> int:
    """Output columns per register block: ``cfg["tile_ow"]`` when set, else the widest block
    of at most ``cfg["accumulators"]`` vectors among those that pad the row least.

    Example
    -------
    >>> from kiln.topi.x86.depthwise import DEFAULT_CONFIG, tile_width
    >>> tile_width(56, DEFAULT_CONFIG), tile_width(7, DEFAULT_CONFIG)
    (8, 7)
    """
    if cfg["tile_ow"]:
        return cfg["tile_ow"]
    widest = max(1, cfg["accumulators"])
    return min(range(widest, 0, -1), key=lambda t: -(-out_width // t) * t)


def depthwise_conv2d_nchw(data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any,
                          dilation: Any, out_dtype: str | None = None,
                          config: dict | None = None) -> te.Tensor:
    """Depthwise conv2d: data ``[N, C, H, W]``, kernel ``[C × multiplier, 1, KH, KW]``.

    Example
    -------
    >>> from kiln import te
    >>> from kiln.topi.x86.depthwise import depthwise_conv2d_nchw
    >>> y = depthwise_conv2d_nchw(te.placeholder((1, 16, 9, 9)), te.placeholder((16, 1, 3, 3)),
    ...                           1, 1, 1)
    >>> [int(d) for d in y.shape]
    [1, 16, 9, 9]
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    n, c, h, w = get_const_tuple(data.shape)
    kshape = get_const_tuple(kernel.shape)
    if len(kshape) != 4 or kshape[1] != 1 or kshape[0] % c:
        raise TVMError(f"depthwise conv2d: kernel {list(kshape)} is not [C x multiplier, 1, "
                       f"KH, KW] for {c} input channels")
    o, _, kh, kw = kshape
    multiplier = o // c
    bn = divisor_at_most(o, cfg["c_bn"])

    def read_input(b, ob, row, col, i):
        return data[b, _op.floordiv(ob * bn + i, multiplier), row, col]

    kpack = te.compute((o // bn, kh, kw, bn),
                       lambda ob, y, x, i: kernel[ob * bn + i, 0, y, x], name="kernel_pack",
                       tag="depthwise_kernel_pack")
    blocked, ow = _depthwise_blocked(read_input, (n, o // bn, h, w, bn), kpack, data.dtype,
                                     strides, padding, dilation, out_dtype, cfg)
    return te.compute((n, o, blocked.shape[2], ow), lambda b, f, y, x: blocked[
        b, _op.floordiv(f, bn), y, x, _op.floormod(f, bn)],
        name="depthwise_conv2d_nchw_out", tag="injective,conv_unpack")


def depthwise_conv2d_NCHWc(data: te.Tensor, kernel: te.Tensor, strides: Any,  # noqa: N802
                           padding: Any, dilation: Any, layout: str, out_layout: str,
                           out_dtype: str | None = None,
                           config: dict | None = None) -> te.Tensor:
    """TVM's ``depthwise_conv2d_NCHWc`` (channel multiplier 1): ``NCHW{bn}c`` data (or plain
    NCHW) × ``OIHW1i{bn}o`` kernel ``[C / bn, 1, KH, KW, 1, bn]`` → ``NCHW{bn}c`` (or NCHW).

    Example
    -------
    >>> from kiln import te
    >>> from kiln.topi.x86.depthwise import depthwise_conv2d_NCHWc
    >>> y = depthwise_conv2d_NCHWc(te.placeholder((1, 2, 9, 9, 8)),
    ...                            te.placeholder((2, 1, 3, 3, 1, 8)), 2, 1, 1, "NCHW8c", "NCHW8c")
    >>> [int(d) for d in y.shape]
    [1, 2, 5, 5, 8]
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    dshape, kshape = get_const_tuple(data.shape), get_const_tuple(kernel.shape)
    blocked_in = len(dshape) == 5
    channels = dshape[1] * (dshape[4] if blocked_in else 1)
    if len(kshape) != 6 or kshape[1] != 1 or kshape[4] != 1 or \
            kshape[0] * kshape[5] != channels or (blocked_in and dshape[4] != kshape[5]) or \
            out_layout not in ("NCHW", f"NCHW{kshape[5]}c") or \
            layout != (f"NCHW{kshape[5]}c" if blocked_in else "NCHW"):
        raise TVMError(f"depthwise_conv2d_NCHWc: data {list(dshape)} ({layout}) and kernel "
                       f"{list(kshape)} are not [N, C / bn, H, W, bn] (or NCHW) and "
                       f"[C / bn, 1, KH, KW, 1, bn] with output {out_layout}")
    bn = kshape[5]
    n, h, w = dshape[0], dshape[2], dshape[3]
    if not blocked_in and out_layout == "NCHW":
        # one layer alone (NCHW in and out): the NCHW kernel's 8-channel planes gather and
        # scatter faster than 16-channel blocks (measured: 0.8-1.2x ORT against 1.4-1.9x)
        oihw = te.compute((channels, 1, kshape[2], kshape[3]),
                          lambda o, i, y, x: kernel[o // bn, 0, y, x, 0, o % bn],
                          name="kernel_oihw", tag="injective")
        return depthwise_conv2d_nchw(data, oihw, strides, padding, dilation, out_dtype, config)

    def read_input(b, ob, row, col, i):
        return data[b, ob, row, col, i] if blocked_in else data[b, ob * bn + i, row, col]

    kpack = te.compute((kshape[0], kshape[2], kshape[3], bn),
                       lambda ob, y, x, i: kernel[ob, 0, y, x, 0, i], name="kernel_pack",
                       tag="depthwise_kernel_pack")
    blocked, ow = _depthwise_blocked(read_input, (n, kshape[0], h, w, bn), kpack, data.dtype,
                                     strides, padding, dilation, out_dtype, cfg,
                                     direct=blocked_in)
    if out_layout == "NCHW":
        return te.compute((n, channels, blocked.shape[2], ow), lambda b, f, y, x: blocked[
            b, _op.floordiv(f, bn), y, x, _op.floormod(f, bn)],
            name="depthwise_conv2d_nchw_out", tag="injective,conv_unpack")
    shape = [*blocked.shape[:3], ow, bn]
    return te.compute(shape, lambda *i: blocked(*i), name="depthwise_conv2d_NCHWc_out",
                      tag="injective,conv_crop")


def _depthwise_blocked(read_input, shape, kpack, dtype, strides, padding, dilation,
                       out_dtype, cfg, direct: bool = False) -> tuple[te.Tensor, int]:
    """``([N, O / bn, OH, OWp, bn], OW)`` from ``read_input(b, block, row, col, lane)`` (an input
    of ``shape`` = ``(N, O / bn, H, W, bn)`` seen by output channel) and the packed kernel
    ``[O / bn, KH, KW, bn]``. The input is packed, padded, into ``data_pack`` first, or with
    ``direct`` (an input already blocked) read in place: a read outside the input is a zero
    under a ``likely`` bounds check, which LoopPartition peels off the loops over output rows
    and column blocks, so only the border rows and blocks test it."""
    n, blocks, h, w, bn = shape
    _, kh, kw, _ = get_const_tuple(kpack.shape)
    sh, sw = int_values(strides, 2, "strides")
    dh, dw = int_values(dilation, 2, "dilation")
    (pt, pl), (pb, pr) = get_pad_tuple(padding, 2)
    oh = conv_output_size(h, kh, sh, dh, pt, pb)
    ow = conv_output_size(w, kw, sw, dw, pl, pr)
    tile = tile_width(ow, cfg)
    ow_padded = -(-ow // tile) * tile
    hp = (oh - 1) * sh + (kh - 1) * dh + 1
    wp = (ow_padded - 1) * sw + (kw - 1) * dw + 1

    def packed_input(b, ob, y, x, i):
        row, col = y - pt, x - pl
        inside = _op.all(row >= 0, row < h, col >= 0, col < w)
        return _op.if_then_else(inside, read_input(b, ob, _op.min(_op.max(row, 0), h - 1),
                                                   _op.min(_op.max(col, 0), w - 1), i),
                                _op.const(0, dtype))

    def direct_input(b, ob, y, x, i):
        row, col = y - pt, x - pl
        inside = _op.likely(_op.all(row >= 0, row < h, col >= 0, col < w))
        return _op.if_then_else(inside, read_input(b, ob, row, col, i), _op.const(0, dtype))

    if direct:
        source = direct_input
    else:
        source = te.compute((n, blocks, hp, wp, bn), packed_input, name="data_pack",
                            tag="depthwise_data_pack")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    out_dtype = out_dtype or dtype
    return te.compute(
        (n, blocks, oh, ow_padded, bn),
        lambda b, f, y, x, i: te.sum(
            _op.cast(source(b, f, y * sh + ry.var * dh, x * sw + rx.var * dw, i), out_dtype)
            * _op.cast(kpack[f, ry.var, rx.var, i], out_dtype), axis=[ry, rx]),
        name="depthwise_nchwc", tag="depthwise_conv2d_nchwc",
        attrs={"tile_ow": tile, "direct_input": int(direct)}), ow


def schedule_depthwise_conv2d_nchw(outs: Any, config: dict | None = None) -> Any:
    """Schedule the channel-blocked depthwise conv in ``outs`` and its fused epilogue.

    Example
    -------
    >>> from kiln import te, topi
    >>> from kiln.topi.x86.depthwise import depthwise_conv2d_nchw
    >>> y = topi.nn.relu(depthwise_conv2d_nchw(te.placeholder((1, 8, 6, 6)),
    ...                                        te.placeholder((8, 1, 3, 3)), 1, 1, 1))
    >>> s = schedule_depthwise_conv2d_nchw([y])
    >>> len(s[y].leaf_iter_vars)  # (batch, channel block, row) tasks, columns, channels
    3
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    found: list = []

    def visit(op):
        if op.tag == "depthwise_conv2d_nchwc":
            found.append(op.output(0))

    for out in outs:
        traverse_inline(sch, out.op, visit)
    readers = [out for out in outs if found and len(out.shape) in (4, 5)
               and out.op is not found[0].op]
    # row blocks inside the output stage when the input is already blocked (NCHW{c}, read in
    # place); an NCHW input is gathered channel by channel, which pays only once per plane
    attach = len(found) == 1 and len(readers) == 1 and len(outs) == 1 and \
        bool(int(found[0].op.attrs.get("direct_input", 0)))
    rows = divisor_at_most(get_const_tuple(found[0].shape)[2], cfg["rows_per_task"]) \
        if attach else 1
    for out in readers:
        schedule_unblocked_output(sch, out, found[0], worth_threads(found[0], cfg), rows)
    if attach:
        stage = sch[readers[0]]
        _schedule_blocked(sch, found[0], cfg, (stage, stage.leaf_iter_vars[0]))
    else:
        for blocked in found:
            _schedule_blocked(sch, blocked, cfg, None)
    return sch


def _schedule_blocked(sch: Any, blocked: te.Tensor, cfg: dict,
                      attach: tuple[Any, Any] | None) -> None:
    packs = {t.op.tag: t for t in blocked.op.input_tensors}
    kstage = sch[packs["depthwise_kernel_pack"]]
    kstage.compute_root()
    kstage.vectorize(kstage.leaf_iter_vars[-1])
    dpack = packs.get("depthwise_data_pack")
    if attach is None:
        acc, o, task, xo = split_blocked_rows(sch, blocked, False, worth_threads(blocked, cfg))
        if dpack is not None:
            # each task packs its channel block's padded planes just before using them
            sch[dpack].compute_at(o, task)
            sch[dpack].vectorize(sch[dpack].leaf_iter_vars[-1])
    else:
        # a few output rows per task of the output stage (the blocked input read in place),
        # each register block of the conv computed right where the output stage writes it,
        # so the epilogue (bias, relu ...) applies to the accumulators before their only
        # store (measured on MobileNet's layers: a padded copy of the task's input rows and a
        # conv row buffer between conv and epilogue took ~50% of the time)
        out, _ = attach
        tile = int(blocked.op.attrs.get("tile_ow", 1))
        *outer, x, lanes = out.leaf_iter_vars
        xo, xi = out.split(x, factor=tile)
        out.reorder(*outer, xo, xi, lanes)
        out.unroll(xi)
        acc, o = blocked, out
        sch[blocked].set_scope("local")
    block = sch[acc]
    block.compute_at(o, xo)
    leaves = list(block.leaf_iter_vars)
    bx, bi = [iv for iv in leaves if iv.iter_type == 0][3:5]
    ry, rx = [iv for iv in leaves if iv.iter_type != 0]
    block.reorder(ry, rx, bx, bi)
    block.unroll(rx)
    block.unroll(bx)
    block.vectorize(bi)
