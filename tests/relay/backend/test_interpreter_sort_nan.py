"""The interpreter orders NaN like the compiled sort kernels: NaN is the largest key (first in
descending argsort/topk, last in ascending), ties keep their positions."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import relay

X = np.array([[1.0, np.nan, 3.0, np.inf, np.nan, 3.0, -np.inf]], "float32")
# hand-ordered: NaN largest, stable among equal keys
DESCENDING = [1, 4, 3, 2, 5, 0, 6]
ASCENDING = [6, 0, 2, 5, 3, 1, 4]


def _run(expr_of, kind, target="llvm"):
    x = relay.var("x", shape=X.shape, dtype="float32")
    func = relay.Function([x], expr_of(x))
    mod = tvm.IRModule.from_expr(func)
    out = relay.create_executor(kind, mod=mod, target=target).evaluate()(X)
    return out.numpy() if hasattr(out, "numpy") else [o.numpy() for o in out]


@pytest.mark.parametrize("kind", ["debug", "graph"])
@pytest.mark.parametrize("ascend, expected", [(False, DESCENDING), (True, ASCENDING)])
def test_argsort_nan_order(kind, ascend, expected):
    got = _run(lambda x: relay.argsort(x, axis=1, is_ascend=ascend, dtype="int32"), kind)
    assert got.tolist() == [expected]


@pytest.mark.parametrize("kind", ["debug", "graph"])
def test_topk_descending_takes_nan_first(kind):
    values, indices = _run(lambda x: relay.topk(x, k=3, axis=1, ret_type="both",
                                                is_ascend=False, dtype="int32").astuple(), kind)
    assert indices.tolist() == [DESCENDING[:3]]
    np.testing.assert_array_equal(values, X[:, DESCENDING[:3]])
