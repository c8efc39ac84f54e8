"""Cortex-M int8 micro-kernels (``SMLAD`` with DSP, portable C without) inside relay.build:
int8 dense, convolution (kernel re-laid out HWIO -> OHWI at compile time) and depthwise
convolution against NumPy integer math, with the C built for the host (the DSP kernels' C
versions of SXTB16, SMLAD, SMLABB and SMLATT); the QEMU runs are in
tests/micro/test_tflite_int8_board.py."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.topi.arm_cpu.gemv_s8 import has_dsp

rng = np.random.default_rng(3)
TARGETS = {"dsp": "c -keys=arm_cpu -mcpu=cortex-m4",
           "portable": "c -keys=arm_cpu -mcpu=cortex-m4 -mattr=+nodsp"}


def build_and_run(func, target, **inputs):
    mod = tvm.IRModule.from_expr(func)
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        lib = relay.build(mod, target=tvm.target.Target(target))
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    return lib.get_lib().get_source(), m.get_output(0).numpy()


def test_has_dsp():
    assert has_dsp(tvm.target.Target(TARGETS["dsp"]))
    assert not has_dsp(tvm.target.Target(TARGETS["portable"]))
    assert not has_dsp(tvm.target.Target("c -keys=arm_cpu -mcpu=cortex-m3"))


@pytest.mark.parametrize("kernels", list(TARGETS))
@pytest.mark.parametrize("units,depth", [(16, 64), (12, 37), (5, 3)])
def test_int8_dense_matches_numpy(kernels, units, depth):
    x = relay.var("x", shape=(2, depth), dtype="int8")
    w = rng.integers(-128, 128, (units, depth)).astype("int8")
    y = relay.nn.dense(x, relay.const(w), out_dtype="int32")
    xv = rng.integers(-128, 128, (2, depth)).astype("int8")
    source, got = build_and_run(relay.Function([x], y), TARGETS[kernels], x=xv)
    rows = max(d for d in range(1, 9) if units % d == 0)
    name = f"kiln_gemv_s8_{'dsp_' if kernels == 'dsp' else ''}{rows}x{depth}("
    assert name in source
    np.testing.assert_array_equal(got, xv.astype(np.int64) @ w.T.astype(np.int64))


@pytest.mark.parametrize("kernels", list(TARGETS))
@pytest.mark.parametrize("strides,channels", [((1, 1), 16), ((2, 2), 6)])
def test_int8_pointwise_conv_matches_numpy(kernels, strides, channels):
    x = relay.var("x", shape=(1, 5, 3, 20), dtype="int8")
    k = rng.integers(-128, 128, (1, 1, 20, channels)).astype("int8")
    y = relay.nn.conv2d(x, relay.const(k), strides=strides, kernel_size=(1, 1),
                        channels=channels, data_layout="NHWC", kernel_layout="HWIO",
                        out_dtype="int32")
    y = relay.clip(relay.right_shift(y, relay.const(4)), -128, 127)   # an integer epilogue
    xv = rng.integers(-128, 128, (1, 5, 3, 20)).astype("int8")
    source, got = build_and_run(relay.Function([x], y), TARGETS[kernels], x=xv)
    assert "kiln_gemv_s8_" in source
    sub = xv[:, ::strides[0], ::strides[1], :].astype(np.int64)
    want = np.clip(np.einsum("nhwc,co->nhwo", sub, k[0, 0].astype(np.int64)) >> 4, -128, 127)
    np.testing.assert_array_equal(got, want)


def _depthwise_numpy(xv, k, strides, padding, dilation):
    """Depthwise NHWC convolution (multiplier 1) in int64 NumPy; ``k`` is (KH, KW, C)."""
    top, left, bottom, right = padding
    padded = np.pad(xv.astype(np.int64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    kh, kw, _ = k.shape
    oh = (padded.shape[1] - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (padded.shape[2] - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    want = np.zeros((xv.shape[0], oh, ow, xv.shape[3]), np.int64)
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dilation[0], j * dilation[1]
            window = padded[:, y0:y0 + oh * strides[0]:strides[0],
                            x0:x0 + ow * strides[1]:strides[1]]
            want += window * k[i, j].astype(np.int64)
    return want


@pytest.mark.parametrize("kernels", list(TARGETS))
@pytest.mark.parametrize("channels,kernel,strides,padding,dilation,layout", [
    (8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "HWOI"),     # two groups of four channels
    (6, (3, 3), (2, 2), (0, 1, 1, 0), (1, 1), "HWIO"),     # a group of four + two scalar
    (16, (3, 2), (1, 1), (0, 0, 0, 0), (2, 1), "HWIO"),    # dilated rows
    (4, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), "HWIO")])   # 25 taps: the row loop stays
def test_int8_depthwise_conv_matches_numpy(kernels, channels, kernel, strides, padding,
                                            dilation, layout):
    """The depthwise micro-kernel (SMLABB/SMLATT on channel pairs, or portable C)."""
    x = relay.var("x", shape=(1, 7, 6, channels), dtype="int8")
    k = rng.integers(-128, 128, (*kernel, channels)).astype("int8")
    kshape = (*kernel, channels, 1) if layout == "HWOI" else (*kernel, 1, channels)
    y = relay.nn.conv2d(x, relay.const(k.reshape(kshape)), strides=strides, padding=padding,
                        dilation=dilation, groups=channels, channels=channels,
                        kernel_size=kernel, data_layout="NHWC", kernel_layout=layout,
                        out_dtype="int32")
    y = relay.clip(relay.right_shift(y, relay.const(6)), -128, 127)   # an integer epilogue
    xv = rng.integers(-128, 128, (1, 7, 6, channels)).astype("int8")
    source, got = build_and_run(relay.Function([x], y), TARGETS[kernels], x=xv)
    assert f"kiln_dw_s8_{'dsp_' if kernels == 'dsp' else ''}" in source
    assert ("kiln_smlabb" in source) == (kernels == "dsp")
    want = np.clip(_depthwise_numpy(xv, k, strides, padding, dilation) >> 6, -128, 127)
    np.testing.assert_array_equal(got, want)


def test_int8_depthwise_with_multiplier_uses_the_direct_schedule():
    """Two outputs per input channel: not the micro-kernel's shape, the direct schedule."""
    x = relay.var("x", shape=(1, 6, 6, 4), dtype="int8")
    k = rng.integers(-128, 128, (3, 3, 1, 8)).astype("int8")
    y = relay.nn.conv2d(x, relay.const(k), padding=(1, 1, 1, 1), groups=4, channels=8,
                        kernel_size=(3, 3), data_layout="NHWC", kernel_layout="HWIO",
                        out_dtype="int32")
    xv = rng.integers(-128, 128, (1, 6, 6, 4)).astype("int8")
    source, got = build_and_run(relay.Function([x], y), TARGETS["dsp"], x=xv)
    assert "kiln_dw_s8" not in source
    padded = np.pad(xv.astype(np.int64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((1, 6, 6, 8), np.int64)
    for i in range(3):
        for j in range(3):
            want += np.repeat(padded[:, i:i + 6, j:j + 6, :], 2, axis=3) * k[i, j, 0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kernels", list(TARGETS))
@pytest.mark.parametrize("kernel,strides,padding,channels_in", [
    ((3, 3), (1, 1), (1, 1, 1, 1), 8), ((10, 4), (2, 2), (4, 1, 5, 2), 1),
    ((3, 2), (2, 1), (0, 0, 0, 0), 5)])
def test_int8_conv_matches_numpy(kernels, kernel, strides, padding, channels_in):
    """Any kernel size: one micro-kernel call per output pixel and block of channels, over
    all the kernel rows (segments ``x{KH}a{row stride}`` in its name)."""
    x = relay.var("x", shape=(1, 11, 9, channels_in), dtype="int8")
    k = rng.integers(-128, 128, (*kernel, channels_in, 8)).astype("int8")
    y = relay.nn.conv2d(x, relay.const(k), strides=strides, padding=padding,
                        kernel_size=kernel, channels=8, data_layout="NHWC",
                        kernel_layout="HWIO", out_dtype="int32")
    xv = rng.integers(-128, 128, (1, 11, 9, channels_in)).astype("int8")
    source, got = build_and_run(relay.Function([x], y), TARGETS[kernels], x=xv)
    top, left, bottom, right = padding
    row_stride = (9 + left + right) * channels_in
    assert f"x{kernel[0]}a{row_stride}(" in source
    padded = np.pad(xv.astype(np.int64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    oh = (padded.shape[1] - kernel[0]) // strides[0] + 1
    ow = (padded.shape[2] - kernel[1]) // strides[1] + 1
    want = np.zeros((1, oh, ow, 8), np.int64)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            window = padded[:, i:i + oh * strides[0]:strides[0], j:j + ow * strides[1]:strides[1]]
            want += np.einsum("nhwc,co->nhwo", window, k[i, j].astype(np.int64))
    np.testing.assert_array_equal(got, want)


def test_int8_depthwise_rows_knob():
    """The schedule's ``rows`` (AutoTVM's knob, as for the dense and conv kernels) sets the
    channels per call; the result is the same."""
    from kiln import te
    from kiln.topi.arm_cpu.depthwise_s8 import (
        depthwise_conv2d_nhwc_s8,
        schedule_depthwise_conv2d_nhwc_s8,
    )

    data = te.placeholder((1, 5, 5, 8), "int8", name="data")
    kernel = te.placeholder((3, 3, 1, 8), "int8", name="kernel")
    out = depthwise_conv2d_nhwc_s8(data, kernel, (1, 1), (1, 1, 1, 1), (1, 1), "HWIO")
    sch = schedule_depthwise_conv2d_nhwc_s8([out], (1, 1), dsp=True, rows=4)
    func = tvm.build(sch, [data, kernel, out], target=TARGETS["dsp"])
    assert "kiln_dw_s8_dsp_4_3x3" in func.get_source()
    xv = rng.integers(-128, 128, (1, 5, 5, 8)).astype("int8")
    kv = rng.integers(-128, 128, (3, 3, 1, 8)).astype("int8")
    got = tvm.nd.array(np.zeros((1, 5, 5, 8), "int32"))
    func(tvm.nd.array(xv), tvm.nd.array(kv), got)
    want = _depthwise_numpy(xv, kv[:, :, 0], (1, 1), (1, 1, 1, 1), (1, 1))
    np.testing.assert_array_equal(got.numpy(), want)
