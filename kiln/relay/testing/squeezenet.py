"""SqueezeNet 1.0 / 1.1 workloads (TVM's ``relay.testing.squeezenet``, Iandola et al. 2016)."""

from __future__ import annotations

from typing import Any

from kiln import relay
from kiln.relay.testing import create_workload, layers

# Fire modules as (squeeze, expand) channels; "pool" is a 3x3/2 max pool.
_LAYOUT = {
    "1.0": (96, 7, [(16, 64), (16, 64), (32, 128), "pool", (32, 128), (48, 192), (48, 192),
                    (64, 256), "pool", (64, 256)]),
    "1.1": (64, 3, [(16, 64), (16, 64), "pool", (32, 128), (32, 128), "pool", (48, 192),
                    (48, 192), (64, 256), (64, 256)]),
}


def _conv_relu(x: Any, channels: int, kernel: int, name: str, stride: int = 1,
               padding: int = 0) -> Any:
    x = layers.conv2d(x, channels=channels, kernel_size=(kernel, kernel),
                      strides=(stride, stride), padding=(padding, padding), name=name)
    return relay.nn.relu(relay.nn.bias_add(x, relay.var(name + "_bias")))


def _fire(x: Any, squeeze: int, expand: int, name: str) -> Any:
    x = _conv_relu(x, squeeze, 1, name + "_input")
    left = _conv_relu(x, expand, 1, name + "_left")
    right = _conv_relu(x, expand, 3, name + "_right", padding=1)
    return relay.concatenate([left, right], axis=1)


def get_net(batch_size: int, image_shape: tuple, num_classes: int, version: str,
            dtype: str) -> Any:
    """The SqueezeNet function of ``version`` "1.0" or "1.1"."""
    if version not in _LAYOUT:
        raise ValueError(f"Unsupported SqueezeNet version {version}: 1.0 or 1.1 expected")
    channels, kernel, body = _LAYOUT[version]
    data = relay.var("data", shape=(batch_size, *image_shape), dtype=dtype)
    x = _conv_relu(data, channels, kernel, "conv1", stride=2)
    x = relay.nn.max_pool2d(x, pool_size=(3, 3), strides=(2, 2))
    for i, item in enumerate(body):
        if item == "pool":
            x = relay.nn.max_pool2d(x, pool_size=(3, 3), strides=(2, 2))
        else:
            x = _fire(x, *item, name=f"fire{i}")
    x = relay.nn.dropout(x, rate=0.5)
    x = _conv_relu(x, num_classes, 1, "conv_final")
    out = relay.nn.softmax(relay.nn.batch_flatten(relay.nn.global_avg_pool2d(x)))
    return relay.Function(relay.analysis.free_vars(out), out)


def get_workload(batch_size: int = 1, num_classes: int = 1000, version: str = "1.0",
                 image_shape: tuple = (3, 224, 224), dtype: str = "float32") -> tuple[Any, dict]:
    """``(mod, params)`` of SqueezeNet."""
    return create_workload(get_net(batch_size, image_shape, num_classes, version, dtype))
