"""Three small float32 models for microcontrollers, as layer lists and as Relay.

Entry points: :func:`cnn`, :func:`kws_dscnn`, :func:`mlp` (each returns a
:class:`LayerModel`), :func:`to_relay`, :data:`MODELS`.

The layer list is the single description of each model: :func:`to_relay` turns it into a
Relay module + params (NHWC, HWIO/HWOI kernels, batch-norm already folded into the convolution
biases, as a deployed model has it), and ``benchmarks/micro.py`` writes the same list as a
``.tflite`` flatbuffer for TensorFlow Lite Micro. Weights are seeded, so every build of a model
is the same model.

- ``cnn``: 1x28x28x1 → conv3x3(8)+relu → maxpool2 → conv3x3(16)+relu → maxpool2 → dense(10)
  → softmax.
- ``kws_dscnn``: MLPerf Tiny's keyword-spotting DS-CNN, 1x49x10x1 → conv10x4/2(64)+relu →
  4 x [depthwise3x3(64)+relu → pointwise1x1(64)+relu] → avgpool 25x5 → dense(12) → softmax.
- ``mlp``: 1x490 → dense(128)+relu → dense(64)+relu → dense(12) → softmax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.runtime.error import TVMError

__all__ = ["Layer", "LayerModel", "cnn", "kws_dscnn", "mlp", "mobilenet_tiny", "to_relay",
           "MODELS", "same_padding"]


@dataclass
class Layer:
    """One layer: ``kind`` in conv2d, depthwise_conv2d, max_pool2d, avg_pool2d, flatten,
    dense, softmax; ``weight``/``bias`` as NumPy arrays where the kind has them."""

    kind: str
    weight: np.ndarray | None = None
    bias: np.ndarray | None = None
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    pool: tuple[int, int] = (1, 1)
    relu: bool = False


@dataclass
class LayerModel:
    """A named model: its input shape (NHWC or NC) and layers."""

    name: str
    input_shape: tuple[int, ...]
    layers: list[Layer] = field(default_factory=list)

    def random_input(self, seed: int = 0) -> np.ndarray:
        """A reproducible float32 input in [-1, 1)."""
        return np.random.default_rng(seed).uniform(-1, 1, self.input_shape).astype("float32")


def same_padding(size: tuple[int, int], kernel: tuple[int, int],
                 strides: tuple[int, int]) -> tuple[int, int, int, int]:
    """TensorFlow's ``SAME`` padding (top, left, bottom, right): extra padding goes after."""
    pads = []
    for n, k, s in zip(size, kernel, strides):
        out = math.ceil(n / s)
        pads.append(max((out - 1) * s + k - n, 0))
    return (pads[0] // 2, pads[1] // 2, pads[0] - pads[0] // 2, pads[1] - pads[1] // 2)


class _Weights:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def __call__(self, *shape: int, fan_in: int) -> np.ndarray:
        # He-scaled so activations stay O(1) through the layers (the test tolerances are
        # relative to values of that size).
        scale = math.sqrt(2.0 / fan_in)
        return (self.rng.standard_normal(shape) * scale).astype("float32")

    def bias(self, n: int) -> np.ndarray:
        return (self.rng.standard_normal(n) * 0.1).astype("float32")


def cnn(seed: int = 1) -> LayerModel:
    """The small CNN (28x28 grey image, 10 classes)."""
    w = _Weights(seed)
    return LayerModel("cnn", (1, 28, 28, 1), [
        Layer("conv2d", w(3, 3, 1, 8, fan_in=9), w.bias(8), padding=(1, 1, 1, 1), relu=True),
        Layer("max_pool2d", pool=(2, 2), strides=(2, 2)),
        Layer("conv2d", w(3, 3, 8, 16, fan_in=72), w.bias(16), padding=(1, 1, 1, 1),
              relu=True),
        Layer("max_pool2d", pool=(2, 2), strides=(2, 2)),
        Layer("flatten"),
        Layer("dense", w(10, 7 * 7 * 16, fan_in=784), w.bias(10)),
        Layer("softmax"),
    ])


def kws_dscnn(seed: int = 2, channels: int = 64, blocks: int = 4) -> LayerModel:
    """MLPerf Tiny's keyword-spotting DS-CNN (49 frames x 10 MFCC features, 12 classes)."""
    w = _Weights(seed)
    layers = [Layer("conv2d", w(10, 4, 1, channels, fan_in=40), w.bias(channels),
                    strides=(2, 2), padding=same_padding((49, 10), (10, 4), (2, 2)),
                    relu=True)]
    for _ in range(blocks):
        layers += [
            Layer("depthwise_conv2d", w(3, 3, channels, 1, fan_in=9), w.bias(channels),
                  padding=(1, 1, 1, 1), relu=True),
            Layer("conv2d", w(1, 1, channels, channels, fan_in=channels), w.bias(channels),
                  relu=True),
        ]
    layers += [Layer("avg_pool2d", pool=(25, 5), strides=(25, 5)), Layer("flatten"),
               Layer("dense", w(12, channels, fan_in=channels), w.bias(12)), Layer("softmax")]
    return LayerModel("kws_dscnn", (1, 49, 10, 1), layers)


def mobilenet_tiny(seed: int = 4) -> LayerModel:
    """A MobileNet-style depthwise-separable CNN (32x32 RGB image, 10 classes): a stride-2
    stem, three depthwise + pointwise blocks (the second depthwise of stride 2, with SAME's
    uneven padding), a global average pool."""
    w = _Weights(seed)
    layers = [Layer("conv2d", w(3, 3, 3, 16, fan_in=27), w.bias(16), strides=(2, 2),
                    padding=same_padding((32, 32), (3, 3), (2, 2)), relu=True)]
    size, channels = 16, 16
    for out, stride in ((32, 1), (64, 2), (64, 1)):
        layers += [
            Layer("depthwise_conv2d", w(3, 3, channels, 1, fan_in=9), w.bias(channels),
                  strides=(stride, stride),
                  padding=same_padding((size, size), (3, 3), (stride, stride)), relu=True),
            Layer("conv2d", w(1, 1, channels, out, fan_in=channels), w.bias(out), relu=True),
        ]
        size, channels = size // stride, out
    layers += [Layer("avg_pool2d", pool=(size, size), strides=(size, size)), Layer("flatten"),
               Layer("dense", w(10, channels, fan_in=channels), w.bias(10)), Layer("softmax")]
    return LayerModel("mobilenet_tiny", (1, 32, 32, 3), layers)


def mlp(seed: int = 3) -> LayerModel:
    """A three-layer perceptron over the 490 KWS features."""
    w = _Weights(seed)
    return LayerModel("mlp", (1, 490), [
        Layer("dense", w(128, 490, fan_in=490), w.bias(128), relu=True),
        Layer("dense", w(64, 128, fan_in=128), w.bias(64), relu=True),
        Layer("dense", w(12, 64, fan_in=64), w.bias(12)),
        Layer("softmax"),
    ])


MODELS = {"cnn": cnn, "kws_dscnn": kws_dscnn, "mlp": mlp}


def to_relay(model: LayerModel, input_name: str = "input") -> tuple[Any, dict]:
    """``(mod, params)``: the model in Relay, weights as named params (``p0_weight`` …)."""
    from kiln import relay
    from kiln.ir.module import IRModule

    x = relay.var(input_name, shape=model.input_shape, dtype="float32")
    params: dict[str, np.ndarray] = {}

    def param(name: str, value: np.ndarray) -> Any:
        params[name] = value
        return relay.var(name, shape=value.shape, dtype=str(value.dtype))

    y = x
    for i, layer in enumerate(model.layers):
        kind = layer.kind
        if kind in ("conv2d", "depthwise_conv2d"):
            kh, kw = layer.weight.shape[:2]
            depthwise = kind == "depthwise_conv2d"
            channels = layer.weight.shape[2] if depthwise else layer.weight.shape[3]
            y = relay.nn.conv2d(y, param(f"p{i}_weight", layer.weight),
                                strides=layer.strides, padding=layer.padding,
                                groups=channels if depthwise else 1, channels=channels,
                                kernel_size=(kh, kw), data_layout="NHWC",
                                kernel_layout="HWOI" if depthwise else "HWIO")
            y = relay.nn.bias_add(y, param(f"p{i}_bias", layer.bias), axis=3)
        elif kind in ("max_pool2d", "avg_pool2d"):
            pool = relay.nn.max_pool2d if kind == "max_pool2d" else relay.nn.avg_pool2d
            y = pool(y, pool_size=layer.pool, strides=layer.strides, layout="NHWC")
        elif kind == "flatten":
            y = relay.nn.batch_flatten(y)
        elif kind == "dense":
            y = relay.nn.dense(y, param(f"p{i}_weight", layer.weight))
            y = relay.nn.bias_add(y, param(f"p{i}_bias", layer.bias))
        elif kind == "softmax":
            y = relay.nn.softmax(y)
        else:
            raise TVMError(f"unknown layer kind {kind!r}")
        if layer.relu:
            y = relay.nn.relu(y)
    func = relay.Function(relay.analysis.free_vars(y), y)
    return IRModule.from_expr(func), params
