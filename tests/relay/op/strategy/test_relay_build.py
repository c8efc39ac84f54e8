"""The strategies drive relay.build end to end: a small CNN matches PyTorch."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import kiln
from kiln import relay
from kiln.contrib import graph_executor


def test_small_cnn_through_relay_build_matches_torch():
    x = relay.var("x", shape=(1, 3, 16, 16))
    w = relay.var("w", shape=(8, 3, 3, 3))
    b = relay.var("b", shape=(8,))
    wd = relay.var("wd", shape=(10, 8 * 8 * 8))
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w, padding=(1, 1)), b))
    y = relay.nn.batch_flatten(relay.nn.max_pool2d(y, pool_size=(2, 2), strides=(2, 2)))
    y = relay.nn.softmax(relay.nn.dense(y, wd))
    mod = kiln.IRModule.from_expr(relay.Function([x, w, b, wd], y))
    rng = np.random.default_rng(0)
    values = {"x": rng.standard_normal((1, 3, 16, 16)).astype("float32"),
              "w": rng.standard_normal((8, 3, 3, 3)).astype("float32"),
              "b": rng.standard_normal(8).astype("float32"),
              "wd": (rng.standard_normal((10, 512)) * 0.1).astype("float32")}
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    module = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    for name, value in values.items():
        module.set_input(name, value)
    module.run()
    t = {k: torch.from_numpy(v) for k, v in values.items()}
    ref = F.softmax(F.linear(F.max_pool2d(F.relu(F.conv2d(t["x"], t["w"], t["b"], padding=1)),
                                          2).reshape(1, -1), t["wd"]), -1)
    np.testing.assert_allclose(module.get_output(0).numpy(), ref.numpy(), rtol=1e-5,
                               atol=1e-6)


def test_dense_alter_layout_packs_the_weight_for_cpu_targets():
    from kiln.ir.type import TensorType
    from kiln.relay.op.op_attrs import DenseAttrs
    from kiln.relay.op.strategy.x86 import alter_dense_layout

    x, w = relay.var("x", shape=(3, 20)), relay.var("w", shape=(32, 20))
    weight = relay.const(np.random.default_rng(0).standard_normal((32, 20)).astype("float32"))
    types = [TensorType((3, 20)), TensorType((32, 20))]
    with kiln.target.Target("c -keys=arm_cpu"):
        assert alter_dense_layout(DenseAttrs(), [x, weight], types, TensorType((3, 32))) is None
    with kiln.target.Target("llvm"):
        # a run-time weight would be packed at every call anyway: no alteration
        assert alter_dense_layout(DenseAttrs(), [x, w], types, TensorType((3, 32))) is None
        packed = alter_dense_layout(DenseAttrs(), [x, weight], types, TensorType((3, 32)))
    assert packed.op.name == "nn.contrib_dense_pack"
    assert packed.args[1].attrs.dst_layout == "NC16n" and packed.args[1].args[0] is weight
    # the same packed form over a run-time weight runs through relay.build
    altered = relay.nn.contrib_dense_pack(x, relay.layout_transform(w, "NC", "NC16n"), "NC16n")
    mod = kiln.IRModule.from_expr(relay.Function([x, w], altered))
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    module = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 20)).astype("float32")
    b = rng.standard_normal((32, 20)).astype("float32")
    module.set_input("x", a)
    module.set_input("w", b)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), a @ b.T, rtol=1e-4, atol=1e-4)
