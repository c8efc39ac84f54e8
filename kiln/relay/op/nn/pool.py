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

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.layout import (
    InferCorrectLayoutOutput,
    attrs_with,
    convert_array,
    parse_layout,
    primal_layout,
)
from kiln.relay.op.nn.conv import (
    as_tuple,
    canonical_layout,
    explicit_pads,
    get_pad_tuple,
    pad_pairs,
    shape_func_same_batch,
    sliding_windows,
)
from kiln.relay.op.op import (
    OUT_ELEMWISE_FUSABLE,
    call,
    define_op,
    register_compute,
    register_infer_correct_layout,
    register_opaque_schedule,
    register_reference,
    register_shape_func,
)
from kiln.relay.op.rule_util import reference_dtype
from kiln.relay.op.type_relations import dim_op, dims, fail, is_static, tensor_arg, tensor_type

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.

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
    pool, strides, dilation = (list(as_tuple(v, n)) for v in (attrs.pool_size, attrs.strides,
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


def pool2d_infer_correct_layout(attrs, new_in_layouts, old_in_layouts, old_in_types):
    """A 2-D pool runs in its input's layout (``NCHW16c``) when that keeps H and W whole:
    ``layout`` follows the input and the output keeps it."""
    layout, out = new_in_layouts[0], attrs.out_layout or attrs.layout
    if not layout or layout == attrs.layout or out != attrs.layout or "h" in layout or \
            "w" in layout or set(primal_layout(layout)) != set(attrs.layout):
        return InferCorrectLayoutOutput([attrs.layout], [out])
    return InferCorrectLayoutOutput([layout], [layout],
                                    attrs_with(attrs, layout=layout, out_layout=""))


for _name in ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_max_pool2d", "nn.global_avg_pool2d"):
    register_infer_correct_layout(_name, pool2d_infer_correct_layout)


def _pool(name, n, data, pool_size, strides, dilation, padding, layout, out_layout, ceil_mode,
          **extra):
    attrs_type = _POOL_OPS[name][1]
    return call(name, [data], attrs_type(
        pool_size=as_tuple(pool_size, n), strides=as_tuple(strides, n),
        dilation=as_tuple(dilation, n), padding=get_pad_tuple(padding, n), layout=layout,
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


# ---- computes (TOPI) and schedule kind ------------------------------------------------------
def _pool_compute(kind: str):
    def compute(attrs, inputs, out_type):
        from kiln.topi import nn as topi_nn

        return [topi_nn.pool(inputs[0], list(attrs.pool_size), list(attrs.strides),
                             list(attrs.dilation), list(attrs.padding), kind, attrs.ceil_mode,
                             attrs.layout, getattr(attrs, "count_include_pad", False))]

    compute.__name__ = compute.__qualname__ = f"compute_{kind}_pool"
    return compute


def _global_pool_compute(kind: str):
    def compute(attrs, inputs, out_type):
        from kiln.topi import nn as topi_nn

        return [topi_nn.global_pool(inputs[0], kind, attrs.layout)]

    compute.__name__ = compute.__qualname__ = f"compute_global_{kind}_pool"
    return compute


def _adaptive_pool_compute(kind: str):
    def compute(attrs, inputs, out_type):
        from kiln.topi import nn as topi_nn

        n = sum(1 for c in attrs.layout if c in "DHW")
        size = list(attrs.output_size) if attrs.output_size is not None else [None] * n
        size = size * n if len(size) == 1 else size
        return [topi_nn.adaptive_pool(inputs[0], size, kind, attrs.layout)]

    compute.__name__ = compute.__qualname__ = f"compute_adaptive_{kind}_pool"
    return compute


# ---- reference semantics (NumPy): sliding windows in the canonical NC<spatial> layout -------
def _pool_reference(attrs, args, out_type, nd, kind):
    layout = attrs.layout
    x = convert_array(args[0], layout, canonical_layout(layout, nd)).astype(np.float64)
    kernel = [int(k) for k in attrs.pool_size]
    strides = [int(s) for s in attrs.strides]
    dilation = [int(d) for d in attrs.dilation]
    pads = explicit_pads(attrs.padding, nd)
    extra = []
    for i in range(nd):
        span = (kernel[i] - 1) * dilation[i] + 1
        size = x.shape[2 + i] + pads[i][0] + pads[i][1]
        if attrs.ceil_mode:
            out = -(-(size - span) // strides[i]) + 1
            # the last window must start inside the input or its left padding
            if (out - 1) * strides[i] >= x.shape[2 + i] + pads[i][0]:
                out -= 1
        else:
            out = (size - span) // strides[i] + 1
        extra.append(max(0, (out - 1) * strides[i] + span - size))
    full_pads = [(0, 0), (0, 0)] + [(p[0], p[1] + e) for p, e in zip(pads, extra)]
    inside = np.pad(np.ones(x.shape[2:]), [(p[0], p[1] + e) for p, e in zip(pads, extra)])
    # ones over the input and its explicit padding, zeros over the ceil_mode extension
    in_pad = np.ones([n + a + b for n, (a, b) in zip(x.shape[2:], pads)])
    in_pad = np.pad(in_pad, [(0, e) for e in extra])
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, full_pads, constant_values=fill)
    win = sliding_windows(xp, kernel, strides, dilation)
    axes = tuple(range(2 + nd, 2 + 2 * nd))
    if kind == "max":
        out = win.max(axis=axes)
    else:
        count_src = in_pad if attrs.count_include_pad else inside
        counts = sliding_windows(count_src[None, None], kernel, strides, dilation).sum(axis=axes)
        out = win.sum(axis=axes) / np.maximum(counts, 1)
    out = out.astype(reference_dtype(out_type))
    return convert_array(out, canonical_layout(layout, nd), attrs.out_layout or layout)




def _global_pool_reference(attrs, args, out_type, kind):
    layout = attrs.layout
    x = convert_array(args[0], layout, "NCHW")
    out = x.max(axis=(2, 3), keepdims=True) if kind == "max" else x.mean(axis=(2, 3),
                                                                            keepdims=True)
    return convert_array(out.astype(reference_dtype(out_type)), "NCHW",
                            attrs.out_layout or layout)




def _adaptive_pool_reference(attrs, args, out_type, nd, kind):
    layout = attrs.layout
    x = convert_array(args[0], layout, canonical_layout(layout, nd))
    sizes = list(attrs.output_size) if attrs.output_size is not None else [None] * nd
    if len(sizes) == 1 and nd > 1:
        sizes = sizes * nd
    sizes = [x.shape[2 + i] if s is None else int(s) for i, s in enumerate(sizes)]
    out = np.empty(x.shape[:2] + tuple(sizes), dtype=np.float64)
    for pos in np.ndindex(*sizes):
        sl = []
        for i, p in enumerate(pos):
            n = x.shape[2 + i]
            sl.append(slice(p * n // sizes[i], -(-(p + 1) * n // sizes[i])))
        window = x[(slice(None), slice(None), *sl)]
        axes = tuple(range(2, 2 + nd))
        out[(slice(None), slice(None), *pos)] = (
            window.max(axis=axes) if kind == "max" else window.mean(axis=axes))
    out = out.astype(reference_dtype(out_type))
    return convert_array(out, canonical_layout(layout, nd), attrs.out_layout or layout)


def _pool_kind(op_name: str) -> str:
    return "max" if "max_pool" in op_name else "avg"


def _spatial_rank(op_name: str) -> int:
    return int(op_name[-2]) if op_name[-2].isdigit() else 2


def _pool_reference_of(op_name: str):
    kind, nd = _pool_kind(op_name), _spatial_rank(op_name)
    if op_name.startswith("nn.global"):
        def reference(attrs, args, out_type):
            return _global_pool_reference(attrs, args, out_type, kind)
    elif op_name.startswith("nn.adaptive"):
        def reference(attrs, args, out_type):
            return _adaptive_pool_reference(attrs, args, out_type, nd, kind)
    else:
        def reference(attrs, args, out_type):
            return _pool_reference(attrs, args, out_type, nd, kind)
    reference.__name__ = reference.__qualname__ = f"reference_{op_name.split('.')[1]}"
    return reference


for _name in _POOL_OPS:
    if _name.startswith("nn.global"):
        register_compute(_name, _global_pool_compute(_pool_kind(_name)))
    elif _name.startswith("nn.adaptive"):
        register_compute(_name, _adaptive_pool_compute(_pool_kind(_name)))
    else:
        register_compute(_name, _pool_compute(_pool_kind(_name)))
    register_opaque_schedule(_name)
    register_reference(_name, _pool_reference_of(_name))
    # only the batch may be dynamic: the window geometry fixes the spatial extents
    register_shape_func(_name, False, shape_func_same_batch)


__all__ = [
    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "global_max_pool2d", "global_avg_pool2d", "adaptive_max_pool1d", "adaptive_avg_pool1d",
    "adaptive_max_pool2d", "adaptive_avg_pool2d",
]
