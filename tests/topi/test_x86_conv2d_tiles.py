"""x86 conv2d / depthwise / dense register-blocked schedules on odd shapes, against PyTorch.

Each target compiles one Relay model holding every case (relay.build at opt level 3, so
AlterOpLayout prepacks the constant kernels and the prepacked schedules run), plus TOPI-level
cases with forced tiling knobs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from topi_testlib import run_many

import kiln
from kiln import relay, te
from kiln.runtime.error import TVMError
from kiln.topi.x86 import conv2d as x86_conv2d

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype("float32")


# (data shape, kernel shape, strides, padding (top, left, bottom, right), dilation, groups)
CONV_CASES = [
    ((1, 5, 7, 7), (10, 5, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),   # odd channels, W 7
    ((1, 3, 1, 1), (8, 3, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),    # H = W = 1
    ((2, 6, 13, 11), (24, 6, 3, 3), (2, 2), (1, 0, 2, 1), (1, 1), 1),  # asymmetric pad
    ((1, 8, 12, 12), (16, 8, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 1),  # dilation 2
    ((1, 4, 9, 15), (12, 4, 5, 3), (2, 1), (2, 1, 2, 1), (1, 1), 1),   # rectangular kernel
    ((1, 16, 14, 14), (32, 16, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1),  # 1x1 stride 2
    ((1, 16, 12, 12), (32, 16, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),  # 1x1: 16 x 6 blocks
    ((1, 3, 17, 17), (16, 3, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1),  # stem-like 7x7
    ((1, 8, 9, 9), (12, 4, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),    # grouped
    ((1, 12, 7, 10), (12, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 12),  # depthwise
    ((1, 5, 8, 9), (10, 1, 3, 3), (2, 2), (1, 0, 1, 1), (1, 1), 5),    # depthwise x2, odd
    ((1, 16, 6, 6), (16, 1, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 16),  # depthwise dilated
]


def torch_conv(x, w, strides, padding, dilation, groups):
    top, left, bottom, right = padding
    xp = torch.nn.functional.pad(torch.from_numpy(x), (left, right, top, bottom))
    return torch.nn.functional.conv2d(xp, torch.from_numpy(w), stride=strides,
                                      dilation=dilation, groups=groups).numpy()


def build_and_run(body_of, arrays, target):
    inputs = [relay.var(f"x{k}", shape=a.shape, dtype="float32") for k, a in enumerate(arrays)]
    func = relay.Function(inputs, body_of(inputs))
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(kiln.IRModule.from_expr(func), target=target)
    from kiln.contrib.graph_executor import GraphModule

    gmod = GraphModule(lib["default"](kiln.cpu(0)))
    for k, a in enumerate(arrays):
        gmod.set_input(f"x{k}", a)
    gmod.run()
    return [gmod.get_output(i).numpy() for i in range(gmod.get_num_outputs())], lib


def _host_has_avx2() -> bool:
    from kiln.target.x86 import target_has_features

    return target_has_features("avx2", kiln.target.Target("llvm"))


# "llvm" is the host (AVX-512 register blocks where it has them); haswell the AVX2 blocks
@pytest.fixture(scope="module", params=[
    "llvm", "c", pytest.param("llvm -mcpu=haswell", marks=pytest.mark.skipif(
        not _host_has_avx2(), reason="the host cannot run AVX2 code"))])
def relay_results(request):
    datas = [f32(*case[0]) for case in CONV_CASES]
    kernels = [f32(*case[1]) for case in CONV_CASES]
    bias, residual, epilogue_kernel = f32(10), f32(1, 10, 7, 7), f32(10, 5, 3, 3)

    def body(inputs):
        outs = []
        for (_, wshape, strides, padding, dilation, groups), x, w in zip(CONV_CASES, inputs,
                                                                          kernels):
            outs.append(relay.nn.conv2d(x, relay.const(w), strides, padding, dilation,
                                        groups, channels=wshape[0],
                                        kernel_size=wshape[2:]))
        # conv + bias + relu + residual add: the epilogue FuseOps puts in the conv's group
        conv = relay.nn.conv2d(inputs[0], relay.const(epilogue_kernel), padding=(1, 1),
                               channels=10, kernel_size=(3, 3))
        epilogue = relay.add(relay.nn.relu(relay.nn.bias_add(conv, relay.const(bias))),
                             relay.const(residual))
        return relay.Tuple([*outs, epilogue])

    results, lib = build_and_run(body, datas, request.param)
    return datas, kernels + [epilogue_kernel], bias, residual, results, lib


def test_every_conv_case_matches_torch(relay_results):
    datas, kernels, _, _, results, _ = relay_results
    for case, x, w, got in zip(CONV_CASES, datas, kernels, results):
        want = torch_conv(x, w, *case[2:])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(case))


def test_fused_bias_relu_residual_epilogue(relay_results):
    datas, kernels, bias, residual, results, _ = relay_results
    conv = torch_conv(datas[0], kernels[-1], *CONV_CASES[0][2:])
    want = np.maximum(conv + bias[None, :, None, None], 0) + residual
    np.testing.assert_allclose(results[-1], want, rtol=1e-4, atol=1e-4)


def test_kernels_are_prepacked_and_epilogue_fused(relay_results):
    import json

    graph = json.loads(relay_results[-1].get_graph_json())
    kernels = [n["attrs"]["func_name"] for n in graph["nodes"] if n["op"] == "tvm_op"]
    # one kernel per conv: the packing folded away, the epilogue in the first conv's kernel
    assert len(kernels) == len(CONV_CASES) + 1
    assert not any("layout_transform" in k for k in kernels)
    # (bias_add is canonicalized to add)
    # (AlterOpLayout makes the conv nn.contrib_conv2d_NCHWc, unpacking its own NCHW result)
    assert any(k.endswith(("conv2d_add_nn_relu_add", "conv2d_NCHWc_add_nn_relu_add"))
               for k in kernels)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_forced_tiles_pad_the_row_to_whole_blocks(target):
    x, w = f32(1, 6, 9, 11), f32(24, 6, 3, 3)
    # parallel_min_flops 0: these small convs also run their stages on the thread pool
    configs = [{"oc_bn": 8, "tile_ow": 5, "parallel_min_flops": 0, "parallel_pad": True},
               {"oc_bn": 24, "tile_ow": 2},
               {"oc_bn": 8, "tile_ow": 4, "unroll_kw": False, "parallel_min_flops": 0}]
    want = torch_conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    for cfg in configs:
        def make(d, k, cfg=cfg):
            return x86_conv2d.conv2d_nchw(d, k, 1, 1, 1, config=cfg)

        got = run_many([(make, [x, w])], target,
                       lambda outs, cfg=cfg: x86_conv2d.schedule_conv2d_nchw(outs, cfg))
        np.testing.assert_allclose(got[0][0], want, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


def test_block_shape_table_choices_avx2():
    cfg = x86_conv2d.DEFAULT_CONFIG

    def block(*args, **kwargs):
        return x86_conv2d.block_shape(*args, **kwargs, lanes=8)

    # ResNet-18 widths: 16 x 4 blocks where 4 divides the row, 8 x 7 for 14 and 7
    assert block(64, 56, cfg) == (16, 4)
    assert block(256, 14, cfg) == (8, 7)
    assert block(512, 7, cfg) == (8, 7)
    # channels that 8 does not divide: one partial vector, the row in whole blocks
    bn, tile = block(10, 7, cfg)
    assert 10 % bn == 0 and tile >= 1
    # 1x1 kernels broadcast each input once: 12 accumulators fit
    assert block(32, 12, cfg, kernel_width=1) == (16, 6)
    assert block(32, 12, cfg, kernel_width=3) == (16, 4)
    # ... but a 1x1 row is not padded to whole 6-column blocks (that would copy the input)
    assert block(128, 28, cfg, kernel_width=1) == (16, 4)
    # a forced 24-channel block is 3 vectors a column: 2 columns keep 6 accumulators
    assert block(48, 56, {**cfg, "oc_bn": 24}) == (24, 2)


def test_block_shape_choices_avx512():
    cfg = x86_conv2d.DEFAULT_CONFIG

    def block(*args, **kwargs):
        return x86_conv2d.block_shape(*args, **kwargs, lanes=16)

    # one zmm of output channels, 14 columns (14 accumulators) for 56/28/14-wide rows, and
    # a 7-wide row in one block
    for width in (56, 28, 14):
        assert block(256, width, cfg) == (16, 14)
        assert block(256, width, cfg, kernel_width=1) == (16, 14)
    assert block(512, 7, cfg) == block(1024, 7, cfg, kernel_width=1) == (16, 7)
    # a 16-wide row is one 16-column block (16 accumulators still fit in 32 registers)
    assert block(64, 16, cfg) == (16, 16)
    # a 7x7 kernel's longer input row leaves room for 8 accumulators
    assert block(64, 112, cfg, kernel_width=7) == (16, 8)
    # 8 channels fill half a register: still one block of the channels, and never past
    # 16 accumulators
    bn, tile = block(8, 32, cfg)
    assert bn == 8 and tile <= 16
    # a 48-channel block forced: 3 zmm a column, at most 5 columns
    assert block(48, 56, {**cfg, "oc_bn": 48})[1] <= 5


def test_simd_lanes_follow_the_target():
    from kiln.target import Target
    from kiln.target.x86 import simd_32bit_lanes, target_has_features

    assert simd_32bit_lanes(Target("llvm -mcpu=znver3")) == 8
    assert simd_32bit_lanes(Target("llvm -mcpu=znver4")) == 16
    assert simd_32bit_lanes(Target("llvm -mcpu=skylake-avx512 -mattr=-avx512f")) == 8
    assert simd_32bit_lanes(Target("llvm -mcpu=core2")) == 4
    assert simd_32bit_lanes(Target("c -mcpu=cortex-m7")) == 4
    assert target_has_features(["avx2", "fma"], Target("llvm -mcpu=x86-64 -mattr=+avx2,+fma"))
    with Target("llvm -mcpu=znver3"):  # the current target when none is given
        assert simd_32bit_lanes() == 8
    assert kiln.target.x86.target_has_features is target_has_features  # TVM's path


def test_bad_packing_raises_kiln_errors():
    kernel = te.placeholder((12, 4, 3, 3), name="k")
    with pytest.raises(TVMError, match="blocks of 8"):
        x86_conv2d.pack_kernel(kernel, 8)
    data = te.placeholder((1, 5, 8, 8), name="d")
    packed = te.placeholder((2, 4, 3, 3, 8), name="p")
    with pytest.raises(TVMError, match="5 input channels"):
        x86_conv2d.conv2d_nchwc(data, packed, 1, 1, 1)


# (M, K, N): a GEMV, odd sizes (N not a multiple of 16), and a parallel M = 64 product
DENSE_CASES = [(1, 200, 48), (3, 37, 20), (1, 64, 40), (64, 300, 128)]


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_dense_through_relay_build(target):
    from kiln.topi.x86 import dense as x86_dense

    datas = [f32(m, k) for m, k, _ in DENSE_CASES]
    weights = [f32(n, k) for _, k, n in DENSE_CASES]
    bias = f32(DENSE_CASES[0][2])

    def body(inputs):
        outs = [relay.nn.dense(x, relay.const(w), units=w.shape[0])
                for x, w in zip(inputs, weights)]
        outs.append(relay.nn.relu(relay.nn.bias_add(
            relay.nn.dense(inputs[0], relay.const(weights[0] * 2)), relay.const(bias))))
        return relay.Tuple(outs)

    results, lib = build_and_run(body, datas, target)
    for x, w, got in zip(datas, weights, results):
        np.testing.assert_allclose(got, x @ w.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(results[-1], np.maximum(datas[0] @ (2 * weights[0]).T + bias, 0),
                               rtol=1e-4, atol=1e-4)
    assert "contrib_dense_pack" in lib.get_graph_json()
    # the GEMV spans several packed blocks; the M = 64 product keeps 4 x 16 blocks
    cfg = x86_dense.DEFAULT_CONFIG
    assert x86_dense.register_block(1, 32, 16, cfg) == (1, 4)
    assert x86_dense.register_block(64, 8, 16, cfg) == (4, 1)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_dense_forced_blocks_and_serial_small_products(target):
    from kiln.topi.x86 import dense as x86_dense

    a, w = f32(2, 33), f32(64, 33)
    cfg = {"tile_y": 2, "blocks": 2, "parallel_min_flops": 0}

    def make(x, y):
        return x86_dense.dense_pack(x, y, config=cfg)

    got = run_many([(make, [a, w])], target,
                   lambda outs: x86_dense.schedule_dense_pack(outs, cfg))
    np.testing.assert_allclose(got[0][0], a @ w.T, rtol=1e-4, atol=1e-4)


def test_dense_pack_rejects_mismatched_shapes():
    from kiln.topi.nn.dense import dense_pack

    with pytest.raises(TVMError, match="reduces over 24"):
        dense_pack(te.placeholder((2, 16), name="a"), te.placeholder((4, 24, 8), name="w"))
    with pytest.raises(TVMError, match="ranks 2 and 2"):
        dense_pack(te.placeholder((2, 16), name="a"), te.placeholder((32, 16), name="w"))


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_depthwise_forced_knobs_on_the_thread_pool(target):
    from kiln.topi.x86 import depthwise

    x, w = f32(2, 6, 10, 13), f32(12, 1, 3, 3)
    cfg = {"c_bn": 4, "tile_ow": 5, "parallel_min_flops": 0}

    def make(d, k):
        return depthwise.depthwise_conv2d_nchw(d, k, (1, 2), (1, 2, 0, 1), (2, 1), config=cfg)

    got = run_many([(make, [x, w])], target,
                   lambda outs: depthwise.schedule_depthwise_conv2d_nchw(outs, cfg))
    want = torch_conv(x, w, (1, 2), (1, 2, 0, 1), (2, 1), 6)
    np.testing.assert_allclose(got[0][0], want, rtol=1e-4, atol=1e-4)


def test_depthwise_rejects_a_non_depthwise_kernel():
    from kiln.topi.x86 import depthwise

    with pytest.raises(TVMError, match="not \\[C x multiplier, 1, KH, KW\\]"):
        depthwise.depthwise_conv2d_nchw(te.placeholder((1, 6, 8, 8), name="d"),
                                        te.placeholder((9, 1, 3, 3), name="k"), 1, 1, 1)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_conv_with_two_outputs_keeps_the_blocked_result_whole(target):
    from kiln import topi

    x, w = f32(1, 4, 8, 9), f32(16, 4, 3, 3)
    cfg = {"parallel_min_flops": 0}

    def make(d, k):
        conv = x86_conv2d.conv2d_nchw(d, k, 1, 1, 1)
        return [conv, topi.nn.relu(conv)]

    got = run_many([(make, [x, w])], target,
                   lambda outs: x86_conv2d.schedule_conv2d_nchw(outs, cfg))
    want = torch_conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    np.testing.assert_allclose(got[0][0], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[0][1], np.maximum(want, 0), rtol=1e-4, atol=1e-4)
