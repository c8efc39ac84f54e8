"""NumPy semantics of the neural-network operators (``nn.*`` and ``image.*``).

Registered as ``"FNumpyEval"`` like :mod:`kiln.relay.backend.numpy_ops`. Convolutions and
pools are written once for any number of spatial dims over sliding windows, in the canonical
``NC<spatial>`` / ``OI<spatial>`` layouts; other layouts (NHWC, HWIO, NCHW8c …) are converted
on the way in and out with :func:`~kiln.relay.backend.numpy_layout.layout_transform`.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from kiln.relay.backend.numpy_layout import layout_transform
from kiln.relay.backend.numpy_ops import _axes, _out_dtype, register_numpy
from kiln.runtime.error import TVMError

_SPATIAL = "DHW"


def _canonical(layout: str, nd: int, kernel: bool = False) -> str:
    """The canonical layout with ``nd`` spatial dims: NCW/NCHW/NCDHW or OIW/OIHW/OIDHW."""
    return ("OI" if kernel else "NC") + _SPATIAL[-nd:]


def _pads(padding, nd: int) -> list[tuple[int, int]]:
    pad = [int(p) for p in padding]
    if len(pad) == 1:
        pad = pad * (2 * nd)
    elif len(pad) == nd:
        pad = pad + pad
    if len(pad) != 2 * nd:
        raise TVMError(f"padding {padding} does not fit {nd} spatial dims")
    return list(zip(pad[:nd], pad[nd:]))


def _windows(x: np.ndarray, kernel, strides, dilation) -> np.ndarray:
    """(N, C, out..., k...) windows of a padded NC<spatial> array."""
    nd = len(kernel)
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    win = sliding_window_view(x, span, axis=tuple(range(2, 2 + nd)))
    idx = [slice(None), slice(None)] + [slice(None, None, s) for s in strides]
    idx += [slice(None, None, d) for d in dilation]
    return win[tuple(idx)]


def _conv(data, weight, strides, padding, dilation, groups, out_dtype):
    nd = data.ndim - 2
    pads = _pads(padding, nd)
    x = np.pad(data, [(0, 0), (0, 0)] + pads)
    win = _windows(x, weight.shape[2:], strides, dilation)  # N C out.. k..
    n, c = data.shape[:2]
    o = weight.shape[0]
    cg, og = c // groups, o // groups
    outs = []
    letters = "pqr"[:nd]  # kernel offsets; upper case: output positions (never n, c or o)
    for g in range(groups):
        wg = weight[g * og:(g + 1) * og].astype(np.float64 if out_dtype.kind == "f" else np.int64)
        xg = win[:, g * cg:(g + 1) * cg]
        spec = f"nc{letters.upper()}{letters},oc{letters}->no{letters.upper()}"
        outs.append(np.einsum(spec, xg, wg))
    return np.concatenate(outs, axis=1).astype(out_dtype)


def _conv_eval(attrs, args, out_type, nd):
    data, weight = args
    dl = attrs.data_layout
    kl = attrs.kernel_layout
    canon_d, canon_k = _canonical(dl, nd), _canonical(kl, nd, kernel=True)
    x = layout_transform(data, dl, canon_d)
    w = layout_transform(weight, kl, canon_k)
    if attrs.groups > 1 and w.shape[1] * attrs.groups != x.shape[1]:
        raise TVMError("conv: input channels do not match kernel * groups")
    out = _conv(x, w, attrs.strides, attrs.padding, attrs.dilation, int(attrs.groups),
                _out_dtype(out_type))
    return layout_transform(out, canon_d, attrs.out_layout or dl)


register_numpy("nn.conv1d")(lambda a, x, t: _conv_eval(a, x, t, 1))
register_numpy("nn.conv2d")(lambda a, x, t: _conv_eval(a, x, t, 2))
register_numpy("nn.conv3d")(lambda a, x, t: _conv_eval(a, x, t, 3))


# ---- convolutions with pre-transformed weights (contrib_conv2d_winograd_* / _gemm_*) --------
def _winograd_matrices(tile: int, kernel: int):
    from kiln.topi.nn.winograd import winograd_matrices  # the Toom-Cook constants only

    return winograd_matrices(tile, kernel)


@register_numpy("nn.contrib_conv2d_winograd_weight_transform")
def _winograd_weight(attrs, args, out_type):
    """``U = G g G^T`` per (out, in) channel pair: OIHW -> [alpha, alpha, O, I]."""
    (weight,) = args
    _, g, _ = _winograd_matrices(int(attrs.tile_size), weight.shape[2])
    u = np.einsum("ar,oirs,bs->aboi", g, weight.astype(np.float64), g)
    return u.astype(_out_dtype(out_type))


@register_numpy("nn.contrib_conv2d_winograd_without_weight_transform")
def _winograd_conv(attrs, args, out_type):
    """Stride-1 NCHW conv from a transformed weight: per m x m output tile,
    ``A^T [U ⊙ (B^T d B)] A`` summed over input channels."""
    data, u = args
    m = int(attrs.tile_size)
    alpha = u.shape[0]
    at, _, bt = _winograd_matrices(m, alpha - m + 1)
    (pt, pb), (pl, pr) = _pads(attrs.padding, 2)
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
    return y.astype(_out_dtype(out_type))


@register_numpy("nn.contrib_conv2d_gemm_weight_transform")
def _gemm_weight(attrs, args, out_type):
    """HWIO -> ``[ceil(O/N), ceil(K/Kt), N, Kt]``: the (K = H*W*I, O) matrix, zero-padded to
    whole tiles, cut into N x Kt tiles stored transposed."""
    (weight,) = args
    tn, tk = int(attrs.tile_N), int(attrs.tile_K)
    big_k, oc = int(np.prod(weight.shape[:3])), weight.shape[3]
    kp, npad = -(-big_k // tk) * tk, -(-oc // tn) * tn
    mat = np.zeros((kp, npad), weight.dtype)
    mat[:big_k, :oc] = weight.reshape(big_k, oc)
    return mat.reshape(kp // tk, tk, npad // tn, tn).transpose(2, 0, 3, 1)


@register_numpy("nn.contrib_conv2d_gemm_without_weight_transform")
def _gemm_conv(attrs, args, out_type):
    """NHWC conv whose HWIO weight comes interleaved (:func:`_gemm_weight`): unpack, convolve."""
    data, packed = args
    kh, kw = (int(k) for k in attrs.kernel_size)
    ic, oc = data.shape[3], int(attrs.channels)
    nb, kb, tn, tk = packed.shape
    mat = packed.transpose(1, 3, 0, 2).reshape(kb * tk, nb * tn)
    weight = mat[:kh * kw * ic, :oc].reshape(kh, kw, ic, oc)
    x = layout_transform(data, "NHWC", "NCHW")
    out = _conv(x, layout_transform(weight, "HWIO", "OIHW"), attrs.strides, attrs.padding,
                attrs.dilation, 1, _out_dtype(out_type))
    return layout_transform(out, "NCHW", "NHWC")


def _conv_transpose_eval(attrs, args, out_type, nd):
    data, weight = args
    dl = attrs.data_layout
    x = layout_transform(data, dl, _canonical(dl, nd))
    w = layout_transform(weight, attrs.kernel_layout, "IO" + _SPATIAL[-nd:])  # I=in channels
    groups = int(attrs.groups)
    strides, dilation = list(attrs.strides), list(attrs.dilation)
    pads = _pads(attrs.padding, nd)
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
    out = out[(slice(None), slice(None), *crop)].astype(_out_dtype(out_type))
    return layout_transform(out, _canonical(dl, nd), attrs.out_layout or dl)


register_numpy("nn.conv1d_transpose")(lambda a, x, t: _conv_transpose_eval(a, x, t, 1))
register_numpy("nn.conv2d_transpose")(lambda a, x, t: _conv_transpose_eval(a, x, t, 2))


# ---- pooling ------------------------------------------------------------------------------
def _pool_eval(attrs, args, out_type, nd, kind):
    layout = attrs.layout
    x = layout_transform(args[0], layout, _canonical(layout, nd)).astype(np.float64)
    kernel = [int(k) for k in attrs.pool_size]
    strides = [int(s) for s in attrs.strides]
    dilation = [int(d) for d in attrs.dilation]
    pads = _pads(attrs.padding, nd)
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
    win = _windows(xp, kernel, strides, dilation)
    axes = tuple(range(2 + nd, 2 + 2 * nd))
    if kind == "max":
        out = win.max(axis=axes)
    else:
        count_src = in_pad if attrs.count_include_pad else inside
        counts = _windows(count_src[None, None], kernel, strides, dilation).sum(axis=axes)
        out = win.sum(axis=axes) / np.maximum(counts, 1)
    out = out.astype(_out_dtype(out_type))
    return layout_transform(out, _canonical(layout, nd), attrs.out_layout or layout)


for _nd in (1, 2, 3):
    register_numpy(f"nn.max_pool{_nd}d")(
        lambda a, x, t, nd=_nd: _pool_eval(a, x, t, nd, "max"))
    register_numpy(f"nn.avg_pool{_nd}d")(
        lambda a, x, t, nd=_nd: _pool_eval(a, x, t, nd, "avg"))


def _global_pool(attrs, args, out_type, kind):
    layout = attrs.layout
    x = layout_transform(args[0], layout, "NCHW")
    out = x.max(axis=(2, 3), keepdims=True) if kind == "max" else x.mean(axis=(2, 3),
                                                                            keepdims=True)
    return layout_transform(out.astype(_out_dtype(out_type)), "NCHW",
                            attrs.out_layout or layout)


register_numpy("nn.global_max_pool2d")(lambda a, x, t: _global_pool(a, x, t, "max"))
register_numpy("nn.global_avg_pool2d")(lambda a, x, t: _global_pool(a, x, t, "avg"))


def _adaptive_pool(attrs, args, out_type, nd, kind):
    layout = attrs.layout
    x = layout_transform(args[0], layout, _canonical(layout, nd))
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
    out = out.astype(_out_dtype(out_type))
    return layout_transform(out, _canonical(layout, nd), attrs.out_layout or layout)


for _nd in (1, 2):
    register_numpy(f"nn.adaptive_max_pool{_nd}d")(
        lambda a, x, t, nd=_nd: _adaptive_pool(a, x, t, nd, "max"))
    register_numpy(f"nn.adaptive_avg_pool{_nd}d")(
        lambda a, x, t, nd=_nd: _adaptive_pool(a, x, t, nd, "avg"))


# ---- normalization and softmax ------------------------------------------------------------
@register_numpy("nn.softmax", "nn.fast_softmax")
def _softmax(attrs, args, out_type):
    x = args[0].astype(np.float64)
    e = np.exp(x - x.max(axis=attrs.axis, keepdims=True))
    return (e / e.sum(axis=attrs.axis, keepdims=True)).astype(_out_dtype(out_type))


@register_numpy("nn.log_softmax")
def _log_softmax(attrs, args, out_type):
    x = args[0].astype(np.float64)
    shifted = x - x.max(axis=attrs.axis, keepdims=True)
    out = shifted - np.log(np.exp(shifted).sum(axis=attrs.axis, keepdims=True))
    return out.astype(_out_dtype(out_type))


def _channel_shape(ndim: int, axis: int) -> list[int]:
    shape = [1] * ndim
    shape[axis % ndim] = -1
    return shape


@register_numpy("nn.batch_norm")
def _batch_norm(attrs, args, out_type):
    x, gamma, beta, mean, var = args
    shape = _channel_shape(x.ndim, attrs.axis)
    scale = (gamma if attrs.scale else np.ones_like(gamma)) / np.sqrt(var + attrs.epsilon)
    shift = (beta if attrs.center else 0) - mean * scale
    out = (x * scale.reshape(shape) + np.reshape(shift, shape)).astype(x.dtype)
    return out, mean.copy(), var.copy()


def _normalize(x, axes, gamma, beta, attrs, channel_axis):
    xf = x.astype(np.float64)
    mean = xf.mean(axis=axes, keepdims=True)
    var = xf.var(axis=axes, keepdims=True)
    out = (xf - mean) / np.sqrt(var + attrs.epsilon)
    shape = _channel_shape(x.ndim, channel_axis)
    if attrs.scale:
        out = out * gamma.reshape(shape)
    if attrs.center:
        out = out + beta.reshape(shape)
    return out.astype(x.dtype)


@register_numpy("nn.layer_norm")
def _layer_norm(attrs, args, out_type):
    x, gamma, beta = args
    return _normalize(x, (attrs.axis % x.ndim,), gamma, beta, attrs, attrs.axis)


@register_numpy("nn.instance_norm")
def _instance_norm(attrs, args, out_type):
    x, gamma, beta = args
    axis = attrs.axis % x.ndim
    axes = tuple(a for a in range(1, x.ndim) if a != axis)
    return _normalize(x, axes, gamma, beta, attrs, axis)


@register_numpy("nn.group_norm")
def _group_norm(attrs, args, out_type):
    x, gamma, beta = args
    axis = attrs.axis % x.ndim
    groups = int(attrs.num_groups)
    c = x.shape[axis]
    shape = list(x.shape[:axis]) + [groups, c // groups] + list(x.shape[axis + 1:])
    xg = x.astype(np.float64).reshape(shape)
    axes = tuple(a for a in range(axis + 1, len(shape)))
    mean = xg.mean(axis=axes, keepdims=True)
    var = xg.var(axis=axes, keepdims=True)
    out = ((xg - mean) / np.sqrt(var + attrs.epsilon)).reshape(x.shape)
    cshape = _channel_shape(x.ndim, axis)
    if attrs.scale:
        out = out * gamma.reshape(cshape)
    if attrs.center:
        out = out + beta.reshape(cshape)
    return out.astype(x.dtype)


@register_numpy("nn.l2_normalize")
def _l2_normalize(attrs, args, out_type):
    x = args[0]
    axes = _axes(attrs.axis, x.ndim)
    sq = np.sum(x.astype(np.float64) ** 2, axis=axes, keepdims=True)
    return (x / np.sqrt(np.maximum(sq, attrs.eps))).astype(x.dtype)


@register_numpy("nn.lrn")
def _lrn(attrs, args, out_type):
    x = args[0].astype(np.float64)
    axis, size = attrs.axis % x.ndim, int(attrs.size)
    sq = np.moveaxis(x ** 2, axis, -1)
    half = size // 2
    padded = np.pad(sq, [(0, 0)] * (sq.ndim - 1) + [(half, size - 1 - half)])
    window = sliding_window_view(padded, size, axis=-1).sum(axis=-1)
    window = np.moveaxis(window, -1, axis)
    out = x / (attrs.bias + attrs.alpha * window / size) ** attrs.beta
    return out.astype(_out_dtype(out_type))


# ---- padding, resampling, pixel shuffles ----------------------------------------------------
@register_numpy("nn.pad")
def _pad(attrs, args, out_type):
    x, value = args[0], args[1] if len(args) > 1 else 0
    width = [(int(a), int(b)) for a, b in attrs.pad_width]
    mode = {"constant": "constant", "edge": "edge", "reflect": "reflect"}[attrs.pad_mode]
    if mode == "constant":
        return np.pad(x, width, constant_values=np.asarray(value).item())
    return np.pad(x, width, mode=mode)


@register_numpy("nn.mirror_pad")
def _mirror_pad(attrs, args, out_type):
    width = [(int(a), int(b)) for a, b in attrs.pad_width]
    mode = "symmetric" if attrs.mode == "SYMMETRIC" else "reflect"
    return np.pad(args[0], width, mode=mode)


@register_numpy("nn.depth_to_space")
def _depth_to_space(attrs, args, out_type):
    x = layout_transform(args[0], attrs.layout, "NCHW")
    b = int(attrs.block_size)
    n, c, h, w = x.shape
    if attrs.mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:  # CRD
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return layout_transform(y.reshape(n, c // (b * b), h * b, w * b), "NCHW", attrs.layout)


@register_numpy("nn.space_to_depth")
def _space_to_depth(attrs, args, out_type):
    x = layout_transform(args[0], attrs.layout, "NCHW")
    b = int(attrs.block_size)
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return layout_transform(y.reshape(n, c * b * b, h // b, w // b), "NCHW", attrs.layout)


def _source_coords(out_size: int, in_size: int, mode: str, scale: float | None = None,
                   roi: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    x = np.arange(out_size, dtype=np.float64)
    ratio = in_size / out_size if scale is None else 1.0 / scale
    if mode == "half_pixel":
        return (x + 0.5) * ratio - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) * ratio - 0.5 if out_size > 1 else np.zeros_like(x)
    if mode == "align_corners":
        return x * ((in_size - 1) / (out_size - 1)) if out_size > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x * ratio
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) * ratio
    if mode == "tf_crop_and_resize":
        start, end = roi
        if out_size > 1:
            return start * (in_size - 1) + x * (end - start) * (in_size - 1) / (out_size - 1)
        return np.full_like(x, 0.5 * (start + end) * (in_size - 1))
    raise TVMError(f"unknown coordinate_transformation_mode {mode!r}")


def _round(coords: np.ndarray, method: str) -> np.ndarray:
    if method == "round":
        return np.floor(coords + 0.5)  # half away from zero for the non-negative coordinates
    if method == "round_prefer_floor":
        return np.ceil(coords - 0.5)
    if method == "round_prefer_ceil":
        return np.floor(coords + 0.5)
    if method == "floor":
        return np.floor(coords)
    if method == "ceil":
        return np.ceil(coords)
    raise TVMError(f"unknown rounding_method {method!r}")


def _cubic_weights(t: np.ndarray, alpha: float) -> np.ndarray:
    d = np.stack([1 + t, t, 1 - t, 2 - t], axis=-1)
    ad = np.abs(d)
    w = np.where(ad <= 1, ((alpha + 2) * ad - (alpha + 3)) * ad * ad + 1,
                 np.where(ad < 2, ((alpha * ad - 5 * alpha) * ad + 8 * alpha) * ad - 4 * alpha,
                          0.0))
    return w


def _resize_axis(x: np.ndarray, axis: int, out_size: int, attrs, roi) -> np.ndarray:
    in_size = x.shape[axis]
    mode = attrs.coordinate_transformation_mode
    coords = _source_coords(out_size, in_size, mode, roi=roi)
    xm = np.moveaxis(x.astype(np.float64), axis, -1)
    method = attrs.method
    if method == "nearest_neighbor":
        rounding = attrs.rounding_method or ("round" if mode == "align_corners" else "floor")
        idx = np.clip(_round(coords, rounding).astype(np.int64), 0, in_size - 1)
        out = xm[..., idx]
    elif method == "linear":
        lo = np.floor(coords)
        frac = coords - lo
        i0 = np.clip(lo.astype(np.int64), 0, in_size - 1)
        i1 = np.clip(lo.astype(np.int64) + 1, 0, in_size - 1)
        out = xm[..., i0] * (1 - frac) + xm[..., i1] * frac
    elif method == "cubic":
        lo = np.floor(coords)
        frac = coords - lo
        weights = _cubic_weights(frac, float(attrs.cubic_alpha))
        idx = lo.astype(np.int64)[:, None] + np.arange(-1, 3)[None, :]
        if attrs.cubic_exclude:
            weights = np.where((idx < 0) | (idx >= in_size), 0.0, weights)
            weights = weights / weights.sum(axis=-1, keepdims=True)
        idx = np.clip(idx, 0, in_size - 1)
        out = (xm[..., idx] * weights).sum(axis=-1)
    else:
        raise TVMError(f"unknown resize method {method!r}")
    if mode == "tf_crop_and_resize":
        outside = (coords < 0) | (coords > in_size - 1)
        out = np.where(outside, attrs.extrapolation_value, out)
    return np.moveaxis(out, -1, axis)


def _resize(attrs, args, out_type, nd):
    layout = attrs.layout
    canon = _canonical(layout, nd)
    x = layout_transform(args[0], layout, canon)
    sizes = [int(s) for s in attrs.size]
    roi = list(attrs.roi) if attrs.roi else [0.0] * nd + [1.0] * nd
    for i in range(nd):
        x = _resize_axis(x, 2 + i, sizes[i], attrs, (roi[i], roi[nd + i]))
    out = layout_transform(x, canon, layout)
    dtype = _out_dtype(out_type)
    if dtype.kind != "f":
        out = np.round(out)
    return out.astype(dtype)


register_numpy("image.resize1d")(lambda a, x, t: _resize(a, x, t, 1))
register_numpy("image.resize2d")(lambda a, x, t: _resize(a, x, t, 2))


class _UpsamplingAsResize:
    """nn.upsampling expressed as resize attributes (TVM's topi does the same)."""

    cubic_alpha, cubic_exclude, extrapolation_value = -0.75, 0, 0.0

    def __init__(self, attrs) -> None:
        nearest = attrs.method == "nearest_neighbor"
        self.method = {"nearest_neighbor": "nearest_neighbor", "bilinear": "linear",
                       "bicubic": "cubic"}[attrs.method]
        self.coordinate_transformation_mode = (
            "align_corners" if attrs.align_corners else "asymmetric" if nearest else "half_pixel")
        self.rounding_method = "floor" if nearest else ""


@register_numpy("nn.upsampling")
def _upsampling(attrs, args, out_type):
    x = layout_transform(args[0], attrs.layout, "NCHW").astype(np.float64)
    sizes = (int(round(x.shape[2] * attrs.scale_h)), int(round(x.shape[3] * attrs.scale_w)))
    resize = _UpsamplingAsResize(attrs)
    for axis, size in zip((2, 3), sizes):
        x = _resize_axis(x, axis, size, resize, (0.0, 1.0))
    return layout_transform(x.astype(_out_dtype(out_type)), "NCHW", attrs.layout)
