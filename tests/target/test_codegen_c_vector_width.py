"""The ``c`` target prints vectors as wide as the target's registers: AVX-512 or AVX2."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay, te
from kiln.contrib import graph_executor
from kiln.target import Target
from kiln.target.codegen_c import emit_c, native_vector_bits
from kiln.target.x86 import host_features


@pytest.mark.parametrize("target, bits", [
    ("c -mcpu=skylake-avx512", 512),
    ("c -mcpu=znver3", 256),  # AVX2 only
    ("c -mcpu=core-avx2", 256),
    ("c -mcpu=skylake-avx512 -mattr=-avx512f", 256),
    ("c -keys=arm_cpu -mcpu=cortex-m4", 256),
    ("c -mtriple=aarch64-linux-gnu", 256),  # another machine: never the host's AVX-512
])
def test_register_width_follows_the_target(target, bits):
    assert native_vector_bits(Target(target)) == bits


def test_host_c_uses_the_host_registers():
    expected = 512 if "avx512f" in host_features() else 256
    assert native_vector_bits(Target("c")) == expected
    assert native_vector_bits(None) == 256  # no target: AVX2-wide, as before targets mattered


def _accumulator_schedule():
    """A 4x16 matmul tile whose 16-lane accumulator lives in a local buffer."""
    a = te.placeholder((4, 8), name="A")
    b = te.placeholder((8, 16), name="B")
    k = te.reduce_axis((0, 8), name="k")
    c = te.compute((4, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    sch = te.create_schedule(c.op)
    cc = sch.cache_write(c, "local")
    sch[cc].compute_at(sch[c], sch[c].op.axis[0])
    sch[cc].reorder(sch[cc].op.reduce_axis[0], sch[cc].op.axis[1])
    sch[cc].vectorize(sch[cc].op.axis[1])
    sch[c].vectorize(sch[c].op.axis[1])
    return sch, [a, b, c]


@pytest.mark.parametrize("target, tile", [("c -mcpu=skylake-avx512", "float32x16 C_local[1]"),
                                          ("c -mcpu=core-avx2", "float32x8 C_local[2]")])
def test_a_16_lane_accumulator_is_one_register_on_avx512_two_on_avx2(target, tile):
    sch, args = _accumulator_schedule()
    lowered = kiln.lower(sch, args, name="acc")
    source, _ = emit_c(lowered, Target(target))
    assert tile in source


@pytest.mark.parametrize("target", ["c", "c -mcpu=core-avx2"])
def test_dense_and_conv_match_numpy_at_either_width(target):
    rng = np.random.default_rng(3)
    x = relay.var("x", shape=(1, 16, 10, 10))
    w = rng.standard_normal((32, 16, 3, 3)).astype("float32")
    d = rng.standard_normal((10, 32 * 8 * 8)).astype("float32")
    y = relay.nn.relu(relay.nn.conv2d(x, relay.const(w)))
    y = relay.nn.dense(relay.nn.batch_flatten(y), relay.const(d))
    mod = kiln.IRModule.from_expr(relay.Function([x], y))
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target)
    m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    xn = rng.standard_normal((1, 16, 10, 10)).astype("float32")
    m.set_input("x", xn)
    m.run()
    conv = np.zeros((1, 32, 8, 8))
    for i in range(3):
        for j in range(3):
            conv += np.einsum("nchw,oc->nohw", xn[:, :, i:i + 8, j:j + 8], w[:, :, i, j])
    expected = np.maximum(conv, 0).reshape(1, -1) @ d.T
    np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-3)
