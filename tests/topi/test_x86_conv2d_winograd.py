"""x86 Winograd conv2d (``topi/x86/conv2d_winograd.py``) against PyTorch: F(2x2, 3x3) and
F(4x4, 3x3), odd sizes, padding 0 and 1, batch 2, NCHW and blocked data, on AVX-512 (the
host), AVX2 and the c target; its precision on a ResNet-sized reduction; bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln
from kiln import te
from kiln.runtime.error import TVMError
from kiln.topi.nn.winograd import winograd_matrices
from kiln.topi.x86 import conv2d_winograd as wino

RNG = np.random.default_rng(17)


def _torch_conv(x, w, pad):
    return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                                      padding=pad).numpy()


def _block(x, lanes):
    n, c, h, w = x.shape
    return x.reshape(n, c // lanes, lanes, h, w).transpose(0, 1, 3, 4, 2).copy()


def _unblock(y):
    n, cb, h, w, b = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w)


def _run(target, data_shape, kernel_shape, pad, config, in_block=0, out_layout="NCHW"):
    """Build the Winograd conv (kernel transformed in the kernel) and run it on random data:
    ``(result in NCHW, torch's)``."""
    x = RNG.standard_normal(data_shape).astype("float32")
    k = RNG.standard_normal(kernel_shape).astype("float32")
    data = te.placeholder(_block(x, in_block).shape if in_block else data_shape, name="data")
    kernel = te.placeholder(kernel_shape, name="kernel")
    with kiln.target.Target(target):
        cfg = {**wino.DEFAULT_CONFIG, **config}
        packed = wino.winograd_kernel_pack(kernel, cfg["tile_size"], cfg["oc_bn"])
        out = wino.conv2d_winograd_nchwc(data, packed, pad, out_layout, config=config)
        func = kiln.build(wino.schedule_conv2d_winograd([out], config), [data, kernel, out],
                          target)
    result = kiln.nd.empty([int(d) for d in out.shape])
    func(kiln.nd.array(_block(x, in_block) if in_block else x), kiln.nd.array(k), result)
    y = result.numpy()
    return (_unblock(y) if y.ndim == 5 else y), _torch_conv(x, k, pad)


@pytest.mark.parametrize("target, data_shape, pad, config, in_block, out_layout", [
    # F(2): odd height and width (the last tiles partly outside the output), padding 1
    ("llvm", (1, 16, 7, 5), 1, {"tile_size": 2, "tile_t": 4}, 0, "NCHW"),
    # F(4): batch 2, padding 0, blocked data and output, GEMM over tile blocks, AVX2 vectors
    ("llvm -mcpu=core-avx2", (2, 16, 9, 6), 0,
     {"tile_size": 4, "oc_bn": 8, "gemm_parallel": "tiles"}, 8, "NCHW16c"),
    # F(4) on the c target: 11 x 10 output tiles of 4, padding 1
    ("c", (1, 8, 11, 10), 1, {"tile_size": 4, "oc_bn": 16, "tile_t": 7}, 0, "NCHW"),
])
def test_winograd_matches_torch(target, data_shape, pad, config, in_block, out_layout):
    got, want = _run(target, data_shape, (32, data_shape[1], 3, 3), pad, config, in_block,
                     out_layout)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_winograd_precision_on_a_resnet_sized_reduction():
    """Max error relative to the largest output, float32 against float64 torch, 256 input
    channels: F(2) stays near float32 rounding, F(4) loses about one more digit (its
    transforms multiply by up to 8 and 5 before summing)."""
    x = RNG.standard_normal((1, 256, 8, 8)).astype("float32")
    k = (RNG.standard_normal((16, 256, 3, 3)) / 48).astype("float32")
    want = torch.nn.functional.conv2d(torch.from_numpy(x).double(),
                                      torch.from_numpy(k).double(), padding=1).numpy()
    errors = {}
    for m in (2, 4):
        data, kernel = te.placeholder(x.shape), te.placeholder(k.shape)
        with kiln.target.Target("llvm"):
            out = wino.conv2d_nchw_winograd(data, kernel, 1, 1, 1, config={"tile_size": m})
            func = kiln.build(wino.schedule_conv2d_winograd([out]), [data, kernel, out])
        got = kiln.nd.empty(want.shape)
        func(kiln.nd.array(x), kiln.nd.array(k), got)
        errors[m] = np.abs(got.numpy() - want).max() / np.abs(want).max()
    assert errors[2] < 2e-6
    assert errors[4] < 2e-5


def test_the_transform_matrices_are_exact():
    """A^T [(G g) ⊙ (B^T d)] is the 1-D correlation exactly (in float64), with zeros
    where the Toom-Cook matrices have them (the schedules drop those terms)."""
    for m in (2, 4):
        at, g, bt = winograd_matrices(m, 3)
        d, k = RNG.standard_normal(m + 2), RNG.standard_normal(3)
        np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), np.correlate(d, k, "valid"),
                                   atol=1e-12)
        assert np.all((bt == 0) | (np.abs(bt) >= 0.25))


def test_bad_input_raises_naming_the_problem():
    data = te.placeholder((1, 16, 8, 8))
    kernel = te.placeholder((32, 16, 3, 3))
    with pytest.raises(TVMError, match="3x3 kernels at stride 1"):
        wino.conv2d_nchw_winograd(data, kernel, 2, 1, 1)
    with pytest.raises(TVMError, match="3x3 kernels at stride 1"):
        wino.conv2d_nchw_winograd(data, te.placeholder((32, 16, 5, 5)), 1, 2, 1)
    with pytest.raises(TVMError, match="channel block 12 does not divide 32"):
        wino.winograd_kernel_pack(kernel, 2, 12)
    with pytest.raises(TVMError, match="F\\(2\\) and F\\(4\\) only"):
        wino.conv2d_winograd_nchwc(data, te.placeholder((5, 5, 2, 16, 16)), 1)
    with pytest.raises(TVMError, match="does not match the data"):
        wino.conv2d_winograd_nchwc(data, te.placeholder((4, 4, 2, 8, 16)), 1)
    with pytest.raises(TVMError, match="output layout NCHW12c"):
        wino.conv2d_winograd_nchwc(data, te.placeholder((4, 4, 2, 16, 16)), 1, "NCHW12c")


@pytest.mark.parametrize("strides, dilation", [((2, 2), (1, 1)), ((1, 1), (2, 2))])
def test_packed_winograd_op_at_stride_or_dilation_2_is_refused_when_built(strides, dilation):
    # the x86 kernel computes stride 1, dilation 1 only: it was chosen anyway, and the build
    # ran until its output failed the kernel's argument check at run time
    from kiln import relay

    data = relay.var("x", shape=(1, 16, 8, 8))
    weight = relay.const(RNG.standard_normal((4, 4, 1, 16, 16)).astype("float32"))
    call = relay.nn.contrib_conv2d_winograd_without_weight_transform(
        data, weight, 2, strides=strides, dilation=dilation, padding=(1, 1), channels=16,
        kernel_size=(3, 3))
    mod = kiln.IRModule.from_expr(relay.Function([data], call))
    with pytest.raises(TVMError, match="stride 1, dilation 1"):
        relay.build(mod, target="llvm")
