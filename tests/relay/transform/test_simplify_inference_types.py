"""A rewrite's borrowed types do not leave untyped nodes behind for the incremental InferType."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import relay


def test_dropout_between_dense_layers_builds_and_matches_numpy():
    # VGG's classifier: dense -> bias_add -> relu -> dropout -> dense -> bias_add; once
    # SimplifyInference drops the dropout, CanonicalizeOps used to find the inner dense untyped
    x = relay.var("x", shape=(2, 8))
    w1, b1 = relay.var("w1", shape=(6, 8)), relay.var("b1", shape=(6,))
    w2, b2 = relay.var("w2", shape=(4, 6)), relay.var("b2", shape=(4,))
    h = relay.nn.dropout(relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, w1), b1)))
    h = relay.nn.dropout(relay.nn.relu(relay.nn.bias_add(relay.nn.dense(h, w2), b2)))
    mod = kiln.IRModule.from_expr(relay.Function([x, w1, b1, w2, b2], h))
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((6, 8)).astype("float32"),
              "b1": rng.standard_normal(6).astype("float32"),
              "w2": rng.standard_normal((4, 6)).astype("float32"),
              "b2": rng.standard_normal(4).astype("float32")}
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    from kiln.contrib import graph_executor
    m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    data = rng.standard_normal((2, 8)).astype("float32")
    m.set_input("x", data)
    m.run()
    ref = np.maximum(data @ params["w1"].T + params["b1"], 0)
    ref = np.maximum(ref @ params["w2"].T + params["b2"], 0)
    np.testing.assert_allclose(m.get_output(0).numpy(), ref, rtol=1e-5, atol=1e-5)
