"""ResNet workloads (TVM's ``relay.testing.resnet``, after He et al. 2016).

``get_workload(batch_size=1, num_classes=1000, num_layers=18, image_shape=(3, 224, 224))``
returns ``(mod, params)``; ResNet-18/34 use basic blocks, 50/101/152 bottlenecks. Only the
input is annotated: InferType derives every weight's shape from the layer attrs, as in TVM.
"""

from __future__ import annotations

from typing import Any

from kiln import relay
from kiln.relay.testing import create_workload

_UNITS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3),
          152: (3, 8, 36, 3)}


def _bn(x: Any, name: str) -> Any:
    gamma, beta = relay.var(name + "_gamma"), relay.var(name + "_beta")
    mean, var = relay.var(name + "_moving_mean"), relay.var(name + "_moving_var")
    return relay.nn.batch_norm(x, gamma, beta, mean, var, epsilon=2e-5)[0]


def _conv(x: Any, channels: int, kernel: int, stride: int, name: str) -> Any:
    return relay.nn.conv2d(x, relay.var(name + "_weight"), strides=(stride, stride),
                           padding=(kernel // 2, kernel // 2), channels=channels,
                           kernel_size=(kernel, kernel))


def _unit(x: Any, cin: int, channels: int, stride: int, bottleneck: bool, name: str) -> Any:
    act = relay.nn.relu(_bn(x, name + "_bn1"))
    if bottleneck:
        mid = channels // 4
        y = _conv(act, mid, 1, 1, name + "_conv1")
        y = _conv(relay.nn.relu(_bn(y, name + "_bn2")), mid, 3, stride, name + "_conv2")
        y = _conv(relay.nn.relu(_bn(y, name + "_bn3")), channels, 1, 1, name + "_conv3")
    else:
        y = _conv(act, channels, 3, stride, name + "_conv1")
        y = _conv(relay.nn.relu(_bn(y, name + "_bn2")), channels, 3, 1, name + "_conv2")
    match = cin == channels and stride == 1
    shortcut = x if match else _conv(act, channels, 1, stride, name + "_sc")
    return relay.add(y, shortcut)


def get_net(batch_size: int = 1, num_classes: int = 1000, num_layers: int = 18,
            image_shape: tuple = (3, 224, 224), dtype: str = "float32") -> Any:
    """The pre-activation ResNet of TVM's testing workloads."""
    if num_layers not in _UNITS:
        raise ValueError(f"no ResNet with {num_layers} layers; choose one of {sorted(_UNITS)}")
    bottleneck = num_layers >= 50
    widths = (256, 512, 1024, 2048) if bottleneck else (64, 128, 256, 512)
    data = relay.var("data", shape=(batch_size, *image_shape), dtype=dtype)
    x = _bn(data, "bn_data")
    x = _conv(x, 64, 7, 2, "conv0")
    x = relay.nn.relu(_bn(x, "bn0"))
    x = relay.nn.max_pool2d(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1))
    in_channels = 64
    for stage, (units, width) in enumerate(zip(_UNITS[num_layers], widths), start=1):
        for unit in range(units):
            stride = 2 if unit == 0 and stage > 1 else 1
            x = _unit(x, in_channels, width, stride, bottleneck, f"stage{stage}_unit{unit + 1}")
            in_channels = width
    x = relay.nn.relu(_bn(x, "bn1"))
    x = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(x))
    x = relay.nn.bias_add(relay.nn.dense(x, relay.var("fc1_weight"), units=num_classes),
                          relay.var("fc1_bias"))
    out = relay.nn.softmax(x)
    return relay.Function(relay.analysis.free_vars(out), out)


def get_workload(batch_size: int = 1, num_classes: int = 1000, num_layers: int = 18,
                 image_shape: tuple = (3, 224, 224), dtype: str = "float32") -> tuple[Any, dict]:
    """``(mod, params)`` of a ResNet."""
    return create_workload(get_net(batch_size, num_classes, num_layers, image_shape, dtype))
