"""The DCGAN generator workload (TVM's ``relay.testing.dcgan``, Radford et al. 2015)."""

from __future__ import annotations

from typing import Any

from kiln import relay
from kiln.relay.testing import create_workload, layers
from kiln.runtime.error import TVMError


def get_net(batch_size: int, random_len: int = 100, oshape: tuple = (3, 64, 64),
            ngf: int = 128, code: Any = None, dtype: str = "float32") -> Any:
    """A dense projection to 4x4, then stride-2 transposed convolutions (each doubling the
    image and halving the filters) up to ``oshape``, then tanh."""
    steps = (oshape[1] // 4).bit_length() - 1
    if oshape[1] != oshape[2] or oshape[1] < 8 or 4 << steps != oshape[1]:
        raise TVMError(f"dcgan needs a square output of size 4 * 2**k (k >= 1), got {oshape}")
    code = relay.var("data", shape=(batch_size, random_len), dtype=dtype) if code is None \
        else code
    filters = ngf * (1 << (steps - 1))
    x = relay.nn.dense(code, relay.var("dense_weight"), units=filters * 16)
    x = relay.nn.relu(relay.reshape(x, (batch_size, filters, 4, 4)))
    for i in range(1, steps + 1):
        last = i == steps
        channels = oshape[0] if last else filters // 2
        x = layers.conv2d_transpose(x, channels=channels, kernel_size=(4, 4), strides=(2, 2),
                                    padding=(1, 1), name=f"g{i}")
        if last:
            x = relay.tanh(x)
        else:
            x = relay.nn.relu(layers.batch_norm_infer(x, epsilon=1e-5, name=f"g{i}_bn"))
        filters //= 2
    return relay.Function(relay.analysis.free_vars(x), x)


def get_workload(batch_size: int, oshape: tuple = (3, 64, 64), ngf: int = 128,
                 random_len: int = 100, layout: str = "NCHW",
                 dtype: str = "float32") -> tuple[Any, dict]:
    """``(mod, params)`` of the DCGAN generator."""
    if layout != "NCHW":
        raise TVMError(f"kiln's dcgan workload is built in NCHW, got layout {layout!r}")
    return create_workload(get_net(batch_size, random_len, oshape, ngf, dtype=dtype))
