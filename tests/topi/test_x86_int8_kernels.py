"""The x86 8-bit pointwise (``conv2d_int8_1x1``), depthwise (``depthwise_int8``) and dense
(``dense_int8``) kernels against NumPy int64 math: odd channel counts, partial blocks and pixel
tiles, several pixel chunks, batches, every 8-bit dtype pair, strides, dilation, asymmetric
padding, channel multipliers, tails of the vector loops, and products that would saturate
16-bit sums (the fused requantize epilogue: ``tests/relay/qnn/test_qnn_x86_kernels.py``).

Cases share builds (one Relay function with a tuple of outputs) to keep the C compiles few.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
from kiln import relay, te
from kiln.ir.type import TensorType
from kiln.relay.op.strategy import select_implementation
from kiln.relay.op.strategy.x86_int8 import target_has_avx2

needs_avx2 = pytest.mark.skipif(not target_has_avx2(kiln.target.Target("llvm")),
                                reason="the 8-bit conv kernels are selected with AVX2")


def reference(x, w, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """int64 grouped convolution: NCHW data, OIHW kernel, padding (top, left, bottom, right)."""
    pt, pl, pb, pr = padding
    a = np.pad(x.astype("int64"), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oc, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilation
    oh = (a.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (a.shape[3] - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((x.shape[0], oc, oh, ow), "int64")
    per_group = oc // groups
    for o in range(oc):
        c0 = (o // per_group) * cg
        for y in range(kh):
            for z in range(kw):
                patch = a[:, c0:c0 + cg, y * dh:y * dh + (oh - 1) * sh + 1:sh,
                          z * dw:z * dw + (ow - 1) * sw + 1:sw]
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, y, z].astype("int64"))
    return out


def _random(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _build_and_run(convs, opt_level, target="llvm"):
    """convs: [(x, w, conv2d kwargs)]; their int32 outputs from one graph-executor build."""
    params, outs, feeds = [], [], {}
    for k, (x, w, kwargs) in enumerate(convs):
        v = relay.var(f"x{k}", shape=x.shape, dtype=str(x.dtype))
        params.append(v)
        feeds[f"x{k}"] = x
        outs.append(relay.nn.conv2d(v, relay.const(w), out_dtype="int32", **kwargs))
    mod = kiln.IRModule.from_expr(relay.Function(params, relay.Tuple(outs)))
    with kiln.transform.PassContext(opt_level=opt_level):
        lib = relay.build(mod, target=target)
    from kiln.contrib.graph_executor import GraphModule

    gmod = GraphModule(lib["default"](kiln.cpu(0)))
    gmod.run(**feeds)
    return [gmod.get_output(k).numpy() for k in range(len(convs))]


POINTWISE = [
    # (data shape, output channels, dtypes): odd C, partial 16-blocks, 7x7 (one partial pixel
    # tile), 13x13 (two pixel chunks), a batch of 2
    ((1, 7, 5, 9), 20, ("uint8", "int8")),
    ((2, 32, 13, 13), 48, ("int8", "int8")),
    ((1, 64, 7, 7), 16, ("uint8", "uint8")),
    ((1, 6, 4, 4), 3, ("int8", "uint8")),
    # uint8 x int8 (VNNI quads on such hosts): channels a multiple of 4, packed at compile
    # time at opt_level 3, two pixel chunks and a partial pixel tile
    ((1, 36, 13, 13), 48, ("uint8", "int8")),
]


@needs_avx2
def test_pointwise_int8_conv_is_the_pixel_gemm():
    x, w = te.placeholder((1, 8, 6, 6), "uint8"), te.placeholder((16, 8, 1, 1), "int8")
    attrs = relay.nn.conv2d(relay.var("a", shape=(1, 8, 6, 6)),
                            relay.var("b", shape=(16, 8, 1, 1)), out_dtype="int32").attrs
    target = kiln.target.Target("llvm")
    with target:
        impl, outs = select_implementation("nn.conv2d", attrs, [x, w],
                                           TensorType((1, 16, 6, 6), "int32"), target)
    stages, todo = set(), [outs[0].op]
    while todo:
        op = todo.pop()
        stages.add(op.name)
        todo.extend(t.op for t in op.input_tensors)
    assert impl.name == "conv2d_nchw_int8.x86" and "conv2d_int8_1x1" in stages


# opt_level 3: AlterOpLayout packs the kernel ahead; -mcpu=haswell: the AVX2 code (this host
# may run the AVX-512 and VNNI ones)
@needs_avx2
@pytest.mark.parametrize("opt_level, target", [(2, "llvm"), (3, "llvm"),
                                               (3, "llvm -mcpu=haswell")])
def test_pointwise_int8_conv_matches_numpy(opt_level, target):
    rng = np.random.default_rng(opt_level)
    convs = [(_random(rng, shape, dt[0]), _random(rng, (oc, shape[1], 1, 1), dt[1]), {})
             for shape, oc, dt in POINTWISE]
    for (x, w, _), got in zip(convs, _build_and_run(convs, opt_level, target)):
        np.testing.assert_array_equal(got, reference(x, w))


DEPTHWISE = [
    # (data shape, multiplier, kernel, strides, padding (t, l, b, r), dilation, dtypes)
    ((1, 4, 9, 11), 1, 3, (1, 1), (1, 1, 1, 1), (1, 1), ("uint8", "int8")),
    ((2, 3, 10, 13), 2, 3, (2, 2), (1, 1, 1, 1), (1, 1), ("int8", "int8")),
    ((1, 5, 20, 41), 1, 5, (1, 2), (2, 1, 0, 3), (1, 2), ("uint8", "uint8")),
    ((1, 8, 7, 7), 1, 3, (2, 1), (0, 1, 1, 1), (1, 1), ("int8", "uint8")),
    ((1, 16, 56, 56), 1, 3, (2, 2), (0, 0, 1, 1), (1, 1), ("uint8", "int8")),
    ((1, 3, 6, 40), 1, 3, (1, 1), (1, 1, 1, 1), (1, 1), ("uint8", "int8")),  # a strategy pick
]


@needs_avx2
def test_depthwise_int8_conv_uses_the_kernel():
    x, w = te.placeholder((1, 8, 8, 40), "uint8"), te.placeholder((8, 1, 3, 3), "int8")
    attrs = relay.nn.conv2d(relay.var("a", shape=(1, 8, 8, 40)),
                            relay.var("b", shape=(8, 1, 3, 3)), groups=8, padding=(1, 1),
                            out_dtype="int32").attrs
    target = kiln.target.Target("llvm")
    with target:
        impl, _ = select_implementation("nn.conv2d", attrs, [x, w],
                                        TensorType((1, 8, 8, 40), "int32"), target)
    assert impl.name == "depthwise_conv2d_nchw_int8.x86"


@needs_avx2
def test_depthwise_strategy_keeps_short_and_strided_rows_on_the_channel_schedule():
    """The row kernel's rule (an AVX2 target: no tap quads)."""
    x, w = te.placeholder((1, 8, 30, 30), "uint8"), te.placeholder((8, 1, 3, 3), "int8")
    target = kiln.target.Target("llvm -mcpu=core-avx2")
    names = []
    for strides, out in [((1, 1), 30), ((2, 2), 15)]:
        attrs = relay.nn.conv2d(relay.var("a", shape=(1, 8, 30, 30)),
                                relay.var("b", shape=(8, 1, 3, 3)), strides=strides,
                                padding=(1, 1), groups=8, out_dtype="int32").attrs
        with target:
            impl, _ = select_implementation("nn.conv2d", attrs, [x, w],
                                            TensorType((1, 8, out, out), "int32"), target)
        names.append(impl.name)
    assert names == ["depthwise_conv2d_nchw.x86"] * 2


QUAD_DEPTHWISE = [
    # uint8 x int8 for the tap-quad kernel: two 4-tap groups (5 wide, dilated), a multiplier,
    # stride 3, rows of 70 (5 blocks, a partial one), padding wider than the kernel reaches
    ((1, 3, 12, 30), 2, 5, (1, 2), (2, 3, 2, 1), (2, 2)),
    ((2, 5, 9, 70), 1, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 4, 20, 47), 1, 3, (3, 3), (0, 2, 1, 0), (1, 1)),
    ((1, 2, 6, 7), 1, 3, (1, 1), (4, 4, 4, 4), (1, 1)),
]


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=core-avx2"])
def test_depthwise_tap_quad_kernel_matches_numpy(target):
    """The uint8 x int8 tap-quad kernel (vpermb + vpdpbusd on this host when it has
    AVX512-VNNI/VBMI; its plain C on an AVX2 target), extremes included."""
    from topi_testlib import run_many

    from kiln.topi.x86.conv2d_int8 import schedule_conv2d_nchw_int8
    from kiln.topi.x86.depthwise_int8 import depthwise_conv2d_nchw_int8

    rng = np.random.default_rng(8)
    cases, wants = [], []
    for shape, mult, k, strides, padding, dilation in QUAD_DEPTHWISE:
        x = _random(rng, shape, "uint8")
        w = _random(rng, (shape[1] * mult, 1, k, k), "int8")
        if shape[0] == 2:
            x[1], w[0] = 255, -128
        cases.append((lambda a, b, s=strides, p=padding, d=dilation: depthwise_conv2d_nchw_int8(
            a, b, s, p, d, quads=True), [x, w]))
        wants.append(reference(x, w, strides, padding, dilation, shape[1]))
    for (got,), want in zip(run_many(cases, target, schedule_conv2d_nchw_int8), wants):
        np.testing.assert_array_equal(got, want)


def test_depthwise_strategy_takes_tap_quads_on_vnni_vbmi_targets():
    """Any width and stride on a CPU with AVX512-VNNI and -VBMI; cascadelake (no VBMI) keeps
    the row kernel for long stride-1 rows and the channel schedule for the others."""
    picks = {}
    for target in ["llvm -mcpu=icelake-server", "llvm -mcpu=cascadelake"]:
        for width, stride in [(14, 1), (56, 2), (40, 1)]:
            x, w = te.placeholder((1, 8, width, width), "uint8"), te.placeholder((8, 1, 3, 3),
                                                                                 "int8")
            attrs = relay.nn.conv2d(relay.var("a", shape=x.shape), relay.var("b", shape=w.shape),
                                    strides=(stride, stride), padding=(1, 1), groups=8,
                                    out_dtype="int32").attrs
            out = width // stride
            with kiln.target.Target(target) as t:
                impl, outs = select_implementation("nn.conv2d", attrs, [x, w],
                                                   TensorType((1, 8, out, out), "int32"), t)
            stages, todo = {}, [outs[0]]
            while todo:
                op = todo.pop().op
                stages[op.name] = op
                todo.extend(op.input_tensors)
            quads = "depthwise_int8" in stages and stages["depthwise_int8"].num_outputs == 1
            picks[target.split("=")[1], width, stride] = (impl.name, quads)
    dw8, chan = "depthwise_conv2d_nchw_int8.x86", "depthwise_conv2d_nchw.x86"
    assert picks == {
        ("icelake-server", 14, 1): (dw8, True), ("icelake-server", 56, 2): (dw8, True),
        ("icelake-server", 40, 1): (dw8, True), ("cascadelake", 14, 1): (chan, False),
        ("cascadelake", 56, 2): (chan, False), ("cascadelake", 40, 1): (dw8, False)}


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell", "c"])
def test_depthwise_int8_kernel_matches_numpy(target):
    """The TOPI compute itself at every stride, dilation and width (the strategy picks it for
    long stride-1 rows only)."""
    from topi_testlib import run_many

    from kiln.topi.x86.conv2d_int8 import schedule_conv2d_nchw_int8
    from kiln.topi.x86.depthwise_int8 import depthwise_conv2d_nchw_int8

    rng = np.random.default_rng(7)
    cases, wants = [], []
    for shape, mult, k, strides, padding, dilation, dt in DEPTHWISE:
        x = _random(rng, shape, dt[0])
        w = _random(rng, (shape[1] * mult, 1, k, k), dt[1])
        cases.append((lambda a, b, s=strides, p=padding, d=dilation: depthwise_conv2d_nchw_int8(
            a, b, s, p, d), [x, w]))
        wants.append(reference(x, w, strides, padding, dilation, shape[1]))
    for (got,), want in zip(run_many(cases, target, schedule_conv2d_nchw_int8), wants):
        np.testing.assert_array_equal(got, want)


@needs_avx2
def test_extreme_products_do_not_saturate():
    """255 * -128 over 64 channel pairs (pointwise) and 9 taps (depthwise): beyond int16."""
    x = np.full((1, 64, 6, 40), 255, "uint8")
    w1, w3 = np.full((16, 64, 1, 1), -128, "int8"), np.full((64, 1, 3, 3), -128, "int8")
    pw, dw = _build_and_run([(x, w1, {}), (x, w3, dict(groups=64, channels=64))], 3)
    assert np.all(pw == 255 * -128 * 64) and np.all(dw == 255 * -128 * 9)


DENSE = [  # (m, k, n, dtypes): a classifier's GEMV, odd sizes (vector tails, partial blocks)
    (1, 1024, 1000, ("uint8", "int8")),
    (3, 37, 9, ("int8", "int8")),
    (2, 64, 5, ("uint8", "uint8")),
    (5, 16, 4, ("int8", "uint8")),
    (3, 130, 6, ("uint8", "int8")),  # VNNI: two whole 64-byte steps and a masked one
]


@needs_avx2
def test_int8_dense_uses_the_kernel_and_keeps_its_weight_unpacked():
    x, w = te.placeholder((1, 32), "uint8"), te.placeholder((8, 32), "int8")
    attrs = relay.nn.dense(relay.var("a", shape=(1, 32)), relay.var("b", shape=(8, 32)),
                           out_dtype="int32").attrs
    target = kiln.target.Target("llvm")
    with target:
        impl, _ = select_implementation("nn.dense", attrs, [x, w],
                                        TensorType((1, 8), "int32"), target)
    v = relay.var("x", shape=(1, 32), dtype="uint8")
    mod = kiln.IRModule.from_expr(relay.Function([v], relay.nn.dense(
        v, relay.const(np.ones((8, 32), "int8")), out_dtype="int32")))
    with kiln.transform.PassContext(opt_level=3):
        graph = json.loads(relay.build(mod, target="llvm").get_graph_json())
    kernels = [n["name"] for n in graph["nodes"] if n["op"] == "tvm_op"]
    # no contrib_dense_pack behind a layout_transform (AlterOpLayout leaves it alone)
    assert impl.name == "dense_int8.x86" and kernels == ["tvmgen_default_fused_nn_dense"]


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell", "c"])
def test_int8_dense_kernel_matches_numpy(target):
    from topi_testlib import run_many

    from kiln.topi.x86.dense_int8 import dense_int8, schedule_dense_int8

    rng = np.random.default_rng(11)
    cases = [(dense_int8, [_random(rng, (m, k), dt[0]), _random(rng, (n, k), dt[1])])
             for m, k, n, dt in DENSE]
    extreme = [np.full((2, 40), 255, "uint8"), np.full((3, 40), -128, "int8")]
    cases.append((dense_int8, extreme))
    for (got,), (_, (x, w)) in zip(run_many(cases, target, schedule_dense_int8), cases):
        np.testing.assert_array_equal(got, x.astype("int64") @ w.astype("int64").T)
