"""ONNX GridSample on the compiled path against ONNX's reference evaluator, with grid points
inside, on and far outside the image for every mode and padding mode."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import kiln
from kiln import relay
from kiln.relay.frontend import from_onnx
from kiln.runtime.error import OpNotImplemented
from kiln.runtime.vm import VirtualMachine


def _model(x_shape, grid_shape, out_shape, **attrs):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
                      helper.make_tensor_value_info("grid", TensorProto.FLOAT, grid_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


# every mode and every padding mode once, both align_corners settings
@pytest.mark.parametrize("mode, padding_mode, align_corners", [
    ("nearest", "reflection", 1), ("linear", "border", 0), ("cubic", "zeros", 1)])
def test_grid_sample_matches_the_reference(mode, padding_mode, align_corners):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 2, 4, 5)).astype("float32")
    grid = (rng.uniform(-3.2, 3.2, (2, 3, 6, 2))).astype("float32")
    grid[0, 0, :3] = [[-1, -1], [1, 1], [0, 0]]
    model = _model([2, 2, 4, 5], [2, 3, 6, 2], [2, 2, 3, 6], mode=mode,
                   padding_mode=padding_mode, align_corners=align_corners)
    want = ReferenceEvaluator(model).run(None, {"x": x, "grid": grid})[0]
    mod, params = from_onnx(model)
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    got = VirtualMachine(exe, kiln.cpu(0)).invoke("main", x, grid).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _det_model(shape):
    node = helper.make_node("Det", ["x"], ["y"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape[:-2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_det_matches_numpy(order):
    x = np.random.default_rng(order).standard_normal((2, 3, order, order)).astype("float32")
    mod, params = from_onnx(_det_model([2, 3, order, order]))
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    got = VirtualMachine(exe, kiln.cpu(0)).invoke("main", x).numpy()
    np.testing.assert_allclose(got, np.linalg.det(x.astype("float64")), rtol=1e-4, atol=1e-5)


def test_det_of_a_large_matrix_is_refused():
    with pytest.raises(OpNotImplemented, match="5x5"):
        from_onnx(_det_model([5, 5]))
