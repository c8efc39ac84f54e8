"""Structured fuzzing of from_tflite with hypothesis: well-formed flatbuffers whose contents
break the rules (hostile shapes, strides, axes, paddings, quantization parameters, tensor
indices), so the converters' own checks see them. Each model converts or raises a TVMError."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.relay.testing.tflite import TFLiteModelBuilder
from kiln.runtime.error import TVMError

pytest.importorskip("tflite")

small = st.integers(-2, 6)
dims = st.lists(st.integers(0, 5), min_size=0, max_size=4)
# op -> (options table, its integer fields)
OPS = {
    "CONV_2D": ("Conv2DOptions", ["Padding", "StrideW", "StrideH", "DilationWFactor",
                                  "DilationHFactor", "FusedActivationFunction"]),
    "DEPTHWISE_CONV_2D": ("DepthwiseConv2DOptions", ["Padding", "StrideW", "StrideH",
                                                     "DepthMultiplier"]),
    "AVERAGE_POOL_2D": ("Pool2DOptions", ["Padding", "StrideW", "StrideH", "FilterWidth",
                                          "FilterHeight"]),
    "MAX_POOL_2D": ("Pool2DOptions", ["Padding", "StrideW", "StrideH", "FilterWidth",
                                      "FilterHeight"]),
    "FULLY_CONNECTED": ("FullyConnectedOptions", ["FusedActivationFunction"]),
    "ADD": ("AddOptions", ["FusedActivationFunction"]),
    "CONCATENATION": ("ConcatenationOptions", ["Axis"]),
    "RESHAPE": (None, []), "TRANSPOSE": (None, []), "PAD": (None, []), "MEAN": (None, []),
    "SQUEEZE": (None, []), "SOFTMAX": (None, []), "SLICE": (None, []),
    "STRIDED_SLICE": ("StridedSliceOptions", ["BeginMask", "EndMask", "ShrinkAxisMask",
                                              "EllipsisMask"]),
    "QUANTIZE": (None, []), "DEQUANTIZE": (None, []), "EXPAND_DIMS": (None, []),
    "SPLIT": ("SplitOptions", ["NumSplits"]), "SPLIT_V": ("SplitVOptions", ["NumSplits"]),
    "UNPACK": ("UnpackOptions", ["Num", "Axis"]), "GATHER": ("GatherOptions", ["Axis"]),
    "TILE": (None, []), "SELECT_V2": (None, []), "BATCH_MATMUL": (None, []),
}


@st.composite
def models(draw):
    b = TFLiteModelBuilder()
    dtype = draw(st.sampled_from(["float32", "int8", "uint8"]))
    quant = {} if dtype == "float32" else {
        "scale": draw(st.sampled_from([0.05, 1e-30, 3.0, [0.1, 0.2]])),
        "zero_point": draw(st.sampled_from([0, -3, 130, [0, 0]]))}
    x = b.add_input("x", draw(dims), dtype, **quant)
    inputs = [x]
    for i in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["int32", "int8", "float32"]))
        shape = draw(dims)
        data = draw(st.lists(st.integers(-3, 6), min_size=int(np.prod(shape)),
                             max_size=int(np.prod(shape))))
        inputs.append(b.add_const(f"c{i}", np.array(data).reshape(shape), kind))
    if draw(st.booleans()):
        inputs.append(draw(st.integers(-1, 6)))   # absent, or a dangling index
    op = draw(st.sampled_from(sorted(OPS)))
    options, fields = OPS[op]
    values = {f: draw(small) for f in fields}
    out_dtype = draw(st.sampled_from([dtype, "float32", "int8"]))
    y = b.add_tensor("y", draw(dims), out_dtype, **(quant if out_dtype != "float32" else {}))
    b.add_operator(op, inputs, [y], options if fields else None, **values)
    b.add_output(y)
    return b.finish()


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(models())
def test_hostile_models_convert_or_raise_tvmerror(model_bytes):
    try:
        relay.frontend.from_tflite(model_bytes)
    except TVMError:
        pass
