"""ONNX NonMaxSuppression on the compiled path (VM) against ONNX's reference evaluator, with
random overlapping boxes, ties, both box formats and thresholds; malformed inputs are refused."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_frontend_helpers import run_vm

from kiln.relay.frontend import from_onnx
from kiln.runtime.error import OpAttributeInvalid, TVMError

RNG = np.random.default_rng(11)


def _model(batch, classes, count, center=0, score_threshold=True, box_dim=4):
    inputs = ["boxes", "scores", "max_out", "iou"] + (["score_thr"] if score_threshold else [])
    node = helper.make_node("NonMaxSuppression", inputs, ["selected"],
                            center_point_box=center)
    inits = [helper.make_tensor("max_out", TensorProto.INT64, [1], [3]),
             helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.3])]
    if score_threshold:
        inits.append(helper.make_tensor("score_thr", TensorProto.FLOAT, [1], [0.2]))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [batch, count, box_dim]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batch, classes, count])],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, ["n", 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def _boxes(batch, count, center):
    start = RNG.uniform(0, 4, (batch, count, 2))
    size = RNG.uniform(0.5, 3, (batch, count, 2))
    if center:
        return np.concatenate([start, size], -1).astype("float32")
    corners = np.concatenate([start, start + size], -1)
    flip = RNG.random((batch, count)) < 0.5  # ONNX takes any two opposite corners
    corners[flip] = corners[flip][:, [2, 3, 0, 1]]
    return corners.astype("float32")


@pytest.mark.parametrize("center, score_threshold", [(0, True), (1, False), (0, False)])
def test_matches_the_reference(center, score_threshold):
    batch, classes, count = 2, 3, 12
    model = _model(batch, classes, count, center, score_threshold)
    boxes = _boxes(batch, count, center)
    # a coarse score grid makes ties: equal scores go lower box index first
    scores = (RNG.integers(0, 8, (batch, classes, count)) / 8).astype("float32")
    want = ReferenceEvaluator(model).run(None, {"boxes": boxes, "scores": scores})[0]
    got = run_vm(model, [boxes, scores]).numpy()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_bad_box_format_and_shapes_are_refused():
    bad_format = _model(1, 1, 4, center=2)
    with pytest.raises(OpAttributeInvalid, match="center_point_box must be 0 or 1"):
        from_onnx(bad_format)
    with pytest.raises(TVMError, match=r"boxes \[1, 4, 3\] must be \[batch, boxes, 4\]"):
        from_onnx(_model(1, 1, 4, box_dim=3))
