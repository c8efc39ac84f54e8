"""``relay.image``: resizing. Entry points: :func:`resize1d`, :func:`resize2d`.

Both are ``INJECTIVE``. The spatial axes are found by letter in ``layout`` (``W``; ``H`` and
``W``), so ``NHWC`` and blocked layouts work; the output has ``size`` there and ``out_dtype``
(default: the input dtype). A Relay-expression ``size`` gives ``dyn.image.resize2d``.

Example
-------
>>> from kiln import relay
>>> y = relay.image.resize2d(relay.var("x", shape=(1, 3, 8, 8)), size=(16, 16),
...                          method="cubic", cubic_alpha=-0.75)
"""

from __future__ import annotations

from typing import Any

from kiln.relay.op import op_attrs as A
from kiln.relay.op.nn.pool import spatial_axes
from kiln.relay.op.op import INJECTIVE, as_expr, call, constant_value, define_op, is_expr
from kiln.relay.op.type_relations import Any as DynDim
from kiln.relay.op.type_relations import dims, fail, tensor_arg, tensor_type

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


__all__ = ["resize1d", "resize2d"]
