"""Inception v3 workloads (TVM's ``relay.testing.inception_v3``, Szegedy et al. 2015).

Blocks follow TVM's (MXNet's) ``Inception7A``-``7E``: parallel towers of conv-bn-relu units
concatenated along channels. The head pools globally, which equals TVM's 8x8 pool at the
default 299x299 input.
"""

from __future__ import annotations

import itertools
from typing import Any

from kiln import relay
from kiln.relay.testing import create_workload, layers

Pair = tuple[int, int]


class _Net:
    """Builds conv-bn-relu units with unique parameter names (``<block>_conv<k>_weight``)."""

    def __init__(self) -> None:
        self._ids = itertools.count()

    def conv(self, x: Any, channels: int, kernel: Pair = (1, 1), stride: Pair = (1, 1),
             pad: Pair = (0, 0), name: str = "") -> Any:
        name = f"{name}_conv{next(self._ids)}"
        x = layers.conv2d(x, channels=channels, kernel_size=kernel, strides=stride,
                          padding=pad, name=name)
        return relay.nn.relu(layers.batch_norm_infer(x, epsilon=2e-5, name=name + "_bn"))

    @staticmethod
    def pool(x: Any, kind: str, stride: int, pad: int) -> Any:
        args = dict(pool_size=(3, 3), strides=(stride, stride), padding=(pad, pad))
        return relay.nn.max_pool2d(x, **args) if kind == "max" else relay.nn.avg_pool2d(x, **args)

    def chain(self, x: Any, specs: list[tuple], name: str) -> Any:
        """Apply ``conv`` for each ``(channels, kernel, stride, pad)`` in turn."""
        for channels, kernel, stride, pad in specs:
            x = self.conv(x, channels, kernel, stride, pad, name)
        return x

    def block_a(self, x: Any, n1: int, r3: int, a3: int, b3: int, r5: int, n5: int, pool: str,
                proj: int, name: str) -> Any:
        one = (1, 1), (1, 1), (0, 0)
        towers = [self.conv(x, n1, name=name),
                  self.chain(x, [(r5, *one), (n5, (5, 5), (1, 1), (2, 2))], name),
                  self.chain(x, [(r3, *one), (a3, (3, 3), (1, 1), (1, 1)),
                                 (b3, (3, 3), (1, 1), (1, 1))], name),
                  self.conv(self.pool(x, pool, 1, 1), proj, name=name)]
        return relay.concatenate(towers, axis=1)

    def block_b(self, x: Any, n3: int, rd: int, d1: int, d2: int, name: str) -> Any:
        towers = [self.conv(x, n3, (3, 3), (2, 2), name=name),
                  self.chain(x, [(rd, (1, 1), (1, 1), (0, 0)), (d1, (3, 3), (1, 1), (1, 1)),
                                 (d2, (3, 3), (2, 2), (0, 0))], name),
                  self.pool(x, "max", 2, 0)]
        return relay.concatenate(towers, axis=1)

    def block_c(self, x: Any, n1: int, d7: tuple, q7: tuple, pool: str, proj: int,
                name: str) -> Any:
        wide, tall = ((1, 7), (1, 1), (0, 3)), ((7, 1), (1, 1), (3, 0))
        one = (1, 1), (1, 1), (0, 0)
        towers = [self.conv(x, n1, name=name),
                  self.chain(x, [(d7[0], *one), (d7[1], *wide), (d7[2], *tall)], name),
                  self.chain(x, [(q7[0], *one), (q7[1], *tall), (q7[2], *wide), (q7[3], *tall),
                                 (q7[4], *wide)], name),
                  self.conv(self.pool(x, pool, 1, 1), proj, name=name)]
        return relay.concatenate(towers, axis=1)

    def block_d(self, x: Any, r3: int, n3: int, r7: int, a7: int, b7: int, n7: int,
                name: str) -> Any:
        one = (1, 1), (1, 1), (0, 0)
        towers = [self.chain(x, [(r3, *one), (n3, (3, 3), (2, 2), (0, 0))], name),
                  self.chain(x, [(r7, *one), (a7, (1, 7), (1, 1), (0, 3)),
                                 (b7, (7, 1), (1, 1), (3, 0)), (n7, (3, 3), (2, 2), (0, 0))],
                             name),
                  self.pool(x, "max", 2, 0)]
        return relay.concatenate(towers, axis=1)

    def block_e(self, x: Any, n1: int, rd: int, d1: int, d2: int, r3: int, n3: int, e1: int,
                e2: int, pool: str, proj: int, name: str) -> Any:
        split = self.conv(x, rd, name=name)
        deep = self.chain(x, [(r3, (1, 1), (1, 1), (0, 0)), (n3, (3, 3), (1, 1), (1, 1))], name)
        towers = [self.conv(x, n1, name=name),
                  self.conv(split, d1, (1, 3), pad=(0, 1), name=name),
                  self.conv(split, d2, (3, 1), pad=(1, 0), name=name),
                  self.conv(deep, e1, (1, 3), pad=(0, 1), name=name),
                  self.conv(deep, e2, (3, 1), pad=(1, 0), name=name),
                  self.conv(self.pool(x, pool, 1, 1), proj, name=name)]
        return relay.concatenate(towers, axis=1)


def get_net(batch_size: int, num_classes: int, image_shape: tuple, dtype: str) -> Any:
    """The Inception v3 function."""
    net = _Net()
    data = relay.var("data", shape=(batch_size, *image_shape), dtype=dtype)
    x = net.chain(data, [(32, (3, 3), (2, 2), (0, 0)), (32, (3, 3), (1, 1), (0, 0)),
                         (64, (3, 3), (1, 1), (1, 1))], "stem")
    x = net.pool(x, "max", 2, 0)
    x = net.chain(x, [(80, (1, 1), (1, 1), (0, 0)), (192, (3, 3), (1, 1), (0, 0))], "stem2")
    x = net.pool(x, "max", 2, 0)
    for i, proj in enumerate((32, 64, 64)):
        x = net.block_a(x, 64, 64, 96, 96, 48, 64, "avg", proj, f"mixed_{i}")
    x = net.block_b(x, 384, 64, 96, 96, "mixed_3")
    for i, width in enumerate((128, 160, 160, 192), start=4):
        x = net.block_c(x, 192, (width, width, 192), (width,) * 4 + (192,), "avg", 192,
                        f"mixed_{i}")
    x = net.block_d(x, 192, 320, 192, 192, 192, 192, "mixed_8")
    x = net.block_e(x, 320, 384, 384, 384, 448, 384, 384, 384, "avg", 192, "mixed_9")
    x = net.block_e(x, 320, 384, 384, 384, 448, 384, 384, 384, "max", 192, "mixed_10")
    x = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(x))
    out = relay.nn.softmax(layers.dense_add_bias(x, units=num_classes, name="fc1"))
    return relay.Function(relay.analysis.free_vars(out), out)


def get_workload(batch_size: int = 1, num_classes: int = 1000,
                 image_shape: tuple = (3, 299, 299),
                 dtype: str = "float32") -> tuple[Any, dict]:
    """``(mod, params)`` of Inception v3 (inputs of at least 75x75)."""
    if min(image_shape[1:]) < 75:
        raise ValueError(f"Inception v3 needs inputs of at least 75x75, got {image_shape}")
    return create_workload(get_net(batch_size, num_classes, image_shape, dtype))
