"""NumPy reference implementations with TVM's names (``tvm.topi.testing``).

Written from each operator's definition, independently of kiln's compute rules, so tests (TVM's
and kiln's) can compare kiln's kernels against them. Entry points: convolutions in
:mod:`~kiln.topi.testing.conv` (``conv2d_nchw_python``, ``conv2d_nhwc_python``,
``depthwise_conv2d_python_nchw``, ``conv1d_ncw_python``), dense algebra, softmax, pooling,
indexing and resizing in :mod:`~kiln.topi.testing.nn`, and ``roi_align_nchw_python`` in
:mod:`~kiln.topi.testing.vision`.
"""

from __future__ import annotations

from kiln.topi.testing.conv import (
    conv1d_ncw_python,
    conv2d_nchw_python,
    conv2d_nhwc_python,
    depthwise_conv2d_python_nchw,
    depthwise_conv2d_python_nhwc,
    get_pad_tuple,
)
from kiln.topi.testing.nn import (
    batch_matmul,
    dense,
    gather_python,
    log_softmax_python,
    one_hot,
    poolnd_python,
    resize2d_python,
    softmax_python,
)
from kiln.topi.testing.vision import roi_align_nchw_python, roi_align_nhwc_python

__all__ = ["conv1d_ncw_python", "conv2d_nchw_python", "conv2d_nhwc_python",
           "depthwise_conv2d_python_nchw", "depthwise_conv2d_python_nhwc", "get_pad_tuple",
           "batch_matmul", "dense", "gather_python", "log_softmax_python", "one_hot",
           "poolnd_python", "resize2d_python", "softmax_python", "roi_align_nchw_python",
           "roi_align_nhwc_python"]
