"""3-D ResNet workloads for video (TVM's ``relay.testing.resnet_3d``, after Hara et al. 2018).

``get_workload(batch_size=1, num_classes=1000, num_layers=18, image_shape=(3, 16, 112, 112))``
gives the ImageNet-style stage layout of :mod:`~kiln.relay.testing.resnet` with 3-D
convolutions over (depth, height, width); inputs of height <= 32 start with a 3x3x3 convolution
instead of the strided 3x7x7 stem, as in TVM.
"""

from __future__ import annotations

from typing import Any

from kiln import relay
from kiln.relay.testing import create_workload, layers
from kiln.runtime.error import TVMError

_UNITS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3),
          152: (3, 8, 36, 3)}


def _bn_relu(x: Any, name: str) -> Any:
    return relay.nn.relu(layers.batch_norm_infer(x, epsilon=2e-5, name=name))


def _conv(x: Any, channels: int, kernel: tuple, stride: tuple, name: str) -> Any:
    weight = relay.var(name + "_weight")
    return relay.nn.conv3d(x, weight, strides=stride, padding=tuple(k // 2 for k in kernel),
                           channels=channels, kernel_size=kernel)


def _unit(x: Any, channels: int, stride: int, match: bool, bottleneck: bool, name: str) -> Any:
    """A pre-activation residual unit: bn-relu-conv twice (basic) or three times (bottleneck)."""
    act = _bn_relu(x, name + "_bn1")
    strides = (stride,) * 3
    if bottleneck:
        y = _conv(act, channels // 4, (1, 1, 1), strides, name + "_conv1")
        y = _conv(_bn_relu(y, name + "_bn2"), channels // 4, (3, 3, 3), (1, 1, 1),
                  name + "_conv2")
        y = _conv(_bn_relu(y, name + "_bn3"), channels, (1, 1, 1), (1, 1, 1), name + "_conv3")
    else:
        y = _conv(act, channels, (3, 3, 3), strides, name + "_conv1")
        y = _conv(_bn_relu(y, name + "_bn2"), channels, (3, 3, 3), (1, 1, 1), name + "_conv2")
    shortcut = x if match else _conv(act, channels, (1, 1, 1), strides, name + "_sc")
    return relay.add(y, shortcut)


def get_net(batch_size: int = 1, num_classes: int = 1000, num_layers: int = 18,
            image_shape: tuple = (3, 16, 112, 112), layout: str = "NCDHW",
            dtype: str = "float32") -> Any:
    """The 3-D ResNet function on NCDHW input."""
    if layout != "NCDHW":
        raise TVMError(f"kiln's resnet_3d workload is built in NCDHW, got layout {layout!r}")
    if num_layers not in _UNITS:
        raise ValueError(f"no ResNet with {num_layers} layers; choose one of {sorted(_UNITS)}")
    bottleneck = num_layers >= 50
    widths = (256, 512, 1024, 2048) if bottleneck else (64, 128, 256, 512)
    data = relay.var("data", shape=(batch_size, *image_shape), dtype=dtype)
    x = layers.batch_norm_infer(data, epsilon=2e-5, name="bn_data")
    if image_shape[2] <= 32:
        x = _conv(x, 64, (3, 3, 3), (1, 1, 1), "conv0")
    else:
        x = _conv(x, 64, (3, 7, 7), (1, 2, 2), "conv0")
    x = _bn_relu(x, "bn0")
    channels = 64
    for stage, (units, width) in enumerate(zip(_UNITS[num_layers], widths, strict=True), 1):
        for unit in range(units):
            stride = 2 if unit == 0 and stage > 1 else 1
            x = _unit(x, width, stride, unit > 0 or (channels == width and stride == 1),
                      bottleneck, f"stage{stage}_unit{unit + 1}")
            channels = width
    x = relay.mean(_bn_relu(x, "bn1"), axis=[2, 3, 4])  # global average pooling over D, H, W
    out = relay.nn.softmax(layers.dense_add_bias(x, units=num_classes, name="fc1"))
    return relay.Function(relay.analysis.free_vars(out), out)


def get_workload(batch_size: int = 1, num_classes: int = 1000, num_layers: int = 18,
                 image_shape: tuple = (3, 16, 112, 112), layout: str = "NCDHW",
                 dtype: str = "float32") -> tuple[Any, dict]:
    """``(mod, params)`` of a 3-D ResNet."""
    return create_workload(get_net(batch_size, num_classes, num_layers, image_shape, layout,
                                   dtype))
