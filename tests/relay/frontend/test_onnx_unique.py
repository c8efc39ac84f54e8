"""ONNX Unique on the compiled path (VM) against NumPy's ``np.unique`` (values, first
indices, inverse indices, counts; sorted or in order of first occurrence; with an axis)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_frontend_helpers import run_vm

from kiln.relay.frontend import from_onnx
from kiln.runtime.error import OpAttributeInvalid

RNG = np.random.default_rng(17)
ELEM = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64}


def _model(shape, dtype, **attrs):
    node = helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], **attrs)
    outs = [helper.make_tensor_value_info("y", ELEM[dtype], ["u"] * len(shape))] + [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["k"])
        for n in ("indices", "inverse", "counts")]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", ELEM[dtype],
                                                                          list(shape))], outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def _numpy_unique(x, axis, is_sorted):
    y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                          return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not is_sorted:  # ONNX: unique values in order of first occurrence
        by_first = np.argsort(first, kind="stable")
        y = np.take(y, by_first, axis=0 if axis is None else axis)
        first, counts = first[by_first], counts[by_first]
        inverse = np.argsort(by_first)[inverse]
    return [y, first, inverse, counts]


@pytest.mark.parametrize("shape, dtype, axis, is_sorted", [
    ((12,), "float32", None, 1), ((3, 5), "int64", None, 0), ((6, 3), "float32", 0, 1),
    ((2, 5, 2), "int64", -2, 0)])
def test_matches_numpy(shape, dtype, axis, is_sorted):
    x = RNG.integers(0, 3, shape).astype(dtype)  # few values: many duplicates
    attrs = {"sorted": is_sorted} | ({} if axis is None else {"axis": axis})
    got = [v.numpy() for v in run_vm(_model(shape, dtype, **attrs), [x])]
    for g, w in zip(got, _numpy_unique(x, axis, is_sorted)):
        assert g.dtype == w.dtype or g.dtype == np.int64
        np.testing.assert_array_equal(g, w)


def test_axis_out_of_range_is_refused():
    with pytest.raises(OpAttributeInvalid, match="axis 2 is out of range for rank 2"):
        from_onnx(_model((3, 3), "float32", axis=2))
