"""x86 dense: the packed weight's block width is a vector (a power of two) whenever the
output columns allow one, so a classifier of 1000 units runs vectorized; answers vs NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor

RNG = np.random.default_rng(18)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=core-avx2"])
@pytest.mark.parametrize("rows,k,units", [(1, 96, 1000), (3, 40, 12), (1, 16, 10)])
def test_dense_with_units_not_a_multiple_of_16_matches_numpy(rows, k, units, target):
    w, b = RNG.standard_normal((units, k)).astype("float32"), RNG.standard_normal(units)
    x = relay.var("x", shape=(rows, k))
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, relay.const(w)),
                                        relay.const(b.astype("float32"))))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(relay.Function([x], y)), target=target)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    xn = RNG.standard_normal((rows, k)).astype("float32")
    m.run(x=xn)
    want = np.maximum(xn @ w.T + b, 0)
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_1000_unit_classifier_packs_its_weight_in_vector_blocks():
    w = RNG.standard_normal((1000, 64)).astype("float32")
    x = relay.var("x", shape=(1, 64))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(relay.Function([x], relay.nn.dense(
            x, relay.const(w)))), target="llvm")
    (packed,) = lib.get_params().values()
    assert packed.shape == (125, 64, 8)  # blocks of 8 (a vector), not of 10
