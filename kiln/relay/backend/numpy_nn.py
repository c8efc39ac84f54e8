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
from kiln.relay.backend.numpy_ops import register_numpy
from kiln.relay.op.nn.conv import canonical_layout as _canonical
from kiln.relay.op.rule_util import is_integer_dtype, reference_dtype
from kiln.runtime.error import TVMError


# ---- normalization and softmax ------------------------------------------------------------
@register_numpy("nn.softmax", "nn.fast_softmax")
def _softmax(attrs, args, out_type):
    x = args[0].astype(np.float64)
    e = np.exp(x - x.max(axis=attrs.axis, keepdims=True))
    return (e / e.sum(axis=attrs.axis, keepdims=True)).astype(reference_dtype(out_type))


@register_numpy("nn.log_softmax")
def _log_softmax(attrs, args, out_type):
    x = args[0].astype(np.float64)
    shifted = x - x.max(axis=attrs.axis, keepdims=True)
    out = shifted - np.log(np.exp(shifted).sum(axis=attrs.axis, keepdims=True))
    return out.astype(reference_dtype(out_type))


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
    axes = tuple(range(x.ndim)) if attrs.axis is None else \
        tuple(int(a) % x.ndim for a in attrs.axis)
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
    return out.astype(reference_dtype(out_type))


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
    dtype = reference_dtype(out_type)
    if is_integer_dtype(dtype):
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
    return layout_transform(x.astype(reference_dtype(out_type)), "NCHW", attrs.layout)
