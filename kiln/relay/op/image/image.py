"""``relay.image``: resizing. Entry points: :func:`resize1d`, :func:`resize2d`.

Both are ``INJECTIVE``; this module registers their type relations, TE computes (the injective
schedule), reference NumPy rules (:func:`resize_reference`, which ``nn.upsampling`` and
``dyn.image.resize2d`` reuse) and VM shape functions. The spatial axes are found by letter in
``layout`` (``W``; ``H`` and ``W``), so ``NHWC`` and blocked layouts work; the output has
``size`` there and ``out_dtype`` (default: the input dtype). A Relay-expression ``size``
gives ``dyn.image.resize2d``.

Example
-------
>>> from kiln import relay
>>> y = relay.image.resize2d(relay.var("x", shape=(1, 3, 8, 8)), size=(16, 16),
...                          method="cubic", cubic_alpha=-0.75)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.layout import convert_array
from kiln.relay.op.nn.conv import canonical_layout, shape_func_same_batch
from kiln.relay.op.nn.pool import spatial_axes
from kiln.relay.op.op import (
    INJECTIVE,
    as_expr,
    call,
    constant_value,
    define_op,
    is_expr,
    register_compute,
    register_injective_schedule,
    register_reference,
    register_shape_func,
)
from kiln.relay.op.rule_util import (
    is_integer_dtype,
    optional_list,
    out_dtype,
    out_shape,
    reference_dtype,
)
from kiln.relay.op.type_relations import Any as DynDim
from kiln.relay.op.type_relations import dims, fail, tensor_arg, tensor_type
from kiln.runtime.error import TVMError

METHODS = ("nearest_neighbor", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                    "tf_half_pixel_for_nn", "tf_crop_and_resize")
ROUNDING_METHODS = ("", "round", "floor", "ceil", "round_prefer_floor", "round_prefer_ceil")


def _check_modes(attrs, op_name):
    for value, allowed, what in ((attrs.method, METHODS, "method"),
                                 (attrs.coordinate_transformation_mode, COORDINATE_MODES,
                                  "coordinate_transformation_mode"),
                                 (attrs.rounding_method, ROUNDING_METHODS, "rounding_method")):
        if value not in allowed:
            fail(f"{op_name}: {what} must be one of {allowed}, got {value!r}")


def _resize_rel(types, attrs, op_name, letters):
    data = tensor_arg(types, 0, op_name)
    _check_modes(attrs, op_name)
    d = dims(data)
    axes = spatial_axes(attrs.layout, letters, len(d), op_name)
    if len(types) > 1:  # dyn.image.resize2d: size is a tensor input
        for axis in axes:
            d[axis] = DynDim()
    else:
        size = list(attrs.size)
        if len(size) != len(axes):
            fail(f"{op_name}: size needs {len(axes)} values, got {size}")
        if attrs.roi is not None and len(attrs.roi) != 2 * len(axes):
            fail(f"{op_name}: roi needs {2 * len(axes)} values, got {list(attrs.roi)}")
        for axis, extent in zip(axes, size):
            d[axis] = int(extent)
    return tensor_type(d, attrs.out_dtype or data.dtype)


def _resize1d_rel(types, attrs, op_name):
    return _resize_rel(types, attrs, op_name, "W")


def resize2d_rel(types, attrs, op_name):
    """The type relation of image.resize2d (an NCHW/NHWC image, new H and W)."""
    return _resize_rel(types, attrs, op_name, "HW")


define_op("image.resize1d", _resize1d_rel, INJECTIVE, 1, A.Resize1DAttrs, "resize W", 5)
define_op("image.resize2d", resize2d_rel, INJECTIVE, 1, A.Resize2DAttrs, "resize H, W", 5)


def _size(size: Any, n: int) -> Any:
    value = constant_value(size)
    if value is not None:
        return tuple(int(v) for v in value.reshape(-1))
    if is_expr(size):
        return size
    if isinstance(size, int):
        return (int(size),) * n
    return tuple(int(v) for v in size)


def resize1d(data: Any, size: Any, roi: Any = None, layout: str = "NCW",
             method: str = "linear", coordinate_transformation_mode: str = "half_pixel",
             rounding_method: str = "", cubic_alpha: float = -0.5, cubic_exclude: int = 0,
             extrapolation_value: float = 0.0, out_dtype: str | None = None) -> Any:
    """Resize the W axis of ``data`` to ``size``."""
    return call("image.resize1d", [data], A.Resize1DAttrs(
        size=_size(size, 1), roi=tuple(roi) if roi is not None else (0.0, 0.0), layout=layout,
        method=method, coordinate_transformation_mode=coordinate_transformation_mode,
        rounding_method=rounding_method, cubic_alpha=float(cubic_alpha),
        cubic_exclude=int(cubic_exclude), extrapolation_value=float(extrapolation_value),
        out_dtype=out_dtype or ""))


def resize2d(data: Any, size: Any, roi: Any = None, layout: str = "NCHW",
             method: str = "linear", coordinate_transformation_mode: str = "half_pixel",
             rounding_method: str = "", cubic_alpha: float = -0.5, cubic_exclude: int = 0,
             extrapolation_value: float = 0.0, out_dtype: str | None = None) -> Any:
    """Resize the H and W axes of ``data`` to ``size``; ``method`` "nearest_neighbor",
    "linear" or "cubic"; an Expr ``size`` gives ``dyn.image.resize2d``."""
    size = _size(size, 2)
    roi_value = constant_value(roi)
    if roi_value is not None:
        roi = roi_value.astype("float32").tolist()
    if roi is None:
        roi = (0.0, 0.0, 0.0, 0.0)
    fields = dict(layout=layout, method=method,
                  coordinate_transformation_mode=coordinate_transformation_mode,
                  rounding_method=rounding_method, cubic_alpha=float(cubic_alpha),
                  cubic_exclude=int(cubic_exclude),
                  extrapolation_value=float(extrapolation_value), out_dtype=out_dtype or "")
    if is_expr(size) or is_expr(roi):
        size = size if is_expr(size) else as_expr(list(size), "int64")
        roi = roi if is_expr(roi) else as_expr([float(r) for r in roi], "float32")
        return call("dyn.image.resize2d", [data, size, roi],
                    A.Resize2DAttrs(**fields))
    return call("image.resize2d", [data], A.Resize2DAttrs(
        size=size, roi=tuple(float(r) for r in roi), **fields))



# ---- computes (TOPI), all with the injective schedule ---------------------------------------
@register_compute("image.resize1d")
def compute_resize1d(attrs, inputs, out_type):
    """``topi.image.resize1d`` to the output's W extent."""
    from kiln import topi

    width = out_shape(out_type)[attrs.layout.index("W"):][:1]
    return [topi.image.resize1d(
        inputs[0], optional_list(attrs.roi), width, attrs.layout, attrs.method,
        attrs.coordinate_transformation_mode, attrs.rounding_method, attrs.cubic_alpha,
        attrs.cubic_exclude, attrs.extrapolation_value, out_dtype(out_type))]


def spatial_extents(out_type, layout: str) -> list:
    """The H and W extents of the output (static ints or shape variables)."""
    shape = out_shape(out_type)
    return [shape[layout.index("H")], shape[layout.index("W")]]


@register_compute("image.resize2d")
def compute_resize2d(attrs, inputs, out_type):
    """``topi.image.resize2d`` to the output's H and W extents."""
    from kiln import topi

    return [topi.image.resize2d(
        inputs[0], optional_list(attrs.roi), spatial_extents(out_type, attrs.layout),
        attrs.layout, attrs.method, attrs.coordinate_transformation_mode,
        attrs.rounding_method, attrs.cubic_alpha, attrs.cubic_exclude,
        attrs.extrapolation_value, out_dtype(out_type))]


for _name in ("image.resize1d", "image.resize2d"):
    register_injective_schedule(_name)


# ---- reference semantics (NumPy): one resize along each spatial axis in turn ----------------
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


def resize_axis(x: np.ndarray, axis: int, out_size: int, attrs, roi) -> np.ndarray:
    """``x`` resized along ``axis`` to ``out_size`` with the attrs' method, coordinate
    transformation and rounding (in float64; ``roi`` is the axis's crop window)."""
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


def resize_reference(attrs, args, out_type, nd):
    """The reference rule of an ``nd``-axis resize (``attrs.size`` and ``roi`` per axis)."""
    layout = attrs.layout
    canon = canonical_layout(layout, nd)
    x = convert_array(args[0], layout, canon)
    sizes = [int(s) for s in attrs.size]
    roi = list(attrs.roi) if attrs.roi else [0.0] * nd + [1.0] * nd
    for i in range(nd):
        x = resize_axis(x, 2 + i, sizes[i], attrs, (roi[i], roi[nd + i]))
    out = convert_array(x, canon, layout)
    dtype = reference_dtype(out_type)
    if is_integer_dtype(dtype):
        out = np.round(out)
    return out.astype(dtype)


@register_reference("image.resize1d")
def reference_resize1d(attrs, args, out_type):
    """:func:`resize_reference` over W."""
    return resize_reference(attrs, args, out_type, 1)


@register_reference("image.resize2d")
def reference_resize2d(attrs, args, out_type):
    """:func:`resize_reference` over H and W."""
    return resize_reference(attrs, args, out_type, 2)


# ---- VM shape functions: only the batch is a run-time extent --------------------------------
for _name in ("image.resize1d", "image.resize2d"):
    register_shape_func(_name, False, shape_func_same_batch)


__all__ = ["resize1d", "resize2d", "resize_axis", "resize_reference", "spatial_extents"]
