"""Cortex-M (``arm_cpu`` + ``-mcpu=cortex-m*``) schedules: the dense micro-kernel through
``pragma("import_c")`` + ``tensorize`` inside ``relay.build``, and serial, vector-free code.
Numbers come from the C built for the host against NumPy; the QEMU runs are in
tests/micro/test_board_models.py."""

from __future__ import annotations

import re

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


@pytest.mark.parametrize("strides,channels", [((1, 1), 12), ((2, 2), 7)])
def test_pointwise_conv_micro_kernel_matches_numpy(strides, channels):
    x = relay.var("x", shape=(1, 5, 3, 16), dtype="float32")
    k = rng.standard_normal((1, 1, 16, channels)).astype("float32")
    b = rng.standard_normal(channels).astype("float32")
    y = relay.nn.conv2d(x, relay.const(k), strides=strides, kernel_size=(1, 1),
                        channels=channels, data_layout="NHWC", kernel_layout="HWIO")
    y = relay.nn.relu(relay.nn.bias_add(y, relay.const(b), axis=3))
    lib = _build(relay.Function([x], y), CORTEX_M4)
    rows = max(d for d in range(1, 9) if channels % d == 0)
    assert f"kiln_gemv_f32_{rows}(" in lib.get_lib().get_source()
    xv = rng.standard_normal((1, 5, 3, 16)).astype("float32")
    picked = xv[:, ::strides[0], ::strides[1]]
    want = np.maximum(np.einsum("nhwc,co->nhwo", picked, k[0, 0]) + b, 0)
    np.testing.assert_allclose(_run(lib, x=xv), want, rtol=1e-5, atol=1e-5)


def _conv_nhwc(x, k, strides, pads, groups=1):
    """NumPy NHWC convolution with an HWIO kernel (I = channels per group)."""
    top, left, bottom, right = pads
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    kh, kw, cin, cout = k.shape
    oh = (xp.shape[1] - kh) // strides[0] + 1
    ow = (xp.shape[2] - kw) // strides[1] + 1
    out = np.zeros((x.shape[0], oh, ow, cout), "float64")
    per_group = cout // groups
    for dy in range(kh):
        for dx in range(kw):
            win = xp[:, dy:dy + oh * strides[0]:strides[0], dx:dx + ow * strides[1]:strides[1]]
            for g in range(groups):
                o = slice(g * per_group, (g + 1) * per_group)
                out[..., o] += win[..., g * cin:(g + 1) * cin] @ k[dy, dx, :, o]
    return out


@pytest.mark.parametrize("depthwise", [False, True])
def test_direct_conv_keeps_no_whole_intermediate_and_matches_numpy(depthwise):
    channels = 6
    x = relay.var("x", shape=(1, 9, 7, channels if depthwise else 3), dtype="float32")
    if depthwise:
        k = rng.standard_normal((3, 3, channels, 1)).astype("float32")
        y = relay.nn.conv2d(x, relay.const(k), strides=(2, 1), padding=(1, 1, 1, 1),
                            groups=channels, channels=channels, kernel_size=(3, 3),
                            data_layout="NHWC", kernel_layout="HWOI")
        hwio = k.transpose(0, 1, 3, 2)
    else:
        hwio = k = rng.standard_normal((3, 3, 3, channels)).astype("float32")
        y = relay.nn.conv2d(x, relay.const(k), strides=(2, 1), padding=(1, 1, 1, 1),
                            channels=channels, kernel_size=(3, 3), data_layout="NHWC",
                            kernel_layout="HWIO")
    b = rng.standard_normal(channels).astype("float32")
    y = relay.nn.relu(relay.nn.bias_add(y, relay.const(b), axis=3))
    lib = _build(relay.Function([x], y), CORTEX_M4)
    # the convolution's scratch is one row of channels, not the 5x7x6 result
    sizes = [int(n) for n in re.findall(r"float conv\w*\[(\d+)\]", lib.get_lib().get_source())]
    assert sizes and max(sizes) <= channels
    xv = rng.standard_normal(tuple(int(d) for d in x.type_annotation.shape)).astype("float32")
    want = _conv_nhwc(xv, hwio, (2, 1), (1, 1, 1, 1), channels if depthwise else 1)
    np.testing.assert_allclose(_run(lib, x=xv), np.maximum(want + b, 0), rtol=1e-5, atol=1e-5)


def test_cortex_m_picks_the_micro_kernel_and_other_arm_cpus_do_not():
    from kiln import te
    from kiln.ir.type import TensorType
    from kiln.relay.op.op_attrs import Conv2DAttrs, DenseAttrs

    x, w = te.placeholder((1, 16), name="x"), te.placeholder((8, 16), name="w")
    for target, want in ((CORTEX_M4, "dense_micro_kernel.arm_cpu"),
                         ("c -keys=arm_cpu -mcpu=cortex-m7", "dense_micro_kernel.arm_cpu"),
                         ("c -keys=arm_cpu -mcpu=cortex-a53", "dense.generic")):
        impl, _ = select_implementation("nn.dense", DenseAttrs(), [x, w],
                                        TensorType((1, 8), "float32"),
                                        tvm.target.Target(target))
        assert impl.name == want, target
    data = te.placeholder((1, 6, 6, 8), name="data")
    for kernel_shape, want in (((1, 1, 8, 16), "conv2d_nhwc_1x1_micro_kernel.arm_cpu"),
                               ((3, 3, 8, 16), "conv2d_direct.arm_cpu")):
        attrs = Conv2DAttrs(data_layout="NHWC", kernel_layout="HWIO",
                            kernel_size=kernel_shape[:2], channels=16)
        kernel = te.placeholder(kernel_shape, name="kernel")
        out = 6 - kernel_shape[0] + 1
        impl, _ = select_implementation("nn.conv2d", attrs, [data, kernel],
                                        TensorType((1, out, out, 16), "float32"),
                                        tvm.target.Target(CORTEX_M4))
        assert impl.name == want, kernel_shape


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
