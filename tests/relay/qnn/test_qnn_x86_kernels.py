"""qnn ops on the x86 8-bit kernels (pointwise, 3x3, depthwise, dense) with their requantize
epilogue fused, on the host and an AVX2-only target, against int64 NumPy math and the
requantize written from its definition."""

from __future__ import annotations

import numpy as np
import pytest
from qnn_reference import conv2d_nchw, numpy_requantize  # beside this file

import kiln
from kiln import relay
from kiln.relay.op.strategy.x86_int8 import target_has_avx2

needs_avx2 = pytest.mark.skipif(not target_has_avx2(kiln.target.Target("llvm")),
                                reason="the 8-bit conv kernels are selected with AVX2")


def _random(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _conv(x, w, groups=1):
    """int64 grouped 'valid' convolution, NCHW / OIHW, stride 1."""
    oc, cg, kh, kw = w.shape
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((x.shape[0], oc, oh, ow), "int64")
    for o in range(oc):
        c0 = (o // (oc // groups)) * cg
        for y in range(kh):
            for z in range(kw):
                out[:, o] += np.einsum("nchw,c->nhw", x[:, c0:c0 + cg, y:y + oh, z:z + ow],
                                       w[o, :, y, z].astype("int64"))
    return out


@needs_avx2
def test_fused_requantize_epilogue_matches_numpy():
    """qnn.conv2d (pointwise and depthwise) + requantize to uint8 with relu clipping, as a
    quantized MobileNet block runs, against int64 reference math rounding half up."""
    rng = np.random.default_rng(3)
    x = _random(rng, (1, 16, 5, 36), "uint8")  # rows of 36: the depthwise kernel
    wp, wd = _random(rng, (32, 16, 1, 1), "int8"), _random(rng, (16, 1, 3, 3), "int8")
    v = relay.var("x", shape=x.shape, dtype="uint8")

    def block(w, **kwargs):
        y = relay.qnn.op.conv2d(v, relay.const(w), relay.const(5, "int32"),
                                relay.const(0, "int32"), relay.const(0.02), relay.const(0.01),
                                kernel_size=w.shape[2:], channels=w.shape[0], out_dtype="int32",
                                **kwargs)
        return relay.qnn.op.requantize(y, relay.const(0.0002), relay.const(0, "int32"),
                                       relay.const(0.3), relay.const(0, "int32"),
                                       out_dtype="uint8")

    mod = kiln.IRModule.from_expr(relay.Function([v], relay.Tuple([
        block(wp), block(wd, groups=16, padding=(1, 1))])))
    with kiln.transform.PassContext(opt_level=3):
        got = relay.create_executor("graph", mod=mod, target="llvm").evaluate()(x)
    xz = x.astype("int64") - 5
    for out, want in zip(got, [_conv(xz, wp),
                               _conv(np.pad(xz, ((0, 0), (0, 0), (1, 1), (1, 1))), wd, 16)]):
        ref = numpy_requantize(want, 0.0002, 0, 0.3, 0, None, "UPWARD", "uint8")
        np.testing.assert_array_equal(out.numpy(), ref)


@needs_avx2
def test_qnn_dense_with_fused_requantize_matches_numpy():
    """qnn.dense (uint8 x int8, both zero points nonzero) + requantize to int8, as a quantized
    classifier's last layer runs on dense_int8."""
    rng = np.random.default_rng(5)
    x, w = _random(rng, (2, 70), "uint8"), _random(rng, (30, 70), "int8")
    v = relay.var("x", shape=x.shape, dtype="uint8")
    y = relay.qnn.op.dense(v, relay.const(w), relay.const(128, "int32"), relay.const(3, "int32"),
                           relay.const(0.05), relay.const(0.004), units=30, out_dtype="int32")
    y = relay.qnn.op.requantize(y, relay.const(0.0002), relay.const(0, "int32"),
                                relay.const(0.4), relay.const(-2, "int32"), out_dtype="int8")
    mod = kiln.IRModule.from_expr(relay.Function([v], y))
    with kiln.transform.PassContext(opt_level=3):
        got = relay.create_executor("graph", mod=mod, target="llvm").evaluate()(x).numpy()
    acc = (x.astype("int64") - 128) @ (w.astype("int64") - 3).T
    np.testing.assert_array_equal(got, numpy_requantize(acc, 0.0002, 0, 0.4, -2, None,
                                                        "UPWARD", "int8"))


# (data shape, weight shape, strides, padding, groups): 3x3 with 7 input channels (not a
# multiple of 4) and a partial 16-block, 1x1 with 13, 3x3 stride 2 with 16 (packed at compile
# time), depthwise 3x3 stride 1 and 2 (rows of 40: the tap-quad and row kernels' widths)
QNN_CONVS = [((1, 7, 9, 10), (20, 7, 3, 3), (1, 1), (1, 1, 1, 1), 1),
             ((1, 13, 6, 7), (18, 13, 1, 1), (1, 1), (0, 0, 0, 0), 1),
             ((1, 16, 11, 9), (32, 16, 3, 3), (2, 2), (1, 1, 1, 1), 1),
             ((1, 12, 5, 40), (12, 1, 3, 3), (1, 1), (1, 1, 1, 1), 12),
             ((1, 12, 9, 40), (12, 1, 3, 3), (2, 2), (0, 1, 1, 1), 12)]


@needs_avx2
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=core-avx2"])
@pytest.mark.parametrize("in_dtype", ["uint8", "int8"])
def test_qnn_conv2d_with_zero_point_padding_and_per_channel_scales_matches_numpy(target,
                                                                                in_dtype):
    """qnn.conv2d + per-channel requantize as a quantized model runs (uint8 or int8
    activations: x86 legalization moves int8 to uint8; a nonzero input zero point, so the
    padding is that zero point, not 0; per-channel kernel scales), against the int64
    reference and the requantize written from its definition."""
    rng = np.random.default_rng(12)
    zp_a, out_zp = (131, 7) if in_dtype == "uint8" else (-9, -3)
    outs, wants, feeds, params = [], [], {}, []
    for k, (dshape, wshape, strides, padding, groups) in enumerate(QNN_CONVS):
        x, w = _random(rng, dshape, in_dtype), _random(rng, wshape, "int8")
        w_scale = rng.uniform(0.002, 0.02, wshape[0]).astype("float32")
        v = relay.var(f"x{k}", shape=dshape, dtype=in_dtype)
        y = relay.qnn.op.conv2d(v, relay.const(w), relay.const(zp_a, "int32"),
                                relay.const(0, "int32"), relay.const(0.05),
                                relay.const(w_scale), kernel_size=wshape[2:],
                                channels=wshape[0], strides=strides, padding=padding,
                                groups=groups, out_dtype="int32")
        outs.append(relay.qnn.op.requantize(
            y, relay.const(0.05 * w_scale), relay.const(0, "int32"), relay.const(0.4),
            relay.const(out_zp, "int32"), axis=1, out_dtype=in_dtype))
        params.append(v)
        feeds[f"x{k}"] = x
        acc = conv2d_nchw(x, w, zp_a, 0, strides, padding, groups=groups)
        wants.append(numpy_requantize(acc, 0.05 * w_scale, 0, 0.4, out_zp, 1, "UPWARD",
                                      in_dtype))
    mod = kiln.IRModule.from_expr(relay.Function(params, relay.Tuple(outs)))
    with kiln.transform.PassContext(opt_level=3):
        got = relay.create_executor("graph", mod=mod, target=target).evaluate()(**feeds)
    for out, want in zip(got, wants):
        np.testing.assert_array_equal(out.numpy(), want)
