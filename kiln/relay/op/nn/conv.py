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

from typing import Any

from kiln.relay.op import op_attrs as A
from kiln.relay.op.layout import convert_shape
from kiln.relay.op.op import OUT_ELEMWISE_FUSABLE, call, define_op, register_arg_types
from kiln.relay.op.type_relations import (
    dim_op,
    dims,
    fail,
    is_static,
    shape_str,
    tensor_arg,
    tensor_type,
)

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


def _tuple(value: Any, n: int) -> tuple:
    """An int (or a 1-tuple) repeated ``n`` times; a tuple as is."""
    if isinstance(value, int):
        return (int(value),) * n
    return tuple(int(v) if isinstance(v, int) else v for v in value)


def get_pad_tuple(padding: Any, n: int) -> tuple:
    """TVM's ``get_pad_tuple{1,2,3}d``: 1, n or 2n values -> 2n values (befores, afters)."""
    pad = _tuple(padding, 1) if isinstance(padding, int) else tuple(padding)
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


def _conv2d_rel(types, attrs, op_name):
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
define_op("nn.conv2d", _conv2d_rel, OUT_ELEMWISE_FUSABLE, 2, A.Conv2DAttrs, "2-D conv", 2)
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
    return dict(strides=_tuple(strides, n), padding=get_pad_tuple(padding, n),
                dilation=_tuple(dilation, n), groups=int(groups), channels=channels,
                kernel_size=None if kernel_size is None else _tuple(kernel_size, n))


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
        output_padding=_tuple(output_padding, 1), data_layout=data_layout,
        kernel_layout=kernel_layout, out_layout=out_layout, out_dtype=out_dtype))


def conv2d_transpose(data: Any, weight: Any, strides: Any = (1, 1), padding: Any = (0, 0),
                     dilation: Any = (1, 1), groups: int = 1, channels: int | None = None,
                     kernel_size: Any = None, data_layout: str = "NCHW",
                     kernel_layout: str = "IOHW", out_layout: str = "",
                     output_padding: Any = (0, 0), out_dtype: str = "") -> Any:
    """2-D transposed convolution (``IOHW`` kernel by default)."""
    return call("nn.conv2d_transpose", [data, weight], A.Conv2DTransposeAttrs(
        **_conv_attrs(2, strides, padding, dilation, groups, channels, kernel_size),
        output_padding=_tuple(output_padding, 2), data_layout=data_layout,
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


__all__ = [
    "conv1d", "conv2d", "conv3d", "conv1d_transpose", "conv2d_transpose",
    "contrib_conv2d_winograd_weight_transform",
    "contrib_conv2d_winograd_without_weight_transform",
    "contrib_conv2d_gemm_weight_transform", "contrib_conv2d_gemm_without_weight_transform",
    "get_pad_tuple", "pad_pairs",
]
