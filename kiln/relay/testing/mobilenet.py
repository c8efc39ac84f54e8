"""MobileNet v1 workloads (TVM's ``relay.testing.mobilenet``, after Howard et al. 2017)."""

from __future__ import annotations

from typing import Any

from kiln import relay
from kiln.relay.testing import create_workload, layers
from kiln.runtime.error import TVMError

# (input channels, output channels, downsample) of each separable block after the first conv.
_BLOCKS = [(32, 64, False), (64, 128, True), (128, 128, False), (128, 256, True),
           (256, 256, False), (256, 512, True)]
_DEEP = [(512, 512, False)] * 5 + [(512, 1024, True), (1024, 1024, False)]
_SHALLOW = [(512, 1024, True), (1024, 1024, True)]


def _conv_bn_relu(x: Any, name: str, channels: int, kernel: int, stride: int,
                  groups: int = 1) -> Any:
    pad = kernel // 2
    x = layers.conv2d(x, channels=channels, kernel_size=(kernel, kernel),
                      strides=(stride, stride), padding=(pad, pad), groups=groups,
                      name=name + "_conv")
    return relay.nn.relu(layers.batch_norm_infer(x, epsilon=1e-5, name=name + "_bn"))


def mobile_net(num_classes: int = 1000, data_shape: tuple = (1, 3, 224, 224),
               dtype: str = "float32", alpha: float = 1.0, is_shallow: bool = False,
               layout: str = "NCHW") -> Any:
    """The MobileNet function: a strided conv, 13 depthwise-separable blocks, a classifier."""
    if layout != "NCHW":
        raise TVMError(f"kiln's mobilenet workload is built in NCHW, got layout {layout!r}; "
                       "convert with relay.transform.ConvertLayout")
    data = relay.var("data", shape=data_shape, dtype=dtype)
    x = _conv_bn_relu(data, "conv_block_1", int(32 * alpha), 3, 2)
    for i, (cin, cout, down) in enumerate(_BLOCKS + (_SHALLOW if is_shallow else _DEEP), 1):
        name = f"separable_conv_block_{i}"
        x = _conv_bn_relu(x, name + "_depthwise", int(cin * alpha), 3, 2 if down else 1,
                          groups=int(cin * alpha))
        x = _conv_bn_relu(x, name + "_pointwise", int(cout * alpha), 1, 1)
    x = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(x))
    out = relay.nn.softmax(layers.dense_add_bias(x, units=num_classes, name="fc"))
    return relay.Function(relay.analysis.free_vars(out), out)


def get_workload(batch_size: int = 1, num_classes: int = 1000,
                 image_shape: tuple = (3, 224, 224), dtype: str = "float32",
                 layout: str = "NCHW") -> tuple[Any, dict]:
    """``(mod, params)`` of MobileNet v1."""
    net = mobile_net(num_classes, (batch_size, *image_shape), dtype, layout=layout)
    return create_workload(net)
