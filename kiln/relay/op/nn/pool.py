"""Pooling: ``nn.max_pool{1,2,3}d``, ``nn.avg_pool{1,2,3}d``, global and adaptive pooling.

Entry points (TVM's signatures): :func:`max_pool1d`, :func:`max_pool2d`, :func:`max_pool3d`,
:func:`avg_pool1d`, :func:`avg_pool2d`, :func:`avg_pool3d`, :func:`global_max_pool2d`,
:func:`global_avg_pool2d`, :func:`adaptive_max_pool1d`, :func:`adaptive_avg_pool1d`,
:func:`adaptive_max_pool2d`, :func:`adaptive_avg_pool2d`. All ``OUT_ELEMWISE_FUSABLE``.

The spatial axes are found by letter in the layout (``H``/``W``; ``D`` for 3-D), so blocked
layouts such as ``NCHW16c`` work. Output extent, as TVM computes it::

    out = (in + pad_before + pad_after - ((pool - 1) * dilation + 1)) // stride + 1
    ceil_mode:  (in + pad_before + pad_after - ((pool - 1) * dilation + 1) + stride - 1)
                // stride + 1

Example
-------
>>> from kiln import relay
>>> y = relay.nn.max_pool2d(relay.var("x", shape=(1, 3, 7, 7)), pool_size=2, strides=2,
...                         ceil_mode=True)
"""

from __future__ import annotations

from typing import Any

from kiln.relay.op import op_attrs as A
from kiln.relay.op.layout import parse_layout
from kiln.relay.op.nn.conv import get_pad_tuple, int_tuple, pad_pairs
from kiln.relay.op.op import OUT_ELEMWISE_FUSABLE, call, define_op
from kiln.relay.op.type_relations import dim_op, dims, fail, is_static, tensor_arg, tensor_type

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


def spatial_axes(layout: str, letters: str, ndim: int, op_name: str) -> list[int]:
    """Positions of the spatial axes ``letters`` in ``layout``; they must not be split."""
    axes = parse_layout(layout, op_name)
    if len(axes) != ndim:
        fail(f"{op_name}: a tensor of rank {ndim} does not have layout {layout!r}")
    names = [a for a, _ in axes]
    out = []
    for letter in letters:
        if letter not in names:
            fail(f"{op_name}: layout {layout!r} has no {letter} axis")
        if letter.lower() in names:
            fail(f"{op_name}: layout {layout!r} splits the spatial axis {letter}")
        out.append(names.index(letter))
    return out


def _pool_rel(types, attrs, op_name, n):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    axes = spatial_axes(attrs.layout, _SPATIAL[n], len(d), op_name)
    pool, strides, dilation = (list(int_tuple(v, n)) for v in (attrs.pool_size, attrs.strides,
                                                           attrs.dilation))
    if len(pool) == 1:
        pool = pool * n
    if len(strides) == 1:
        strides = strides * n
    if len(dilation) == 1:
        dilation = dilation * n
    if not len(pool) == len(strides) == len(dilation) == n:
        fail(f"{op_name}: pool_size, strides and dilation need {n} values")
    pads = pad_pairs(attrs.padding, n, op_name)
    extra = [int(s) - 1 if attrs.ceil_mode else 0 for s in strides]
    out = list(d)
    for i, axis in enumerate(axes):
        window = (int(pool[i]) - 1) * int(dilation[i]) + 1
        size = dim_op(lambda x, i=i, k=window: (x + pads[i][0] + pads[i][1] - k + extra[i])
                      // int(strides[i]) + 1, d[axis])
        if is_static(size) and size <= 0:
            fail(f"{op_name}: pool window {window} does not fit the padded input on axis "
                 f"{axis}")
        out[axis] = size
    return tensor_type(out, data.dtype)


def _pool1d_rel(types, attrs, op_name):
    return _pool_rel(types, attrs, op_name, 1)


def _pool2d_rel(types, attrs, op_name):
    return _pool_rel(types, attrs, op_name, 2)


def _pool3d_rel(types, attrs, op_name):
    return _pool_rel(types, attrs, op_name, 3)


def _global_pool_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    for axis in spatial_axes(attrs.layout, "HW", len(d), op_name):
        d[axis] = 1
    return tensor_type(d, data.dtype)


def _adaptive_rel(types, attrs, op_name, n):
    data = tensor_arg(types, 0, op_name)
    d = dims(data)
    axes = spatial_axes(attrs.layout, _SPATIAL[n], len(d), op_name)
    size = list(attrs.output_size or ())
    if len(size) == 1:
        size = size * n
    if size and len(size) != n:
        fail(f"{op_name}: output_size needs 1 or {n} values, got {size}")
    for i, axis in enumerate(axes):
        if size and size[i] is not None:
            d[axis] = int(size[i])
    return tensor_type(d, data.dtype)


def _adaptive1d_rel(types, attrs, op_name):
    return _adaptive_rel(types, attrs, op_name, 1)


def _adaptive2d_rel(types, attrs, op_name):
    return _adaptive_rel(types, attrs, op_name, 2)


_POOL_OPS = {
    "nn.max_pool1d": (_pool1d_rel, A.MaxPool1DAttrs),
    "nn.max_pool2d": (_pool2d_rel, A.MaxPool2DAttrs),
    "nn.max_pool3d": (_pool3d_rel, A.MaxPool3DAttrs),
    "nn.avg_pool1d": (_pool1d_rel, A.AvgPool1DAttrs),
    "nn.avg_pool2d": (_pool2d_rel, A.AvgPool2DAttrs),
    "nn.avg_pool3d": (_pool3d_rel, A.AvgPool3DAttrs),
    "nn.global_max_pool2d": (_global_pool_rel, A.GlobalPool2DAttrs),
    "nn.global_avg_pool2d": (_global_pool_rel, A.GlobalPool2DAttrs),
    "nn.adaptive_max_pool1d": (_adaptive1d_rel, A.AdaptivePool1DAttrs),
    "nn.adaptive_avg_pool1d": (_adaptive1d_rel, A.AdaptivePool1DAttrs),
    "nn.adaptive_max_pool2d": (_adaptive2d_rel, A.AdaptivePool2DAttrs),
    "nn.adaptive_avg_pool2d": (_adaptive2d_rel, A.AdaptivePool2DAttrs),
}
for _name, (_rel, _attrs) in _POOL_OPS.items():
    define_op(_name, _rel, OUT_ELEMWISE_FUSABLE, 1, _attrs, _name.split(".")[1], 2)


def _pool(name, n, data, pool_size, strides, dilation, padding, layout, out_layout, ceil_mode,
          **extra):
    attrs_type = _POOL_OPS[name][1]
    return call(name, [data], attrs_type(
        pool_size=int_tuple(pool_size, n), strides=int_tuple(strides, n),
        dilation=int_tuple(dilation, n), padding=get_pad_tuple(padding, n), layout=layout,
        out_layout=out_layout, ceil_mode=bool(ceil_mode), **extra))


def max_pool1d(data: Any, pool_size: Any = (1,), strides: Any = (1,), dilation: Any = (1,),
               padding: Any = (0,), layout: str = "NCW", out_layout: str = "",
               ceil_mode: bool = False) -> Any:
    """1-D max pooling."""
    return _pool("nn.max_pool1d", 1, data, pool_size, strides, dilation, padding, layout,
                 out_layout, ceil_mode)


def max_pool2d(data: Any, pool_size: Any = (1, 1), strides: Any = (1, 1),
               dilation: Any = (1, 1), padding: Any = (0, 0), layout: str = "NCHW",
               out_layout: str = "", ceil_mode: bool = False) -> Any:
    """2-D max pooling; ``padding`` of 1, 2 or 4 values is stored as 4."""
    return _pool("nn.max_pool2d", 2, data, pool_size, strides, dilation, padding, layout,
                 out_layout, ceil_mode)


def max_pool3d(data: Any, pool_size: Any = (1, 1, 1), strides: Any = (1, 1, 1),
               dilation: Any = (1, 1, 1), padding: Any = (0, 0, 0), layout: str = "NCDHW",
               out_layout: str = "", ceil_mode: bool = False) -> Any:
    """3-D max pooling."""
    return _pool("nn.max_pool3d", 3, data, pool_size, strides, dilation, padding, layout,
                 out_layout, ceil_mode)


def avg_pool1d(data: Any, pool_size: Any = (1,), strides: Any = (1,), dilation: Any = (1,),
               padding: Any = (0,), layout: str = "NCW", out_layout: str = "",
               ceil_mode: bool = False, count_include_pad: bool = False) -> Any:
    """1-D average pooling."""
    return _pool("nn.avg_pool1d", 1, data, pool_size, strides, dilation, padding, layout,
                 out_layout, ceil_mode, count_include_pad=bool(count_include_pad))


def avg_pool2d(data: Any, pool_size: Any = (1, 1), strides: Any = (1, 1),
               dilation: Any = (1, 1), padding: Any = (0, 0), layout: str = "NCHW",
               out_layout: str = "", ceil_mode: bool = False,
               count_include_pad: bool = False) -> Any:
    """2-D average pooling (``count_include_pad``: padding counts in the divisor)."""
    return _pool("nn.avg_pool2d", 2, data, pool_size, strides, dilation, padding, layout,
                 out_layout, ceil_mode, count_include_pad=bool(count_include_pad))


def avg_pool3d(data: Any, pool_size: Any = (1, 1, 1), strides: Any = (1, 1, 1),
               dilation: Any = (1, 1, 1), padding: Any = (0, 0, 0), layout: str = "NCDHW",
               out_layout: str = "", ceil_mode: bool = False,
               count_include_pad: bool = False) -> Any:
    """3-D average pooling."""
    return _pool("nn.avg_pool3d", 3, data, pool_size, strides, dilation, padding, layout,
                 out_layout, ceil_mode, count_include_pad=bool(count_include_pad))


def global_max_pool2d(data: Any, layout: str = "NCHW", out_layout: str = "") -> Any:
    """Max over the whole H x W plane."""
    return call("nn.global_max_pool2d", [data], A.GlobalPool2DAttrs(layout=layout,
                                                                    out_layout=out_layout))


def global_avg_pool2d(data: Any, layout: str = "NCHW", out_layout: str = "") -> Any:
    """Mean over the whole H x W plane."""
    return call("nn.global_avg_pool2d", [data], A.GlobalPool2DAttrs(layout=layout,
                                                                    out_layout=out_layout))


def _output_size(output_size: Any) -> tuple | None:
    if output_size is None:
        return ()
    if isinstance(output_size, int):
        return (int(output_size),)
    return tuple(None if v is None else int(v) for v in output_size)


def adaptive_max_pool1d(data: Any, output_size: Any = None, layout: str = "NCW",
                        out_layout: str = "") -> Any:
    """Max pooling to a fixed output width (the input width when None)."""
    return call("nn.adaptive_max_pool1d", [data], A.AdaptivePool1DAttrs(
        output_size=_output_size(output_size), layout=layout, out_layout=out_layout))


def adaptive_avg_pool1d(data: Any, output_size: Any = None, layout: str = "NCW",
                        out_layout: str = "") -> Any:
    """Average pooling to a fixed output width (the input width when None)."""
    return call("nn.adaptive_avg_pool1d", [data], A.AdaptivePool1DAttrs(
        output_size=_output_size(output_size), layout=layout, out_layout=out_layout))


def adaptive_max_pool2d(data: Any, output_size: Any = None, layout: str = "NCHW",
                        out_layout: str = "") -> Any:
    """Max pooling to a fixed (H, W) (one value: square; None: the input size)."""
    return call("nn.adaptive_max_pool2d", [data], A.AdaptivePool2DAttrs(
        output_size=_output_size(output_size), layout=layout, out_layout=out_layout))


def adaptive_avg_pool2d(data: Any, output_size: Any = None, layout: str = "NCHW",
                        out_layout: str = "") -> Any:
    """Average pooling to a fixed (H, W) (one value: square; None: the input size)."""
    return call("nn.adaptive_avg_pool2d", [data], A.AdaptivePool2DAttrs(
        output_size=_output_size(output_size), layout=layout, out_layout=out_layout))


__all__ = [
    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "global_max_pool2d", "global_avg_pool2d", "adaptive_max_pool1d", "adaptive_avg_pool1d",
    "adaptive_max_pool2d", "adaptive_avg_pool2d",
]
