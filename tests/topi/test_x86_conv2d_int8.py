"""The x86 8-bit convolution micro-kernel (``conv2d_nchw_int8.x86``) against NumPy int64
math: odd channel counts, partial output-channel blocks, strides, dilation, padding, every
8-bit dtype pair, and the extreme products that would saturate 16-bit pair sums."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay, te
from kiln.ir.type import TensorType
from kiln.relay.op.strategy import select_implementation
from kiln.relay.op.strategy.x86_int8 import target_has_avx2


def reference(x, w, strides, padding, dilation):
    a = np.pad(x.astype("int64"), ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    oc, _, kh, kw = w.shape
    sh, sw = strides
    dh, dw = dilation
    oh = (a.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (a.shape[3] - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((x.shape[0], oc, oh, ow), "int64")
    for y in range(kh):
        for z in range(kw):
            rows = slice(y * dh, y * dh + (oh - 1) * sh + 1, sh)
            patch = a[:, :, rows, z * dw:z * dw + (ow - 1) * sw + 1:sw]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, y, z].astype("int64"))
    return out


def _run(x, w, target="llvm", **attrs):
    xv = relay.var("x", shape=x.shape, dtype=str(x.dtype))
    y = relay.nn.conv2d(xv, relay.const(w), out_dtype="int32", **attrs)
    mod = kiln.IRModule.from_expr(relay.Function([xv], y))
    return relay.create_executor("graph", mod=mod, target=target).evaluate()(x).numpy()


CASES = [
    # (data shape, weight shape, dtypes, strides, padding, dilation)
    ((1, 3, 9, 11), (5, 3, 3, 3), ("uint8", "int8"), (1, 1), (1, 1), (1, 1)),
    ((2, 7, 10, 10), (20, 7, 3, 3), ("int8", "int8"), (2, 2), (1, 1), (1, 1)),
    ((1, 16, 12, 19), (32, 16, 1, 1), ("uint8", "uint8"), (1, 1), (0, 0), (1, 1)),
    ((1, 4, 13, 13), (16, 4, 3, 3), ("int8", "uint8"), (1, 2), (2, 0), (2, 2)),
]


@pytest.mark.skipif(not target_has_avx2(kiln.target.Target("llvm")), reason="needs AVX2")
def test_int8_conv_uses_the_micro_kernel():
    x, w = te.placeholder((1, 8, 8, 8), "uint8"), te.placeholder((16, 8, 3, 3), "int8")
    attrs = relay.nn.conv2d(relay.var("a", shape=(1, 8, 8, 8)), relay.var("b", shape=(16, 8, 3, 3)),
                            out_dtype="int32").attrs
    target = kiln.target.Target("llvm")
    with target:
        impl, _ = select_implementation("nn.conv2d", attrs, [x, w],
                                        TensorType((1, 16, 6, 6), "int32"), target)
    assert impl.name == "conv2d_nchw_int8.x86"


@pytest.mark.parametrize("case", range(len(CASES)))
def test_int8_conv_matches_numpy(case):
    dshape, wshape, dtypes, strides, padding, dilation = CASES[case]
    rng = np.random.default_rng(case)
    di, wi = np.iinfo(dtypes[0]), np.iinfo(dtypes[1])
    x = rng.integers(di.min, di.max + 1, dshape).astype(dtypes[0])
    w = rng.integers(wi.min, wi.max + 1, wshape).astype(dtypes[1])
    out = _run(x, w, strides=strides, padding=padding, dilation=dilation)
    np.testing.assert_array_equal(out, reference(x, w, strides, padding, dilation))


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_extreme_products_do_not_saturate(target):
    """255 * -128 summed over 64 channels x 9 taps: pairs reach -65280, beyond int16."""
    x = np.full((1, 64, 6, 10), 255, "uint8")
    w = np.full((16, 64, 3, 3), -128, "int8")
    out = _run(x, w, target=target)
    assert np.all(out == 255 * -128 * 64 * 9)


@pytest.mark.skipif(not target_has_avx2(kiln.target.Target("llvm")), reason="needs AVX2")
def test_constant_kernel_is_packed_at_compile_time():
    x = relay.var("x", shape=(1, 32, 8, 8), dtype="uint8")
    w = relay.const(np.ones((16, 32, 3, 3), "int8"))
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.nn.conv2d(x, w, out_dtype="int32")))
    with kiln.transform.PassContext(opt_level=3), kiln.target.Target("llvm"):
        optimized = relay.optimize(mod, target="llvm")
    optimized = optimized[0] if isinstance(optimized, tuple) else optimized
    text = optimized["main"].astext()
    assert 'kernel_layout="OIHW16o2i"' in text and "layout_transform" not in text
