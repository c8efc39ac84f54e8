"""x86 depthwise conv2d on blocked (NCHW{c}) activations, as it runs inside a MobileNet:
the input read in place with its padding peeled off the loops, the epilogue applied to the
register accumulators. Answers against PyTorch on odd shapes (padding, asymmetric padding,
stride, dilation, channels not a multiple of 16, 1x1 spatial, 5x5 kernels), on the host's
AVX-512 and on AVX2."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor

TARGETS = ["llvm", "llvm -mcpu=core-avx2"]
RNG = np.random.default_rng(18)


def _const(shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def _run(func, x, target):
    mod = tvm.IRModule.from_expr(func)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.run(x=x)
    return [m.get_output(k).numpy() for k in range(m.get_num_outputs())], lib


def _pw_dw_pw(c_in, c, h, w, k, stride, pad, dilation, last_pw=True):
    """pointwise -> depthwise + bias + relu -> pointwise (the depthwise between two blocked
    convs); returns the Relay function and a PyTorch oracle of it."""
    w1, wd, b, w2 = (_const((c, c_in, 1, 1), 0.5), _const((c, 1, k, k)), _const((c,)),
                     _const((8, c, 1, 1), 0.3))
    x = relay.var("x", shape=(1, c_in, h, w))
    y = relay.nn.relu(relay.nn.conv2d(x, relay.const(w1), kernel_size=(1, 1)))
    y = relay.nn.conv2d(y, relay.const(wd), kernel_size=(k, k), strides=(stride, stride),
                        padding=pad, dilation=(dilation, dilation), groups=c)
    y = relay.nn.relu(relay.nn.bias_add(y, relay.const(b)))
    if last_pw:
        y = relay.nn.conv2d(y, relay.const(w2), kernel_size=(1, 1))

    def oracle(xn):
        t = F.relu(F.conv2d(torch.from_numpy(xn), torch.from_numpy(w1)))
        top, left, bottom, right = pad if len(pad) == 4 else (*pad, *pad)
        t = F.conv2d(F.pad(t, (left, right, top, bottom)), torch.from_numpy(wd),
                     stride=stride, dilation=dilation, groups=c)
        t = F.relu(t + torch.from_numpy(b)[None, :, None, None])
        if last_pw:
            t = F.conv2d(t, torch.from_numpy(w2))
        return t.numpy()

    return relay.Function([x], y), oracle


CASES = [
    # c_in, c, h, w, kernel, stride, padding (top, left[, bottom, right]), dilation
    (8, 32, 14, 14, 3, 1, (1, 1), 1),
    (8, 32, 15, 13, 3, 2, (1, 1), 1),  # odd sizes, stride 2
    (8, 48, 9, 11, 3, 1, (0, 0), 1),  # no padding: no border rows or blocks at all
    (8, 24, 10, 10, 3, 2, (1, 0, 0, 1), 1),  # asymmetric padding, 24 channels
    (8, 40, 12, 12, 3, 1, (2, 2), 2),  # dilation 2
    (8, 32, 11, 17, 5, 2, (2, 2), 1),  # 5x5 kernel, stride 2
    (8, 32, 1, 1, 3, 1, (1, 1), 1),  # 1x1 spatial: every tap but the centre is padding
    (8, 16, 2, 3, 3, 2, (1, 1), 1),  # output narrower than a register block
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "c{1}_{2}x{3}_k{4}s{5}p{6}d{7}".format(*c)
                         .replace(" ", "").replace(",", "_"))
def test_blocked_depthwise_matches_torch(case, target):
    c_in, c, h, w, k, stride, pad, dilation = case
    func, oracle = _pw_dw_pw(c_in, c, h, w, k, stride, pad, dilation)
    x = _const((1, c_in, h, w))
    (out,), lib = _run(func, x, target)
    assert "contrib_depthwise_conv2d_NCHWc" in lib.get_graph_json()
    np.testing.assert_allclose(out, oracle(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_blocked_depthwise_that_ends_the_blocked_region_writes_nchw(target):
    func, oracle = _pw_dw_pw(8, 48, 13, 9, 3, 2, (1, 1), 1, last_pw=False)
    x = _const((1, 8, 13, 9))
    (out,), _ = _run(func, x, target)
    np.testing.assert_allclose(out, oracle(x), rtol=1e-4, atol=1e-4)


def test_blocked_depthwise_read_in_place_has_no_padded_copy():
    # the conv reads the blocked input itself: the lowered kernel allocates no padded copy
    func, _ = _pw_dw_pw(8, 32, 14, 14, 3, 1, (1, 1), 1)
    _, lib = _run(func, _const((1, 8, 14, 14)), "llvm")
    ir = lib.get_lib().get_source("ll")
    body = ir[ir.index("fused_nn_contrib_depthwise_conv2d_NCHWc"):]
    assert "data_pack" not in body and "depthwise_conv2d_NCHWc" in body


STEMS = [
    # c_in, c, h, w, kernel, stride, padding: convs reading an NCHW image (the stem)
    (3, 32, 33, 29, 3, 2, 1),  # MobileNet's stem on an odd image
    (3, 16, 23, 23, 7, 2, 3),  # ResNet's 7x7 stem
    (4, 16, 9, 18, 3, 1, 0),  # no padding
    (3, 8, 1, 1, 3, 1, 1),  # 1x1 image: only the centre tap reads it
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", STEMS, ids=lambda c: "c{}-{}_{}x{}_k{}s{}p{}".format(*c))
def test_stem_conv_on_an_nchw_image_matches_torch(case, target):
    # the stem's padded copy of the image is peeled into border columns and vector copies
    c_in, c, h, w, k, stride, pad = case
    w1, wd = _const((c, c_in, k, k), 0.3), _const((c, 1, 3, 3))
    x = relay.var("x", shape=(1, c_in, h, w))
    y = relay.nn.relu(relay.nn.conv2d(x, relay.const(w1), kernel_size=(k, k),
                                      strides=(stride, stride), padding=(pad, pad)))
    y = relay.nn.conv2d(y, relay.const(wd), kernel_size=(3, 3), padding=(1, 1), groups=c)
    xn = _const((1, c_in, h, w))
    (out,), _ = _run(relay.Function([x], y), xn, target)
    t = F.relu(F.conv2d(torch.from_numpy(xn), torch.from_numpy(w1), stride=stride,
                        padding=pad))
    want = F.conv2d(t, torch.from_numpy(wd), padding=1, groups=c).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


LONE = [
    # c, multiplier, h, w, kernel, (stride h, stride w), padding, dilation: NCHW in and out
    (32, 1, 40, 37, 3, (1, 1), (1, 1), 1),  # plane by plane: border blocks lane by lane
    (16, 1, 14, 14, 5, (2, 1), (2, 1, 1, 2), 1),  # row stride 2, asymmetric padding
    (8, 2, 9, 21, 3, (1, 1), (2, 2), 2),  # channel multiplier 2, dilation 2
    (24, 1, 1, 1, 3, (1, 1), (1, 1), 1),  # 1x1 plane
    (16, 1, 15, 15, 3, (2, 2), (1, 1), 1),  # column stride 2: planes through a phase copy
    (8, 2, 17, 23, 3, (2, 2), (1, 1), 2),  # ... with a multiplier and dilation 2
    (16, 1, 20, 48, 3, (1, 3), (0, 1, 2, 1), 1),  # column stride 3, asymmetric padding
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", LONE, ids=lambda c: "c{}m{}_{}x{}_k{}s{}p{}d{}".format(*c)
                         .replace(" ", "").replace(",", "_"))
def test_lone_nchw_depthwise_matches_torch(case, target):
    c, mult, h, w, k, stride, pad, dilation = case
    wd, b = _const((c * mult, 1, k, k)), _const((c * mult,))
    x = relay.var("x", shape=(1, c, h, w))
    y = relay.nn.conv2d(x, relay.const(wd), kernel_size=(k, k), strides=stride, padding=pad,
                        dilation=(dilation, dilation), groups=c, channels=c * mult)
    y = relay.nn.relu(relay.nn.bias_add(y, relay.const(b)))
    xn = _const((1, c, h, w))
    (out,), _ = _run(relay.Function([x], y), xn, target)
    top, left, bottom, right = pad if len(pad) == 4 else (*pad, *pad)
    t = F.conv2d(F.pad(torch.from_numpy(xn), (left, right, top, bottom)), torch.from_numpy(wd),
                 torch.from_numpy(b), stride=stride, dilation=dilation, groups=c)
    np.testing.assert_allclose(out, F.relu(t).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [LONE[0], LONE[5]], ids=["stride1", "stride2"])
def test_lone_nchw_depthwise_on_the_c_target_matches_torch(case):
    test_lone_nchw_depthwise_matches_torch(case, "c")


def test_a_column_stride_runs_plane_by_plane_through_a_phase_copy():
    # a stride-2 row read is a gather per tap; the plane kernel reads a per-plane copy split
    # by column phase instead of packing to channel blocks and back
    from kiln import te
    from kiln.topi.x86.depthwise import depthwise_conv2d_nchw

    y = depthwise_conv2d_nchw(te.placeholder((1, 16, 30, 30)), te.placeholder((16, 1, 3, 3)),
                              2, 1, 1)
    planes = y.op.input_tensors[0].op
    assert planes.tag == "depthwise_conv2d_planes"
    assert [t.op.tag for t in planes.input_tensors][0] == "depthwise_phase_split"


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("target", TARGETS)
def test_plane_depthwise_with_two_outputs_reading_it(target, stride):
    # the conv and its relu both returned: the conv is computed whole, then each output
    from kiln import te, topi
    from kiln.topi.x86.depthwise import depthwise_conv2d_nchw, schedule_depthwise_conv2d_nchw

    xn, wn = _const((1, 8, 11, 19)), _const((8, 1, 3, 3))
    with tvm.target.Target(target):
        d, k = te.placeholder(xn.shape, name="d"), te.placeholder(wn.shape, name="k")
        y = depthwise_conv2d_nchw(d, k, stride, 1, 1)
        z = topi.nn.relu(y)
        s = schedule_depthwise_conv2d_nchw([y, z])
    f = tvm.build(s, [d, k, y, z], target)
    dev = tvm.cpu(0)
    want = F.conv2d(torch.from_numpy(xn), torch.from_numpy(wn), stride=stride, padding=1,
                    groups=8).numpy()
    args = [tvm.nd.array(xn, dev), tvm.nd.array(wn, dev),
            tvm.nd.empty(want.shape, "float32", dev), tvm.nd.empty(want.shape, "float32", dev)]
    f(*args)
    np.testing.assert_allclose(args[2].numpy(), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(args[3].numpy(), np.maximum(want, 0), rtol=1e-4, atol=1e-4)


def test_tuned_channel_blocks_keep_the_channel_blocked_kernel():
    # a depthwise_conv2d_nchw.x86 record's c_bn / tile_ow were measured on the blocked kernel
    from kiln import te
    from kiln.topi.x86.depthwise import depthwise_conv2d_nchw

    d, k = te.placeholder((1, 16, 20, 20)), te.placeholder((16, 1, 3, 3))
    untuned = depthwise_conv2d_nchw(d, k, 1, 1, 1)
    tuned = depthwise_conv2d_nchw(d, k, 1, 1, 1, config={"c_bn": 8, "tile_ow": 4})
    assert untuned.op.input_tensors[0].op.tag == "depthwise_conv2d_planes"
    assert tuned.op.input_tensors[0].op.tag == "depthwise_conv2d_nchwc"
