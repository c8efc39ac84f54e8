"""Reference convolutions in NumPy (TVM's ``topi.testing.conv*_python``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["get_pad_tuple", "conv2d_nchw_python", "conv2d_nhwc_python", "conv1d_ncw_python",
           "depthwise_conv2d_python_nchw", "depthwise_conv2d_python_nhwc"]


def get_pad_tuple(padding: Any, kernel: tuple[int, int]) -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)`` padding from TVM's padding spellings: an int, 2 ints
    (height, width), 4 ints (top, left, bottom, right), ``"VALID"`` or ``"SAME"``."""
    if isinstance(padding, str):
        if padding == "VALID":
            return 0, 0, 0, 0
        if padding == "SAME":
            # TVM's SAME puts the odd pixel at the top/left (ceil of half the total there).
            pad_h, pad_w = kernel[0] - 1, kernel[1] - 1
            top, left = (pad_h + 1) // 2, (pad_w + 1) // 2
            return top, left, pad_h - top, pad_w - left
        raise ValueError(f"padding string must be 'VALID' or 'SAME', got {padding!r}")
    if isinstance(padding, int):
        return padding, padding, padding, padding
    padding = tuple(int(p) for p in padding)
    if len(padding) == 2:
        return padding[0], padding[1], padding[0], padding[1]
    if len(padding) == 4:
        return padding
    raise ValueError(f"padding must be an int, 2 or 4 ints, 'VALID' or 'SAME'; got {padding}")


def _pair(value: Any) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def _conv_nchw(data: np.ndarray, weight: np.ndarray, stride: Any, padding: Any) -> np.ndarray:
    """Ungrouped NCHW x OIHW convolution: a sum over (c, kh, kw) of strided windows."""
    sh, sw = _pair(stride)
    top, left, bottom, right = get_pad_tuple(padding, weight.shape[2:])
    padded = np.pad(data, ((0, 0), (0, 0), (top, bottom), (left, right)))
    windows = sliding_window_view(padded, weight.shape[2:], axis=(2, 3))[:, :, ::sh, ::sw]
    out = np.einsum("nchwij,ocij->nohw", windows, weight, dtype="float64")
    return out.astype(np.result_type(data.dtype, weight.dtype))


def conv2d_nchw_python(a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any,
                       groups: int = 1) -> np.ndarray:
    """Convolution of ``a_np`` [N, C, H, W] with ``w_np`` [O, C // groups, KH, KW]."""
    if a_np.shape[1] != w_np.shape[1] * groups:
        raise ValueError(f"input has {a_np.shape[1]} channels; weight expects "
                         f"{w_np.shape[1]} x {groups} groups")
    parts = zip(np.split(a_np, groups, axis=1), np.split(w_np, groups, axis=0), strict=True)
    return np.concatenate([_conv_nchw(a, w, stride, padding) for a, w in parts], axis=1)


def conv2d_nhwc_python(a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any,
                       groups: int = 1) -> np.ndarray:
    """Convolution of ``a_np`` [N, H, W, C] with ``w_np`` [KH, KW, C // groups, O]."""
    out = conv2d_nchw_python(a_np.transpose(0, 3, 1, 2), w_np.transpose(3, 2, 0, 1), stride,
                             padding, groups)
    return out.transpose(0, 2, 3, 1)


def conv1d_ncw_python(a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any,
                      dilation: Any = 1) -> np.ndarray:
    """1-D convolution of ``a_np`` [N, C, W] with ``w_np`` [O, C, K]; padding an int, a
    (left, right) pair, ``"VALID"`` or ``"SAME"``."""
    stride = stride[0] if isinstance(stride, list | tuple) else stride
    dilation = dilation[0] if isinstance(dilation, list | tuple) else dilation
    kernel = w_np.shape[2]
    if dilation > 1:
        dilated = np.zeros(w_np.shape[:2] + ((kernel - 1) * dilation + 1,), w_np.dtype)
        dilated[:, :, ::dilation] = w_np
        w_np, kernel = dilated, dilated.shape[2]
    if isinstance(padding, list | tuple) and len(padding) == 2:
        left, right = padding
    else:
        pad = padding[0] if isinstance(padding, list | tuple) else padding
        top, left, bottom, right = get_pad_tuple(pad, (1, kernel))
    out = conv2d_nchw_python(a_np[:, :, None, :], w_np[:, :, None, :], (1, stride),
                             (0, left, 0, right))
    return out[:, :, 0, :]


def depthwise_conv2d_python_nchw(input_np: np.ndarray, filter_np: np.ndarray, stride: Any,
                                 padding: Any) -> np.ndarray:
    """Depthwise convolution: ``input_np`` [N, C, H, W], ``filter_np`` [C, M, KH, KW] gives
    C * M output channels, channel c * M + m from input channel c and filter (c, m)."""
    channels, multiplier = filter_np.shape[:2]
    if input_np.shape[1] != channels:
        raise ValueError(f"input has {input_np.shape[1]} channels, filter {channels}")
    weight = filter_np.reshape(channels * multiplier, 1, *filter_np.shape[2:])
    return conv2d_nchw_python(input_np, weight, stride, padding, groups=channels)


def depthwise_conv2d_python_nhwc(input_np: np.ndarray, filter_np: np.ndarray, stride: Any,
                                 padding: Any) -> np.ndarray:
    """Depthwise convolution: ``input_np`` [N, H, W, C], ``filter_np`` [KH, KW, C, M]."""
    out = depthwise_conv2d_python_nchw(input_np.transpose(0, 3, 1, 2),
                                       filter_np.transpose(2, 3, 0, 1), stride, padding)
    return out.transpose(0, 2, 3, 1)
