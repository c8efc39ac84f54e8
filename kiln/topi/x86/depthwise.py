"""x86 depthwise conv2d NCHW (``depthwise_conv2d_nchw.x86``) and NCHW{c}
(``depthwise_conv2d_NCHWc.x86``).

Entry points: :func:`depthwise_conv2d_nchw` and :func:`depthwise_conv2d_NCHWc` (computes),
:func:`schedule_depthwise_conv2d_nchw` (both),
:func:`tile_width`, :data:`DEFAULT_CONFIG` (knobs: ``c_bn`` channels per vector block,
``tile_ow`` output columns per register block (0: the widest of at most ``accumulators``
that pads the row least), ``parallel_min_flops``, the work below which one thread runs it;
``rows_per_task``, output rows per task (at most; a divisor of the height) when the conv is
computed inside its output stage; ``planes``, whether an NCHW conv (NCHW in and out)
runs plane by plane (unless the config sets ``c_bn`` or ``tile_ow``, e.g. from a
``depthwise_conv2d_nchw.x86`` tuning record), and ``plane_rows``, the output rows of its
register block).

Three schemes, each reading the input once per tap without a gather:

* NCHW{c} input (inside a MobileNet, between blocked convs): the output is computed as
  ``[N, O / bn, OH, OWp, bn]``, the innermost loop ``bn`` channels (one vector of input times
  one of weights, any stride or dilation), ``tile_ow`` vector accumulators per register
  block. The input is read in place: a read outside it is a zero under a bounds check
  whose column part is ``likely``, so LoopPartition peels the border column blocks off the
  interior ones (a row's check does not change along the row). Each block is computed
  where the output stage writes it, so the epilogue (bias, relu ...) applies to the
  accumulators before their only store.
* NCHW input and output (a lone layer): plane by plane, vectorized along the output row
  (each tap a shifted contiguous load), blocks of ``plane_rows`` rows times one vector; the
  bounds check of the whole vector is the ``likely`` one, so only the border blocks choose
  lane by lane. At a column stride > 1 each plane task first copies its input plane, padded,
  split by column phase, and the taps read that copy contiguously.
* otherwise (an NCHW input with a tuned channel block, or with a channel multiplier for a
  blocked output): each task packs its channel block's padded planes by *output* channel into
  ``[N, O / c_bn, Hp, Wp, c_bn]`` (a multiplier above 1 repeats input channels) just before it
  reads them, then as the first scheme; a final stage returns to NCHW where needed.

Each output channel ``o`` reads input channel ``o // multiplier``; the kernel is packed as
``[O / c_bn, KH, KW, c_bn]`` for the channel-blocked schemes.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.target.x86 import simd_32bit_lanes
from kiln.tir import op as _op
from kiln.topi.nn.conv import conv_output_size, get_pad_tuple, int_values
from kiln.topi.utils import divisor_at_most, get_const_tuple, traverse_inline
from kiln.topi.x86.conv2d import schedule_unblocked_output, split_blocked_rows, worth_threads
from kiln.topi.x86.conv2d_stem import column_phases
from kiln.topi.x86.injective import schedule_injective_from_existing
from kiln.topi.x86.parallel import DEFAULT_PARALLEL_MIN_FLOPS

DEFAULT_CONFIG = {"c_bn": 8, "tile_ow": 0, "accumulators": 8,
                  "parallel_min_flops": DEFAULT_PARALLEL_MIN_FLOPS, "rows_per_task": 4,
                  "planes": True, "plane_rows": 8}


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
    # a tuning record's channel block / register block were measured on the channel-blocked
    # kernel, so they keep it
    tuned_blocks = any(knob in (config or {}) for knob in ("c_bn", "tile_ow"))
    if cfg["planes"] and not tuned_blocks:
        return _depthwise_planes(data, kernel, strides, padding, dilation, out_dtype, cfg)
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
        # one layer alone (NCHW in and out): the NCHW kernel runs plane by plane (or, with a
        # tuned channel block, on 8-channel blocks), which gather and scatter faster than
        # 16-channel ones (measured: 0.8-1.2x ORT against 1.4-1.9x)
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


def _depthwise_planes(data, kernel, strides, padding, dilation, out_dtype,
                      cfg) -> te.Tensor:
    """NCHW depthwise conv computed plane by plane, vectorized along the output row (at a
    unit column stride each tap is a contiguous, shifted load of the input row; at a larger
    one, of a phase-split copy: :func:`_depthwise_phase_planes`), no repacking:
    ``[N, O, OHp, OWp]`` blocks of ``cfg["plane_rows"]`` rows × one vector, read through a
    ``likely`` bounds check that LoopPartition peels off the interior blocks; the returned
    ``[N, O, OH, OW]`` stage (the crop) carries the epilogue."""
    n, c, h, w = get_const_tuple(data.shape)
    o, _, kh, kw = get_const_tuple(kernel.shape)
    multiplier = o // c
    sh, sw = int_values(strides, 2, "strides")
    dh, dw = int_values(dilation, 2, "dilation")
    (pt, pl), (pb, pr) = get_pad_tuple(padding, 2)
    oh = conv_output_size(h, kh, sh, dh, pt, pb)
    ow = conv_output_size(w, kw, sw, dw, pl, pr)
    lanes = simd_32bit_lanes()
    rows = max(1, min(cfg["plane_rows"], oh))
    shape = (n, o, -(-oh // rows) * rows, -(-ow // lanes) * lanes)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    out_dtype = out_dtype or data.dtype
    if sw > 1:
        return _depthwise_phase_planes(data, kernel, (sh, sw), (dh, dw), (pt, pl), (oh, ow),
                                       shape, (ry, rx), out_dtype, rows, lanes)

    def tap(b, f, y, x):
        row, col = y * sh + ry.var * dh - pt, x * sw + rx.var * dw - pl
        # the check of the whole vector's columns (its first and last lane) is the likely
        # one: it does not depend on the lane, so the partitioner splits the block loop on
        # it but never the vector loop; a border block then chooses lane by lane. The row's
        # check stays (peeling border rows as well copies the unrolled block nine times)
        first = (x - _op.floormod(x, lanes)) * sw + rx.var * dw - pl
        row_inside = _op.all(row >= 0, row < h)
        whole = _op.all(row_inside, _op.likely(_op.all(first >= 0,
                                                       first + (lanes - 1) * sw < w)))
        value = data[b, _op.floordiv(f, multiplier), row, col]
        zero = _op.const(0, data.dtype)
        lane = _op.if_then_else(_op.all(row_inside, col >= 0, col < w), value, zero)
        return _op.cast(_op.if_then_else(whole, value, lane), out_dtype)

    planes = te.compute(
        shape, lambda b, f, y, x: te.sum(
            tap(b, f, y, x) * _op.cast(kernel[f, 0, ry.var, rx.var], out_dtype),
            axis=[ry, rx]),
        name="depthwise_planes", tag="depthwise_conv2d_planes",
        attrs={"rows": rows, "lanes": lanes})
    return te.compute((n, o, oh, ow), lambda *i: planes(*i), name="depthwise_conv2d_nchw_out",
                      tag="injective,conv_crop")


def _depthwise_phase_planes(data, kernel, strides, dilation, pad_before, out_hw, shape,
                            reduce_axes, out_dtype, rows, lanes) -> te.Tensor:
    """The plane-by-plane kernel at a column stride > 1: a strided row read would be a gather
    per tap, so each plane task first copies its input plane, zero-padded, split by column
    phase (``phases[b, f, row, p, j] = padded[b, f / multiplier, row, j * sw + p]``); tap
    ``rx`` of output columns ``x .. x + lanes`` then reads ``phases[.., (rx * dw) % sw,
    x + (rx * dw) // sw ..]``, contiguous (measured on Zen 4, one thread, 64x112x112 3x3
    stride 2: 0.19 ms, 0.22 through the channel-blocked kernel's pack and unpack; ORT 0.16)."""
    n, c = get_const_tuple(data.shape)[:2]
    o, _, kh, kw = get_const_tuple(kernel.shape)
    (sh, sw), (dh, dw), (oh, ow) = strides, dilation, out_hw
    ry, rx = reduce_axes
    phases = column_phases(data, o, (shape[2] - 1) * sh + (kh - 1) * dh + 1, sw,
                           shape[3] + (kw - 1) * dw // sw, pad_before, "depthwise_phases",
                           "depthwise_phase_split", multiplier=o // c)
    planes = te.compute(
        shape, lambda b, f, y, x: te.sum(
            _op.cast(phases[b, f, y * sh + ry.var * dh, _op.floormod(rx.var * dw, sw),
                            x + _op.floordiv(rx.var * dw, sw)], out_dtype)
            * _op.cast(kernel[f, 0, ry.var, rx.var], out_dtype), axis=[ry, rx]),
        name="depthwise_planes", tag="depthwise_conv2d_planes",
        attrs={"rows": rows, "lanes": lanes})
    return te.compute((n, o, oh, ow), lambda *i: planes(*i), name="depthwise_conv2d_nchw_out",
                      tag="injective,conv_crop")


def _schedule_planes(sch: Any, planes: te.Tensor, out: te.Tensor | None, cfg: dict) -> None:
    """One task per (batch, channel) plane; in it, blocks of ``rows`` output rows × one
    vector, the conv accumulated in registers and written once through the epilogue of
    ``out`` (or into the conv's own tensor when ``out`` is None: several readers)."""
    rows, lanes = int(planes.op.attrs["rows"]), int(planes.op.attrs["lanes"])
    if out is None:
        acc = sch.cache_write(planes, "local")
        stage = sch[planes]
    else:
        acc = planes
        sch[planes].set_scope("local")
        stage = sch[out]
    n, f, y, x = stage.leaf_iter_vars[:4]
    yo, yi = stage.split(y, factor=rows)
    xo, xi = stage.split(x, factor=lanes)
    # rows and blocks stay serial loops inside the task, so the loop partitioner can peel
    # the padded border rows and blocks off them
    stage.reorder(n, f, yo, xo, yi, xi)
    task = stage.fuse(n, f)
    if worth_threads(planes, cfg):
        stage.parallel(task)
    for t in planes.op.input_tensors:
        if t.op.tag == "depthwise_phase_split":  # a column stride: the plane's phase copy
            sch[t].compute_at(stage, task)
            # both phases in one column loop: LLVM reads the row contiguously and
            # deinterleaves (an interleave group) instead of a strided load per phase
            _, _, row, phase, col = sch[t].op.axis
            sch[t].reorder(row, col, phase)
            sch[t].unroll(phase)
    stage.unroll(yi)
    stage.vectorize(xi)
    conv = sch[acc]
    conv.compute_at(stage, xo)
    _, _, cy, cx = conv.op.axis
    ry, rx = conv.op.reduce_axis
    conv.reorder(ry, rx, cy, cx)
    conv.unroll(rx)
    conv.unroll(cy)
    conv.vectorize(cx)


def _find_planes(op: Any) -> Any:
    """The plane-wise depthwise conv ``op`` reads (through inlined stages), or None."""
    if op.tag == "depthwise_conv2d_planes":
        return op
    for t in getattr(op, "input_tensors", []):
        found = _find_planes(t.op)
        if found is not None:
            return found
    return None


def _depthwise_blocked(read_input, shape, kpack, dtype, strides, padding, dilation,
                       out_dtype, cfg, direct: bool = False) -> tuple[te.Tensor, int]:
    """``([N, O / bn, OH, OWp, bn], OW)`` from ``read_input(b, block, row, col, lane)`` (an input
    of ``shape`` = ``(N, O / bn, H, W, bn)`` seen by output channel) and the packed kernel
    ``[O / bn, KH, KW, bn]``. The input is packed, padded, into ``data_pack`` first, or with
    ``direct`` (an input already blocked) read in place: a read outside the input is a zero
    under a bounds check whose column part is ``likely``, which LoopPartition peels off the
    loop over column blocks, so only the border blocks test the columns."""
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
        # only the columns' check is likely: peeling the border rows too (copies of the
        # unrolled block for each) tripled MobileNet's lowering and LLVM time; a row's check
        # does not change along the row
        inside = _op.all(row >= 0, row < h, _op.likely(_op.all(col >= 0, col < w)))
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
    >>> [iv.var.name for iv in s[y].leaf_iter_vars]  # plane tasks, row blocks, vector blocks
    ['i0.i1.fused', 'i2.outer', 'i3.outer', 'i2.inner', 'i3.inner']
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    found: list = []

    planes: list = []

    def visit(op):
        if op.tag == "depthwise_conv2d_nchwc":
            found.append(op.output(0))
        elif op.tag == "depthwise_conv2d_planes" and all(t.op is not op for t in planes):
            planes.append(op.output(0))

    for out in outs:
        traverse_inline(sch, out.op, visit)
    for conv in planes:
        users = [out for out in outs if _find_planes(out.op) is conv.op]
        if len(users) == 1 and users[0].op is not conv.op:
            _schedule_planes(sch, conv, users[0], cfg)
            continue
        _schedule_planes(sch, conv, None, cfg)
        for out in users:
            if out.op is not conv.op:
                schedule_injective_from_existing(sch, out)
    outs = [out for out in outs if _find_planes(out.op) is None]
    if not found:
        return sch
    readers = [out for out in outs if len(out.shape) in (4, 5) and out.op is not found[0].op]
    # row blocks inside the output stage when the input is already blocked (NCHW{c}, read in
    # place); an NCHW input is gathered channel by channel, which pays only once per plane
    attach = len(found) == 1 and len(readers) == 1 and len(outs) == 1 and \
        bool(int(found[0].op.attrs.get("direct_input", 0)))
    rows = divisor_at_most(get_const_tuple(found[0].shape)[2], cfg["rows_per_task"]) \
        if attach else 1
    for out in readers:
        schedule_unblocked_output(sch, out, found[0], worth_threads(found[0], cfg), rows)
        if len(out.shape) == 4:  # NCHW: each column's channel block scattered, unrolled
            sch[out].unroll(sch[out].leaf_iter_vars[-1])
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
            # the gathering copy unrolled by 4 columns (LLVM's own unroller, which did it,
            # is off since the LLVM pipeline marks loops itself: 0.14 -> 0.42 ms on
            # MobileNet's lone 64-channel stride-2 layer; 0.21 ms with these unrolls)
            _, columns = sch[dpack].split(sch[dpack].leaf_iter_vars[-2], factor=4)
            sch[dpack].unroll(columns)
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
