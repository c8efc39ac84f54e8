"""ONNX Resize through its given scale, where Relay's resize would map through the sizes.

Entry points: :func:`resize_through_scale`, :data:`SCALE_MAPPED`.

ONNX maps an output coordinate ``x`` to ``a + b * x`` in the input, with ``a`` and ``b`` from
the *given* scale (and ``in * scale``, which need not be an integer); Relay's resize derives
them from the output and input sizes, which is the same only when ``in * scale`` is exact.
For the other cases the mapping is written as a ``tf_crop_and_resize`` region, whose
coordinates are exactly ``start * (in - 1) + x * (end - start) * (in - 1) / (out - 1)``: the
input is first edge-padded by 3 pixels, so no mapped coordinate (nor a cubic tap) leaves the
padded input and the crop never extrapolates; edge padding is what ONNX's clamped taps read.
With ``exclude_outside=1`` the taps must see the true border, so there is no padding, which
is exact for downscales (their coordinates stay inside) only.

Example
-------
>>> "half_pixel" in SCALE_MAPPED and "tf_crop_and_resize" not in SCALE_MAPPED
True
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import infer_value, is_static

__all__ = ["resize_through_scale", "SCALE_MAPPED", "PAD"]

# ONNX coordinate modes whose mapping uses the given scale (align_corners through in * scale)
SCALE_MAPPED = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                "tf_half_pixel_for_nn", "half_pixel_symmetric")
PAD = 3  # > half a pixel of mapping slack plus the two-pixel reach of a cubic tap

_F = "float32"


def _f(value):
    return relay.const(np.asarray(value, _F))


def _mapping(mode: str, length, scale, out):
    """``(a, b)``: ONNX maps output coordinate x to ``a + b * x`` (float32 vectors, one
    entry per axis; ``length`` the input extents, ``out`` the integer output extents)."""
    width = relay.multiply(length, scale)  # ONNX's (possibly fractional) output width
    inverse = relay.divide(_f(1.0), scale)
    half = relay.subtract(relay.multiply(_f(0.5), inverse), _f(0.5))
    one_wide = relay.equal(width, _f(1.0))
    if mode == "align_corners":
        span = relay.where(one_wide, _f(1.0), relay.subtract(width, _f(1.0)))  # no 0 / 0
        step = relay.divide(relay.subtract(length, _f(1.0)), span)
        return relay.zeros_like(width), relay.where(one_wide, relay.zeros_like(width), step)
    if mode == "asymmetric":
        return relay.zeros_like(width), inverse
    if mode == "pytorch_half_pixel":
        return relay.where(one_wide, _f(-0.5), half), relay.where(
            one_wide, relay.zeros_like(width), inverse)
    if mode == "tf_half_pixel_for_nn":
        return relay.multiply(_f(0.5), inverse), inverse
    if mode == "half_pixel_symmetric":
        offset = relay.multiply(relay.multiply(length, _f(0.5)),
                                relay.subtract(_f(1.0), relay.divide(out, width)))
        return relay.add(offset, half), inverse
    return half, inverse  # half_pixel


def resize_through_scale(x, scale, out, mode: str, method: str, rounding: str, attrs, ctx):
    """``x`` (NCHW) resized to ``out`` with ONNX's mapping through ``scale``; ``scale`` and
    ``out`` are float32 ``(4,)`` expressions (run-time or constant), ``method`` Relay's
    resize method. With a static input shape and constant scales the resize is static."""
    shape = ctx.shape(x)
    spatial = [2, 3]
    exclude = attrs.get("exclude_outside", 0)
    pad = 0 if exclude else PAD
    length = _f(shape) if is_static(shape) else \
        relay.cast(relay.shape_of(x, "int64"), _F)
    a, b = _mapping(mode, length, scale, out)
    if pad:
        x = relay.nn.pad(x, [(0, 0), (0, 0)] + [(pad, pad)] * len(spatial), pad_mode="edge")
    span = relay.maximum(relay.add(length, _f(2.0 * pad - 1.0)), _f(1.0))  # in' - 1
    start = relay.divide(relay.add(a, _f(float(pad))), span)
    end = relay.add(start, relay.divide(relay.multiply(
        b, relay.maximum(relay.subtract(out, _f(1.0)), _f(0.0))), span))
    picks = relay.const(np.array(spatial, "int64"))
    roi = relay.concatenate([relay.take(start, picks), relay.take(end, picks)], 0)
    size = relay.take(relay.cast(out, "int64"), picks)
    known_roi, known_size = infer_value(roi), infer_value(size)
    if known_roi is not None and known_size is not None:
        roi, size = [float(v) for v in known_roi], [int(v) for v in known_size]
    return relay.image.resize2d(x, size, roi, "NCHW", method, "tf_crop_and_resize", rounding,
                                attrs.get("cubic_coeff_a", -0.75), exclude, 0.0)
