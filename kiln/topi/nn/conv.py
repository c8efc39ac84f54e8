"""Convolutions in any layout (TVM's ``topi.nn.conv1d/conv2d/conv3d`` and transposes).

Entry points: :func:`conv` (the one general compute: ``NCHW``/``NHWC``/``NCW``/``NDHWC`` …
data, ``OIHW``/``HWIO``/``HWOI`` … kernels, groups, strides, dilation, padding),
:func:`conv1d`, :func:`conv2d`, :func:`conv3d`, :func:`conv2d_nchw`, :func:`conv2d_nhwc`,
:func:`depthwise_conv2d_nchw`, :func:`group_conv2d_nchw`, :func:`conv2d_transpose_nchw`,
:func:`conv1d_transpose_ncw`, :func:`conv_output_size`, :func:`get_pad_tuple`.

Depthwise and grouped convolutions are ``conv`` with ``groups > 1``: output channel ``f``
reads the input channels of group ``f // (F / groups)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi.nn.pad import clamp, in_bounds, pad
from kiln.topi.utils import get_const_int, get_const_tuple

_SPATIAL = "DHW"


def int_values(value: Any, n: int, what: str) -> list[int]:
    """``n`` ints from an int or a sequence (one value repeats); ``what`` names the attribute
    in the error raised for a sequence of another length (``strides``, ``padding`` …)."""
    values = [value] * n if isinstance(value, int) else [int(v) for v in value]
    if len(values) == 1 and n > 1:
        values = values * n
    if len(values) != n:
        raise TVMError(f"conv: {what} {value!r} must have {n} values")
    return values


def get_pad_tuple(padding: Any, ndim: int) -> tuple[list[int], list[int]]:
    """Padding (one value, one per axis, or before+after per axis) as (before, after)."""
    if isinstance(padding, int):
        return [padding] * ndim, [padding] * ndim
    values = [int(v) for v in padding]
    if len(values) == 1:
        return values * ndim, values * ndim
    if len(values) == ndim:
        return values, list(values)
    if len(values) == 2 * ndim:
        return values[:ndim], values[ndim:]
    raise TVMError(f"conv: padding {padding!r} must have 1, {ndim} or {2 * ndim} values")


def conv_output_size(size: int, kernel: int, stride: int, dilation: int, before: int,
                     after: int) -> int:
    return (size + before + after - (kernel - 1) * dilation - 1) // stride + 1


def conv(data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any, dilation: Any,
         groups: int, data_layout: str, kernel_layout: str, out_dtype: str | None = None,
         name: str = "conv") -> te.Tensor:
    """The general convolution; layouts name each axis (N, C, D/H/W; O, I, D/H/W).

    Example
    -------
    >>> from kiln import te, topi
    >>> x = te.placeholder((1, 4, 8, 8), name="x")
    >>> w = te.placeholder((8, 2, 3, 3), name="w")
    >>> y = topi.nn.conv(x, w, 1, 1, 1, 2, "NCHW", "OIHW")
    >>> [int(d) for d in y.shape], y.op.tag
    ([1, 8, 8, 8], 'conv2d_nchw')
    """
    spatial = [a for a in data_layout if a in _SPATIAL]
    nsp = len(spatial)
    if sorted(data_layout) != sorted("NC" + "".join(spatial)) or \
            sorted(kernel_layout) != sorted("OI" + "".join(spatial)):
        raise TVMError(f"conv: unsupported layouts {data_layout}/{kernel_layout}")
    out_dtype = out_dtype or data.dtype
    strides, dilation = int_values(strides, nsp, "strides"), int_values(dilation, nsp, "dilation")
    before, after = get_pad_tuple(padding, nsp)
    dshape, kshape = get_const_tuple(data.shape), get_const_tuple(kernel.shape)
    dim = {a: dshape[data_layout.index(a)] for a in data_layout}
    kdim = {a: kshape[kernel_layout.index(a)] for a in kernel_layout}
    channels, in_per_group = kdim["O"], kdim["I"]
    if dim["C"] != in_per_group * groups:
        raise TVMError(f"conv: data has {dim['C']} channels but the kernel expects "
                       f"{in_per_group} x {groups} groups")
    if channels % groups:
        raise TVMError(f"conv: {channels} output channels do not divide into {groups} groups")
    out_per_group = channels // groups
    out_sp = [conv_output_size(dim[a], kdim[a], s, d, b, e)
              for a, s, d, b, e in zip(spatial, strides, dilation, before, after)]
    if min(out_sp, default=1) <= 0:
        raise TVMError(f"conv: the kernel {[kdim[a] for a in spatial]} is larger than the "
                       f"padded input {[dim[a] for a in spatial]}")
    pad_before = [before[spatial.index(a)] if a in spatial else 0 for a in data_layout]
    pad_after = [after[spatial.index(a)] if a in spatial else 0 for a in data_layout]
    padded = pad(data, pad_before, pad_after, name="pad_temp")
    rc = te.reduce_axis((0, in_per_group), name="rc")
    rk = {a: te.reduce_axis((0, kdim[a]), name="r" + a.lower()) for a in spatial}
    out_dim = {"N": dim["N"], "C": channels, **dict(zip(spatial, out_sp))}

    def body(*i):
        at = dict(zip(data_layout, i))
        f = at["C"]
        g = _op.floordiv(f, out_per_group) if groups > 1 else 0
        src = {"N": at["N"], "C": g * in_per_group + rc.var if groups > 1 else rc.var}
        for k, a in enumerate(spatial):
            src[a] = at[a] * strides[k] + rk[a].var * dilation[k]
        widx = {"O": f, "I": rc.var, **{a: rk[a].var for a in spatial}}
        value = _op.cast(padded(*[src[a] for a in data_layout]), out_dtype) * \
            _op.cast(kernel(*[widx[a] for a in kernel_layout]), out_dtype)
        return te.sum(value, axis=[rc] + [rk[a] for a in spatial])

    tag_name = f"conv{nsp}d_{data_layout.lower()}"
    if groups > 1 and groups == dim["C"]:
        tag_name = f"depthwise_conv{nsp}d_{data_layout.lower()}"
    return te.compute([out_dim[a] for a in data_layout], body, name=name, tag=tag_name)


def conv1d(data, kernel, strides=1, padding=0, dilation=1, groups=1, data_layout="NCW",
           kernel_layout="", out_dtype=None):
    """1-D convolution (``NCW``/``OIW`` or ``NWC``/``WIO``)."""
    kernel_layout = kernel_layout or ("OIW" if data_layout == "NCW" else "WIO")
    return conv(data, kernel, strides, padding, dilation, groups, data_layout, kernel_layout,
                out_dtype, name="conv1d")


def conv2d(data, kernel, strides=1, padding=0, dilation=1, groups=1, data_layout="NCHW",
           kernel_layout="", out_dtype=None):
    """2-D convolution (``NCHW``/``OIHW`` or ``NHWC``/``HWIO``)."""
    kernel_layout = kernel_layout or ("OIHW" if data_layout == "NCHW" else "HWIO")
    return conv(data, kernel, strides, padding, dilation, groups, data_layout, kernel_layout,
                out_dtype, name="conv2d")


def conv3d(data, kernel, strides=1, padding=0, dilation=1, groups=1, data_layout="NCDHW",
           kernel_layout="", out_dtype=None):
    """3-D convolution (``NCDHW``/``OIDHW`` or ``NDHWC``/``DHWIO``)."""
    kernel_layout = kernel_layout or ("OIDHW" if data_layout == "NCDHW" else "DHWIO")
    return conv(data, kernel, strides, padding, dilation, groups, data_layout, kernel_layout,
                out_dtype, name="conv3d")


def conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=None):
    return conv2d(data, kernel, strides, padding, dilation, 1, "NCHW", "OIHW", out_dtype)


def conv2d_nhwc(data, kernel, strides, padding, dilation, out_dtype=None):
    return conv2d(data, kernel, strides, padding, dilation, 1, "NHWC", "HWIO", out_dtype)


def group_conv2d_nchw(data, kernel, strides, padding, dilation, groups, out_dtype=None):
    return conv2d(data, kernel, strides, padding, dilation, groups, "NCHW", "OIHW", out_dtype)


def depthwise_conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=None):
    """Depthwise conv; ``kernel`` is ``(C, multiplier, kh, kw)`` as in TVM's topi."""
    c, m = get_const_int(kernel.shape[0]), get_const_int(kernel.shape[1])
    w = te.compute((c * m, 1, kernel.shape[2], kernel.shape[3]),
                   lambda o, _, y, x: kernel[_op.floordiv(o, m), _op.floormod(o, m), y, x],
                   name="dw_kernel", tag="injective")
    return conv2d(data, w, strides, padding, dilation, c, "NCHW", "OIHW", out_dtype)


def conv_transpose(data: te.Tensor, kernel: te.Tensor, strides: Sequence[int], padding: Any,
                   dilation: Sequence[int], output_padding: Sequence[int], groups: int = 1,
                   out_dtype: str | None = None) -> te.Tensor:
    """Transposed convolution, data ``NC<spatial>``, kernel ``IO<spatial>`` (Relay's)."""
    nsp = data.ndim - 2
    strides, dilation = int_values(strides, nsp, "strides"), int_values(dilation, nsp, "dilation")
    output_padding = int_values(output_padding, nsp, "output_padding")
    before, after = get_pad_tuple(padding, nsp)
    out_dtype = out_dtype or data.dtype
    dshape, kshape = get_const_tuple(data.shape), get_const_tuple(kernel.shape)
    batch, in_c, in_sp = dshape[0], dshape[1], dshape[2:]
    out_per_group, ksp = kshape[1], kshape[2:]
    if kshape[0] != in_c:
        raise TVMError(f"conv_transpose: the kernel has {kshape[0]} input channels, the data "
                       f"{in_c}")
    in_per_group = in_c // groups
    out_c = out_per_group * groups
    out_sp = [(n - 1) * s - b - a + d * (k - 1) + op + 1 for n, s, b, a, d, k, op in
              zip(in_sp, strides, before, after, dilation, ksp, output_padding)]
    rc = te.reduce_axis((0, in_per_group), name="rc")
    rk = [te.reduce_axis((0, k), name=f"rk{j}") for j, k in enumerate(ksp)]

    def body(n, f, *pos):
        g = _op.floordiv(f, out_per_group)
        c = g * in_per_group + rc.var
        conds, src = [], []
        for p, r, s, b, d, size in zip(pos, rk, strides, before, dilation, in_sp):
            num = p + b - r.var * d
            conds += [_op.floormod(num, s) == 0, in_bounds(_op.floordiv(num, s), size)]
            src.append(clamp(_op.floordiv(num, s), size))
        cond = conds[0]
        for c_ in conds[1:]:
            cond = _op.logical_and(cond, c_)
        value = _op.cast(data(n, c, *src), out_dtype) * \
            _op.cast(kernel(c, f - g * out_per_group, *[r.var for r in rk]), out_dtype)
        return te.sum(_op.if_then_else(cond, value, _op.const(0, out_dtype)), axis=[rc] + rk)

    return te.compute([batch, out_c] + out_sp, body, name="conv_transpose",
                      tag=f"conv{nsp}d_transpose")


def conv2d_transpose_nchw(data, kernel, strides, padding, out_dtype=None, output_padding=(0, 0),
                          dilation=(1, 1), groups=1):
    return conv_transpose(data, kernel, strides, padding, dilation, output_padding, groups,
                          out_dtype)


def conv1d_transpose_ncw(data, kernel, strides, padding, out_dtype=None, output_padding=(0,),
                         dilation=(1,), groups=1):
    return conv_transpose(data, kernel, strides, padding, dilation, output_padding, groups,
                          out_dtype)
