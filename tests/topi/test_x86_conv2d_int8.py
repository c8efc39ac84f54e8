"""The x86 8-bit convolution micro-kernels (``conv2d_nchw_int8.x86``: int16 pairs, and uint8 x
int8 quads on AVX512-VNNI targets) against NumPy int64 math: odd channel counts (not multiples
of 2, 4 or 16), partial output-channel blocks, strides, dilation, padding, every 8-bit dtype
pair, on the host and on an AVX2-only target, and the extreme products that would saturate
16-bit pair sums."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay, te
from kiln.ir.type import TensorType
from kiln.relay.op.strategy import select_implementation
from kiln.relay.op.strategy.x86_int8 import target_has_avx2
from kiln.target.x86 import target_has_features

HOST_VNNI = target_has_features(["avx512bw", "avx512vnni"], kiln.target.Target("llvm"))
# the host's own code (AVX-512 + VNNI here), and AVX2 only: int16 pairs through vpmaddwd
TARGETS = ["llvm", "llvm -mcpu=core-avx2"]


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
    # uint8 x int8, the VNNI quads: channels not a multiple of 4 (packed at run time), 16
    # output channels by 12 inputs (packed at compile time), the stem's 3 channels at stride 2
    ((1, 7, 9, 9), (20, 7, 3, 3), ("uint8", "int8"), (1, 1), (1, 1), (1, 1)),
    ((2, 12, 8, 11), (32, 12, 3, 3), ("uint8", "int8"), (2, 1), (1, 2), (1, 1)),
    ((1, 3, 15, 15), (16, 3, 3, 3), ("uint8", "int8"), (2, 2), (1, 1), (1, 1)),
    ((1, 8, 10, 10), (16, 8, 3, 3), ("uint8", "int8"), (1, 1), (0, 0), (2, 2)),
    ((1, 20, 6, 7), (17, 20, 1, 1), ("uint8", "int8"), (2, 2), (0, 0), (1, 1)),
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


def _stage_dtypes(target, dshape, wshape, dtypes):
    """{stage name: dtype} of the conv2d compute the strategy picks under ``target``."""
    x, w = te.placeholder(dshape, dtypes[0]), te.placeholder(wshape, dtypes[1])
    attrs = relay.nn.conv2d(relay.var("a", shape=dshape), relay.var("b", shape=wshape),
                            out_dtype="int32").attrs
    oshape = (dshape[0], wshape[0], dshape[2] - wshape[2] + 1, dshape[3] - wshape[3] + 1)
    target = kiln.target.Target(target)
    with target:
        impl, outs = select_implementation("nn.conv2d", attrs, [x, w],
                                           TensorType(oshape, "int32"), target)
    stages, todo = {}, [outs[0]]
    while todo:
        t = todo.pop()
        stages[t.op.name] = str(t.dtype)
        todo.extend(t.op.input_tensors)
    assert impl.name == "conv2d_nchw_int8.x86"
    return stages


@pytest.mark.parametrize("wshape", [(16, 8, 3, 3), (16, 8, 1, 1)])
def test_vnni_targets_take_uint8_quads_others_int16_pairs(wshape):
    """uint8 x int8 on an AVX512-VNNI CPU packs bytes for vpdpbusd; AVX2 widens to int16; so
    do int8 data (legalization moves qnn's to uint8) and uint8 kernels on any CPU."""
    dshape = (1, 8, 8, 8)
    vnni = "llvm -mcpu=cascadelake"
    assert _stage_dtypes(vnni, dshape, wshape, ("uint8", "int8"))["data_pack_int8"] == "uint8"
    for target, dtypes in [("llvm -mcpu=core-avx2", ("uint8", "int8")),
                           (vnni, ("int8", "int8")), (vnni, ("uint8", "uint8"))]:
        assert _stage_dtypes(target, dshape, wshape, dtypes)["data_pack_int8"] == "int16"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_int8_conv_matches_numpy(case, target):
    dshape, wshape, dtypes, strides, padding, dilation = CASES[case]
    rng = np.random.default_rng(case)
    di, wi = np.iinfo(dtypes[0]), np.iinfo(dtypes[1])
    x = rng.integers(di.min, di.max + 1, dshape).astype(dtypes[0])
    w = rng.integers(wi.min, wi.max + 1, wshape).astype(dtypes[1])
    out = _run(x, w, target=target, strides=strides, padding=padding, dilation=dilation)
    np.testing.assert_array_equal(out, reference(x, w, strides, padding, dilation))


def test_quad_kernels_without_vnni_instructions_are_plain_c():
    """A target that claims AVX512-VNNI but compiles for an AVX2 CPU (``-mattr`` is not passed
    to gcc, ``-mcpu`` is) gets the quad layout and the quad kernels' portable C branch."""
    target = "llvm -mcpu=core-avx2 -mattr=+avx512bw,+avx512vnni"
    rng = np.random.default_rng(9)
    for wshape, padding in [((20, 7, 3, 3), (1, 1)), ((18, 12, 1, 1), (0, 0))]:
        x = rng.integers(0, 256, (1, wshape[1], 6, 37)).astype("uint8")
        w = rng.integers(-128, 128, wshape).astype("int8")
        out = _run(x, w, target=target, padding=padding)
        np.testing.assert_array_equal(out, reference(x, w, (1, 1), padding, (1, 1)))


def test_one_module_holds_both_packings():
    """uint8 x int8 (quads on a VNNI host) and int8 x int8 (int16 pairs) 3x3 and 1x1 convs of
    one input in one build: each packing has its own C entry points."""
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, (1, 8, 7, 9)).astype("uint8")
    xv = relay.var("x", shape=x.shape, dtype="uint8")
    signed = relay.cast(relay.subtract(relay.cast(xv, "int32"), relay.const(128)), "int8")
    ws = [rng.integers(-128, 128, shape).astype("int8") for shape in
          [(16, 8, 3, 3), (16, 8, 3, 3), (16, 8, 1, 1), (16, 8, 1, 1)]]
    outs = [relay.nn.conv2d(data, relay.const(w), out_dtype="int32")
            for data, w in zip([xv, signed, xv, signed], ws)]
    mod = kiln.IRModule.from_expr(relay.Function([xv], relay.Tuple(outs)))
    with kiln.transform.PassContext(opt_level=3):
        got = relay.create_executor("graph", mod=mod, target="llvm").evaluate()(x)
    xs = (x.astype("int64") - 128).astype("int8")
    for out, data, w in zip(got, [x, xs, x, xs], ws):
        np.testing.assert_array_equal(out.numpy(), reference(data, w, (1, 1), (0, 0), (1, 1)))


@pytest.mark.parametrize("target", ["llvm", "c", "llvm -mcpu=core-avx2"])
def test_extreme_products_do_not_saturate(target):
    """255 * -128 summed over 64 channels x 9 taps: pairs reach -65280, beyond int16."""
    x = np.full((1, 64, 6, 10), 255, "uint8")
    w = np.full((16, 64, 3, 3), -128, "int8")
    out = _run(x, w, target=target)
    assert np.all(out == 255 * -128 * 64 * 9)


@pytest.mark.skipif(not target_has_avx2(kiln.target.Target("llvm")), reason="needs AVX2")
@pytest.mark.parametrize("target, layout", [
    ("llvm", "OIHW16o4i" if HOST_VNNI else "OIHW16o2i"),
    ("llvm -mcpu=cascadelake", "OIHW16o4i"), ("llvm -mcpu=core-avx2", "OIHW16o2i")])
def test_constant_kernel_is_packed_at_compile_time(target, layout):
    x = relay.var("x", shape=(1, 32, 8, 8), dtype="uint8")
    w = relay.const(np.ones((16, 32, 3, 3), "int8"))
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.nn.conv2d(x, w, out_dtype="int32")))
    with kiln.transform.PassContext(opt_level=3), kiln.target.Target(target):
        optimized = relay.optimize(mod, target=target)
    optimized = optimized[0] if isinstance(optimized, tuple) else optimized
    text = optimized["main"].astext()
    assert f'kernel_layout="{layout}"' in text and "layout_transform" not in text
