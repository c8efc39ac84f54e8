"""ONNX converters: RoiAlign.

Entry points: the converter registered in :data:`~.onnx_registry.CONVERTERS` on import.

Each output bin averages (or, ``mode="max"``, takes the largest weighted tap of)
``sampling_ratio`` x ``sampling_ratio`` bilinear samples. The sample coordinates depend on the
run-time ROIs but separate by axis, so each axis gets its taps and weights as tensors (ONNX's
rules: a sample more than a pixel outside contributes 0, coordinates clamp at the far edge).
Average mode is then two batched matmuls per ROI, ``Ay @ X[batch] @ Ax^T`` with ``Ay``
``(rois, out_h, H)`` holding each output row's tap weights; max mode gathers the taps.
``sampling_ratio=0`` (a per-ROI sample count, known only at run time) is not supported.

Example
-------
>>> from kiln.relay.frontend import onnx_ops_roi
>>> from kiln.relay.frontend.onnx_registry import CONVERTERS
>>> "RoiAlign" in CONVERTERS
True
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import is_static
from kiln.relay.frontend.onnx_ops_math import matmul
from kiln.relay.frontend.onnx_registry import register_function, unsupported
from kiln.runtime.error import OpAttributeInvalid, TVMError

__all__: list[str] = []

_F = "float32"


def _f(value):
    return relay.const(np.asarray(value, _F))


def _axis_taps(start, size, bins: int, ratio: int, extent: int):
    """Taps of one axis: ``(index, weight)`` each ``(rois, bins, ratio, 2)`` (low and high
    neighbour), weights 0 for samples more than a pixel outside ``[0, extent]``."""
    step = relay.divide(size, _f(float(bins)))  # (rois,)
    grid = np.arange(bins, dtype=_F)[:, None] + (np.arange(ratio, dtype=_F)[None, :] + 0.5) \
        / ratio  # (bins, ratio): ph + (iy + 0.5) / ratio
    coord = relay.add(relay.reshape(start, [-1, 1, 1]),
                      relay.multiply(relay.reshape(step, [-1, 1, 1]), _f(grid)))
    inside = relay.logical_not(relay.logical_or(relay.less(coord, _f(-1.0)),
                                                relay.greater(coord, _f(float(extent)))))
    coord = relay.maximum(coord, _f(0.0))
    low = relay.floor(coord)
    at_edge = relay.greater_equal(low, _f(float(extent - 1)))
    low = relay.where(at_edge, _f(float(extent - 1)), low)
    coord = relay.where(at_edge, low, coord)
    high = relay.where(at_edge, low, relay.add(low, _f(1.0)))
    frac = relay.subtract(coord, low)
    keep = relay.cast(inside, _F)
    index = relay.cast(relay.stack([low, high], 3), "int64")
    weight = relay.stack([relay.multiply(relay.subtract(_f(1.0), frac), keep),
                          relay.multiply(frac, keep)], 3)
    return index, weight


def _tap_matrix(index, weight, extent: int):
    """``(rois, bins, extent)``: the summed tap weight each input position gets."""
    onehot = relay.equal(relay.expand_dims(index, 4),
                         relay.const(np.arange(extent, dtype="int64")))
    return relay.sum(relay.multiply(relay.cast(onehot, _F), relay.expand_dims(weight, 4)),
                     axis=[2, 3])


def _roi_align(inputs, attrs, ctx):
    x, rois, batch = inputs[0], inputs[1], inputs[2]
    shape, r_shape = ctx.shape(x), ctx.shape(rois)
    if not (is_static(shape) and is_static(r_shape)):
        raise unsupported("RoiAlign", "an input or ROI list of unknown shape")
    if len(shape) != 4 or len(r_shape) != 2 or r_shape[1] != 4:
        raise TVMError(f"RoiAlign: X {list(shape)} must be [N, C, H, W] and rois "
                       f"{list(r_shape)} [num_rois, 4]")
    mode = attrs.get("mode", "avg")
    if mode not in ("avg", "max"):
        raise OpAttributeInvalid(f"ONNX RoiAlign: mode must be 'avg' or 'max', got {mode!r}")
    ratio = int(attrs.get("sampling_ratio", 0))
    if ratio <= 0:
        raise unsupported("RoiAlign", "sampling_ratio 0 (a per-ROI sample count known only "
                          "at run time)")
    out_h, out_w = int(attrs.get("output_height", 1)), int(attrs.get("output_width", 1))
    # opset 16 added the attribute; before it, ROIs mapped as output_half_pixel does
    default = "half_pixel" if ctx.opset >= 16 else "output_half_pixel"
    half_pixel = attrs.get("coordinate_transformation_mode", default) == "half_pixel"
    _, channels, height, width = shape
    dtype = ctx.dtype(x)
    boxes = relay.multiply(relay.cast(rois, _F), _f(float(attrs.get("spatial_scale", 1.0))))
    if half_pixel:
        boxes = relay.subtract(boxes, _f(0.5))
    corner = [relay.take(boxes, relay.const(k, "int64"), axis=1) for k in range(4)]
    size_w = relay.subtract(corner[2], corner[0])
    size_h = relay.subtract(corner[3], corner[1])
    if not half_pixel:  # output_half_pixel: ROIs at least one pixel wide
        size_w, size_h = relay.maximum(size_w, _f(1.0)), relay.maximum(size_h, _f(1.0))
    y_index, y_weight = _axis_taps(corner[1], size_h, out_h, ratio, height)
    x_index, x_weight = _axis_taps(corner[0], size_w, out_w, ratio, width)
    features = relay.take(relay.cast(x, _F), relay.cast(batch, "int64"), axis=0)  # R,C,H,W
    if mode == "avg":
        rows = relay.expand_dims(_tap_matrix(y_index, y_weight, height), 1)  # R,1,OH,H
        cols = relay.expand_dims(_tap_matrix(x_index, x_weight, width), 1)  # R,1,OW,W
        pooled = matmul(matmul(rows, features, ctx), relay.transpose(cols, [0, 1, 3, 2]),
                        ctx)
        out = relay.divide(pooled, _f(float(ratio * ratio)))
    else:
        count = r_shape[0]
        # every (roi, row tap, column tap) as a flat (roi, y, x) index into (R*H*W, C)
        flat = relay.reshape(relay.transpose(features, [0, 2, 3, 1]), [-1, channels])
        base = relay.const(np.arange(count, dtype="int64").reshape(-1, 1, 1, 1, 1, 1, 1))
        ys = relay.reshape(y_index, [count, out_h, ratio, 2, 1, 1, 1])
        xs = relay.reshape(x_index, [count, 1, 1, 1, out_w, ratio, 2])
        where = relay.add(relay.multiply(relay.add(relay.multiply(
            base, relay.const(np.int64(height))), ys), relay.const(np.int64(width))), xs)
        taps = relay.take(flat, where, axis=0)  # R,OH,S,2,OW,S,2,C
        weight = relay.multiply(relay.reshape(y_weight, [count, out_h, ratio, 2, 1, 1, 1]),
                                relay.reshape(x_weight, [count, 1, 1, 1, out_w, ratio, 2]))
        best = relay.max(relay.multiply(taps, relay.expand_dims(weight, 7)),
                         axis=[2, 3, 5, 6])  # R,OH,OW,C
        out = relay.transpose(best, [0, 3, 1, 2])
    return relay.cast(out, dtype)


register_function("RoiAlign", _roi_align, since=10)
