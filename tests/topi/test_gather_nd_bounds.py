"""gather_nd with indices known only at run time: negative indices count from the end (ONNX
GatherND, checked against onnxruntime) and out-of-range ones never read outside the data."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import kiln
from kiln import relay


def test_onnx_gather_nd_negative_runtime_indices_match_onnxruntime():
    node = helper.make_node("GatherND", ["x", "i"], ["y"])
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5, 3]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [3, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(0).standard_normal((4, 5, 3)).astype("float32")
    idx = np.array([[-1, -5], [2, -2], [-4, 4]], "int64")
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "i": idx})[0]
    mod, params = relay.frontend.from_onnx(model, {"x": x.shape, "i": idx.shape})
    run = relay.create_executor("graph", mod=mod, target="llvm", params=params).evaluate()
    np.testing.assert_array_equal(run(x, idx).numpy(), expected)


def test_gather_nd_out_of_range_runtime_indices_stay_inside_the_data():
    # an index of 10**8 used to read 10**8 rows past the buffer (a segfault)
    data = relay.var("x", shape=(4, 5))
    indices = relay.var("i", shape=(1, 3), dtype="int32")
    mod = kiln.IRModule.from_expr(relay.Function([data, indices],
                                                 relay.gather_nd(data, indices)))
    run = relay.create_executor("graph", mod=mod, target="llvm").evaluate()
    x = np.arange(20, dtype="float32").reshape(4, 5)
    got = run(x, np.array([[10**8, -10**8, 3]], "int32")).numpy()
    np.testing.assert_array_equal(got, x[[3, 0, 3]])  # clamped into [0, 3]


def test_gather_elements_out_of_range_runtime_indices_stay_inside_the_data():
    # relay.gather (ONNX GatherElements) read index 10**8 far past the buffer as well
    data = relay.var("x", shape=(4, 5))
    indices = relay.var("i", shape=(2, 5), dtype="int32")
    mod = kiln.IRModule.from_expr(relay.Function([data, indices],
                                                 relay.gather(data, 0, indices)))
    run = relay.create_executor("graph", mod=mod, target="llvm").evaluate()
    x = np.arange(20, dtype="float32").reshape(4, 5)
    idx = np.array([[10**8, -1, 0, -10**8, 2], [3, 1, -4, 7, 10**6]], "int32")
    expected = np.take_along_axis(x, np.clip(np.where(idx < 0, idx + 4, idx), 0, 3), 0)
    np.testing.assert_array_equal(run(x, idx).numpy(), expected)
