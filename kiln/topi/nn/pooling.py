"""Pooling computes (TVM's ``topi.nn.pool*``) over the spatial axes of any layout.

Entry points: :func:`pool` (max/avg, 1-3 spatial axes, dilation, padding, ``ceil_mode``,
``count_include_pad``), :func:`pool1d`, :func:`pool2d`, :func:`pool3d`, :func:`global_pool`,
:func:`adaptive_pool`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi.nn.conv import get_pad_tuple, int_values
from kiln.topi.nn.pad import clamp, in_bounds
from kiln.topi.utils import get_const_tuple

_SPATIAL = "DHW"


def _all(conds: list) -> Any:
    out = conds[0]
    for c in conds[1:]:
        out = _op.logical_and(out, c)
    return out


def window_mean(total: Any, count: Any) -> Any:
    """``total / count``; integer averages truncate toward zero, as TVM's ``div``."""
    if "int" in str(total.dtype):
        return _op.truncdiv(total, count)
    return total / count


def pool(data: te.Tensor, kernel: Sequence[int], stride: Any, dilation: Any, padding: Any,
         pool_type: str, ceil_mode: bool = False, layout: str = "NCHW",
         count_include_pad: bool = True) -> te.Tensor:
    """Max or average pooling over the spatial axes named in ``layout``.

    Example
    -------
    >>> from kiln import te, topi
    >>> x = te.placeholder((1, 2, 7, 7))
    >>> y = topi.nn.pool(x, (3, 3), 2, 1, 1, "max", ceil_mode=True)
    >>> [int(d) for d in y.shape]
    [1, 2, 4, 4]
    """
    if pool_type not in ("max", "avg"):
        raise TVMError(f"pool: pool_type must be 'max' or 'avg', got {pool_type!r}")
    spatial = [k for k, a in enumerate(layout) if a in _SPATIAL]
    nsp = len(spatial)
    kernel = int_values(kernel, nsp, "pool_size")
    stride, dilation = int_values(stride, nsp, "strides"), int_values(dilation, nsp, "dilation")
    before, after = get_pad_tuple(padding, nsp)
    shape = get_const_tuple(data.shape)
    out_sp = []
    for k, ax in enumerate(spatial):
        span = shape[ax] + before[k] + after[k] - (kernel[k] - 1) * dilation[k] - 1
        n = (span + (stride[k] - 1 if ceil_mode else 0)) // stride[k] + 1
        if ceil_mode and (n - 1) * stride[k] >= shape[ax] + before[k]:
            n -= 1
        if n <= 0:
            raise TVMError(f"pool: window {kernel} is larger than the padded input")
        out_sp.append(n)
    out_shape = list(shape)
    for k, ax in enumerate(spatial):
        out_shape[ax] = out_sp[k]
    red = [te.reduce_axis((0, kernel[k]), name=f"rv{k}") for k in range(nsp)]

    def window(i):
        pos = [i[ax] * stride[k] - before[k] + red[k].var * dilation[k]
               for k, ax in enumerate(spatial)]
        src = list(i)
        for k, ax in enumerate(spatial):
            src[ax] = clamp(pos[k], shape[ax])
        valid = _all([in_bounds(p, shape[ax]) for p, ax in zip(pos, spatial)])
        return pos, data(*src), valid

    if pool_type == "max":
        def body(*i):
            _, value, valid = window(i)
            return te.max(_op.if_then_else(valid, value, _op.min_value(data.dtype)), axis=red)

        return te.compute(out_shape, body, name="pool_max", tag="pool_max")

    def total(*i):
        _, value, valid = window(i)
        return te.sum(_op.if_then_else(valid, value, _op.const(0, data.dtype)), axis=red)

    sums = te.compute(out_shape, total, name="pool_sum", tag="pool_sum")
    cnt_red = [te.reduce_axis((0, kernel[k]), name=f"rc{k}") for k in range(nsp)]

    def count(*i):
        conds = []
        for k, ax in enumerate(spatial):
            p = i[ax] * stride[k] - before[k] + cnt_red[k].var * dilation[k]
            lo, hi = (-before[k], shape[ax] + after[k]) if count_include_pad else (0, shape[ax])
            conds += [p >= lo, p < hi]
        return te.sum(_op.if_then_else(_all(conds), 1, 0), axis=cnt_red)

    counts = te.compute(out_shape, count, name="pool_count", tag="pool_count")
    return te.compute(out_shape, lambda *i: window_mean(sums(*i), _op.cast(
        _op.max(counts(*i), 1), data.dtype)), name="pool_avg", tag="elemwise")


def pool1d(data, kernel, stride, dilation, padding, pool_type, ceil_mode=False, layout="NCW",
           count_include_pad=True):
    return pool(data, kernel, stride, dilation, padding, pool_type, ceil_mode, layout,
                count_include_pad)


def pool2d(data, kernel, stride, dilation, padding, pool_type, ceil_mode=False, layout="NCHW",
           count_include_pad=True):
    return pool(data, kernel, stride, dilation, padding, pool_type, ceil_mode, layout,
                count_include_pad)


def pool3d(data, kernel, stride, dilation, padding, pool_type, ceil_mode=False,
           layout="NCDHW", count_include_pad=True):
    return pool(data, kernel, stride, dilation, padding, pool_type, ceil_mode, layout,
                count_include_pad)


def adaptive_pool(data: te.Tensor, output_size: Sequence[int], pool_type: str,
                  layout: str = "NCHW") -> te.Tensor:
    """Pooling into ``output_size`` bins: bin ``o`` covers ``[floor(o*n/O), ceil((o+1)*n/O))``."""
    spatial = [k for k, a in enumerate(layout) if a in _SPATIAL]
    shape = get_const_tuple(data.shape)
    sizes = [shape[ax] if o is None else int(o) for o, ax in zip(output_size, spatial)]
    widths = [-(-n // o) + (1 if n % o else 0) for n, o in
              zip([shape[ax] for ax in spatial], sizes)]
    red = [te.reduce_axis((0, w), name=f"rv{k}") for k, w in enumerate(widths)]
    out_shape = list(shape)
    for k, ax in enumerate(spatial):
        out_shape[ax] = sizes[k]

    def bounds(i):
        starts, ends = [], []
        for k, ax in enumerate(spatial):
            n, o = shape[ax], sizes[k]
            starts.append(_op.floordiv(i[ax] * n, o))
            ends.append(_op.floordiv((i[ax] + 1) * n + o - 1, o))
        return starts, ends

    def body(*i):
        starts, ends = bounds(i)
        src = list(i)
        for k, ax in enumerate(spatial):
            src[ax] = clamp(starts[k] + red[k].var, shape[ax])
        valid = _all([starts[k] + red[k].var < ends[k] for k in range(len(spatial))])
        if pool_type == "max":
            return te.max(_op.if_then_else(valid, data(*src), _op.min_value(data.dtype)),
                          axis=red)
        return te.sum(_op.if_then_else(valid, data(*src), _op.const(0, data.dtype)), axis=red)

    out = te.compute(out_shape, body, name=f"adaptive_pool_{pool_type}",
                     tag=f"adaptive_pool_{pool_type}")
    if pool_type == "max":
        return out

    def average(*i):
        starts, ends = bounds(i)
        count = None
        for s, e in zip(starts, ends):
            count = (e - s) if count is None else count * (e - s)
        return window_mean(out(*i), _op.cast(count, data.dtype))

    return te.compute(out_shape, average, name="adaptive_pool_avg", tag="elemwise")


def global_pool(data: te.Tensor, pool_type: str, layout: str = "NCHW") -> te.Tensor:
    """Pooling over all spatial positions (output spatial size 1)."""
    nsp = sum(1 for a in layout if a in _SPATIAL)
    return adaptive_pool(data, [1] * nsp, pool_type, layout)
