"""ONNX ops defined by function bodies convert through their body: the result matches ONNX's
reference evaluator on the compiled path, and an op with neither converter nor body is still
reported as unsupported."""

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


def _vm_run(model, *args):
    mod, params = from_onnx(model)
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    return VirtualMachine(exe, kiln.cpu(0)).invoke("main", *args).numpy()


def test_center_crop_pad_converts_through_its_context_dependent_body():
    """The body reads the node's ``axes`` attribute through an attribute reference."""
    node = helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[0, 1])
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [3, 7])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 4, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 7, 2])], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    x = np.arange(40, dtype="float32").reshape(5, 4, 2)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(_vm_run(model, x), want)


def test_op_without_converter_or_body_is_reported():
    node = helper.make_node("StringNormalizer", ["x"], ["y"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    with pytest.raises(OpNotImplemented, match="StringNormalizer"):
        from_onnx(model)
