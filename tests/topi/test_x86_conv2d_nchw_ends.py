"""x86 convs whose data and result are both NCHW (a lone layer at the graph boundary): the
pointwise conv as a GEMM over pixels (``conv2d_pointwise_nchw.x86``) and the few-channel stem
vectorized over output columns (``conv2d_stem_nchw.x86``). Answers against PyTorch through
relay.build at opt level 3 (AlterOpLayout, fused bias/relu/residual epilogues) on the host's
AVX-512, on AVX2 and on the c target; odd sizes, batch 2, strides 1 and 2."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln as tvm
from kiln import relay, te
from kiln.contrib import graph_executor
from kiln.target import Target
from kiln.topi.x86 import conv2d_pointwise, conv2d_stem

TARGETS = ["llvm", "llvm -mcpu=core-avx2", "c"]
RNG = np.random.default_rng(18)


def _const(shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def _conv_model(n, c, h, w, o, k, stride, pad, epilogue):
    """conv2d (+ bias + relu, or + residual + relu) on NCHW data; returns the function, its
    inputs and a PyTorch oracle."""
    wt, b = _const((o, c, k, k), 0.3), _const((o,))
    x = relay.var("x", shape=(n, c, h, w))
    y = relay.nn.conv2d(x, relay.const(wt), strides=(stride, stride), padding=pad,
                        kernel_size=(k, k), channels=o)
    xn = _const((n, c, h, w))
    top, left, bottom, right = pad if isinstance(pad, tuple) else (pad,) * 4
    ref = F.conv2d(F.pad(torch.from_numpy(xn), (left, right, top, bottom)),
                   torch.from_numpy(wt), stride=stride)
    inputs, params = {"x": xn}, [x]
    if epilogue == "bias_relu":
        y = relay.nn.relu(relay.nn.bias_add(y, relay.const(b)))
        ref = F.relu(ref + torch.from_numpy(b)[None, :, None, None])
    elif epilogue == "residual":
        r = relay.var("r", shape=tuple(int(d) for d in ref.shape))
        inputs["r"] = _const(tuple(ref.shape))
        params.append(r)
        y = relay.nn.relu(relay.add(y, r))
        ref = F.relu(ref + torch.from_numpy(inputs["r"]))
    return relay.Function(params, y), inputs, ref.numpy()


def _build_and_run(func, inputs, target):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(func), target=target)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.run(**inputs)
    return m.get_output(0).numpy(), lib.get_lib().get_source()


POINTWISE = [
    # n, c, h, w, o, stride, epilogue
    (1, 32, 8, 8, 32, 1, "bias_relu"),
    (1, 12, 6, 24, 20, 1, "none"),  # rows of 24 pixels: 2 rows per 16-lane task; 20 channels
    (2, 16, 12, 16, 24, 2, "bias_relu"),  # batch 2, stride 2 (a ResNet downsample)
    (1, 8, 4, 4, 16, 1, "residual"),  # the whole image is one vector of 16 pixels
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", POINTWISE, ids=lambda c: "n{}c{}_{}x{}_o{}s{}_{}".format(*c))
def test_lone_pointwise_conv_is_a_gemm_over_pixels(case, target):
    n, c, h, w, o, stride, epilogue = case
    func, inputs, ref = _conv_model(n, c, h, w, o, 1, stride, 0, epilogue)
    out, source = _build_and_run(func, inputs, target)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    assert "conv2d_pointwise" in source


def test_avx2_pointwise_rows_too_short_for_two_vectors():
    # AVX2 blocks are 4 channels x 2 vectors of 8 pixels; 3 rows of 8 pixels have no group of
    # rows that 16 pixels tile, so each block takes one vector
    func, inputs, ref = _conv_model(1, 16, 3, 8, 16, 1, 1, 0, "bias_relu")
    out, source = _build_and_run(func, inputs, "llvm -mcpu=core-avx2")
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    assert "conv2d_pointwise" in source


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_pointwise_without_whole_vector_rows_keeps_the_blocked_kernel(target):
    # 7x7 = 49 pixels: no group of rows fills whole 16-lane vectors (8 on AVX2: 56)
    func, inputs, ref = _conv_model(1, 16, 7, 7, 32, 1, 1, 0, "bias_relu")
    out, source = _build_and_run(func, inputs, target)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    assert "conv2d_pointwise" not in source


STEMS = [
    # n, c, h, w, o, kernel, stride, padding, epilogue
    (1, 3, 32, 32, 16, 3, 2, 1, "bias_relu"),  # MobileNet's stem, small
    (2, 3, 9, 16, 32, 3, 1, 1, "none"),  # batch 2, stride 1, odd height
    (1, 1, 20, 33, 16, 2, 2, 0, "residual"),  # one channel, 2x2 kernel, odd width
    (1, 3, 11, 41, 16, 3, 2, 1, "bias_relu"),  # 21-wide rows: a partial last vector
    (1, 4, 15, 32, 24, 3, 2, (0, 1, 1, 0), "bias_relu"),  # asymmetric padding, 4 channels
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", STEMS, ids=lambda c: "n{}c{}_{}x{}_o{}k{}s{}_{}".format(
    *c[:7], c[8]))
def test_lone_stem_conv_writes_nchw_rows(case, target):
    n, c, h, w, o, k, stride, pad, epilogue = case
    func, inputs, ref = _conv_model(n, c, h, w, o, k, stride, pad, epilogue)
    out, source = _build_and_run(func, inputs, target)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    assert "data_phases" in source


@pytest.mark.parametrize("kernel", [1, 3])
def test_weight_given_at_run_time_takes_the_nchw_kernels(kernel):
    # a weight that is an input is not packed by AlterOpLayout: nn.conv2d's own strategy
    # picks the kernel, reading the OIHW weight
    c, stride, pad = (16, 2, 0) if kernel == 1 else (3, 2, 1)
    x = relay.var("x", shape=(2, c, 8, 32))
    w = relay.var("w", shape=(16, c, kernel, kernel))
    y = relay.nn.relu(relay.nn.conv2d(x, w, strides=(stride, stride), padding=(pad, pad),
                                      kernel_size=(kernel, kernel)))
    xn, wn = _const((2, c, 8, 32)), _const((16, c, kernel, kernel))
    out, source = _build_and_run(relay.Function([x, w], y), {"x": xn, "w": wn}, "llvm")
    ref = F.relu(F.conv2d(torch.from_numpy(xn), torch.from_numpy(wn), stride=stride,
                          padding=pad))
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=1e-4)
    assert ("conv2d_pointwise" if kernel == 1 else "data_phases") in source


def test_stem_inside_a_model_keeps_its_blocked_result():
    # the stem's consumer is a blocked conv: it writes NCHW16c, as before
    w1, w2 = _const((16, 3, 3, 3)), _const((16, 16, 3, 3), 0.2)
    x = relay.var("x", shape=(1, 3, 16, 32))
    y = relay.nn.relu(relay.nn.conv2d(x, relay.const(w1), strides=(2, 2), padding=(1, 1),
                                      kernel_size=(3, 3)))
    y = relay.nn.conv2d(y, relay.const(w2), padding=(1, 1), kernel_size=(3, 3))
    xn = _const((1, 3, 16, 32))
    out, source = _build_and_run(relay.Function([x], y), {"x": xn}, "llvm")
    t = F.relu(F.conv2d(torch.from_numpy(xn), torch.from_numpy(w1), stride=2, padding=1))
    np.testing.assert_allclose(out, F.conv2d(t, torch.from_numpy(w2), padding=1).numpy(),
                               rtol=1e-4, atol=1e-4)
    assert "data_phases" not in source


# ---- TE level: several outputs reading the conv, bad kernels ------------------------------
def _te_run(make, schedule, arrays, target):
    target = Target(target)
    with target:
        holders = [te.placeholder(a.shape, name=f"in{k}") for k, a in enumerate(arrays)]
        outs = make(*holders)
        sch = schedule(outs)
        mod = tvm.build(sch, [*holders, *outs], target=target)
    results = [tvm.nd.empty([int(d) for d in t.shape], "float32") for t in outs]
    mod(*[tvm.nd.array(a) for a in arrays], *results)
    return [r.numpy() for r in results]


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=core-avx2"])
def test_conv_read_by_two_outputs(target):
    x, w = _const((1, 8, 4, 8)), _const((16, 8, 1, 1))
    xs, ws = _const((1, 3, 8, 32)), _const((16, 3, 3, 3))

    def two(conv):
        return [te.compute(conv.shape, lambda *i: conv(*i) * 2.0, name="double",
                           tag="injective"), conv]

    pw = _te_run(lambda a, b: two(conv2d_pointwise.conv2d_pointwise_nchw(a, b, 1)),
                 conv2d_pointwise.schedule_conv2d_pointwise, [x, w], target)
    ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(w)).numpy()
    np.testing.assert_allclose(pw[1], ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(pw[0], 2 * ref, rtol=1e-4, atol=1e-4)
    stem = _te_run(lambda a, b: two(conv2d_stem.conv2d_stem_nchw(a, b, 2, 1, 1)),
                   conv2d_stem.schedule_conv2d_stem, [xs, ws], target)
    ref = F.conv2d(torch.from_numpy(xs), torch.from_numpy(ws), stride=2, padding=1).numpy()
    np.testing.assert_allclose(stem[1], ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(stem[0], 2 * ref, rtol=1e-4, atol=1e-4)


def test_bad_kernels_raise_naming_the_shapes():
    data = te.placeholder((1, 8, 4, 4))
    with pytest.raises(tvm.TVMError, match=r"not a 1x1 kernel over the 8 input channels"):
        conv2d_pointwise.conv2d_pointwise_nchw(data, te.placeholder((16, 8, 3, 3)), 1)
    with pytest.raises(tvm.TVMError, match=r"not a 1x1 kernel over the 8 input channels"):
        conv2d_pointwise.conv2d_pointwise_nchw(data, te.placeholder((16, 4, 1, 1)), 1)
    with pytest.raises(tvm.TVMError, match=r"does not read the 8 input channels"):
        conv2d_stem.conv2d_stem_nchw(data, te.placeholder((16, 3, 3, 3)), 1, 1, 1)


def test_which_shapes_take_the_kernels():
    assert conv2d_pointwise.pointwise_applies((1, 64, 56, 56), (128, 64, 1, 1), 2, 0, 1, 16)
    assert not conv2d_pointwise.pointwise_applies((1, 64, 56, 56), (128, 64, 1, 1), 1, 1, 1,
                                                  16)  # padded
    assert not conv2d_pointwise.pointwise_applies((1, 64, 56, 56), (128, 64, 3, 3), 1, 0, 1,
                                                  16)
    assert not conv2d_pointwise.pointwise_applies((1, 64, 14, 14), (128, 64, 1, 1), 1, 0, 1,
                                                  16)
    assert conv2d_pointwise.pointwise_applies((1, 64, 14, 14), (128, 64, 1, 1), 1, 0, 1, 4)
    assert not conv2d_stem.stem_applies((1, 8, 32, 32), (16, 8, 3, 3), 1, 1, 1, 1, 16)
    assert not conv2d_stem.stem_applies((1, 3, 30, 14), (16, 3, 3, 3), 1, 1, 1, 1, 16)
