"""Convolutions: ``nn.conv1d/2d/3d``, transposed convs, Winograd and GEMM variants (the matrix
products are in :mod:`.dense`).

Entry points (TVM's signatures): :func:`conv1d`, :func:`conv2d`, :func:`conv3d`,
:func:`conv1d_transpose`, :func:`conv2d_transpose`,
:func:`contrib_conv2d_winograd_weight_transform`,
:func:`contrib_conv2d_winograd_without_weight_transform`,
:func:`contrib_conv2d_gemm_weight_transform`,
:func:`contrib_conv2d_gemm_without_weight_transform`. All are ``OUT_ELEMWISE_FUSABLE``.

Relations work in a canonical layout (``NCHW`` data, ``OIHW`` kernel): the input shapes are
converted from the attrs' layouts, the output is computed there and converted to
``out_layout`` (default: the data layout). Padding is normalized as TVM does: one value pads
every side, ``n`` values pad both sides of each spatial axis, ``2n`` values are all befores
then all afters.

Example
-------
>>> from kiln import relay
>>> x = relay.var("x", shape=(1, 3, 32, 32))
>>> w = relay.var("w", shape=(16, 3, 3, 3))
>>> y = relay.nn.conv2d(x, w, padding=1)
>>> y.attrs.padding
(1, 1, 1, 1)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from kiln.relay.op import op_attrs as A
from kiln.relay.op.layout import InferCorrectLayoutOutput, convert_array, convert_shape
from kiln.relay.op.op import (
    OUT_ELEMWISE_FUSABLE,
    call,
    define_op,
    register_arg_types,
    register_compute,
    register_convert_op_layout,
    register_fold_scale_axis,
    register_gradient,
    register_infer_correct_layout,
    register_mac_count,
    register_opaque_schedule,
    register_reference,
    register_shape_func,
)
from kiln.relay.op.reshape import transpose
from kiln.relay.op.rule_util import i64, out_dtype, reference_dtype, wide_dtype
from kiln.relay.op.transform import strided_slice
from kiln.relay.op.type_relations import (
    dim_op,
    dims,
    fail,
    is_static,
    shape_str,
    tensor_arg,
    tensor_type,
)
from kiln.runtime.error import OpNotImplemented, TVMError

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


def as_tuple(value: Any, n: int) -> tuple:
    """An int (or a 1-tuple) repeated ``n`` times; a tuple as is."""
    if isinstance(value, int):
        return (int(value),) * n
    return tuple(int(v) if isinstance(v, int) else v for v in value)


def get_pad_tuple(padding: Any, n: int) -> tuple:
    """TVM's ``get_pad_tuple{1,2,3}d``: 1, n or 2n values -> 2n values (befores, afters)."""
    pad = as_tuple(padding, 1) if isinstance(padding, int) else tuple(padding)
    if len(pad) == 1:
        return pad * (2 * n)
    if len(pad) == n:
        return pad + pad
    if len(pad) == 2 * n:
        return pad
    raise ValueError(f"padding must have 1, {n} or {2 * n} values, got {padding!r}")


def pad_pairs(padding: Any, n: int, op_name: str) -> list[tuple[Any, Any]]:
    """(before, after) for each of ``n`` spatial axes from 1, n or 2n padding values."""
    pad = list(padding)
    if len(pad) == 1:
        pad = pad * (2 * n)
    elif len(pad) == n:
        pad = pad + pad
    elif len(pad) != 2 * n:
        fail(f"{op_name}: padding must have 1, {n} or {2 * n} values, got {list(padding)}")
    return [(pad[i], pad[n + i]) for i in range(n)]


def _spatial_params(attrs, n, op_name):
    strides, dilation = list(attrs.strides), list(attrs.dilation)
    if len(strides) == 1:
        strides = strides * n
    if len(dilation) == 1:
        dilation = dilation * n
    if len(strides) != n or len(dilation) != n:
        fail(f"{op_name}: strides and dilation need {n} values")
    if any(int(s) <= 0 for s in strides) or any(int(x) <= 0 for x in dilation):
        fail(f"{op_name}: strides and dilation must be positive")
    return strides, dilation, pad_pairs(attrs.padding, n, op_name)


def _conv_out(x, k, pad, stride, dilation):
    return dim_op(lambda x_, k_: (x_ + pad[0] + pad[1] - ((k_ - 1) * dilation + 1)) // stride + 1,
                  x, k)


def _out_dtype(attrs, data):
    return attrs.out_dtype or data.dtype


def _check_kernel_size(attrs, kernel, op_name):
    if attrs.kernel_size is None:
        return
    ks = list(attrs.kernel_size)
    for want, have in zip(ks, kernel):
        if is_static(have) and int(want) != have:
            fail(f"{op_name}: kernel_size {ks} does not match the weight's spatial shape "
                 f"{shape_str(kernel)}")


def _conv_rel(types, attrs, op_name, n):
    data, weight = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    sp = _SPATIAL[n]
    d = convert_shape(dims(data), attrs.data_layout, "NC" + sp, op_name)
    w = convert_shape(dims(weight), attrs.kernel_layout, "OI" + sp, op_name)
    strides, dilation, pads = _spatial_params(attrs, n, op_name)
    groups = int(attrs.groups)
    if groups <= 0:
        fail(f"{op_name}: groups must be positive, got {groups}")
    if attrs.channels is not None:
        out_c = int(attrs.channels)
        if is_static(w[0]) and w[0] != out_c:
            fail(f"{op_name}: channels={out_c} but the weight has {w[0]} output channels")
    else:
        out_c = w[0]
    _check_kernel_size(attrs, w[2:], op_name)
    if is_static(d[1]) and is_static(w[1]):
        if d[1] % groups or d[1] // groups != w[1]:
            fail(f"{op_name}: data has {d[1]} channels in {groups} group(s) but the weight "
                 f"expects {w[1]} input channels per group (data {shape_str(dims(data))}, "
                 f"weight {shape_str(dims(weight))})")
    spatial = [_conv_out(d[2 + i], w[2 + i], pads[i], int(strides[i]), int(dilation[i]))
               for i in range(n)]
    for i, x in enumerate(spatial):
        if is_static(x) and x <= 0:
            fail(f"{op_name}: the kernel does not fit the padded input on spatial axis {i} "
                 f"(data {shape_str(dims(data))})")
    out = convert_shape([d[0], out_c, *spatial], "NC" + sp,
                        attrs.out_layout or attrs.data_layout, op_name)
    return tensor_type(out, _out_dtype(attrs, data))


def _conv1d_rel(types, attrs, op_name):
    return _conv_rel(types, attrs, op_name, 1)


def conv2d_rel(types, attrs, op_name):
    """The type relation of 2-D convolutions in any data/kernel/out layout."""
    return _conv_rel(types, attrs, op_name, 2)


def _conv3d_rel(types, attrs, op_name):
    return _conv_rel(types, attrs, op_name, 3)


def _conv_transpose_rel(types, attrs, op_name, n):
    data, weight = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    sp = _SPATIAL[n]
    d = convert_shape(dims(data), attrs.data_layout, "NC" + sp, op_name)
    w = convert_shape(dims(weight), attrs.kernel_layout, "IO" + sp, op_name)
    strides, dilation, pads = _spatial_params(attrs, n, op_name)
    out_pad = list(attrs.output_padding)
    if len(out_pad) == 1:
        out_pad = out_pad * n
    if len(out_pad) != n:
        fail(f"{op_name}: output_padding needs {n} values")
    groups = int(attrs.groups)
    if is_static(d[1]) and is_static(w[0]) and d[1] != w[0]:
        fail(f"{op_name}: data has {d[1]} channels but the weight expects {w[0]}")
    if attrs.channels is not None:
        out_c = int(attrs.channels)
        if is_static(w[1]) and out_c // groups != w[1]:
            fail(f"{op_name}: channels={out_c} // groups={groups} does not match the weight's "
                 f"{w[1]} output channels per group")
    else:
        # TVM's relation says w[1] here, which is wrong for groups > 1 (its compute gives
        # w[1] * groups); kiln uses the compute's extent.
        out_c = dim_op(lambda o: o * groups, w[1])
    _check_kernel_size(attrs, w[2:], op_name)
    spatial = [
        dim_op(lambda x, k, i=i: (x - 1) * int(strides[i]) + (k - 1) * int(dilation[i]) + 1
               - pads[i][0] - pads[i][1] + int(out_pad[i]), d[2 + i], w[2 + i])
        for i in range(n)
    ]
    out = convert_shape([d[0], out_c, *spatial], "NC" + sp,
                        attrs.out_layout or attrs.data_layout, op_name)
    return tensor_type(out, _out_dtype(attrs, data))


def _conv1d_transpose_rel(types, attrs, op_name):
    return _conv_transpose_rel(types, attrs, op_name, 1)


def _conv2d_transpose_rel(types, attrs, op_name):
    return _conv_transpose_rel(types, attrs, op_name, 2)


def _conv_from_attrs_rel(types, attrs, op_name):
    """Convs whose weight is pre-transformed: the output comes from channels/kernel_size."""
    data = tensor_arg(types, 0, op_name)
    tensor_arg(types, 1, op_name)
    if attrs.channels is None or attrs.kernel_size is None:
        fail(f"{op_name}: channels and kernel_size must be given")
    d = convert_shape(dims(data), attrs.data_layout, "NCHW", op_name)
    strides, dilation, pads = _spatial_params(attrs, 2, op_name)
    ks = list(attrs.kernel_size)
    spatial = [_conv_out(d[2 + i], int(ks[i]), pads[i], int(strides[i]), int(dilation[i]))
               for i in range(2)]
    out = convert_shape([d[0], int(attrs.channels), *spatial], "NCHW",
                        attrs.out_layout or attrs.data_layout, op_name)
    return tensor_type(out, _out_dtype(attrs, data))


def _winograd_weight_rel(types, attrs, op_name):
    weight = tensor_arg(types, 0, op_name)
    w = dims(weight)
    if len(w) != 4:
        fail(f"{op_name}: expects an OIHW weight, got shape {shape_str(w)}")
    tile = int(attrs.tile_size)
    alpha = [dim_op(lambda k: tile + k - 1, w[2]), dim_op(lambda k: tile + k - 1, w[3])]
    return tensor_type([*alpha, w[0], w[1]], weight.dtype)


def _gemm_weight_rel(types, attrs, op_name):
    weight = tensor_arg(types, 0, op_name)
    w = dims(weight)
    if len(w) != 4:
        fail(f"{op_name}: expects an HWIO weight, got shape {shape_str(w)}")
    n, k = int(attrs.tile_N), int(attrs.tile_K)
    big_k = dim_op(lambda a, b, c: a * b * c, w[0], w[1], w[2])
    big_n = w[3]
    k_pad = dim_op(lambda x: (x + k - 1) // k, big_k)
    n_pad = dim_op(lambda x: (x + n - 1) // n, big_n)
    return tensor_type([n_pad, k_pad, n, k], weight.dtype)


def _conv_weight(canonical: str):
    """An ``FInferArgTypes`` rule: an unannotated conv weight from the data, ``channels``,
    ``groups`` and ``kernel_size``. ``canonical`` is "OI" (conv) or "IO" (transposed conv);
    the shape is built in that canonical layout and converted to ``kernel_layout``."""

    def rule(types, attrs, op_name):
        if types[0] is None or types[1] is not None or attrs.channels is None \
                or attrs.kernel_size is None:
            return {}
        data = tensor_arg(types, 0, op_name)
        sp = _SPATIAL[len(attrs.kernel_size)]
        d = convert_shape(dims(data), attrs.data_layout, "NC" + sp, op_name)
        groups = int(attrs.groups)
        extent = {"O": int(attrs.channels), "I": d[1]}
        extent[canonical[1]] = dim_op(lambda c: c // groups, extent[canonical[1]])
        shape = [extent[canonical[0]], extent[canonical[1]], *map(int, attrs.kernel_size)]
        kernel = convert_shape(shape, canonical + sp, attrs.kernel_layout, op_name)
        return {1: tensor_type(kernel, data.dtype)}

    rule.__name__ = f"conv_weight_{canonical}"
    return rule


define_op("nn.conv1d", _conv1d_rel, OUT_ELEMWISE_FUSABLE, 2, A.Conv1DAttrs, "1-D conv", 2)
define_op("nn.conv2d", conv2d_rel, OUT_ELEMWISE_FUSABLE, 2, A.Conv2DAttrs, "2-D conv", 2)
define_op("nn.conv3d", _conv3d_rel, OUT_ELEMWISE_FUSABLE, 2, A.Conv3DAttrs, "3-D conv", 2)
define_op("nn.conv1d_transpose", _conv1d_transpose_rel, OUT_ELEMWISE_FUSABLE, 2,
          A.Conv1DTransposeAttrs, "1-D transposed conv", 2)
define_op("nn.conv2d_transpose", _conv2d_transpose_rel, OUT_ELEMWISE_FUSABLE, 2,
          A.Conv2DTransposeAttrs, "2-D transposed conv", 2)
define_op("nn.contrib_conv2d_winograd_weight_transform", _winograd_weight_rel,
          OUT_ELEMWISE_FUSABLE, 1, A.ConvWinogradWeightTransformAttrs,
          "Winograd kernel transform", 10)
define_op("nn.contrib_conv2d_winograd_without_weight_transform", _conv_from_attrs_rel,
          OUT_ELEMWISE_FUSABLE, 2, A.Conv2DWinogradAttrs, "Winograd conv2d", 10)
define_op("nn.contrib_conv2d_gemm_weight_transform", _gemm_weight_rel, OUT_ELEMWISE_FUSABLE,
          1, A.ConvGemmWeightTransformAttrs, "GEMM kernel interleave", 10)
define_op("nn.contrib_conv2d_gemm_without_weight_transform", _conv_from_attrs_rel,
          OUT_ELEMWISE_FUSABLE, 2, A.Conv2DAttrs, "GEMM conv2d", 10)
for _name in ("nn.conv1d", "nn.conv2d", "nn.conv3d"):
    register_arg_types(_name, _conv_weight("OI"))
for _name in ("nn.conv1d_transpose", "nn.conv2d_transpose"):
    register_arg_types(_name, _conv_weight("IO"))


def _conv_attrs(n, strides, padding, dilation, groups, channels, kernel_size):
    return dict(strides=as_tuple(strides, n), padding=get_pad_tuple(padding, n),
                dilation=as_tuple(dilation, n), groups=int(groups), channels=channels,
                kernel_size=None if kernel_size is None else as_tuple(kernel_size, n))


def conv1d(data: Any, weight: Any, strides: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1, channels: int | None = None, kernel_size: Any = None,
           data_layout: str = "NCW", kernel_layout: str = "OIW", out_layout: str = "",
           out_dtype: str = "") -> Any:
    """1-D convolution (``NCW`` data, ``OIW`` kernel by default)."""
    return call("nn.conv1d", [data, weight], A.Conv1DAttrs(
        **_conv_attrs(1, strides, padding, dilation, groups, channels, kernel_size),
        data_layout=data_layout, kernel_layout=kernel_layout, out_layout=out_layout,
        out_dtype=out_dtype))


def conv2d(data: Any, weight: Any, strides: Any = (1, 1), padding: Any = (0, 0),
           dilation: Any = (1, 1), groups: int = 1, channels: int | None = None,
           kernel_size: Any = None, data_layout: str = "NCHW", kernel_layout: str = "OIHW",
           out_layout: str = "", out_dtype: str = "") -> Any:
    """2-D convolution; ``padding`` of 1, 2 or 4 values is stored as 4 (top, left, bottom,
    right); grouped/depthwise with ``groups``; layouts such as NHWC/HWIO.

    Example
    -------
    >>> from kiln import relay
    >>> y = relay.nn.conv2d(relay.var("x", shape=(1, 8, 8, 3)), relay.var("w", shape=(3, 3, 3, 4)),
    ...                     data_layout="NHWC", kernel_layout="HWIO")
    """
    return call("nn.conv2d", [data, weight], A.Conv2DAttrs(
        **_conv_attrs(2, strides, padding, dilation, groups, channels, kernel_size),
        data_layout=data_layout, kernel_layout=kernel_layout, out_layout=out_layout,
        out_dtype=out_dtype))


def conv3d(data: Any, weight: Any, strides: Any = (1, 1, 1), padding: Any = (0, 0, 0),
           dilation: Any = (1, 1, 1), groups: int = 1, channels: int | None = None,
           kernel_size: Any = None, data_layout: str = "NCDHW", kernel_layout: str = "OIDHW",
           out_layout: str = "", out_dtype: str = "") -> Any:
    """3-D convolution (``NCDHW`` data, ``OIDHW`` kernel by default)."""
    return call("nn.conv3d", [data, weight], A.Conv3DAttrs(
        **_conv_attrs(3, strides, padding, dilation, groups, channels, kernel_size),
        data_layout=data_layout, kernel_layout=kernel_layout, out_layout=out_layout,
        out_dtype=out_dtype))


def conv1d_transpose(data: Any, weight: Any, strides: Any = (1,), padding: Any = (0,),
                     dilation: Any = (1,), groups: int = 1, channels: int | None = None,
                     kernel_size: Any = None, data_layout: str = "NCW",
                     kernel_layout: str = "IOW", out_layout: str = "",
                     output_padding: Any = (0,), out_dtype: str = "") -> Any:
    """1-D transposed convolution (``IOW`` kernel by default)."""
    return call("nn.conv1d_transpose", [data, weight], A.Conv1DTransposeAttrs(
        **_conv_attrs(1, strides, padding, dilation, groups, channels, kernel_size),
        output_padding=as_tuple(output_padding, 1), data_layout=data_layout,
        kernel_layout=kernel_layout, out_layout=out_layout, out_dtype=out_dtype))


def conv2d_transpose(data: Any, weight: Any, strides: Any = (1, 1), padding: Any = (0, 0),
                     dilation: Any = (1, 1), groups: int = 1, channels: int | None = None,
                     kernel_size: Any = None, data_layout: str = "NCHW",
                     kernel_layout: str = "IOHW", out_layout: str = "",
                     output_padding: Any = (0, 0), out_dtype: str = "") -> Any:
    """2-D transposed convolution (``IOHW`` kernel by default)."""
    return call("nn.conv2d_transpose", [data, weight], A.Conv2DTransposeAttrs(
        **_conv_attrs(2, strides, padding, dilation, groups, channels, kernel_size),
        output_padding=as_tuple(output_padding, 2), data_layout=data_layout,
        kernel_layout=kernel_layout, out_layout=out_layout, out_dtype=out_dtype))


def contrib_conv2d_winograd_weight_transform(weight: Any, tile_size: int) -> Any:
    """Winograd-transform an OIHW kernel to ``(alpha, alpha, O, I)``."""
    return call("nn.contrib_conv2d_winograd_weight_transform", [weight],
                A.ConvWinogradWeightTransformAttrs(tile_size=int(tile_size)))


def contrib_conv2d_winograd_without_weight_transform(
        data: Any, weight: Any, tile_size: int, strides: Any = (1, 1), padding: Any = (0, 0),
        dilation: Any = (1, 1), groups: int = 1, channels: int | None = None,
        kernel_size: Any = None, data_layout: str = "NCHW", kernel_layout: str = "OIHW",
        out_layout: str = "", out_dtype: str = "") -> Any:
    """Winograd conv2d on a pre-transformed kernel (``channels``/``kernel_size`` required)."""
    return call("nn.contrib_conv2d_winograd_without_weight_transform", [data, weight],
                A.Conv2DWinogradAttrs(
                    tile_size=int(tile_size),
                    **_conv_attrs(2, strides, padding, dilation, groups, channels, kernel_size),
                    data_layout=data_layout, kernel_layout=kernel_layout,
                    out_layout=out_layout, out_dtype=out_dtype))


def contrib_conv2d_gemm_weight_transform(weights: Any, tile_N: int, tile_K: int) -> Any:  # noqa: N803
    """Interleave an HWIO kernel into ``(N/tile_N, K/tile_K, tile_N, tile_K)`` tiles
    (N and K padded up to whole tiles) for the GEMM conv2d."""
    return call("nn.contrib_conv2d_gemm_weight_transform", [weights],
                A.ConvGemmWeightTransformAttrs(tile_N=int(tile_N), tile_K=int(tile_K)))


def contrib_conv2d_gemm_without_weight_transform(
        data: Any, weight: Any, strides: Any = (1, 1), padding: Any = (0, 0),
        dilation: Any = (1, 1), groups: int = 1, channels: int | None = None,
        kernel_size: Any = None, data_layout: str = "NCHW", kernel_layout: str = "OIHW",
        out_layout: str = "", out_dtype: str = "") -> Any:
    """GEMM conv2d on an interleaved kernel (``channels``/``kernel_size`` required)."""
    return call("nn.contrib_conv2d_gemm_without_weight_transform", [data, weight],
                A.Conv2DAttrs(
                    **_conv_attrs(2, strides, padding, dilation, groups, channels, kernel_size),
                    data_layout=data_layout, kernel_layout=kernel_layout,
                    out_layout=out_layout, out_dtype=out_dtype))


# ---- computes (TOPI) and schedule kind ------------------------------------------------------
def _conv_compute(ndim: int):
    def compute(attrs, inputs, out_type):
        from kiln.topi import nn as topi_nn
        from kiln.topi.transform import layout_transform

        out = topi_nn.conv(inputs[0], inputs[1], list(attrs.strides), list(attrs.padding),
                           list(attrs.dilation), attrs.groups, attrs.data_layout,
                           attrs.kernel_layout, out_dtype(out_type), name=f"conv{ndim}d")
        if attrs.out_layout not in ("", attrs.data_layout):  # e.g. NCHW data, NHWC result
            out = layout_transform(out, attrs.data_layout, attrs.out_layout)
        return [out]

    compute.__name__ = compute.__qualname__ = f"compute_conv{ndim}d"
    return compute


for _nd in (1, 2, 3):
    register_compute(f"nn.conv{_nd}d", _conv_compute(_nd))


@register_compute("nn.conv1d_transpose")
@register_compute("nn.conv2d_transpose")
def compute_conv_transpose(attrs, inputs, out_type):
    """``topi.nn.conv_transpose`` in NCW/IOW or NCHW/IOHW."""
    from kiln.topi import nn as topi_nn

    if attrs.data_layout not in ("NCW", "NCHW") or attrs.kernel_layout not in ("IOW", "IOHW"):
        raise OpNotImplemented(f"conv transpose: layouts {attrs.data_layout}/"
                               f"{attrs.kernel_layout}; kiln computes NCW/IOW and NCHW/IOHW")
    return [topi_nn.conv_transpose(inputs[0], inputs[1], list(attrs.strides),
                                   list(attrs.padding), list(attrs.dilation),
                                   list(attrs.output_padding), attrs.groups,
                                   out_dtype(out_type))]


@register_compute("nn.contrib_conv2d_winograd_weight_transform")
def compute_winograd_weight_transform(attrs, inputs, out_type):
    """``U = G g G^T`` per channel pair."""
    from kiln.topi.nn import winograd

    return [winograd.winograd_weight_transform(inputs[0], attrs.tile_size)]


@register_compute("nn.contrib_conv2d_winograd_without_weight_transform")
def compute_winograd_conv2d(attrs, inputs, out_type):
    """Winograd conv2d over a transformed weight (NCHW, stride 1, dilation 1)."""
    from kiln.topi.nn import winograd

    if attrs.data_layout != "NCHW" or tuple(attrs.strides) != (1, 1) or \
            tuple(attrs.dilation) != (1, 1):
        raise OpNotImplemented("winograd conv2d: kiln computes NCHW, stride 1, dilation 1")
    return [winograd.conv2d_winograd_nchw(inputs[0], inputs[1], attrs.tile_size,
                                          list(attrs.padding), out_dtype(out_type))]


@register_compute("nn.contrib_conv2d_gemm_weight_transform")
def compute_gemm_weight_transform(attrs, inputs, out_type):
    """The HWIO weight interleaved into ``tile_N x tile_K`` tiles."""
    from kiln.topi.nn import winograd

    return [winograd.gemm_weight_transform(inputs[0], attrs.tile_N, attrs.tile_K)]


@register_compute("nn.contrib_conv2d_gemm_without_weight_transform")
def compute_gemm_conv2d(attrs, inputs, out_type):
    """NHWC conv2d as a GEMM over the interleaved weight."""
    from kiln.topi.nn import winograd

    if attrs.data_layout != "NHWC":
        raise OpNotImplemented("gemm conv2d: kiln computes NHWC data")
    return [winograd.conv2d_gemm_nhwc(inputs[0], inputs[1], list(attrs.strides),
                                      list(attrs.padding), list(attrs.dilation),
                                      list(attrs.kernel_size), attrs.channels,
                                      out_dtype(out_type))]


for _name in ("nn.conv1d", "nn.conv2d", "nn.conv3d", "nn.conv1d_transpose", "nn.conv2d_transpose",
              "nn.contrib_conv2d_winograd_weight_transform",
              "nn.contrib_conv2d_winograd_without_weight_transform",
              "nn.contrib_conv2d_gemm_weight_transform",
              "nn.contrib_conv2d_gemm_without_weight_transform"):
    register_opaque_schedule(_name)


# ---- reference semantics (NumPy) ------------------------------------------------------------
_SPATIAL_LETTERS = "DHW"


def canonical_layout(layout: str, nd: int, kernel: bool = False) -> str:
    """The canonical layout with ``nd`` spatial dims: NCW/NCHW/NCDHW or OIW/OIHW/OIDHW."""
    return ("OI" if kernel else "NC") + _SPATIAL_LETTERS[-nd:]


def explicit_pads(padding, nd: int) -> list[tuple[int, int]]:
    """(before, after) per spatial axis from 1, ``nd`` or ``2 nd`` padding values."""
    pad = [int(p) for p in padding]
    if len(pad) == 1:
        pad = pad * (2 * nd)
    elif len(pad) == nd:
        pad = pad + pad
    if len(pad) != 2 * nd:
        raise TVMError(f"padding {padding} does not fit {nd} spatial dims")
    return list(zip(pad[:nd], pad[nd:]))


def sliding_windows(x: np.ndarray, kernel, strides, dilation) -> np.ndarray:
    """(N, C, out..., k...) windows of a padded NC<spatial> array."""
    nd = len(kernel)
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    win = sliding_window_view(x, span, axis=tuple(range(2, 2 + nd)))
    idx = [slice(None), slice(None)] + [slice(None, None, s) for s in strides]
    idx += [slice(None, None, d) for d in dilation]
    return win[tuple(idx)]


def _convolve(data, weight, strides, padding, dilation, groups, out_dtype):
    nd = data.ndim - 2
    pads = explicit_pads(padding, nd)
    x = np.pad(data, [(0, 0), (0, 0)] + pads)
    win = sliding_windows(x, weight.shape[2:], strides, dilation)  # N C out.. k..
    n, c = data.shape[:2]
    o = weight.shape[0]
    cg, og = c // groups, o // groups
    outs = []
    letters = "pqr"[:nd]  # kernel offsets; upper case: output positions (never n, c or o)
    for g in range(groups):
        wg = weight[g * og:(g + 1) * og].astype(wide_dtype(out_dtype))
        xg = win[:, g * cg:(g + 1) * cg]
        spec = f"nc{letters.upper()}{letters},oc{letters}->no{letters.upper()}"
        outs.append(np.einsum(spec, xg, wg))
    return np.concatenate(outs, axis=1).astype(out_dtype)


def _conv_reference(attrs, args, out_type, nd):
    data, weight = args
    dl = attrs.data_layout
    kl = attrs.kernel_layout
    canon_d, canon_k = canonical_layout(dl, nd), canonical_layout(kl, nd, kernel=True)
    x = convert_array(data, dl, canon_d)
    w = convert_array(weight, kl, canon_k)
    if attrs.groups > 1 and w.shape[1] * attrs.groups != x.shape[1]:
        raise TVMError("conv: input channels do not match kernel * groups")
    out = _convolve(x, w, attrs.strides, attrs.padding, attrs.dilation, int(attrs.groups),
                reference_dtype(out_type))
    return convert_array(out, canon_d, attrs.out_layout or dl)




@register_reference("nn.conv1d")
def reference_conv1d(attrs, args, out_type):
    """Sliding-window correlation in NCW/OIW (other layouts converted in and out)."""
    return _conv_reference(attrs, args, out_type, 1)


@register_reference("nn.conv2d")
def reference_conv2d(attrs, args, out_type):
    """Sliding-window correlation in NCHW/OIHW (other layouts converted in and out)."""
    return _conv_reference(attrs, args, out_type, 2)


@register_reference("nn.conv3d")
def reference_conv3d(attrs, args, out_type):
    """Sliding-window correlation in NCDHW/OIDHW (other layouts converted in and out)."""
    return _conv_reference(attrs, args, out_type, 3)


# ---- convolutions with pre-transformed weights (contrib_conv2d_winograd_* / _gemm_*) --------
@register_reference("nn.contrib_conv2d_winograd_weight_transform")
def reference_winograd_weight_transform(attrs, args, out_type):
    """``U = G g G^T`` per (out, in) channel pair: OIHW -> [alpha, alpha, O, I]."""
    from kiln.topi.nn.winograd import winograd_matrices

    (weight,) = args
    _, g, _ = winograd_matrices(int(attrs.tile_size), weight.shape[2])
    u = np.einsum("ar,oirs,bs->aboi", g, weight.astype(np.float64), g)
    return u.astype(reference_dtype(out_type))


@register_reference("nn.contrib_conv2d_winograd_without_weight_transform")
def reference_winograd_conv2d(attrs, args, out_type):
    """Stride-1 NCHW conv from a transformed weight: per m x m output tile,
    ``A^T [U ⊙ (B^T d B)] A`` summed over input channels."""
    from kiln.topi.nn.winograd import winograd_matrices

    data, u = args
    m = int(attrs.tile_size)
    alpha = u.shape[0]
    at, _, bt = winograd_matrices(m, alpha - m + 1)
    (pt, pb), (pl, pr) = explicit_pads(attrs.padding, 2)
    n, _, h, w = data.shape
    oh, ow = h + pt + pb - (alpha - m), w + pl + pr - (alpha - m)
    nh, nw = -(-oh // m), -(-ow // m)
    padded = np.pad(data.astype(np.float64), [(0, 0), (0, 0),
                                             (pt, (nh - 1) * m + alpha - h - pt),
                                             (pl, (nw - 1) * m + alpha - w - pl)])
    tiles = sliding_window_view(padded, (alpha, alpha), axis=(2, 3))[:, :, ::m, ::m]
    v = np.einsum("as,ncyxst,bt->ncyxab", bt, tiles, bt)
    prod = np.einsum("abfc,ncyxab->nfyxab", u.astype(np.float64), v)
    y = np.einsum("ia,nfyxab,jb->nfyixj", at, prod, at)
    y = y.reshape(n, u.shape[2], nh * m, nw * m)[:, :, :oh, :ow]
    return y.astype(reference_dtype(out_type))


@register_reference("nn.contrib_conv2d_gemm_weight_transform")
def reference_gemm_weight_transform(attrs, args, out_type):
    """HWIO -> ``[ceil(O/N), ceil(K/Kt), N, Kt]``: the (K = H*W*I, O) matrix, zero-padded to
    whole tiles, cut into N x Kt tiles stored transposed."""
    (weight,) = args
    tn, tk = int(attrs.tile_N), int(attrs.tile_K)
    big_k, oc = int(np.prod(weight.shape[:3])), weight.shape[3]
    kp, npad = -(-big_k // tk) * tk, -(-oc // tn) * tn
    mat = np.zeros((kp, npad), weight.dtype)
    mat[:big_k, :oc] = weight.reshape(big_k, oc)
    return mat.reshape(kp // tk, tk, npad // tn, tn).transpose(2, 0, 3, 1)


@register_reference("nn.contrib_conv2d_gemm_without_weight_transform")
def reference_gemm_conv2d(attrs, args, out_type):
    """NHWC conv whose HWIO weight comes interleaved
    (:func:`reference_gemm_weight_transform`): unpack, convolve."""
    data, packed = args
    kh, kw = (int(k) for k in attrs.kernel_size)
    ic, oc = data.shape[3], int(attrs.channels)
    nb, kb, tn, tk = packed.shape
    mat = packed.transpose(1, 3, 0, 2).reshape(kb * tk, nb * tn)
    weight = mat[:kh * kw * ic, :oc].reshape(kh, kw, ic, oc)
    x = convert_array(data, "NHWC", "NCHW")
    out = _convolve(x, convert_array(weight, "HWIO", "OIHW"), attrs.strides, attrs.padding,
                attrs.dilation, 1, reference_dtype(out_type))
    return convert_array(out, "NCHW", "NHWC")


def _conv_transpose_reference(attrs, args, out_type, nd):
    data, weight = args
    dl = attrs.data_layout
    x = convert_array(data, dl, canonical_layout(dl, nd))
    # I: the input channels
    w = convert_array(weight, attrs.kernel_layout, "IO" + _SPATIAL_LETTERS[-nd:])
    groups = int(attrs.groups)
    strides, dilation = list(attrs.strides), list(attrs.dilation)
    pads = explicit_pads(attrs.padding, nd)
    out_pad = [int(p) for p in attrs.output_padding]
    n, c = x.shape[:2]
    og = w.shape[1]
    k = w.shape[2:]
    full = [(x.shape[2 + i] - 1) * strides[i] + (k[i] - 1) * dilation[i] + 1 + out_pad[i]
            for i in range(nd)]
    out = np.zeros((n, og * groups, *full), dtype=np.float64)
    cg = c // groups
    for g in range(groups):
        for pos in np.ndindex(*x.shape[2:]):
            vals = x[:, g * cg:(g + 1) * cg][(slice(None), slice(None), *pos)]  # n, cg
            for kpos in np.ndindex(*k):
                target = tuple(pos[i] * strides[i] + kpos[i] * dilation[i] for i in range(nd))
                contrib = vals @ w[(slice(g * cg, (g + 1) * cg), slice(None), *kpos)]  # n, og
                out[(slice(None), slice(g * og, (g + 1) * og), *target)] += contrib
    crop = tuple(slice(pads[i][0], full[i] - pads[i][1]) for i in range(nd))
    out = out[(slice(None), slice(None), *crop)].astype(reference_dtype(out_type))
    return convert_array(out, canonical_layout(dl, nd), attrs.out_layout or dl)


@register_reference("nn.conv1d_transpose")
def reference_conv1d_transpose(attrs, args, out_type):
    """Each input element scattered through its filter slice (NCW/IOW)."""
    return _conv_transpose_reference(attrs, args, out_type, 1)


@register_reference("nn.conv2d_transpose")
def reference_conv2d_transpose(attrs, args, out_type):
    """Each input element scattered through its filter slice (NCHW/IOHW)."""
    return _conv_transpose_reference(attrs, args, out_type, 2)


# ---- VM shape functions ---------------------------------------------------------------------
def shape_func_same_batch(attrs, in_dims, out_types):
    """Convolutions (and pools) whose only dynamic dimension is the batch of input 0."""
    return [[in_dims[0][0]] + [i64(int(d)) if isinstance(getattr(d, "value", None), int)
                               else None for d in list(out_types[0].shape)[1:]]]


for _name in ("nn.conv1d", "nn.conv2d", "nn.conv3d", "nn.conv1d_transpose",
              "nn.conv2d_transpose"):
    register_shape_func(_name, False, shape_func_same_batch)


# ---- gradients ------------------------------------------------------------------------------
def _conv2d_geometry(orig: Any) -> tuple:
    attrs = orig.attrs
    if int(attrs.groups) != 1 or str(attrs.data_layout) != "NCHW" or \
            str(attrs.kernel_layout) != "OIHW" or any(int(d) != 1 for d in attrs.dilation):
        raise TVMError("gradient: nn.conv2d is differentiable for groups=1, dilation 1 and "
                       "NCHW/OIHW layouts only")
    strides = [int(v) for v in attrs.strides]
    padding = [int(v) for v in attrs.padding]  # top, left, bottom, right
    return strides, padding


@register_gradient("nn.conv2d")
def gradient_conv2d(orig, grad):
    """A transposed convolution for the data, a batch/channel-swapped one for the weight."""
    data, weight = orig.args
    strides, padding = _conv2d_geometry(orig)
    n, c, height, width = data.checked_type.concrete_shape
    out_c, _, kh, kw = weight.checked_type.concrete_shape
    oh, ow = orig.checked_type.concrete_shape[2:]
    # d data: the transposed convolution, padded at the end to reach the input's size
    natural = [(oh - 1) * strides[0] - padding[0] - padding[2] + kh,
               (ow - 1) * strides[1] - padding[1] - padding[3] + kw]
    d_data = conv2d_transpose(grad, weight, strides=strides, padding=padding, channels=c,
                              kernel_size=(kh, kw),
                              output_padding=(height - natural[0], width - natural[1]))
    # d weight: correlate the input with the output adjoint (batch and channels swapped),
    # the forward stride becoming the dilation; cut the extra rows a stride can leave
    swapped = conv2d(transpose(data, (1, 0, 2, 3)), transpose(grad, (1, 0, 2, 3)),
                     padding=padding, dilation=strides)
    d_weight = strided_slice(transpose(swapped, (1, 0, 2, 3)), [0, 0, 0, 0],
                             [out_c, c, kh, kw])
    return [d_data, d_weight]


# ---- work counted by relay.analysis.get_total_mac_number ----------------------------------
def _layout_axis(attrs: Any, key: str, default: str, axis: str) -> int:
    return str(getattr(attrs, key, None) or default).index(axis)


def mac_count_conv(call_node: Any) -> int:
    """Each output element sums over one filter: all kernel axes but the output channels."""
    kernel = call_node.args[1].checked_type.concrete_shape
    default = "OI" + "DHW"[3 - (len(kernel) - 2):]
    out_axis = _layout_axis(call_node.attrs, "kernel_layout", default, "O")
    return math.prod(call_node.checked_type.concrete_shape) * math.prod(kernel) // \
        kernel[out_axis]


def mac_count_conv_transpose(call_node: Any) -> int:
    """Each input element is scattered through one filter slice: kernel axes but inputs."""
    kernel = call_node.args[1].checked_type.concrete_shape
    default = "IO" + "DHW"[3 - (len(kernel) - 2):]
    in_axis = _layout_axis(call_node.attrs, "kernel_layout", default, "I")
    return math.prod(call_node.args[0].checked_type.concrete_shape) * math.prod(kernel) // \
        kernel[in_axis]


for _nd in (1, 2, 3):
    register_mac_count(f"nn.conv{_nd}d", mac_count_conv)
register_mac_count("nn.conv1d_transpose", mac_count_conv_transpose)
register_mac_count("nn.conv2d_transpose", mac_count_conv_transpose)


def conv_infer_correct_layout(attrs, new_in_layouts, old_in_layouts, old_in_types):
    """A convolution takes its data and kernel in its attrs' layouts (AlterOpLayout converts
    producers in another layout) and gives ``out_layout`` (default: the data layout)."""
    return InferCorrectLayoutOutput([attrs.data_layout, attrs.kernel_layout],
                                    [attrs.out_layout or attrs.data_layout])


register_infer_correct_layout("nn.conv2d", conv_infer_correct_layout)


def winograd_infer_correct_layout(attrs, new_in_layouts, old_in_layouts, old_in_types):
    """The attrs' layouts, except that blocked Winograd data whose producer AlterOpLayout did
    not block is read as NCHW (the x86 kernel reads either), saving a transform."""
    from kiln.relay.op.layout import attrs_with

    # an unknown producer layout ("") is NCHW only if the data really has 4 axes: a
    # blocked NCHW{c}c input (e.g. a function parameter) keeps the attrs' layout
    rank = len(getattr(old_in_types[0], "shape", ())) if old_in_types else 0
    if new_in_layouts[0] not in ("", "NCHW") or attrs.data_layout == "NCHW" or rank != 4:
        return conv_infer_correct_layout(attrs, new_in_layouts, old_in_layouts, old_in_types)
    new_attrs = attrs_with(attrs, data_layout="NCHW",
                           out_layout=attrs.out_layout or attrs.data_layout)
    return InferCorrectLayoutOutput(["NCHW", attrs.kernel_layout], [new_attrs.out_layout],
                                    new_attrs)


register_infer_correct_layout("nn.contrib_conv2d_winograd_without_weight_transform",
                              winograd_infer_correct_layout)


def convert_conv2d(attrs, inputs, tinfos, desired_layouts):
    """``FTVMConvertOpLayout`` of ``nn.conv2d`` (ConvertLayout): the conv with data layout
    ``desired_layouts[0]`` and kernel layout ``desired_layouts[1]``, whose ``"default"`` is
    OIHW for NCHW data, HWIO (depthwise: HWOI) for NHWC."""
    data_layout, kernel_layout = desired_layouts
    if data_layout == "default" or (kernel_layout == "default" and
                                    data_layout not in ("NCHW", "NHWC")):
        raise TVMError(f"ConvertLayout: nn.conv2d has no default kernel layout for data "
                       f"layout {data_layout!r}; name both (e.g. ['NCHW', 'OIHW'])")
    if kernel_layout == "default":
        channels = convert_shape(list(tinfos[0].shape), attrs.data_layout, "NCHW",
                                 "nn.conv2d")[1]
        depthwise = attrs.groups > 1 and attrs.groups == getattr(channels, "value", channels)
        kernel_layout = "OIHW" if data_layout == "NCHW" else "HWOI" if depthwise else "HWIO"
    return conv2d(inputs[0], inputs[1], attrs.strides, attrs.padding, attrs.dilation,
                  attrs.groups, attrs.channels, attrs.kernel_size, data_layout, kernel_layout,
                  attrs.out_layout, attrs.out_dtype)


register_convert_op_layout("nn.conv2d", convert_conv2d)


# ---- FoldScaleAxis: a per-channel scale moves into the kernel's O or I axis ---------------
def scale_axis_output_conv2d(call_node: Any) -> tuple[int, int, int]:
    """A scale on the result's C axis scales the kernel's O axis."""
    attrs = call_node.attrs
    kernel = str(attrs.kernel_layout)
    return str(attrs.out_layout or attrs.data_layout).index("C"), kernel.index("O"), len(kernel)


def scale_axis_input_conv2d(call_node: Any) -> tuple[int, int, int] | None:
    """A scale on the data's C axis scales the kernel's I axis (ungrouped convolutions)."""
    attrs = call_node.attrs
    if int(attrs.groups) != 1:
        return None
    kernel = str(attrs.kernel_layout)
    return str(attrs.data_layout).index("C"), kernel.index("I"), len(kernel)


register_fold_scale_axis("nn.conv2d", scale_axis_output_conv2d, scale_axis_input_conv2d)


__all__ = [
    "conv1d", "conv2d", "conv3d", "conv1d_transpose", "conv2d_transpose",
    "contrib_conv2d_winograd_weight_transform",
    "contrib_conv2d_winograd_without_weight_transform",
    "contrib_conv2d_gemm_weight_transform", "contrib_conv2d_gemm_without_weight_transform",
    "get_pad_tuple", "pad_pairs",
]
