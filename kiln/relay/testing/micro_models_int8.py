"""The microcontroller models of :mod:`.micro_models` as int8 TFLite flatbuffers.

Entry point: :func:`to_tflite_int8`.

The layer list is quantized as TFLite's converter does for microcontrollers: int8 activations
(asymmetric, ranges calibrated by running the float model in kiln on sample inputs), int8
weights symmetric per output channel, int32 biases at input scale x weight scale, ReLU fused
into the convolutions, softmax output at scale 1/256 and zero point -128. The result runs on
LiteRT and TFLite Micro, and through ``relay.frontend.from_tflite`` on kiln.

Example
-------
>>> from kiln.relay.testing import micro_models
>>> from kiln.relay.testing.micro_models_int8 import to_tflite_int8
>>> model_bytes = to_tflite_int8(micro_models.mlp())
>>> model_bytes[4:8]
b'TFL3'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.testing.micro_models import LayerModel
from kiln.relay.testing.tflite import TFLiteModelBuilder
from kiln.runtime.error import TVMError

__all__ = ["to_tflite_int8", "calibrate_layers", "INPUT_SCALE"]

INPUT_SCALE = 1.0 / 128   # inputs lie in [-1, 1)


def calibrate_layers(model: LayerModel, samples: int = 4) -> list[tuple[float, float]]:
    """(min, max) of every layer's output over ``samples`` seeded inputs (float model)."""
    import kiln
    from kiln import relay
    from kiln.relay.quantize.calibrate import collect_stats

    x = relay.var("input", shape=model.input_shape, dtype="float32")
    outputs, y = [], x
    for layer in model.layers:
        y = _float_layer(relay, y, layer)
        outputs.append(y)
    func = relay.Function([x], relay.Tuple(outputs))
    mod = kiln.transform.Sequential([relay.transform.InferType()])(kiln.IRModule.from_expr(func))
    dataset = [{"input": model.random_input(seed)} for seed in range(samples)]
    stats = collect_stats(mod["main"], outputs, dataset)
    return [(float(v.min()), float(v.max())) for v in stats]


def _float_layer(relay: Any, y: Any, layer: Any) -> Any:
    kind = layer.kind
    if kind in ("conv2d", "depthwise_conv2d"):
        depthwise = kind == "depthwise_conv2d"
        channels = layer.weight.shape[2] if depthwise else layer.weight.shape[3]
        y = relay.nn.conv2d(y, relay.const(layer.weight), strides=layer.strides,
                            padding=layer.padding, groups=channels if depthwise else 1,
                            channels=channels, kernel_size=layer.weight.shape[:2],
                            data_layout="NHWC", kernel_layout="HWOI" if depthwise else "HWIO")
        y = relay.nn.bias_add(y, relay.const(layer.bias), axis=3)
    elif kind in ("max_pool2d", "avg_pool2d"):
        pool = relay.nn.max_pool2d if kind == "max_pool2d" else relay.nn.avg_pool2d
        y = pool(y, pool_size=layer.pool, strides=layer.strides, layout="NHWC")
    elif kind == "flatten":
        y = relay.nn.batch_flatten(y)
    elif kind == "dense":
        y = relay.nn.bias_add(relay.nn.dense(y, relay.const(layer.weight)),
                              relay.const(layer.bias))
    elif kind == "softmax":
        y = relay.nn.softmax(y)
    else:
        raise TVMError(f"unknown layer kind {kind!r}")
    return relay.nn.relu(y) if layer.relu else y


def _asymmetric(lo: float, hi: float) -> dict:
    """int8 parameters covering [lo, hi] (always including 0, as TFLite requires)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max(hi - lo, 1e-6) / 255.0
    zero_point = int(np.clip(round(-128 - lo / scale), -128, 127))
    return {"scale": float(np.float32(scale)), "zero_point": zero_point}


def _per_channel(weight: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights per channel along ``axis`` and their scales."""
    other = tuple(i for i in range(weight.ndim) if i != axis)
    peak = np.maximum(np.abs(weight).max(axis=other), 1e-8)
    scale = (peak / 127.0).astype("float32")
    shape = [1] * weight.ndim
    shape[axis] = -1
    q = np.clip(np.round(weight / scale.reshape(shape)), -127, 127).astype("int8")
    return q, scale


def _same_or_valid(layer: Any) -> int:
    return 0 if any(layer.padding) else 1


def to_tflite_int8(model: LayerModel, ranges: list[tuple[float, float]] | None = None) -> bytes:
    """``model`` as an int8 TFLite flatbuffer (int8 input and output tensors)."""
    ranges = ranges or calibrate_layers(model)
    b = TFLiteModelBuilder()
    q = {"scale": INPUT_SCALE, "zero_point": 0}
    x = b.add_input("input", model.input_shape, "int8", **q)
    shape = model.input_shape
    for i, (layer, (lo, hi)) in enumerate(zip(model.layers, ranges)):
        kind = layer.kind
        out_q = _asymmetric(lo, hi)
        if kind == "softmax":
            out_q = {"scale": 1.0 / 256, "zero_point": -128}
        elif kind in ("max_pool2d", "avg_pool2d", "flatten"):
            out_q = q   # TFLite keeps the input's parameters through pooling and reshapes
        if kind in ("conv2d", "depthwise_conv2d"):
            depthwise = kind == "depthwise_conv2d"
            weight = layer.weight.transpose(3, 0, 1, 2)   # HWIO -> OHWI, HWOI -> 1HWC
            wq, w_scale = _per_channel(weight, 3 if depthwise else 0)
            bias_scale = (q["scale"] * w_scale).astype("float32")
            bias = np.round(layer.bias / bias_scale).astype("int32")
            kh, kw = weight.shape[1:3]
            channels = weight.shape[3] if depthwise else weight.shape[0]
            sh, sw = layer.strides
            pt, pl, pb, pr = layer.padding
            shape = (1, (shape[1] + pt + pb - kh) // sh + 1, (shape[2] + pl + pr - kw) // sw + 1,
                     channels)
            w_i = b.add_const(f"w{i}", wq, "int8", scale=w_scale, zero_point=[0] * channels,
                              quantized_dimension=3 if depthwise else 0)
            b_i = b.add_const(f"b{i}", bias, "int32", scale=bias_scale,
                              zero_point=[0] * channels)
            y = b.add_tensor(f"t{i}", shape, "int8", **out_q)
            fields = dict(Padding=_same_or_valid(layer), StrideH=sh, StrideW=sw,
                          FusedActivationFunction=1 if layer.relu else 0, DilationHFactor=1,
                          DilationWFactor=1)
            if depthwise:
                b.add_operator("DEPTHWISE_CONV_2D", [x, w_i, b_i], [y],
                               "DepthwiseConv2DOptions", DepthMultiplier=1, **fields)
            else:
                b.add_operator("CONV_2D", [x, w_i, b_i], [y], "Conv2DOptions", **fields)
        elif kind in ("max_pool2d", "avg_pool2d"):
            (ph, pw), (sh, sw) = layer.pool, layer.strides
            shape = (1, (shape[1] - ph) // sh + 1, (shape[2] - pw) // sw + 1, shape[3])
            y = b.add_tensor(f"t{i}", shape, "int8", **out_q)
            op = "MAX_POOL_2D" if kind == "max_pool2d" else "AVERAGE_POOL_2D"
            b.add_operator(op, [x], [y], "Pool2DOptions", Padding=1, StrideH=sh, StrideW=sw,
                           FilterHeight=ph, FilterWidth=pw)
        elif kind == "flatten":
            shape = (1, int(np.prod(shape[1:])))
            y = b.add_tensor(f"t{i}", shape, "int8", **out_q)
            b.add_operator("RESHAPE", [x, b.add_const(f"s{i}", np.array(shape, "int32"))], [y])
        elif kind == "dense":
            wq, w_scale = _per_channel(layer.weight, 0)
            w_scale = np.full_like(w_scale, w_scale.max())   # per-tensor, as TFLM's FC wants
            wq = np.clip(np.round(layer.weight / w_scale[0]), -127, 127).astype("int8")
            bias = np.round(layer.bias / (q["scale"] * w_scale[0])).astype("int32")
            shape = (1, layer.weight.shape[0])
            w_i = b.add_const(f"w{i}", wq, "int8", scale=float(w_scale[0]), zero_point=0)
            b_i = b.add_const(f"b{i}", bias, "int32", scale=float(q["scale"] * w_scale[0]),
                              zero_point=0)
            y = b.add_tensor(f"t{i}", shape, "int8", **out_q)
            b.add_operator("FULLY_CONNECTED", [x, w_i, b_i], [y], "FullyConnectedOptions",
                           FusedActivationFunction=1 if layer.relu else 0)
        elif kind == "softmax":
            y = b.add_tensor(f"t{i}", shape, "int8", **out_q)
            b.add_operator("SOFTMAX", [x], [y], "SoftmaxOptions", Beta=1.0)
        else:
            raise TVMError(f"unknown layer kind {kind!r}")
        x, q = y, out_q
    b.add_output(x)
    return b.finish()
