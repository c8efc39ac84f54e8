"""Activations built from exp(x) - 1 (Elu, Selu, Celu) in 16-bit floats on the compiled path:
computed once and rounded once, so they equal the float64 formula rounded to the dtype
(rounding exp, the subtraction and the product each to 16 bits was off by an ulp)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_frontend_helpers import run_vm

DTYPES = {"bfloat16": (TensorProto.BFLOAT16, ml_dtypes.bfloat16),
          "float16": (TensorProto.FLOAT16, np.float16)}
SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875


def _reference(op, alpha, x):
    """The op in float64 (NumPy), from ONNX's definition."""
    if op == "Elu":
        return np.where(x > 0, x, alpha * np.expm1(x))
    if op == "Selu":
        return SELU_GAMMA * np.where(x > 0, x, SELU_ALPHA * np.expm1(x))
    return np.maximum(0, x) + np.minimum(0, alpha * np.expm1(x / alpha))


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("op, alpha", [("Elu", 1.0), ("Elu", 0.7), ("Selu", None),
                                       ("Celu", 2.0)])
def test_expm1_activation_rounds_once(op, alpha, dtype):
    elem, np_type = DTYPES[dtype]
    x = np.linspace(-4, 1, 161).astype(np_type)
    attrs = {} if alpha is None else {"alpha": alpha}
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, [161])],
                              [helper.make_tensor_value_info("y", elem, [161])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    # ONNX attributes are float32
    alpha32 = None if alpha is None else float(np.float32(alpha))
    want = _reference(op, alpha32, x.astype(np.float64)).astype(np_type)
    got = run_vm(model, [x]).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
