"""The ai.onnx.ml tensor-program ops (Binarizer, ArrayFeatureExtractor, numeric LabelEncoder,
TreeEnsemble) on the compiled path against ONNX's reference evaluator; bad attributes and
string keys are refused with clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_frontend_helpers import run_vm

from kiln.relay.frontend import from_onnx
from kiln.runtime.error import OpAttributeInvalid, OpNotImplemented

RNG = np.random.default_rng(23)
ML = "ai.onnx.ml"


def _model(node, inputs, outputs, ml_opset=3):
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid(ML, ml_opset)])


def _info(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _check(model, feeds):
    want = ReferenceEvaluator(model).run(None, feeds)
    got = run_vm(model, list(feeds.values()))
    got = [got] if hasattr(got, "numpy") else list(got)
    for g, w in zip(got, want):
        g = g.numpy()
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_binarizer():
    node = helper.make_node("Binarizer", ["x"], ["y"], domain=ML, threshold=0.25)
    model = _model(node, [_info("x", TensorProto.FLOAT, [3, 4])],
                   [_info("y", TensorProto.FLOAT, [3, 4])])
    _check(model, {"x": RNG.standard_normal((3, 4)).astype("float32")})


@pytest.mark.parametrize("shape", [(3, 5), (5,)])
def test_array_feature_extractor(shape):
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    out = [3, 3] if len(shape) == 2 else [1, 3]
    model = _model(node, [_info("x", TensorProto.FLOAT, list(shape)),
                          _info("i", TensorProto.INT64, [3])],
                   [_info("y", TensorProto.FLOAT, out)])
    _check(model, {"x": RNG.standard_normal(shape).astype("float32"),
                   "i": np.array([4, 0, 2], "int64")})


@pytest.mark.parametrize("kind", ["int_to_float", "float_to_int", "tensor"])
def test_label_encoder(kind):
    if kind == "int_to_float":
        attrs = {"keys_int64s": [3, 7, -1], "values_floats": [0.5, 1.5, 2.5],
                 "default_float": 9.0}
        x, elem_in, elem_out = np.array([[3, 7], [5, -1]], "int64"), TensorProto.INT64, \
            TensorProto.FLOAT
    elif kind == "float_to_int":
        attrs = {"keys_floats": [0.5, 2.0], "values_int64s": [10, 20], "default_int64": -7}
        x, elem_in, elem_out = np.array([0.5, 1.0, 2.0, 2.0], "float32"), \
            TensorProto.FLOAT, TensorProto.INT64
    else:
        attrs = {"keys_tensor": numpy_helper.from_array(np.array([1, 2], "int32")),
                 "values_tensor": numpy_helper.from_array(np.array([-3, 4], "int16")),
                 "default_tensor": numpy_helper.from_array(np.array([42], "int16"))}
        x, elem_in, elem_out = np.array([2, 1, 0], "int32"), TensorProto.INT32, \
            TensorProto.INT16
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, **attrs)
    model = _model(node, [_info("x", elem_in, list(x.shape))],
                   [_info("y", elem_out, list(x.shape))], ml_opset=4)
    _check(model, {"x": x})


def _forest(aggregate, member=False, missing=False):
    """Two trees over 3 features: tree 0 splits twice (node 1 a set-membership test when
    ``member``), tree 1 once."""
    modes = [0, 6 if member else 3, 2]
    attrs = {
        "nodes_featureids": [0, 1, 2], "nodes_modes": numpy_helper.from_array(
            np.array(modes, "uint8")),
        "nodes_splits": numpy_helper.from_array(np.array([0.1, -0.3, 0.7], "float32")),
        "nodes_truenodeids": [1, 0, 2], "nodes_trueleafs": [0, 1, 1],
        "nodes_falsenodeids": [1, 1, 3], "nodes_falseleafs": [1, 1, 1],
        "leaf_targetids": [0, 1, 1, 0], "leaf_weights": numpy_helper.from_array(
            np.array([1.5, -2.0, 3.25, 0.5], "float32")),
        "tree_roots": [0, 2], "n_targets": 2, "aggregate_function": aggregate}
    if member:  # (no 0.0: the reference evaluator's parser stops a set at a falsy member)
        attrs["membership_values"] = numpy_helper.from_array(
            np.array([0.5, 1.0, np.nan], "float32"))
    if missing:
        attrs["nodes_missing_value_tracks_true"] = [1, 0, 1]
    return attrs


@pytest.mark.parametrize("aggregate, member, missing", [(1, False, False), (0, True, False),
                                                       (2, False, True), (3, True, True)])
def test_tree_ensemble(aggregate, member, missing):
    node = helper.make_node("TreeEnsemble", ["x"], ["y"], domain=ML,
                            **_forest(aggregate, member, missing))
    model = _model(node, [_info("x", TensorProto.FLOAT, [8, 3])],
                   [_info("y", TensorProto.FLOAT, [8, 2])], ml_opset=5)
    x = RNG.integers(-1, 3, (8, 3)).astype("float32") / 2
    x[::3, 0] = np.nan
    _check(model, {"x": x})


def test_bad_attributes_are_refused():
    strings = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, keys_strings=["a"],
                               values_int64s=[1])
    model = _model(strings, [_info("x", TensorProto.INT64, [2])],
                   [_info("y", TensorProto.INT64, [2])], ml_opset=4)
    with pytest.raises(OpNotImplemented, match="LabelEncoder: string keys"):
        from_onnx(model)
    attrs = _forest(1) | {"nodes_modes": numpy_helper.from_array(np.array([0, 9, 2], "uint8"))}
    bad = helper.make_node("TreeEnsemble", ["x"], ["y"], domain=ML, **attrs)
    model = _model(bad, [_info("x", TensorProto.FLOAT, [2, 3])],
                   [_info("y", TensorProto.FLOAT, [2, 2])], ml_opset=5)
    with pytest.raises(OpAttributeInvalid, match="node mode 9 is not one of 0-6"):
        from_onnx(model)
