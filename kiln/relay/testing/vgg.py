"""VGG workloads (TVM's ``relay.testing.vgg``, after Simonyan & Zisserman 2014)."""

from __future__ import annotations

from typing import Any

from kiln import relay
from kiln.relay.testing import create_workload, layers

# num_layers -> convolutions per stage; the stages have 64, 128, 256, 512, 512 filters.
_SPEC = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}
_FILTERS = (64, 128, 256, 512, 512)


def get_net(batch_size: int, image_shape: tuple, num_classes: int, dtype: str,
            num_layers: int = 11, batch_norm: bool = False) -> Any:
    """The VGG function: five conv stages with max pooling, then three dense layers."""
    if num_layers not in _SPEC:
        raise ValueError(f"Invalid num_layers {num_layers}. Choices are 11, 13, 16, 19.")
    x = relay.var("data", shape=(batch_size, *image_shape), dtype=dtype)
    for stage, (count, filters) in enumerate(zip(_SPEC[num_layers], _FILTERS, strict=True), 1):
        for j in range(1, count + 1):
            name = f"conv{stage}_{j}"
            x = layers.conv2d(x, channels=filters, kernel_size=(3, 3), padding=(1, 1), name=name)
            x = relay.nn.bias_add(x, relay.var(name + "_bias"))
            if batch_norm:
                x = layers.batch_norm_infer(x, name=f"bn{stage}_{j}")
            x = relay.nn.relu(x)
        x = relay.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    x = relay.nn.batch_flatten(x)
    for i in (6, 7):
        x = relay.nn.dropout(relay.nn.relu(layers.dense_add_bias(x, units=4096, name=f"fc{i}")),
                             rate=0.5)
    out = relay.nn.softmax(layers.dense_add_bias(x, units=num_classes, name="fc8"))
    return relay.Function(relay.analysis.free_vars(out), out)


def get_workload(batch_size: int = 1, num_classes: int = 1000,
                 image_shape: tuple = (3, 224, 224), dtype: str = "float32",
                 num_layers: int = 11, batch_norm: bool = False) -> tuple[Any, dict]:
    """``(mod, params)`` of VGG-``num_layers``."""
    return create_workload(get_net(batch_size, image_shape, num_classes, dtype, num_layers,
                                   batch_norm))
