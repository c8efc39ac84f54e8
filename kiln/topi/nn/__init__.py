"""Neural-network computes (TVM's ``topi.nn``).

Entry points: dense/matmul/batch_matmul/dense_pack (:mod:`.dense`), convolutions
(:mod:`.conv`), pooling (:mod:`.pooling`), pad/mirror_pad (:mod:`.pad`), softmax
(:mod:`.softmax`), norms (:mod:`.norm`), activations and bias (:mod:`.elemwise`),
depth/space and upsampling (:mod:`.mapping`).
"""

from __future__ import annotations

from kiln.topi.nn.conv import (
                               conv,
                               conv1d,
                               conv1d_transpose_ncw,
                               conv2d,
                               conv2d_nchw,
                               conv2d_nhwc,
                               conv2d_transpose_nchw,
                               conv3d,
                               conv_output_size,
                               conv_transpose,
                               depthwise_conv2d_nchw,
                               get_pad_tuple,
                               group_conv2d_nchw,
)
from kiln.topi.nn.dense import batch_matmul, dense, dense_pack, matmul, pack_weight
from kiln.topi.nn.elemwise import batch_flatten, bias_add, leaky_relu, prelu, relu
from kiln.topi.nn.mapping import depth_to_space, space_to_depth, upsampling
from kiln.topi.nn.norm import batch_norm, group_norm, instance_norm, l2_normalize, layer_norm, lrn
from kiln.topi.nn.pad import mirror_pad, pad
from kiln.topi.nn.pooling import adaptive_pool, global_pool, pool, pool1d, pool2d, pool3d
from kiln.topi.nn.softmax import fast_softmax, log_softmax, softmax

__all__ = [
    "conv", "conv1d", "conv2d", "conv3d", "conv2d_nchw", "conv2d_nhwc", "group_conv2d_nchw",
    "depthwise_conv2d_nchw", "conv_transpose", "conv2d_transpose_nchw",
    "conv1d_transpose_ncw", "conv_output_size", "get_pad_tuple", "dense", "matmul",
    "batch_matmul", "dense_pack", "pack_weight", "relu", "leaky_relu", "prelu", "bias_add",
    "batch_flatten", "depth_to_space", "space_to_depth", "upsampling", "batch_norm",
    "layer_norm", "group_norm", "instance_norm", "l2_normalize", "lrn", "pad", "mirror_pad",
    "pool", "pool1d", "pool2d", "pool3d", "global_pool", "adaptive_pool", "softmax",
    "log_softmax", "fast_softmax",
]
