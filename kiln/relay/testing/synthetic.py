"""The synthetic workload of TVM's ``relay.testing.synthetic``: dense, conv2d, softmax,
bias_add, batch norm and reshape_like mixed on one 4-D input (for exercising passes)."""

from __future__ import annotations

from typing import Any

from kiln import relay
from kiln.relay.testing import create_workload, layers
from kiln.relay.testing.init import Constant


def _dense_conv(x: Any, input_shape: tuple, wtype: str, suffix: str) -> Any:
    """relu(dense over the last axis) + softmax(3x3 conv), both shaped like ``x``."""
    width, channels = input_shape[3], input_shape[1]
    dense = relay.nn.relu(relay.nn.dense(
        relay.reshape(x, (-1, width)),
        relay.var(f"dense{suffix}_weight", shape=(width, width), dtype=wtype)))
    conv = relay.nn.softmax(relay.nn.conv2d(
        x, relay.var(f"conv{suffix}_weight", shape=(channels, channels, 3, 3), dtype=wtype),
        padding=(1, 1), kernel_size=(3, 3)))
    return relay.add(relay.reshape_like(dense, x), conv)


def get_net(input_shape: tuple = (1, 3, 24, 12), dtype: str = "float32",
            wtype: str | None = None) -> Any:
    """The synthetic function on NCHW ``input_shape``."""
    wtype = wtype or dtype
    data = relay.var("data", shape=input_shape, dtype=dtype)
    added = _dense_conv(data, input_shape, wtype, "")
    biased = layers.batch_norm_infer(relay.nn.bias_add(added, relay.var("bias", dtype=wtype)),
                                     name="batch_norm")
    out = _dense_conv(biased, input_shape, wtype, "2")
    return relay.Function(relay.analysis.free_vars(out), out)


def get_workload(input_shape: tuple = (1, 3, 24, 12), dtype: str = "float32",
                 wtype: str | None = None) -> tuple[Any, dict]:
    """``(mod, params)`` of the synthetic network, weights filled by TVM's ``Constant()``."""
    return create_workload(get_net(input_shape, dtype, wtype), initializer=Constant())
