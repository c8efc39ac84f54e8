"""x86 pointwise (1x1) conv2d on NCHW data with an NCHW result, as a GEMM with no packing of
the activations (``conv2d_pointwise_nchw.x86``).

Entry points: :func:`pointwise_applies` (whether a conv can take this kernel),
:func:`conv2d_pointwise_nchw` (compute), :func:`schedule_conv2d_pointwise` (schedule),
:func:`row_group` (rows per task), :func:`kernel_dims` and :data:`DEFAULT_CONFIG` (knobs:
``tile_oc`` output channels and ``tile_hw`` vectors of output pixels per register block, 0
for the measured choice; ``parallel_min_flops``).

A 1x1 conv is ``out[n, o, p] = sum_c W[o, c] * X[n, c, p]`` over the flattened pixels ``p``:
the pixels are contiguous in both NCHW tensors, so the innermost loop is one vector of
pixels times one broadcast weight, and a register block of ``tile_oc`` output channels ×
``tile_hw`` vectors keeps its accumulators across the whole reduction. A conv that stays in
NCHW at both ends (a lone layer, or one between ops that need NCHW) then needs neither a
packed input nor an unpacking transpose of its result, which the channel-blocked
``conv2d_NCHWc`` kernel pays for (measured on Zen 4, one thread: MobileNet's 32->64
pointwise layer at 112x112 0.80 -> 0.51 ms, 128->128 at 56x56 1.10 -> 0.95 ms). Each
parallel task computes ``tile_oc``-channel slices of whole output rows (a row group whose
pixels fill whole vectors, :func:`row_group`), so no vector straddles a row group and the
epilogue (bias, activation, residual add ...) writes whole vectors. A strided 1x1 conv (a
ResNet downsample) first gathers the pixels it reads into a dense NCHW copy.

The kernel may be OIHW or AlterOpLayout's ``OIHW{n}o`` (``[O / n, C, 1, 1, n]``), in which a
register block's weights for one input channel are contiguous.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.target.x86 import simd_32bit_lanes
from kiln.tir import op as _op
from kiln.topi.nn.conv import get_pad_tuple, int_values
from kiln.topi.utils import divisor_at_most, find_tagged, get_const_tuple
from kiln.topi.x86.conv2d import worth_threads
from kiln.topi.x86.injective import schedule_injective_from_existing
from kiln.topi.x86.parallel import DEFAULT_PARALLEL_MIN_FLOPS

DEFAULT_CONFIG = {"tile_oc": 0, "tile_hw": 0, "parallel_min_flops": DEFAULT_PARALLEL_MIN_FLOPS}

# (output channels, pixel vectors) per register block by vector width: per input channel,
# the block's pixel vectors times its channels' broadcast weights. AVX-512 (32 zmm registers,
# the broadcast folded into the FMA): 16 x 1 (measured on Zen 4, one thread, 32->64 at
# 112x112 / 128->128 at 56x56 / 256->256 at 28x28: 16 x 1 0.64 / 1.04 / 0.95 ms, 8 x 2
# 0.58 / 1.02 / 0.94, 12 x 2 0.61 / 1.12 / 0.96, 4 x 4 0.67 / 6.2 / 1.09), kept for its smaller
# row groups; AVX2 (16 ymm): 4 x 2 (56x56 / 28x28: 1.16 / 1.14 ms, 8 x 1 1.42 / 1.37, 8 x 2
# and 16 x 1 spill: 2.8-2.9).
_REGISTER_BLOCK = {16: (16, 1), 8: (4, 2), 4: (4, 1)}


def kernel_dims(kernel: Any) -> list[int]:
    """``[O, C, KH, KW]`` of an OIHW or ``OIHW{n}o`` kernel (a tensor or its shape).

    Example
    -------
    >>> kernel_dims((4, 32, 1, 1, 16)), kernel_dims((64, 32, 3, 3))
    ([64, 32, 1, 1], [64, 32, 3, 3])
    """
    shape = [int(getattr(d, "value", d)) for d in getattr(kernel, "shape", kernel)]
    return [shape[0] * shape[4], *shape[1:4]] if len(shape) == 5 else shape


def _weight(kernel: te.Tensor, o: Any, c: Any) -> Any:
    """``W[o, c]`` of a 1x1 kernel in OIHW or ``OIHW{n}o``."""
    if len(kernel.shape) == 5:
        bn = int(kernel.shape[4].value)
        return kernel[_op.floordiv(o, bn), c, 0, 0, _op.floormod(o, bn)]
    return kernel[o, c, 0, 0]


def row_group(out_height: int, out_width: int, lanes: int) -> int:
    """Output rows per task: the fewest that divide the height and fill whole vectors of
    ``lanes`` pixels, 0 when none does (e.g. 7x7 or 14x14 outputs with 16 lanes).

    Example
    -------
    >>> row_group(112, 112, 16), row_group(56, 56, 16), row_group(28, 28, 16), row_group(7, 7, 16)
    (1, 2, 4, 0)
    """
    return next((k for k in range(1, out_height + 1)
                 if out_height % k == 0 and k * out_width % lanes == 0), 0)


def pointwise_applies(data_shape: Any, kernel: te.Tensor | tuple, strides: Any, padding: Any,
                      groups: int = 1, lanes: int | None = None) -> bool:
    """Whether a conv of NCHW ``data_shape`` (static) × ``kernel`` (OIHW or ``OIHW{n}o``, a
    tensor or its shape) can run as this GEMM: a 1x1 kernel, no padding, groups 1, and
    output rows that group into whole vectors (:func:`row_group`)."""
    shape = [getattr(d, "value", d) for d in data_shape]
    if len(shape) != 4 or not all(isinstance(d, int) for d in shape) or groups != 1:
        return False
    kshape = [getattr(d, "value", d) for d in getattr(kernel, "shape", kernel)]
    if len(kshape) not in (4, 5) or kshape[2:4] != [1, 1]:
        return False
    (pt, pl), (pb, pr) = get_pad_tuple(padding, 2)
    if pt or pl or pb or pr:
        return False
    sh, sw = int_values(strides, 2, "strides")
    oh, ow = (shape[2] - 1) // sh + 1, (shape[3] - 1) // sw + 1
    return row_group(oh, ow, lanes or simd_32bit_lanes()) > 0


def conv2d_pointwise_nchw(data: te.Tensor, kernel: te.Tensor, strides: Any,
                          out_dtype: str | None = None) -> te.Tensor:
    """NCHW data × 1x1 kernel (OIHW or ``OIHW{n}o``) → NCHW, computed over flattened pixels.

    Example
    -------
    >>> from kiln import te
    >>> from kiln.topi.x86.conv2d_pointwise import conv2d_pointwise_nchw
    >>> y = conv2d_pointwise_nchw(te.placeholder((1, 32, 28, 28)),
    ...                           te.placeholder((4, 32, 1, 1, 16)), 2)
    >>> [int(d) for d in y.shape]
    [1, 64, 14, 14]
    """
    n, c, h, w = get_const_tuple(data.shape)
    o, kc, kh, kw = kernel_dims(kernel)
    if (kh, kw) != (1, 1) or kc != c:
        raise TVMError(f"conv2d_pointwise x86: kernel {list(get_const_tuple(kernel.shape))} is "
                       f"not a 1x1 kernel over the {c} input channels of {[n, c, h, w]}")
    sh, sw = int_values(strides, 2, "strides")
    oh, ow = (h - 1) // sh + 1, (w - 1) // sw + 1
    if (sh, sw) != (1, 1):
        # a dense copy of the pixels the strided conv reads: the GEMM then loads whole vectors.
        # It runs on the calling thread before the GEMM (a ResNet downsample's 64x28x28
        # floats: ~12 us), as conv2d_nchw.x86's padded copy: a launch of its own waits for
        # the slowest worker, milliseconds when other processes share the cores.
        data = te.compute((n, c, oh, ow), lambda b, ch, y, x: data[b, ch, y * sh, x * sw],
                          name="data_strided", tag="conv_subsample")
    out_dtype = out_dtype or data.dtype
    rc = te.reduce_axis((0, c), name="rc")
    gemm = te.compute(
        (n, o, oh * ow),
        lambda b, f, p: te.sum(
            _op.cast(data[b, rc.var, _op.floordiv(p, ow), _op.floormod(p, ow)], out_dtype)
            * _op.cast(_weight(kernel, f, rc.var), out_dtype), axis=rc),
        name="conv2d_pointwise", tag="conv2d_pointwise")
    return te.compute((n, o, oh, ow), lambda b, f, y, x: gemm[b, f, y * ow + x],
                      name="conv2d_pointwise_out", tag="injective,conv_unflatten")


def _register_block(out_channels: int, cfg: dict, lanes: int) -> tuple[int, int]:
    """(output channels, pixel vectors) of a register block: the knobs, else the table's."""
    channels, vectors = _REGISTER_BLOCK.get(lanes, (4, 1))
    channels = int(cfg["tile_oc"]) or channels
    return divisor_at_most(out_channels, channels), int(cfg["tile_hw"]) or vectors


def schedule_conv2d_pointwise(outs: Any, config: dict | None = None) -> Any:
    """Schedule :func:`conv2d_pointwise_nchw` and its fused epilogue.

    With one output, each parallel task (batch, a row group, ``tile_oc`` channels) computes
    its slice of the GEMM in register blocks into a small buffer, then the output stage
    applies the epilogue to it in whole vectors: one pass over the output, one launch.
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    # a strided conv's copy of its pixels stays a serial loop nest of its own (see
    # conv2d_pointwise_nchw)
    found = find_tagged(sch, outs, ("conv2d_pointwise",))
    gemm = found["conv2d_pointwise"]
    lanes = simd_32bit_lanes()
    threads = worth_threads(gemm, cfg)
    _, out_channels, _ = get_const_tuple(gemm.shape)
    tile_oc, tile_hw = _register_block(out_channels, cfg, lanes)
    anchor = outs[0] if len(outs) == 1 and len(outs[0].shape) == 4 else None
    for t in outs:
        if t is not anchor:
            schedule_injective_from_existing(sch, t)
    if anchor is None:  # several outputs read the conv: it is computed whole, then read
        acc = sch.cache_write(gemm, "local")
        stage = sch[gemm]
        n, f, p = stage.leaf_iter_vars
        fo, fi = stage.split(f, factor=tile_oc)
        po, pi = stage.split(p, factor=lanes)
        stage.reorder(n, fo, po, fi, pi)
        stage.unroll(fi)
        stage.vectorize(pi)
        task = stage.fuse(n, fo)
        _schedule_register_block(sch, acc, stage, po, lanes)
        if threads:
            stage.parallel(task)
        return sch
    _, _, out_height, out_width = get_const_tuple(anchor.shape)
    # a register block's vectors must tile the row group: else one vector per block
    block_pixels = lanes * tile_hw
    rows = row_group(out_height, out_width, block_pixels)
    if not rows:
        rows, block_pixels = row_group(out_height, out_width, lanes), lanes
    stage = sch[anchor]
    n, f, y, x = stage.leaf_iter_vars
    fo, fi = stage.split(f, factor=tile_oc)
    yo, yi = stage.split(y, factor=rows)
    # a row group's channel blocks run one after another, so its input rows stay in the
    # core's cache (blocks outermost streamed the whole input per block: 2 threads spent
    # 0.73 ms CPU on MobileNet's 32->64 layer, 0.55-0.64 in this order)
    stage.reorder(n, yo, fo, fi, yi, x)
    pixels = stage.fuse(yi, x)
    _, vector = stage.split(pixels, factor=lanes)
    stage.vectorize(vector)
    task = stage.fuse(n, yo, fo)
    if threads:
        stage.parallel(task)
    sch[gemm].compute_at(stage, task)
    acc = sch.cache_write(gemm, "local")
    block = sch[gemm]
    _, f, p = block.leaf_iter_vars
    po, pi = block.split(p, factor=block_pixels)
    pv, pl = block.split(pi, factor=lanes)
    block.reorder(po, f, pv, pl)
    block.unroll(f)
    block.unroll(pv)
    block.vectorize(pl)
    _schedule_register_block(sch, acc, block, po, lanes)
    return sch


def _schedule_register_block(sch: Any, acc: te.Tensor, parent: Any, at: Any,
                             lanes: int) -> None:
    """The accumulators of one register block (``tile_oc`` channels × the block's pixel
    vectors), computed at ``parent``'s ``at`` loop: the reduction outermost, the block
    unrolled into registers, the pixels vectorized."""
    stage = sch[acc]
    stage.compute_at(parent, at)
    _, f, p = stage.op.axis
    (rc,) = stage.op.reduce_axis
    pv, pl = stage.split(p, factor=lanes)
    stage.reorder(rc, f, pv, pl)
    stage.unroll(f)
    stage.unroll(pv)
    stage.vectorize(pl)
