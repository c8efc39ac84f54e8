"""x86 conv2d for a network's stem: few input channels (an image's 3), NCHW data and an NCHW
result, vectorized over output columns (``conv2d_stem_nchw.x86``).

Entry points: :func:`stem_applies` (whether a conv can take this kernel),
:func:`conv2d_stem_nchw` (compute), :func:`schedule_conv2d_stem` (schedule) and
:data:`DEFAULT_CONFIG` (knobs: ``tile_oc`` output channels per register block, 0 for the
modelled choice; ``parallel_min_flops``).

The channel-blocked conv (``conv2d_NCHWc``) vectorizes over output channels, so a result
wanted in NCHW must be transposed back out of its register blocks: for MobileNet's 3x3
stride-2 stem over a 224x224 image that unpacking took over a third of the kernel (measured
on Zen 4, one thread: 0.38 ms with the NCHW result, 0.24 ms leaving it NCHW16c). Here a
vector holds consecutive output columns of one channel, written straight to NCHW. A stride
would make those columns' inputs a strided gather, so each parallel task (batch, output row)
first copies the input rows it reads, zero-padded, into a small buffer split by column phase
(``phase[c, row, p, j] = padded[c, row, j * stride + p]``): kernel column ``kx`` of output
columns ``x .. x + lanes`` then reads ``phase[.., (kx * dilation) % stride, x + (kx *
dilation) // stride ..]``, contiguous. A register block keeps ``tile_oc`` channels × one
vector of columns in registers across the whole ``C × KH × KW`` window; the fused epilogue
(bias, activation ...) runs on each block as it is stored.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.target.x86 import simd_32bit_lanes
from kiln.tir import op as _op
from kiln.topi.nn.conv import conv_output_size, get_pad_tuple, int_values
from kiln.topi.utils import divisor_at_most, find_tagged, get_const_tuple
from kiln.topi.x86.conv2d import worth_threads
from kiln.topi.x86.conv2d_pointwise import kernel_dims
from kiln.topi.x86.injective import schedule_injective_from_existing
from kiln.topi.x86.parallel import DEFAULT_PARALLEL_MIN_FLOPS

DEFAULT_CONFIG = {"tile_oc": 0, "parallel_min_flops": DEFAULT_PARALLEL_MIN_FLOPS}

# input channels up to which a conv counts as a stem: the window's few taps per output
# channel make the blocked kernel's per-output transpose a large share of its time
MAX_STEM_CHANNELS = 4
# ... and kernel columns: a 7x7 stem's 147 taps per output hide the transpose (measured on
# Zen 4, ResNet-18's 7x7 stride-2 stem: 2.43 ms here, 2.57 ms blocked; MobileNet's 3x3
# stride-2 stem: 0.26 vs 0.38 ms), so wider kernels keep the blocked kernel
MAX_STEM_KERNEL = 3
# output channels per register block by vector width: one vector of columns times this many
# broadcast weights per tap (AVX-512: 16 accumulators; AVX2: 8, which hide the FMA latency)
_TILE_OC = {16: 16, 8: 8, 4: 4}


def _weight(kernel: te.Tensor, o: Any, c: Any, ky: Any, kx: Any) -> Any:
    if len(kernel.shape) == 5:
        bn = int(kernel.shape[4].value)
        return kernel[_op.floordiv(o, bn), c, ky, kx, _op.floormod(o, bn)]
    return kernel[o, c, ky, kx]


def stem_applies(data_shape: Any, kernel: Any, strides: Any, padding: Any, dilation: Any,
                 groups: int = 1, lanes: int | None = None) -> bool:
    """Whether a conv of NCHW ``data_shape`` (static) × ``kernel`` (OIHW or ``OIHW{n}o``)
    can run as this kernel: groups 1, at most :data:`MAX_STEM_CHANNELS` input channels, a
    kernel of 2 to :data:`MAX_STEM_KERNEL` columns, and output rows of at least one vector
    (a row's last vector may be partial: its lanes past the row read zeros of the phase copy
    and are not stored; measured on Zen 4, one thread, 3x299x299 -> 32 stride 2, 150-wide
    rows: 0.51 ms here, 0.67 blocked; 3x288x288, 144-wide: 0.41).

    Example
    -------
    >>> stem_applies((1, 3, 224, 224), (32, 3, 3, 3), 2, 1, 1, lanes=16)
    True
    >>> stem_applies((1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1, lanes=16)  # ResNet's 7x7
    False
    >>> stem_applies((1, 3, 20, 20), (32, 3, 3, 3), 2, 1, 1, lanes=16)  # 10-wide rows
    False
    """
    shape = [getattr(d, "value", d) for d in data_shape]
    if len(shape) != 4 or not all(isinstance(d, int) for d in shape) or groups != 1:
        return False
    dims = kernel_dims(kernel)
    if len(dims) != 4 or dims[1] != shape[1] or shape[1] > MAX_STEM_CHANNELS or \
            not 2 <= dims[3] <= MAX_STEM_KERNEL or dims[2] > MAX_STEM_KERNEL:
        return False
    out_width = _output_width(shape[3], dims[3], strides, padding, dilation)
    return out_width >= (lanes or simd_32bit_lanes())


def _output_width(width: int, kernel_width: int, strides: Any, padding: Any,
                  dilation: Any) -> int:
    (_, left), (_, right) = get_pad_tuple(padding, 2)
    return conv_output_size(width, kernel_width, int_values(strides, 2, "strides")[1],
                            int_values(dilation, 2, "dilation")[1], left, right)


def column_phases(data: te.Tensor, channels: int, rows: int, stride: int, cols: int,
                  pad_before: tuple[int, int], name: str, tag: str,
                  multiplier: int = 1) -> te.Tensor:
    """NCHW ``data`` zero-padded (``pad_before`` = top, left) and split by column phase:
    ``[N, channels, rows, stride, cols]`` with ``[b, f, row, p, j] = padded[b, f /
    multiplier, row, j * stride + p]``, so a stride-``stride`` read of a row becomes a
    contiguous read of one phase. The bounds test is ``likely``: the loop partitioner peels
    the padded border off the copy."""
    n, _, h, w = get_const_tuple(data.shape)
    top, left = pad_before

    def phase_split(b, f, row, p, j):
        y, x = row - top, j * stride + p - left
        inside = _op.likely(_op.all(y >= 0, y < h, x >= 0, x < w))
        channel = f if multiplier == 1 else _op.floordiv(f, multiplier)
        return _op.if_then_else(inside, data[b, channel, y, x], _op.const(0, data.dtype))

    return te.compute((n, channels, rows, stride, cols), phase_split, name=name, tag=tag)


def conv2d_stem_nchw(data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any,
                     dilation: Any, out_dtype: str | None = None) -> te.Tensor:
    """NCHW data × OIHW (or ``OIHW{n}o``) kernel → NCHW, through the column-phase copy.

    Example
    -------
    >>> from kiln import te
    >>> from kiln.topi.x86.conv2d_stem import conv2d_stem_nchw
    >>> y = conv2d_stem_nchw(te.placeholder((1, 3, 64, 64)), te.placeholder((16, 3, 3, 3)),
    ...                      2, 1, 1)
    >>> [int(d) for d in y.shape]
    [1, 16, 32, 32]
    """
    n, c, h, w = get_const_tuple(data.shape)
    o, kc, kh, kw = kernel_dims(kernel)
    if kc != c:
        raise TVMError(f"conv2d_stem x86: kernel {list(get_const_tuple(kernel.shape))} does "
                       f"not read the {c} input channels of the data {[n, c, h, w]}")
    sh, sw = int_values(strides, 2, "strides")
    dh, dw = int_values(dilation, 2, "dilation")
    (pt, pl), (pb, pr) = get_pad_tuple(padding, 2)
    oh = conv_output_size(h, kh, sh, dh, pt, pb)
    ow = conv_output_size(w, kw, sw, dw, pl, pr)
    phases = column_phases(data, c, (oh - 1) * sh + (kh - 1) * dh + 1, sw,
                           ow + (kw - 1) * dw // sw, (pt, pl), "data_phases",
                           "conv_phase_split")
    out_dtype = out_dtype or data.dtype
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    return te.compute(
        (n, o, oh, ow),
        lambda b, f, y, x: te.sum(
            _op.cast(phases[b, rc.var, y * sh + ry.var * dh, _op.floormod(rx.var * dw, sw),
                            x + _op.floordiv(rx.var * dw, sw)], out_dtype)
            * _op.cast(_weight(kernel, f, rc.var, ry.var, rx.var), out_dtype),
            axis=[rc, ry, rx]),
        name="conv2d_stem", tag="conv2d_stem")


def schedule_conv2d_stem(outs: Any, config: dict | None = None) -> Any:
    """Schedule :func:`conv2d_stem_nchw` and its fused epilogue: one parallel task per
    (batch, output row) copies its input rows by phase, then computes every output channel
    of the row in register blocks, the epilogue applied as each block is stored."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    found = find_tagged(sch, outs, ("conv2d_stem", "conv_phase_split"))
    conv, phases = found["conv2d_stem"], found["conv_phase_split"]
    lanes = simd_32bit_lanes()
    threads = worth_threads(conv, cfg)
    tile_oc = divisor_at_most(int(conv.shape[1].value),
                              int(cfg["tile_oc"]) or _TILE_OC.get(lanes, 8))
    epilogue = len(outs) == 1 and outs[0].op is not conv.op
    acc = sch.cache_write(conv, "local")
    if epilogue:  # the output stage reads the register block itself
        sch[conv].compute_inline()
        anchor = outs[0]
    else:  # the conv is the output, or several outputs read it: computed whole, then read
        anchor = conv
    for t in outs:
        if t is not anchor:
            schedule_injective_from_existing(sch, t)
    stage = sch[anchor]
    n, f, y, x = stage.leaf_iter_vars
    fo, fi = stage.split(f, factor=tile_oc)
    xo, xi = stage.split(x, factor=lanes)
    stage.reorder(n, y, fo, xo, fi, xi)
    stage.unroll(fi)
    stage.vectorize(xi)
    task = stage.fuse(n, y)
    if threads:
        stage.parallel(task)
    sch[phases].compute_at(stage, task)
    block = sch[acc]
    block.compute_at(stage, xo)
    rc, ry, rx = block.op.reduce_axis
    _, bf, _, bx = block.op.axis
    block.reorder(rc, ry, rx, bf, bx)
    block.unroll(ry)
    block.unroll(rx)
    block.unroll(bf)
    block.vectorize(bx)
    return sch

