"""Reference dense algebra, softmax, pooling, indexing and resizing in NumPy (TVM's names)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

__all__ = ["dense", "batch_matmul", "softmax_python", "log_softmax_python", "poolnd_python",
           "one_hot", "gather_python", "resize2d_python"]


def dense(x: np.ndarray, y: np.ndarray, bias: np.ndarray | None, use_bias: bool = False,
          use_relu: bool = False, out_dtype: str | None = None) -> np.ndarray:
    """``x @ y.T`` (+ ``bias``, then ReLU when asked): ``x`` [M, K], ``y`` [N, K]."""
    dtype = x.dtype if out_dtype is None else out_dtype
    out = x.astype(dtype) @ y.T.astype(dtype)
    if use_bias:
        out = out + bias
    return np.maximum(out, 0) if use_relu else out


def batch_matmul(x: np.ndarray, y: np.ndarray, out_dtype: str | None = None,
                 trans_x: bool = False, trans_y: bool = True) -> np.ndarray:
    """Batched matmul of [B, M, K] by [B, N, K] (``trans_y``); a batch of 1 broadcasts."""
    dtype = x.dtype if out_dtype is None else out_dtype
    a = np.swapaxes(x, 1, 2) if trans_x else x
    b = np.swapaxes(y, 1, 2) if trans_y else y
    return np.matmul(a.astype(dtype), b.astype(dtype))


def softmax_python(a_np: np.ndarray, axis: int = 1) -> np.ndarray:
    """Softmax along ``axis``, shifted by the maximum for stability."""
    e = np.exp(a_np - np.max(a_np, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax_python(a_np: np.ndarray, axis: int = 1) -> np.ndarray:
    """Log-softmax along ``axis``: ``x - max - log(sum(exp(x - max)))``."""
    shifted = a_np - np.max(a_np, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def poolnd_python(np_data: np.ndarray, kernel: Any, strides: Any, dilation: Any,
                  padding_before: Any, padding_after: Any, pool_type: str,
                  count_include_pad: bool = True, ceil_mode: bool = False,
                  dtype: str = "float32", layout: str | None = None) -> np.ndarray:
    """N-d max/avg pooling over the spatial axes of ``np_data`` (layout ``NC...`` unless
    ``layout`` says where ``N`` and ``C`` are, e.g. ``"NHWC"``).

    As TVM's reference: padding counts toward an average when ``count_include_pad``, windows
    that ``ceil_mode`` extends past the padded input are cut off, and max pooling pads with zero
    unless ``count_include_pad`` is False (then with the lowest value).
    """
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    if layout is not None:
        order = [layout.index("N"), layout.index("C")]
        order += [i for i in range(np_data.ndim) if i not in order]
        result = poolnd_python(np_data.transpose(order), kernel, strides, dilation,
                               padding_before, padding_after, pool_type, count_include_pad,
                               ceil_mode, dtype)
        return result.transpose(np.argsort(order))
    spatial = np_data.ndim - 2
    if not all(len(v) == spatial for v in (kernel, strides, dilation, padding_before,
                                             padding_after)):
        raise ValueError(f"kernel, strides, dilation and paddings need {spatial} values each")
    low = np.finfo(dtype).min if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min
    pad_value = low if pool_type == "max" and not count_include_pad else 0
    pads = [(0, 0), (0, 0), *zip(padding_before, padding_after, strict=True)]
    data = np.pad(np_data.astype(dtype), pads, constant_values=pad_value)
    real = np.pad(np.ones(np_data.shape, bool), pads)
    out_shape = list(np_data.shape[:2])
    for i in range(spatial):
        span = data.shape[i + 2] - (kernel[i] - 1) * dilation[i] - 1
        rounding = math.ceil if ceil_mode else math.floor
        out_shape.append(int(rounding(span / strides[i])) + 1)
    out = np.zeros(out_shape, dtype)
    for coord in itertools.product(*(range(n) for n in out_shape[2:])):
        # Slicing past the end cuts the window, as ceil_mode's extra windows need.
        window = tuple(slice(c * s, c * s + (k - 1) * d + 1, d)
                       for c, s, k, d in zip(coord, strides, kernel, dilation, strict=True))
        values = data[(slice(None), slice(None), *window)]
        axes = tuple(range(2, 2 + spatial))
        if pool_type == "max":
            out[(..., *coord)] = values.max(axis=axes)
            continue
        count = values[0, 0].size if count_include_pad else real[(0, 0, *window)].sum()
        out[(..., *coord)] = values.sum(axis=axes) / count if count else 0
    return out


def one_hot(indices: np.ndarray, on_value: Any, off_value: Any, depth: int, axis: int,
            dtype: str) -> np.ndarray:
    """``on_value`` where ``indices`` point along a new ``axis`` of size ``depth``, else
    ``off_value``; indices outside [0, depth) give an all-``off_value`` line."""
    indices = np.asarray(indices)
    axis = indices.ndim if axis == -1 else axis
    hot = np.expand_dims(indices, axis) == np.arange(depth).reshape(
        [depth if i == axis else 1 for i in range(indices.ndim + 1)])
    return np.where(hot, on_value, off_value).astype(dtype)


def gather_python(data: np.ndarray, axis: int, indices: np.ndarray) -> np.ndarray:
    """``out[i0..ik..in] = data[i0..indices[i0..in]..in]`` with ``ik`` on ``axis``."""
    return np.take_along_axis(data, indices.astype("int64"), axis=axis)


def _source_coordinate(out_index: np.ndarray, in_size: int, out_size: int,
                       mode: str) -> np.ndarray:
    if mode == "half_pixel":
        return (out_index + 0.5) * (in_size / out_size) - 0.5
    if mode == "align_corners":
        return out_index * ((in_size - 1) / (out_size - 1)) if out_size > 1 else out_index * 0.0
    if mode == "asymmetric":
        return out_index * (in_size / out_size)
    raise ValueError(f"Unsupported coordinate_transformation_mode: {mode}")


def resize2d_python(data: np.ndarray, scale: Any, layout: str = "NCHW",
                    method: str = "nearest_neighbor",
                    coordinate_transformation_mode: str = "align_corners") -> np.ndarray:
    """Resize the H and W axes by ``scale`` (a (sh, sw) pair) with ``nearest_neighbor`` or
    ``linear`` interpolation; the output size is ``round(size * scale)``."""
    if layout == "NHWC":
        return resize2d_python(data.transpose(0, 3, 1, 2), scale, "NCHW", method,
                               coordinate_transformation_mode).transpose(0, 2, 3, 1)
    if layout != "NCHW":
        raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")
    height, width = data.shape[2:]
    out_h, out_w = int(round(height * scale[0])), int(round(width * scale[1]))
    ys = _source_coordinate(np.arange(out_h), height, out_h, coordinate_transformation_mode)
    xs = _source_coordinate(np.arange(out_w), width, out_w, coordinate_transformation_mode)
    if method == "nearest_neighbor":
        # align_corners rounds half up; the other modes take the floor, as TVM's reference.
        pick = (lambda v: np.floor(v + 0.5)) if coordinate_transformation_mode == \
            "align_corners" else np.floor
        yi = np.clip(pick(ys).astype(int), 0, height - 1)
        xi = np.clip(pick(xs).astype(int), 0, width - 1)
        return data[:, :, yi][:, :, :, xi]
    if method != "linear":
        raise ValueError(f"method must be 'nearest_neighbor' or 'linear', got {method!r}")
    y0 = np.floor(ys).astype(int)
    x0 = np.floor(xs).astype(int)
    wy = (ys - y0)[:, None]
    wx = (xs - x0)[None, :]
    y0c, y1c = np.clip(y0, 0, height - 1), np.clip(y0 + 1, 0, height - 1)
    x0c, x1c = np.clip(x0, 0, width - 1), np.clip(x0 + 1, 0, width - 1)

    def at(yi: np.ndarray, xi: np.ndarray) -> np.ndarray:
        return data[:, :, yi][:, :, :, xi]

    top = at(y0c, x0c) * (1 - wx) + at(y0c, x1c) * wx
    bottom = at(y1c, x0c) * (1 - wx) + at(y1c, x1c) * wx
    return (top * (1 - wy) + bottom * wy).astype(data.dtype)
