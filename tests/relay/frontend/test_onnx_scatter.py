"""ONNX TensorScatter and MaxUnpool on the compiled path against ONNX's reference evaluator;
bad modes, shapes and output shapes are refused with clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_frontend_helpers import run_vm

from kiln.relay.frontend import from_onnx
from kiln.runtime.error import OpAttributeInvalid, TVMError

RNG = np.random.default_rng(31)
FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def _info(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _scatter_model(cache, update, **attrs):
    node = helper.make_node("TensorScatter", ["cache", "update", "at"], ["out"], **attrs)
    graph = helper.make_graph([node], "g", [
        _info("cache", FLOAT, list(cache)), _info("update", FLOAT, list(update)),
        _info("at", INT64, [cache[0]])], [_info("out", FLOAT, list(cache))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])


@pytest.mark.parametrize("cache, update, attrs, at", [
    ((2, 3, 6, 4), (2, 3, 2, 4), {}, [0, 4]),
    ((3, 5, 2), (3, 3, 2), {"axis": 1, "mode": "circular"}, [4, 1, 3]),
])
def test_tensor_scatter(cache, update, attrs, at):
    model = _scatter_model(cache, update, **attrs)
    feeds = {"cache": RNG.standard_normal(cache).astype("float32"),
             "update": RNG.standard_normal(update).astype("float32"),
             "at": np.array(at, "int64")}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_array_equal(run_vm(model, list(feeds.values())).numpy(), want)


def _unpool_inputs(shape, kernel, strides):
    """A MaxPool's values and flat indices, from ONNX's reference evaluator."""
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=kernel, strides=strides)
    graph = helper.make_graph([node], "g", [_info("x", FLOAT, list(shape))],
                              [_info("y", FLOAT, None), _info("i", INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    return ReferenceEvaluator(model).run(None, {"x": RNG.standard_normal(shape)
                                                .astype("float32")})


@pytest.mark.parametrize("output_shape", [None, [2, 3, 9, 8]])
def test_max_unpool(output_shape):
    y, i = _unpool_inputs((2, 3, 8, 6), [2, 2], [2, 2])
    names = ["y", "i"] + (["shape"] if output_shape else [])
    node = helper.make_node("MaxUnpool", names, ["out"], kernel_shape=[2, 2], strides=[2, 2])
    inputs = [_info("y", FLOAT, list(y.shape)), _info("i", INT64, list(i.shape))]
    feeds = {"y": y, "i": i}
    if output_shape:
        inputs.append(_info("shape", INT64, [4]))
        feeds["shape"] = np.array(output_shape, "int64")
    graph = helper.make_graph([node], "g", inputs, [_info("out", FLOAT, ["a", "b", "c", "d"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_array_equal(run_vm(model, list(feeds.values())).numpy(), want)


def test_bad_inputs_are_refused():
    with pytest.raises(OpAttributeInvalid, match="mode must be 'linear' or 'circular'"):
        from_onnx(_scatter_model((2, 4, 3), (2, 2, 3), mode="ring"))
    with pytest.raises(TVMError, match=r"update \[2, 5, 3\] does not fit cache"):
        from_onnx(_scatter_model((2, 4, 3), (2, 5, 3)))
    node = helper.make_node("MaxUnpool", ["y", "i", "shape"], ["out"], kernel_shape=[2, 2],
                            strides=[2, 2])
    graph = helper.make_graph([node], "g", [_info("y", FLOAT, [1, 1, 2, 2]),
                                            _info("i", INT64, [1, 1, 2, 2])],
                              [_info("out", FLOAT, [1, 1, 3, 3])],
                              [helper.make_tensor("shape", INT64, [4], [1, 1, 3, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    with pytest.raises(OpAttributeInvalid, match="smaller than the unpooled shape"):
        from_onnx(model)
