"""Image resizing (TVM's ``topi.image.resize1d``/``resize2d``), separable over spatial axes.

Entry points: :func:`resize1d`, :func:`resize2d`, :func:`resize` (any number of spatial
axes). Methods: ``nearest_neighbor``, ``linear``, ``cubic``. Coordinate transformation modes:
``half_pixel``, ``align_corners``, ``asymmetric``, ``pytorch_half_pixel``,
``tf_half_pixel_for_nn``, ``tf_crop_and_resize`` (reads ``roi``, fills outside with
``extrapolation_value``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi.utils import get_const_tuple, is_const

_F = "float32"
_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
          "tf_half_pixel_for_nn", "tf_crop_and_resize")


def _as_float(value: Any) -> Any:
    """A Python number stays a Python float (folded at compile time); an expression (a
    run-time extent or roi value) becomes a float32 expression."""
    number = value if isinstance(value, int | float) else getattr(value, "value", None)
    return float(number) if isinstance(number, int | float) else _op.cast(value, _F)


def _if_more_than_one(size: Any, then: Any, otherwise: Any) -> Any:
    if isinstance(size, int):
        return then() if size > 1 else otherwise()
    return _op.if_then_else(size > 1, then(), otherwise())


def _source_coord(x: Any, in_size: Any, out_size: Any, mode: str, roi: tuple) -> Any:
    """Output coordinate ``x`` mapped into the input (as float32); sizes and roi may be
    run-time expressions."""
    xf = _op.cast(x, _F)
    fin, fout = _as_float(in_size), _as_float(out_size)
    scale = fout / fin
    if mode == "half_pixel":
        return (xf + 0.5) / scale - 0.5
    if mode == "align_corners":
        return _if_more_than_one(out_size, lambda: xf * ((fin - 1) / (fout - 1)),
                                 lambda: xf * 0.0)
    if mode == "asymmetric":
        return xf / scale
    if mode == "pytorch_half_pixel":
        return _if_more_than_one(out_size, lambda: (xf + 0.5) / scale - 0.5, lambda: xf * 0.0)
    if mode == "tf_half_pixel_for_nn":
        return (xf + 0.5) / scale
    start, end = roi
    return _if_more_than_one(
        out_size,
        lambda: start * (fin - 1) + xf * ((end - start) * (fin - 1) / (fout - 1)),
        lambda: xf * 0.0 + 0.5 * (start + end) * (fin - 1))


def _nearest_index(coord: Any, rounding: str) -> Any:
    table = {
        "floor": lambda c: _op.floor(c),
        "ceil": lambda c: _op.ceil(c),
        "round": lambda c: _op.floor(c + 0.5),
        "round_prefer_floor": lambda c: _op.ceil(c - 0.5),
        "round_prefer_ceil": lambda c: _op.floor(c + 0.5),
    }
    if rounding not in table:
        raise TVMError(f"resize: unknown rounding_method {rounding!r}")
    return _op.cast(table[rounding](coord), "int32")


def _cubic_weight(t: Any, alpha: float) -> Any:
    a = alpha
    at = _op.abs(t)
    near = ((a + 2) * at - (a + 3)) * at * at + 1.0
    far = ((a * at - 5 * a) * at + 8 * a) * at - 4 * a
    return _op.if_then_else(at <= 1.0, near, _op.if_then_else(at < 2.0, far, at * 0.0))


def _taps(coord: Any, size: int, method: str, rounding: str, alpha: float, exclude: bool):
    """[(index, weight)] taps for one axis; indices clamped into ``[0, size)``."""
    def clamp(i):
        return _op.min(_op.max(i, 0), size - 1)

    if method == "nearest_neighbor":
        return [(clamp(_nearest_index(coord, rounding)), None)]
    base = _op.floor(coord)
    frac = coord - base
    i0 = _op.cast(base, "int32")
    if method == "linear":
        return [(clamp(i0), 1.0 - frac), (clamp(i0 + 1), frac)]
    offsets = (-1, 0, 1, 2)
    weights = [_cubic_weight(frac - k, alpha) for k in offsets]
    if exclude:
        inside = [_op.logical_and(i0 + k >= 0, i0 + k < size) for k in offsets]
        weights = [_op.if_then_else(c, w, w * 0.0) for c, w in zip(inside, weights)]
        total = weights[0] + weights[1] + weights[2] + weights[3]
        weights = [w / total for w in weights]
    return [(clamp(i0 + k), w) for k, w in zip(offsets, weights)]


def resize(data: te.Tensor, roi: Sequence[float], size: Sequence[int], layout: str,
           method: str = "linear", coordinate_transformation_mode: str = "half_pixel",
           rounding_method: str = "", cubic_alpha: float = -0.5, cubic_exclude: int = 0,
           extrapolation_value: float = 0.0, out_dtype: str | None = None) -> te.Tensor:
    """Resize the spatial axes (``D``/``H``/``W`` in ``layout``) of ``data`` to ``size``.

    ``size``, ``roi`` and the spatial extents of ``data`` may be run-time expressions
    (``dyn.image.resize2d`` reads them from tensors); constants fold at compile time.
    """
    if method not in ("nearest_neighbor", "linear", "cubic"):
        raise TVMError(f"resize: method must be nearest_neighbor, linear or cubic, got "
                       f"{method!r}")
    mode = coordinate_transformation_mode
    if mode not in _MODES:
        raise TVMError(f"resize: unknown coordinate_transformation_mode {mode!r}")
    spatial = [k for k, a in enumerate(layout) if a in "DHW"]
    shape = get_const_tuple(data.shape)
    size = [int(s) if is_const(s) else s for s in size]
    if len(size) != len(spatial):
        raise TVMError(f"resize: size {size} must give {len(spatial)} values for {layout}")
    roi = list(roi or [0.0] * (2 * len(spatial)))
    rois = [(_as_float(roi[k]), _as_float(roi[k + len(spatial)]))
            for k in range(len(spatial))]
    if not rounding_method:
        rounding_method = "round" if mode in ("align_corners", "tf_half_pixel_for_nn") \
            else "floor"
    out_dtype = out_dtype or data.dtype
    out_shape = list(shape)
    for k, ax in enumerate(spatial):
        out_shape[ax] = size[k]

    def body(*i):
        coords = [_source_coord(i[ax], shape[ax], size[k], mode, rois[k])
                  for k, ax in enumerate(spatial)]
        taps = [_taps(c, shape[ax], method, rounding_method, cubic_alpha, bool(cubic_exclude))
                for c, ax in zip(coords, spatial)]
        value = None
        for combo in itertools.product(*taps):
            src = list(i)
            weight = None
            for (idx, w), ax in zip(combo, spatial):
                src[ax] = idx
                if w is not None:
                    weight = w if weight is None else weight * w
            term = _op.cast(data(*src), _F)
            term = term if weight is None else term * weight
            value = term if value is None else value + term
        if mode == "tf_crop_and_resize":
            for c, ax in zip(coords, spatial):
                outside = _op.logical_or(c < 0.0, c > _as_float(shape[ax]) - 1.0)
                value = _op.if_then_else(outside, _op.const(extrapolation_value, _F), value)
        if method == "nearest_neighbor" and out_dtype == data.dtype and \
                mode != "tf_crop_and_resize":
            src = list(i)
            for (idx, _), ax in zip([t[0] for t in taps], spatial):
                src[ax] = idx
            return data(*src)
        if out_dtype.startswith(("int", "uint")):
            value = _op.floor(value + 0.5)
        return _op.cast(value, out_dtype)

    return te.compute(out_shape, body, name="resize", tag=f"resize.{method}")


def resize1d(data, roi, size, layout="NCW", method="linear",
             coordinate_transformation_mode="half_pixel", rounding_method="",
             cubic_alpha=-0.5, cubic_exclude=0, extrapolation_value=0.0, out_dtype=None):
    """1-D resize (``NCW`` or ``NWC``)."""
    return resize(data, roi, size, layout, method, coordinate_transformation_mode,
                  rounding_method, cubic_alpha, cubic_exclude, extrapolation_value, out_dtype)


def resize2d(data, roi, size, layout="NCHW", method="linear",
             coordinate_transformation_mode="half_pixel", rounding_method="",
             cubic_alpha=-0.5, cubic_exclude=0, extrapolation_value=0.0, out_dtype=None):
    """2-D resize (``NCHW`` or ``NHWC``)."""
    return resize(data, roi, size, layout, method, coordinate_transformation_mode,
                  rounding_method, cubic_alpha, cubic_exclude, extrapolation_value, out_dtype)
