"""ONNX Resize whose output size is not in * scale exactly: the coordinates map through the
given scale (as ONNX's reference evaluator does), for constant and run-time scales, every
scale-mapped coordinate mode, linear, nearest and cubic. A cubic kernel with a run-time crop
region took minutes to compile before BindSharedSubexprs stopped rebinding bound scopes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_frontend_helpers import run_vm

from kiln.runtime.error import TVMError

RNG = np.random.default_rng(29)
X = RNG.standard_normal((1, 2, 7, 9)).astype("float32")


def _model(scales, runtime: bool, **attrs):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X.shape))]
    inits = []
    if runtime:
        inputs.append(helper.make_tensor_value_info("scales", TensorProto.FLOAT, [4]))
    else:
        inits.append(helper.make_tensor("scales", TensorProto.FLOAT, [4], scales))
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", inputs, [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _check(scales, runtime, **attrs):
    model = _model(scales, runtime, **attrs)
    feeds = {"x": X} | ({"scales": np.array(scales, "float32")} if runtime else {})
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = run_vm(model, list(feeds.values())).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode, coordinates, scales", [
    ("linear", "half_pixel", [1, 1, 0.6, 0.7]),
    ("linear", "asymmetric", [1, 1, 1.7, 0.45]),
    ("linear", "align_corners", [1, 1, 0.6, 1.3]),
    ("linear", "half_pixel_symmetric", [1, 1, 0.7, 1.55]),
    ("nearest", "pytorch_half_pixel", [1, 1, 0.6, 0.7]),
])
def test_constant_inexact_scales(mode, coordinates, scales):
    _check(scales, False, mode=mode, coordinate_transformation_mode=coordinates)


@pytest.mark.parametrize("mode, scales, attrs", [
    ("linear", [1, 1, 0.6, 1.35], {}),
    ("cubic", [1, 1, 0.55, 1.25], {"cubic_coeff_a": -0.5}),
])
def test_run_time_inexact_scales(mode, scales, attrs):
    _check(scales, True, mode=mode, **attrs)


@pytest.mark.parametrize("scales", [[1, 1, 1.3, 1.0], [1, 1, 0.55, 1.0]])
def test_inexact_run_time_scales_with_exclude_outside_are_refused(scales):
    # exclude_outside must see the true border (no padding), where the crop region of an
    # upscale would extrapolate: refused at run time, never a wrong answer
    model = _model(None, True, mode="cubic", exclude_outside=1)
    with pytest.raises(TVMError, match="negative extent"):
        run_vm(model, [X, np.array(scales, "float32")])
