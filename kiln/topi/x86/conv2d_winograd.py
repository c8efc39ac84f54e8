"""x86 Winograd conv2d for 3x3 stride-1 convs (``conv2d_nchw_winograd.x86``).

Entry points: :func:`winograd_kernel_pack` (the kernel transform, packed for the GEMM; Relay
folds it at compile time), :func:`conv2d_winograd_nchwc` (compute on NCHW or ``NCHW{c}c``
data, output ``NCHW{oc}c`` or NCHW), :func:`schedule_conv2d_winograd`, :func:`applies`
(which convs it computes), :func:`tile_size`, :data:`OC_BLOCKS` (the output channel blocks
tuning offers) and :data:`DEFAULT_CONFIG` (knobs: ``tile_size`` m of F(m x m, 3x3), 2 or 4,
0 for the modelled choice; ``oc_bn`` output channels per GEMM vector block; ``tile_t``
Winograd tiles per register block;
``gemm_parallel``, "point": GEMM tasks over (transform point, channel block) or "tiles":
over (channel block, tile block), each task then running all 16/36 points).

F(m, 3) computes an ``m × m`` output tile as ``A^T [U ⊙ (B^T d B)] A`` with ``U = G g G^T``
(:mod:`kiln.topi.nn.winograd`), in three stages:

1. input transform ``V[a, b, t, c] = (B^T d_t B)[a, b]`` per tile ``t`` and input channel
   ``c``, as two 1-D passes (rows, then columns) on vectors of input channels;
2. a batched GEMM over the ``alpha²`` points ``M[a, b, t, o] = Σ_c V[a, b, t, c] U[a, b, o, c]``,
   ``U`` packed ``[alpha, alpha, O / oc_bn, C, oc_bn]`` (TVM's arm_cpu kernel layout): each
   register block holds ``tile_t × oc_bn`` accumulators, one weight vector and ``tile_t``
   broadcast inputs per input channel;
3. the output transform ``A^T M A`` (rows, then columns) per tile, on vectors of output
   channels, writing ``NCHW{oc_bn}c`` (or NCHW through an unpacking stage), carrying any
   fused epilogue.

The transforms' small constant matrices become literals once their loops are unrolled, and
their zero entries vanish (the matrices are exact, see ``winograd_matrices``). Relative to a
direct conv F(2) does 2.25x and F(4) 4x fewer multiplications in the GEMM; F(4) loses more
precision (float32 max error ~1e-5 relative on ResNet-sized reductions, vs ~1e-6 for F(2)).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi.nn.conv import get_pad_tuple
from kiln.topi.nn.pad import pad
from kiln.topi.nn.winograd import winograd_matrices, winograd_weight_transform
from kiln.topi.utils import get_const_int, get_const_tuple, traverse_inline

DEFAULT_CONFIG = {"tile_size": 0, "oc_bn": 16, "tile_t": 0, "gemm_parallel": "point"}
# the output channel blocks (``oc_bn``) the tuning space offers: a conv none of them divides
# has no Winograd config
OC_BLOCKS = (8, 16, 32)

# F(4) when it leaves at least this many tiles, else F(2); 0 in the config means this
# choice. F(4) does fewer multiplications (4x vs 2.25x fewer than the direct conv, 3x vs 1.7x
# at 7 x 7 counting the padding to whole tiles), but its GEMM's register blocks need tiles:
# at 7 x 7 (4 tiles) they are too short to hide the FMA latency. The tuner decides per conv.
_MIN_F4_TILES = 16

# tiles per register block when the config leaves it open (0): the largest divisor of the
# tile count up to this many (accumulators = tile_t x oc_bn / lanes; 32 zmm registers)
_MAX_TILE_T = 14


def applies(kernel_size: Any, strides: Any, dilation: Any, groups: int) -> bool:
    """Whether a conv is one Winograd F(m, 3x3) computes: 3x3 kernel, stride 1, dilation 1,
    groups 1."""
    pairs = [tuple(int(getattr(v, "value", v)) for v in x) for x in (kernel_size, strides,
                                                                     dilation)]
    return pairs == [(3, 3), (1, 1), (1, 1)] and int(groups) == 1


def winograd_kernel_pack(kernel: te.Tensor, tile_size: int, oc_bn: int) -> te.Tensor:
    """OIHW 3x3 kernel → ``U`` packed ``[alpha, alpha, O / oc_bn, I, oc_bn]``."""
    o, i = get_const_tuple(kernel.shape)[:2]
    if o % oc_bn:
        raise TVMError(f"winograd x86: the output channel block {oc_bn} does not divide "
                       f"{o} output channels")
    u = winograd_weight_transform(kernel, tile_size)
    alpha = get_const_int(u.shape[0])
    return te.compute((alpha, alpha, o // oc_bn, i, oc_bn),
                      lambda a, b, ob, c, oi: u[a, b, ob * oc_bn + oi, c],
                      name="winograd_kernel_pack", tag="winograd_kernel_pack")


def tile_size(batch: int, out_height: int, out_width: int, cfg: dict) -> int:
    """m of F(m x m, 3x3): ``cfg["tile_size"]``, or when 0 the modelled choice."""
    if int(cfg["tile_size"]):
        return int(cfg["tile_size"])
    tiles = batch * -(-out_height // 4) * -(-out_width // 4)
    return 4 if tiles >= _MIN_F4_TILES else 2


def _tiles_per_block(tiles: int, cfg: dict) -> int:
    want = int(cfg["tile_t"]) or _MAX_TILE_T
    return max(d for d in range(1, min(want, tiles) + 1) if tiles % d == 0)


def conv2d_winograd_nchwc(data: te.Tensor, packed: te.Tensor, padding: Any,
                          out_layout: str = "", out_dtype: str | None = None,
                          config: dict | None = None) -> te.Tensor:
    """Stride-1 3x3 conv of NCHW or ``NCHW{c}c`` ``data`` with a kernel from
    :func:`winograd_kernel_pack`; output in ``out_layout``: ``NCHW{k}c`` (any k dividing the
    output channels: the output transform reads the GEMM result unblocked) or NCHW; empty
    means NCHW for NCHW data, else ``NCHW{oc_bn}c``.

    Example
    -------
    >>> from kiln import te
    >>> from kiln.topi.x86.conv2d_winograd import conv2d_winograd_nchwc, winograd_kernel_pack
    >>> u = winograd_kernel_pack(te.placeholder((32, 16, 3, 3)), 2, 16)
    >>> y = conv2d_winograd_nchwc(te.placeholder((1, 16, 10, 10)), u, 1)
    >>> [int(d) for d in y.shape]
    [1, 32, 10, 10]
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    dshape, ushape = get_const_tuple(data.shape), get_const_tuple(packed.shape)
    blocked_in = len(dshape) == 5
    n, cb, h, w = dshape[:4]
    c = cb * (dshape[4] if blocked_in else 1)
    if len(ushape) != 5 or ushape[0] != ushape[1] or ushape[3] != c:
        raise TVMError(f"winograd x86: the packed kernel {list(ushape)} does not match the "
                       f"data {list(dshape)} (expected [alpha, alpha, O / oc_bn, {c}, oc_bn])")
    alpha, _, o_blocks, _, oc_bn = ushape
    m = alpha - 2
    if m not in (2, 4):
        raise TVMError(f"winograd x86: tile size {m} (alpha {alpha}); F(2) and F(4) only")
    at, _, bt = winograd_matrices(m, 3)
    (pt, pl), (pb, pr) = get_pad_tuple(padding, 2)
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    nh, nw = -(-oh // m), -(-ow // m)
    tiles = n * nh * nw
    # pad to whole tiles: the last tile reads past the conv's own padding
    after = [(nh - 1) * m + alpha - h - pt, (nw - 1) * m + alpha - w - pl]
    if blocked_in:
        padded = pad(data, [0, 0, pt, pl, 0], [0, 0, *after, 0], name="winograd_pad")
    else:
        padded = pad(data, [0, 0, pt, pl], [0, 0, *after], name="winograd_pad")

    def read(t, ch, y, x):
        b = _op.floordiv(t, nh * nw)
        rest = _op.floormod(t, nh * nw)
        y = _op.floordiv(rest, nw) * m + y
        x = _op.floormod(rest, nw) * m + x
        if blocked_in:
            lanes = dshape[4]
            return padded[b, _op.floordiv(ch, lanes), y, x, _op.floormod(ch, lanes)]
        return padded[b, ch, y, x]

    rows = te.compute((alpha, alpha, tiles, c), lambda a, x, t, ch: _literal_product(
        bt, a, lambda s: read(t, ch, s, x)), name="winograd_input_rows",
        tag="winograd_input_rows")
    v = te.compute((alpha, alpha, tiles, c), lambda a, b, t, ch: _literal_product(
        bt, b, lambda s: rows[a, s, t, ch]), name="winograd_V", tag="winograd_V")
    rc = te.reduce_axis((0, c), name="rc")
    out_dtype = out_dtype or data.dtype
    gemm = te.compute(
        (alpha, alpha, tiles, o_blocks * oc_bn),
        lambda a, b, t, f: te.sum(v[a, b, t, rc] * packed[a, b, _op.floordiv(f, oc_bn), rc,
                                                          _op.floormod(f, oc_bn)], axis=rc),
        name="winograd_M", tag="winograd_M",
        attrs={"tile_t": _tiles_per_block(tiles, cfg), "oc_bn": oc_bn,
               "gemm_parallel": cfg["gemm_parallel"]})
    out_rows = te.compute((m, alpha, tiles, o_blocks * oc_bn), lambda i, b, t, f:
                          _literal_product(at, i, lambda a: gemm[a, b, t, f]),
                          name="winograd_output_rows", tag="winograd_output_rows")
    channels = o_blocks * oc_bn
    unpack = out_layout == "NCHW" or (not out_layout and not blocked_in)
    out_bn = oc_bn if unpack or not out_layout else _layout_block(out_layout, channels)

    def out_body(bt_, ob, y, x, oi):
        t = (bt_ * nh + _op.floordiv(y, m)) * nw + _op.floordiv(x, m)
        return _op.cast(_literal_product(at, _op.floormod(x, m), lambda b: out_rows[
            _op.floormod(y, m), b, t, ob * out_bn + oi]), out_dtype)

    out = te.compute((n, channels // out_bn, oh, ow, out_bn), out_body,
                     name="conv2d_winograd_nchwc", tag="conv2d_winograd_nchwc",
                     attrs={"tile_size": m})
    if not unpack:
        return out
    return te.compute((n, channels, oh, ow),
                      lambda b, f, y, x: out[b, _op.floordiv(f, out_bn), y, x,
                                             _op.floormod(f, out_bn)],
                      name="conv2d_winograd_out", tag="injective,conv_unpack")


def _literal_product(matrix: np.ndarray, row: Any, term: Any) -> Any:
    """``Σ_k matrix[row, k] · term(k)`` for a loop variable ``row``: a select over the rows'
    sums with literal coefficients, zero terms left out. Once ``row``'s loop is unrolled the
    select is decided and one literal sum is left (a lookup of a constant-matrix tensor
    instead costs the simplifier a select chain per element: seconds per kernel)."""
    sums = []
    for r in range(matrix.shape[0]):
        terms = [term(k) if coef == 1.0 else term(k) * _op.const(float(coef), "float32")
                 for k, coef in enumerate(matrix[r]) if coef != 0.0]
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        sums.append(total)
    out = sums[-1]
    for r in range(len(sums) - 2, -1, -1):
        out = _op.if_then_else(row == r, sums[r], out)
    return out


def _layout_block(layout: str, channels: int) -> int:
    """The channel block of an ``NCHW{k}c`` output layout (k dividing ``channels``)."""
    match = re.fullmatch(r"NCHW(\d+)c", layout)
    if match is None or channels % int(match.group(1)):
        raise TVMError(f"winograd x86: output layout {layout} is not NCHW or NCHW{{k}}c "
                       f"with k dividing the {channels} output channels")
    return int(match.group(1))


def conv2d_nchw_winograd(data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any,
                         dilation: Any, out_dtype: str | None = None,
                         config: dict | None = None) -> te.Tensor:
    """NCHW/OIHW 3x3 stride-1 conv2d by Winograd, the kernel transformed in the kernel
    (a weight that is not a constant; Relay folds a constant one at compile time)."""
    if not applies(get_const_tuple(kernel.shape)[2:], _pair(strides), _pair(dilation), 1):
        raise TVMError(f"winograd x86: computes 3x3 kernels at stride 1 and dilation 1, got "
                       f"kernel {list(get_const_tuple(kernel.shape))}, strides {strides}, "
                       f"dilation {dilation}")
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    (pt, pl), (pb, pr) = get_pad_tuple(padding, 2)
    n, _, h, w = get_const_tuple(data.shape)
    m = tile_size(n, h + pt + pb - 2, w + pl + pr - 2, cfg)
    packed = winograd_kernel_pack(kernel, m, int(cfg["oc_bn"]))
    return conv2d_winograd_nchwc(data, packed, padding, "NCHW", out_dtype, cfg)


def _pair(value: Any) -> tuple[int, int]:
    values = [int(getattr(v, "value", v)) for v in
              (value if isinstance(value, list | tuple) else [value])]
    return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])


def schedule_conv2d_winograd(outs: Any, config: dict | None = None) -> Any:
    """Schedule the Winograd stages of :func:`conv2d_winograd_nchwc` in ``outs`` (and any
    fused epilogue, which runs per output tile)."""
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    found: dict[str, Any] = {}

    def visit(op):
        if op.tag in ("winograd_kernel_pack", "winograd_input_rows", "winograd_V",
                      "winograd_M", "winograd_output_rows", "conv2d_winograd_nchwc"):
            found[op.tag] = op.output(0)

    for t in outs:
        traverse_inline(sch, t.op, visit)
    if "winograd_kernel_pack" in found:  # an unfolded kernel transform (a weight input)
        stage = sch[found["winograd_kernel_pack"]]
        a, b, ob, ci, oi = stage.leaf_iter_vars
        stage.parallel(stage.fuse(a, b))
        stage.vectorize(oi)
    _schedule_input(sch, found["winograd_input_rows"], found["winograd_V"])
    _schedule_gemm(sch, found["winograd_M"])
    _schedule_output(sch, outs[0], found["winograd_output_rows"],
                     found["conv2d_winograd_nchwc"])
    return sch


def _vector_split(stage: Any, axis: Any, extent: int) -> tuple[Any, Any]:
    from kiln.target.x86 import simd_32bit_lanes

    lanes = simd_32bit_lanes()
    factor = max(d for d in range(1, min(lanes, extent) + 1) if extent % d == 0)
    return stage.split(axis, factor=factor)


def _schedule_input(sch: Any, rows: te.Tensor, v: te.Tensor) -> None:
    """Per (tile, vector of input channels): the alpha x alpha input rows transformed into a
    local buffer, then the columns into V; both unrolled so the matrices become literals."""
    padded = rows.op.input_tensors[-1] if rows.op.input_tensors else None
    for t in rows.op.input_tensors:
        if t.op.name == "winograd_pad":
            padded = t
    if padded is not None and padded.op.name == "winograd_pad":
        stage = sch[padded]
        stage.compute_root()
        lead = stage.leaf_iter_vars
        stage.parallel(stage.fuse(*lead[:3]))
        stage.vectorize(_vector_split(stage, lead[-1], get_const_int(padded.shape[-1]))[1]
                        if len(padded.shape) == 4 else lead[-1])
    sv = sch[v]
    a, b, t, ch = v.op.axis
    co, ci = _vector_split(sv, ch, get_const_int(v.shape[3]))
    sv.reorder(t, co, a, b, ci)
    sv.parallel(t)
    sv.unroll(a)
    sv.unroll(b)
    sv.vectorize(ci)
    _transform_at(sch, rows, sv, co)


def _transform_at(sch: Any, stage: te.Tensor, parent: Any, axis: Any) -> None:
    """A 1-D transform stage ``[alpha or m, alpha, tiles, channels]`` computed per tile and
    channel vector of ``parent``: its two matrix axes unrolled (the literal rows chosen),
    its channels vectorized."""
    st = sch[stage]
    st.compute_at(parent, axis)
    first, second, _, channels = stage.op.axis
    st.unroll(first)
    st.unroll(second)
    st.vectorize(channels)


def _schedule_gemm(sch: Any, gemm: te.Tensor) -> None:
    """The batched GEMM in ``tile_t × oc_bn`` register blocks, the input channels
    innermost of each block's reduction."""
    attrs = gemm.op.attrs
    tile_t, oc_bn = int(attrs["tile_t"]), int(attrs["oc_bn"])
    acc = sch.cache_write(gemm, "local")
    sg = sch[gemm]
    a, b, t, f = gemm.op.axis
    fo, fi = sg.split(f, factor=oc_bn)
    to, ti = sg.split(t, factor=tile_t)
    if attrs["gemm_parallel"] == "tiles":
        sg.reorder(fo, to, a, b, ti, fi)
        sg.parallel(sg.fuse(fo, to))
        anchor = b
    else:
        sg.reorder(a, b, fo, to, ti, fi)
        sg.parallel(sg.fuse(a, b, fo))
        anchor = to
    sg.vectorize(fi)
    sa = sch[acc]
    sa.compute_at(sg, anchor)
    leaves = list(sa.leaf_iter_vars)
    data_axes = [iv for iv in leaves if iv.iter_type == 0]
    (rc,) = [iv for iv in leaves if iv.iter_type != 0]
    _, _, at_, af = data_axes
    afo, afi = sa.split(af, factor=oc_bn)
    sa.reorder(*data_axes[:2], rc, at_, afo, afi)
    sa.unroll(at_)
    sa.vectorize(afi)


def _schedule_output(sch: Any, final: te.Tensor, out_rows: te.Tensor,
                     out: te.Tensor) -> None:
    """Per output tile and channel block: the columns, then the rows of ``A^T M A``, both
    unrolled and vectorized over the output channels, then the epilogue of that tile."""
    m = int(out.op.attrs["tile_size"])
    root = sch[final]
    if len(final.shape) == 5:
        n, ob, y, x, oi = final.op.axis
    else:
        oc_bn = get_const_int(out.shape[4])
        n, f, y, x = final.op.axis
        ob, oi = root.split(f, factor=oc_bn)
    yo, yi = root.split(y, factor=m)
    xo, xi = root.split(x, factor=m)
    root.reorder(n, ob, yo, xo, yi, xi, oi)
    root.parallel(root.fuse(n, ob, yo))
    if final.op is not out.op:  # the output transform inlined into the epilogue
        sch[out].compute_inline()
    root.unroll(yi)
    root.unroll(xi)
    if len(final.shape) == 5:
        root.vectorize(oi)
    _transform_at(sch, out_rows, root, xo)
