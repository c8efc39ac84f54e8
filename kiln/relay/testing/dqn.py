"""The DQN workload (TVM's ``relay.testing.dqn``, the Atari network of Mnih et al. 2015)."""

from __future__ import annotations

from typing import Any

from kiln import relay
from kiln.relay.testing import create_workload, layers
from kiln.runtime.error import TVMError


def get_net(batch_size: int, num_actions: int = 18, image_shape: tuple = (4, 84, 84),
            dtype: str = "float32", layout: str = "NCHW") -> Any:
    """Three strided convolutions and two dense layers giving one value per action."""
    if layout != "NCHW":
        raise TVMError(f"kiln's dqn workload is built in NCHW, got layout {layout!r}")
    x = relay.var("data", shape=(batch_size, *image_shape), dtype=dtype)
    for i, (channels, kernel, stride) in enumerate(((32, 8, 4), (64, 4, 2), (64, 3, 1)), 1):
        x = layers.conv2d(x, channels=channels, kernel_size=(kernel, kernel),
                          strides=(stride, stride), name=f"conv{i}")
        x = relay.nn.relu(relay.nn.bias_add(x, relay.var(f"conv{i}_bias")))
    x = relay.nn.relu(layers.dense_add_bias(relay.nn.batch_flatten(x), units=512, name="dense1"))
    out = layers.dense_add_bias(x, units=num_actions, name="dense2")
    return relay.Function(relay.analysis.free_vars(out), out)


def get_workload(batch_size: int, num_actions: int = 18, image_shape: tuple = (4, 84, 84),
                 dtype: str = "float32", layout: str = "NCHW") -> tuple[Any, dict]:
    """``(mod, params)`` of the DQN."""
    return create_workload(get_net(batch_size, num_actions, image_shape, dtype, layout))
