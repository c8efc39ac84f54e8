"""A multi-layer perceptron workload (TVM's ``relay.testing.mlp``)."""

from __future__ import annotations

from typing import Any

from kiln import relay
from kiln.relay.testing import create_workload


def get_net(batch_size: int, num_classes: int = 10, image_shape: tuple = (1, 28, 28),
            dtype: str = "float32") -> Any:
    """dense(128) + relu → dense(64) + relu → dense(num_classes) → softmax."""
    data = relay.var("data", shape=(batch_size, *image_shape), dtype=dtype)
    x = relay.nn.batch_flatten(data)
    for i, units in enumerate((128, 64, num_classes), start=1):
        # weights and biases are unannotated: InferType derives them from data and units
        w, b = relay.var(f"fc{i}_weight"), relay.var(f"fc{i}_bias")
        x = relay.nn.bias_add(relay.nn.dense(x, w, units=units), b, axis=-1)
        if i < 3:
            x = relay.nn.relu(x)
    out = relay.nn.softmax(x)
    return relay.Function(relay.analysis.free_vars(out), out)


def get_workload(batch_size: int = 1, num_classes: int = 10, image_shape: tuple = (1, 28, 28),
                 dtype: str = "float32") -> tuple[Any, dict]:
    """``(mod, params)`` of the MLP."""
    return create_workload(get_net(batch_size, num_classes, image_shape, dtype))
