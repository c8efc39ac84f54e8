"""Cortex-M (``arm_cpu`` + ``-mcpu=cortex-m*``) schedules: the dense micro-kernel through
``pragma("import_c")`` + ``tensorize`` inside ``relay.build``, and serial, vector-free code.
Numbers come from the C built for the host against NumPy; the QEMU runs are in
tests/micro/test_board_models.py."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.op.strategy.registry import select_implementation

rng = np.random.default_rng(7)
CORTEX_M4 = "c -keys=arm_cpu -mcpu=cortex-m4"


def _build(func, target):
    mod = tvm.IRModule.from_expr(func)
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        return relay.build(mod, target=tvm.target.Target(target))


def _run(lib, **inputs):
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    return m.get_output(0).numpy()


@pytest.mark.parametrize("units,epilogue", [(24, True), (10, False), (7, True)])
def test_dense_micro_kernel_matches_numpy(units, epilogue):
    x = relay.var("x", shape=(3, 37), dtype="float32")
    w = rng.standard_normal((units, 37)).astype("float32")
    b = rng.standard_normal(units).astype("float32")
    y = relay.nn.dense(x, relay.const(w))
    if epilogue:
        y = relay.nn.relu(relay.nn.bias_add(y, relay.const(b)))
    lib = _build(relay.Function([x], y), CORTEX_M4)
    source = lib.get_lib().get_source()
    rows = max(d for d in range(1, 9) if units % d == 0)
    assert f"kiln_gemv_f32_{rows}(" in source and "imported by pragma import_c" in source
    xv = rng.standard_normal((3, 37)).astype("float32")
    want = xv @ w.T + (b if epilogue else 0)
    want = np.maximum(want, 0) if epilogue else want
    np.testing.assert_allclose(_run(lib, x=xv), want, rtol=1e-5, atol=1e-5)


def test_cortex_m_picks_the_micro_kernel_and_other_arm_cpus_do_not():
    from kiln import te
    from kiln.ir.type import TensorType
    from kiln.relay.op.op_attrs import DenseAttrs

    x, w = te.placeholder((1, 16), name="x"), te.placeholder((8, 16), name="w")
    for target, want in ((CORTEX_M4, "dense_micro_kernel.arm_cpu"),
                         ("c -keys=arm_cpu -mcpu=cortex-m7", "dense_micro_kernel.arm_cpu"),
                         ("c -keys=arm_cpu -mcpu=cortex-a53", "dense.generic")):
        impl, _ = select_implementation("nn.dense", DenseAttrs(), [x, w],
                                        TensorType((1, 8), "float32"),
                                        tvm.target.Target(target))
        assert impl.name == want, target


def test_cortex_m_code_is_serial_and_scalar():
    # conv + pool + dense: no OpenMP, no vector types, no parallel launch in the C.
    x = relay.var("x", shape=(1, 8, 8, 4), dtype="float32")
    k = relay.const(rng.standard_normal((3, 3, 4, 8)).astype("float32"))
    y = relay.nn.conv2d(x, k, padding=(1, 1), data_layout="NHWC", kernel_layout="HWIO")
    y = relay.nn.max_pool2d(relay.nn.relu(y), (2, 2), (2, 2), layout="NHWC")
    y = relay.nn.dense(relay.reshape(y, (1, 128)),
                       relay.const(rng.standard_normal((10, 128)).astype("float32")))
    source = _build(relay.Function([x], y), CORTEX_M4).get_lib().get_source()
    for banned in ("#pragma omp", "vector_size", "TVMBackendParallelLaunch"):
        assert banned not in source, banned
