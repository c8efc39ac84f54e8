"""ONNX RoiAlign on the compiled path against ONNX's reference evaluator (average and max
pooling, both coordinate modes, ROIs reaching past the image); unsupported and bad attributes
are refused with clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_frontend_helpers import run_vm

from kiln.relay.frontend import from_onnx
from kiln.runtime.error import OpAttributeInvalid, OpNotImplemented

RNG = np.random.default_rng(37)


def _model(**attrs):
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], output_height=3,
                            output_width=4, **attrs)
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 11]),
        helper.make_tensor_value_info("rois", TensorProto.FLOAT, [5, 4]),
        helper.make_tensor_value_info("batch", TensorProto.INT64, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 3, 3, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])


@pytest.mark.parametrize("mode, coordinates", [("avg", "half_pixel"),
                                               ("max", "output_half_pixel")])
def test_matches_the_reference(mode, coordinates):
    model = _model(mode=mode, coordinate_transformation_mode=coordinates, sampling_ratio=2,
                   spatial_scale=0.5)
    start = RNG.uniform(-4, 18, (5, 2))
    rois = np.concatenate([start, start + RNG.uniform(0.5, 12, (5, 2))], 1).astype("float32")
    feeds = {"x": RNG.standard_normal((2, 3, 9, 11)).astype("float32"), "rois": rois,
             "batch": np.array([0, 1, 1, 0, 1], "int64")}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = run_vm(model, list(feeds.values())).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_unsupported_and_bad_attributes_are_refused():
    with pytest.raises(OpNotImplemented, match="sampling_ratio 0"):
        from_onnx(_model(sampling_ratio=0))
    with pytest.raises(OpAttributeInvalid, match="mode must be 'avg' or 'max'"):
        from_onnx(_model(sampling_ratio=1, mode="sum"))
