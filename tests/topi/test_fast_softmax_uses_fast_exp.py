"""topi.nn.fast_softmax computes exp with kiln.topi.math's fast_exp and stays within its stated
accuracy of NumPy's softmax."""

from __future__ import annotations

import numpy as np

import kiln as tvm
from kiln import te, topi


def _calls(tensor):
    found = []
    tvm.tir.post_order_visit(tvm.lower(te.create_schedule(tensor.op),
                                       [tensor.op.input_tensors[0], tensor])["main"].body,
                             lambda n: found.append(getattr(n, "op", None)))
    return found


def test_fast_softmax_has_no_libm_exp_and_matches_numpy():
    x = te.placeholder((3, 17), name="x")
    fast = topi.nn.fast_softmax(x, axis=-1)
    exact = topi.nn.softmax(x, axis=-1)
    assert "tir.exp" in [str(op) for op in _calls(exact)]
    assert "tir.exp" not in [str(op) for op in _calls(fast)]  # polynomial exp
    func = tvm.build(te.create_schedule(fast.op), [x, fast], "llvm")
    data = np.random.default_rng(0).normal(0, 8, (3, 17)).astype("float32")
    out = tvm.nd.empty((3, 17))
    func(tvm.nd.array(data), out)
    shifted = np.exp(data.astype(np.float64) - data.max(axis=1, keepdims=True))
    want = shifted / shifted.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-6, atol=1e-30)

