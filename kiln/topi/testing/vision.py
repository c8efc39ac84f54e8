"""Reference RoI Align in NumPy (TVM's ``topi.testing.roi_align_nchw_python``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["roi_align_nchw_python", "roi_align_nhwc_python"]


def _bilinear(plane: np.ndarray, y: float, x: float) -> float:
    """Bilinear sample of a 2-D ``plane``; zero outside [-1, size], edges clamped."""
    height, width = plane.shape
    if y < -1 or y > height or x < -1 or x > width:
        return 0.0
    y, x = min(max(y, 0.0), height - 1), min(max(x, 0.0), width - 1)
    y0, x0 = int(math.floor(y)), int(math.floor(x))
    value = 0.0
    for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if yy < height and xx < width:
                value += wy * wx * plane[yy, xx]
    return value


def roi_align_nchw_python(a_np: np.ndarray, rois_np: np.ndarray, pooled_size: Any,
                          spatial_scale: float, sample_ratio: int,
                          mode: Any = b"avg") -> np.ndarray:
    """RoI Align: each roi ``[batch, x1, y1, x2, y2]`` (scaled by ``spatial_scale``) pooled to
    ``pooled_size`` bins, each bin the average (``"avg"``) or max (``"max"``) of a grid of
    bilinear samples (``sample_ratio`` per side, or ``ceil(bin size)`` when <= 0)."""
    avg_mode = mode in (b"avg", "avg", 0)
    if not avg_mode and mode not in (b"max", "max", 1):
        raise ValueError(f"mode must be 'avg' or 'max', got {mode!r}")
    ph_size, pw_size = (pooled_size, pooled_size) if isinstance(pooled_size, int) \
        else tuple(pooled_size)
    out = np.zeros((rois_np.shape[0], a_np.shape[1], ph_size, pw_size), a_np.dtype)
    for r, roi in enumerate(rois_np):
        batch = int(roi[0])
        x1, y1, x2, y2 = (float(v) * spatial_scale for v in roi[1:])
        roi_h, roi_w = max(y2 - y1, 1.0), max(x2 - x1, 1.0)
        bin_h, bin_w = roi_h / ph_size, roi_w / pw_size
        grid_h = int(sample_ratio) if sample_ratio > 0 else int(math.ceil(bin_h))
        grid_w = int(sample_ratio) if sample_ratio > 0 else int(math.ceil(bin_w))
        for c in range(a_np.shape[1]):
            plane = a_np[batch, c]
            for ph in range(ph_size):
                for pw in range(pw_size):
                    samples = [_bilinear(plane, y1 + ph * bin_h + (iy + 0.5) * bin_h / grid_h,
                                         x1 + pw * bin_w + (ix + 0.5) * bin_w / grid_w)
                               for iy in range(grid_h) for ix in range(grid_w)]
                    out[r, c, ph, pw] = np.mean(samples) if avg_mode else max(samples)
    return out


def roi_align_nhwc_python(a_np: np.ndarray, rois_np: np.ndarray, pooled_size: Any,
                          spatial_scale: float, sample_ratio: int,
                          mode: Any = b"avg") -> np.ndarray:
    """:func:`roi_align_nchw_python` for NHWC input; the output is NHWC too."""
    out = roi_align_nchw_python(a_np.transpose(0, 3, 1, 2), rois_np, pooled_size,
                                spatial_scale, sample_ratio, mode)
    return out.transpose(0, 2, 3, 1)
