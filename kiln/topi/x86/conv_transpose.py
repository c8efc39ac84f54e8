"""x86 transposed convolutions (``conv1d_transpose_ncw.x86``, ``conv2d_transpose_nchw.x86``)
as a gather over output *phases*: no scatter, no per-lane stride test.

Entry points: :func:`conv_transpose_phased` (compute), :func:`schedule_conv_transpose`,
:data:`DEFAULT_CONFIG` (knobs: ``oc_bn`` output channels and ``tile_ow`` output columns per
register block).

Output position ``p = s * q + ph`` (stride ``s``, phase ``ph``) receives exactly the kernel
taps ``r = (ph + pad) % s + s * j`` from input ``q + (ph + pad) // s - j``. So for a fixed
phase the transposed convolution is an ordinary correlation of the input with every
``s``-th tap: computed as ``phased[n, f, ph..., q...]`` with ``q`` (contiguous input columns)
vectorized and ``oc_bn × tile_ow`` accumulators in registers, over an input padded once so
the inner loop has no bounds checks; an injective stage interleaves the phases into
``[n, f, p...]`` and carries any fused epilogue. Dilation 1, groups 1, ``NC<spatial>`` data
and ``IO<spatial>`` kernels (Relay's layouts); other cases use the generic compute.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi.nn.conv import get_pad_tuple, int_values
from kiln.topi.nn.pad import pad
from kiln.topi.utils import ceil_div, get_const_int, get_const_tuple, traverse_inline
from kiln.topi.x86.conv1d import register_block

DEFAULT_CONFIG = {"oc_bn": 4, "tile_ow": 16}


def conv_transpose_phased(data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any,
                          output_padding: Any, out_dtype: str | None = None) -> te.Tensor:
    """Transposed convolution (dilation 1, groups 1) through per-phase gathers.

    Example
    -------
    >>> from kiln import te, topi
    >>> x, w = te.placeholder((1, 4, 8, 8)), te.placeholder((4, 6, 4, 4))
    >>> y = topi.x86.conv_transpose.conv_transpose_phased(x, w, 2, 1, 0)
    >>> [int(d) for d in y.shape], y.op.input_tensors[0].op.name
    ([1, 6, 16, 16], 'conv_transpose_phased')
    """
    nsp = data.ndim - 2
    strides = int_values(strides, nsp, "strides")
    output_padding = int_values(output_padding, nsp, "output_padding")
    before, after = get_pad_tuple(padding, nsp)
    out_dtype = out_dtype or data.dtype
    dshape, kshape = get_const_tuple(data.shape), get_const_tuple(kernel.shape)
    batch, in_c, in_sp = dshape[0], dshape[1], dshape[2:]
    out_c, ksp = kshape[1], kshape[2:]
    if kshape[0] != in_c or len(kshape) != data.ndim:
        raise TVMError(f"conv_transpose: kernel {list(kshape)} (IO<spatial>) does not match "
                       f"data {list(dshape)} (NC<spatial>, groups 1)")
    out_sp = [(n - 1) * s - b - a + (k - 1) + op + 1 for n, s, b, a, k, op in
              zip(in_sp, strides, before, after, ksp, output_padding)]
    phases = [ceil_div(p, s) for p, s in zip(out_sp, strides)]
    taps = [ceil_div(k, s) for k, s in zip(ksp, strides)]
    # input q + (ph + b) // s - j must stay inside the padded input for every q, ph, j
    pad_lo = [j - 1 for j in taps]
    pad_hi = [max(0, q - 1 + (s - 1 + b) // s - (n - 1)) for q, s, b, n in
              zip(phases, strides, before, in_sp)]
    padded = pad(data, [0, 0] + pad_lo, [0, 0] + pad_hi, name="pad_temp")
    rc = te.reduce_axis((0, in_c), name="rc")
    rj = [te.reduce_axis((0, j), name=f"rj{k}") for k, j in enumerate(taps)]

    def body(n, f, *idx):
        ph, q = idx[:nsp], idx[nsp:]
        src, tap, inside = [], [], []
        for k in range(nsp):
            shift = ph[k] + before[k]
            r = _op.floormod(shift, strides[k]) + strides[k] * rj[k].var
            src.append(q[k] + _op.floordiv(shift, strides[k]) - rj[k].var + pad_lo[k])
            if ksp[k] % strides[k]:
                inside.append(r < ksp[k])
                r = _op.min(r, ksp[k] - 1)
            tap.append(r)
        value = _op.cast(padded(n, rc.var, *src), out_dtype) * \
            _op.cast(kernel(rc.var, f, *tap), out_dtype)
        if inside:
            cond = inside[0]
            for c in inside[1:]:
                cond = _op.logical_and(cond, c)
            value = _op.if_then_else(cond, value, _op.const(0, out_dtype))
        return te.sum(value, axis=[rc] + rj)

    phased = te.compute([batch, out_c] + list(strides) + phases, body,
                        name="conv_transpose_phased", tag="conv_transpose_phased")

    def interleave(n, f, *p):
        ph = [_op.floormod(v, s) for v, s in zip(p, strides)]
        q = [_op.floordiv(v, s) for v, s in zip(p, strides)]
        return phased(n, f, *ph, *q)

    return te.compute([batch, out_c] + out_sp, interleave, name="conv_transpose",
                      tag=f"injective,conv{nsp}d_transpose")


def schedule_conv_transpose(outs: Any, config: dict | None = None) -> Any:
    """Schedule the phased transposed convolution in ``outs`` and its interleaving output.

    Example
    -------
    >>> from kiln import te, topi
    >>> x, w = te.placeholder((1, 4, 8, 8)), te.placeholder((4, 8, 4, 4))
    >>> y = topi.x86.conv_transpose.conv_transpose_phased(x, w, 2, 1, 0)
    >>> s = topi.x86.conv_transpose.schedule_conv_transpose([y])
    >>> [iv.var.name for iv in s[y.op.input_tensors[0]].leaf_iter_vars][-3:]
    ['i5.outer', 'f.inner', 'i5.inner']
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    out = outs[0]

    def visit(op: Any) -> None:
        if op.tag == "conv_transpose_phased":
            _schedule_phased(sch, op.output(0), cfg)

    traverse_inline(sch, out.op, visit)
    stage = sch[out]
    leaves = list(stage.leaf_iter_vars)
    stage.parallel(stage.fuse(*leaves[:-1]))
    return sch


def _schedule_phased(sch: Any, phased: te.Tensor, cfg: dict) -> None:
    padded = phased.op.input_tensors[0]
    if padded.op.name == "pad_temp":
        stage = sch[padded]
        stage.compute_root()
        leaves = list(stage.leaf_iter_vars)
        stage.parallel(stage.fuse(*leaves[:-1]))
    ndim = phased.ndim
    bn, tile = register_block(get_const_int(phased.shape[1]), get_const_int(phased.shape[-1]),
                              cfg)
    acc = sch.cache_write(phased, "local")
    o = sch[phased]
    n, f, *rest = list(o.leaf_iter_vars)[:ndim]
    fo, fi = o.split(f, factor=bn)
    qo, qi = o.split(rest[-1], factor=tile)
    o.reorder(n, fo, *rest[:-1], qo, fi, qi)
    o.parallel(o.fuse(n, fo, *rest[:-1]))
    o.vectorize(qi)
    block = sch[acc]
    block.compute_at(o, qo)
    leaves = list(block.leaf_iter_vars)
    data_axes, reduce_axes = leaves[:ndim], leaves[ndim:]
    block.reorder(*reduce_axes, data_axes[1], data_axes[-1])
    block.unroll(data_axes[1])
    block.vectorize(data_axes[-1])
