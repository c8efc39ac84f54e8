"""nn and image ops through their generic strategies, against PyTorch / NumPy / ONNX Runtime,
on both the ``c`` and the ``llvm`` target."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from strategy_testlib import EXECUTORS, run_cases

from kiln.relay.op import op_attrs as A

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype("float32")


def t(x):
    return torch.from_numpy(np.ascontiguousarray(x))


X4 = f32(2, 4, 7, 6)
X3 = f32(2, 4, 9)
X5 = f32(1, 2, 4, 5, 3)


@pytest.fixture(params=["c", "llvm", EXECUTORS])
def target(request):
    return request.param


def test_convolutions_match_torch(target):
    w = f32(6, 4, 3, 3)
    wg = f32(6, 2, 3, 2)
    wdw = f32(8, 1, 3, 3)
    w1 = f32(5, 4, 3)
    w3 = f32(3, 2, 2, 3, 2)
    wt = f32(4, 3, 3, 3)
    wt1 = f32(4, 2, 4)
    cases = [
        ("nn.conv2d", A.Conv2DAttrs(padding=(1, 1, 1, 1)), [X4, w],
         F.conv2d(t(X4), t(w), padding=1)),
        ("nn.conv2d", A.Conv2DAttrs(strides=(2, 1), padding=(0, 1, 2, 0), dilation=(1, 2),
                                    groups=2), [X4, wg],
         F.conv2d(F.pad(t(X4), (1, 0, 0, 2)), t(wg), stride=(2, 1), dilation=(1, 2),
                  groups=2)),
        ("nn.conv2d", A.Conv2DAttrs(padding=(1, 1, 1, 1), groups=4), [X4, wdw],
         F.conv2d(t(X4), t(wdw), padding=1, groups=4)),
        ("nn.conv2d", A.Conv2DAttrs(padding=(1, 1, 1, 1), data_layout="NHWC",
                                    kernel_layout="HWIO"),
         [X4.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0)],
         F.conv2d(t(X4), t(w), padding=1).permute(0, 2, 3, 1)),
        ("nn.conv1d", A.Conv1DAttrs(strides=(2,), padding=(1, 2)), [X3, w1],
         F.conv1d(F.pad(t(X3), (1, 2)), t(w1), stride=2)),
        ("nn.conv3d", A.Conv3DAttrs(padding=(1, 0, 1, 1, 0, 1)), [X5, w3],
         F.conv3d(F.pad(t(X5), (1, 1, 0, 0, 1, 1)), t(w3))),
        ("nn.conv2d_transpose", A.Conv2DTransposeAttrs(strides=(2, 2), padding=(1, 1, 1, 1),
                                                       output_padding=(1, 1)), [X4, wt],
         F.conv_transpose2d(t(X4), t(wt), stride=2, padding=1, output_padding=1)),
        ("nn.conv1d_transpose", A.Conv1DTransposeAttrs(strides=(3,), padding=(1, 1),
                                                       groups=2), [X3, wt1],
         F.conv_transpose1d(t(X3), t(wt1), stride=3, padding=1, groups=2)),
    ]
    results = run_cases([c[:3] for c in cases], target)
    for (name, _, _, want), (out,) in zip(cases, results):
        np.testing.assert_allclose(out, want.numpy(), rtol=1e-4, atol=1e-4, err_msg=name)


def test_dense_family_matches_numpy(target):
    a, b = f32(3, 5), f32(4, 5)
    bx, by = f32(2, 3, 5), f32(1, 4, 5)
    packed = b.reshape(2, 2, 5).transpose(0, 2, 1)
    cases = [
        ("nn.dense", A.DenseAttrs(), [a, b], a @ b.T),
        ("nn.matmul", A.MatmulAttrs(transpose_a=True), [a.T.copy(), b.T.copy()], a @ b.T),
        ("nn.batch_matmul", A.BatchMatmulAttrs(transpose_b=True), [bx, by],
         bx @ by.transpose(0, 2, 1)),
        ("nn.contrib_dense_pack", A.DensePackAttrs(weight_layout="NC2n"), [a, packed],
         a @ b.T),
    ]
    results = run_cases([c[:3] for c in cases], target)
    for (name, _, _, want), (out,) in zip(cases, results):
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_pools_match_torch(target):
    cases = [
        ("nn.max_pool2d", A.MaxPool2DAttrs(pool_size=(3, 3), strides=(2, 2),
                                           padding=(1, 1, 1, 1)), [X4],
         F.max_pool2d(t(X4), 3, 2, 1)),
        ("nn.max_pool2d", A.MaxPool2DAttrs(pool_size=(2, 2), strides=(2, 2), ceil_mode=True),
         [X4], F.max_pool2d(t(X4), 2, 2, ceil_mode=True)),
        ("nn.avg_pool2d", A.AvgPool2DAttrs(pool_size=(3, 3), strides=(2, 2),
                                           padding=(1, 1, 1, 1), count_include_pad=True),
         [X4], F.avg_pool2d(t(X4), 3, 2, 1, count_include_pad=True)),
        ("nn.avg_pool2d", A.AvgPool2DAttrs(pool_size=(3, 3), strides=(2, 2),
                                           padding=(1, 1, 1, 1), count_include_pad=False,
                                           ceil_mode=True),
         [X4], F.avg_pool2d(t(X4), 3, 2, 1, ceil_mode=True, count_include_pad=False)),
        ("nn.max_pool1d", A.MaxPool1DAttrs(pool_size=(2,), strides=(1,), dilation=(2,)),
         [X3], F.max_pool1d(t(X3), 2, 1, dilation=2)),
        ("nn.avg_pool1d", A.AvgPool1DAttrs(pool_size=(3,), strides=(2,)), [X3],
         F.avg_pool1d(t(X3), 3, 2)),
        ("nn.max_pool3d", A.MaxPool3DAttrs(pool_size=(2, 2, 2), strides=(1, 2, 1)), [X5],
         F.max_pool3d(t(X5), 2, (1, 2, 1))),
        ("nn.avg_pool3d", A.AvgPool3DAttrs(pool_size=(2, 2, 2), strides=(2, 2, 2)), [X5],
         F.avg_pool3d(t(X5), 2, 2)),
        ("nn.global_avg_pool2d", A.GlobalPool2DAttrs(), [X4], t(X4).mean((2, 3), True)),
        ("nn.global_max_pool2d", A.GlobalPool2DAttrs(), [X4], t(X4).amax((2, 3), True)),
        ("nn.adaptive_avg_pool2d", A.AdaptivePool2DAttrs(output_size=(3, 4)), [X4],
         F.adaptive_avg_pool2d(t(X4), (3, 4))),
        ("nn.adaptive_max_pool2d", A.AdaptivePool2DAttrs(output_size=(4, 5)), [X4],
         F.adaptive_max_pool2d(t(X4), (4, 5))),
        ("nn.adaptive_avg_pool1d", A.AdaptivePool1DAttrs(output_size=(4,)), [X3],
         F.adaptive_avg_pool1d(t(X3), 4)),
        ("nn.adaptive_max_pool1d", A.AdaptivePool1DAttrs(output_size=(2,)), [X3],
         F.adaptive_max_pool1d(t(X3), 2)),
    ]
    results = run_cases([c[:3] for c in cases], target)
    for (name, _, _, want), (out,) in zip(cases, results):
        np.testing.assert_allclose(out, want.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)


def test_activation_softmax_and_norms_match_torch(target):
    gamma, beta = f32(4), f32(4)
    mean, var = f32(4), np.abs(f32(4)) + 0.5
    xl = f32(3, 5)
    slope = f32(4)
    cases = [
        ("nn.softmax", A.SoftmaxAttrs(axis=1), [X4], F.softmax(t(X4), 1)),
        ("nn.log_softmax", A.SoftmaxAttrs(axis=-1), [X4], F.log_softmax(t(X4), -1)),
        ("nn.fast_softmax", A.SoftmaxAttrs(axis=-1), [X4], F.softmax(t(X4), -1)),
        ("nn.leaky_relu", A.LeakyReluAttrs(alpha=0.2), [X4], F.leaky_relu(t(X4), 0.2)),
        ("nn.prelu", A.PReluAttrs(axis=1), [X4, slope], F.prelu(t(X4), t(slope))),
        ("nn.bias_add", A.BiasAddAttrs(axis=1), [X4, gamma],
         t(X4) + t(gamma)[None, :, None, None]),
        ("nn.batch_norm", A.BatchNormAttrs(epsilon=1e-3), [X4, gamma, beta, mean, var],
         F.batch_norm(t(X4), t(mean), t(var), t(gamma), t(beta), eps=1e-3)),
        ("nn.layer_norm", A.LayerNormAttrs(axis=-1), [xl, f32(5), f32(5)], None),
        ("nn.instance_norm", A.InstanceNormAttrs(), [X4, gamma, beta],
         F.instance_norm(t(X4), weight=t(gamma), bias=t(beta))),
        ("nn.group_norm", A.GroupNormAttrs(num_groups=2), [X4, gamma, beta],
         F.group_norm(t(X4), 2, t(gamma), t(beta))),
        ("nn.l2_normalize", A.L2NormalizeAttrs(eps=1e-6, axis=(1,)), [X4],
         F.normalize(t(X4), dim=1, eps=1e-3)),
        ("nn.lrn", A.LRNAttrs(size=3, axis=1, alpha=1e-2, beta=0.75, bias=2.0), [X4],
         F.local_response_norm(t(X4), 3, 1e-2, 0.75, 2.0)),
    ]
    results = run_cases([c[:3] for c in cases], target)
    for (name, _, ins, want), outs in zip(cases, results):
        if name == "nn.layer_norm":
            want = F.layer_norm(t(ins[0]), (5,), t(ins[1]), t(ins[2]))
        np.testing.assert_allclose(outs[0], want.numpy(), rtol=1e-4, atol=1e-4, err_msg=name)
    bn = results[6]
    np.testing.assert_array_equal(bn[1], mean)
    np.testing.assert_array_equal(bn[2], var)


def test_pad_and_pixel_ops_match_numpy(target):
    pads = ((0, 0), (1, 0), (2, 1), (0, 3))
    mp = ((0, 0), (0, 0), (1, 2), (2, 1))
    d2s_in = f32(1, 8, 2, 3)
    cases = [
        ("nn.pad", A.PadAttrs(pad_width=pads), [X4, np.float32(1.5)],
         np.pad(X4, pads, constant_values=1.5)),
        ("nn.pad", A.PadAttrs(pad_width=pads, pad_mode="edge"), [X4, np.float32(0)],
         np.pad(X4, pads, mode="edge")),
        ("nn.pad", A.PadAttrs(pad_width=pads, pad_mode="reflect"), [X4, np.float32(0)],
         np.pad(X4, pads, mode="reflect")),
        ("nn.mirror_pad", A.MirrorPadAttrs(pad_width=mp, mode="SYMMETRIC"), [X4],
         np.pad(X4, mp, mode="symmetric")),
        ("nn.mirror_pad", A.MirrorPadAttrs(pad_width=mp, mode="REFLECT"), [X4],
         np.pad(X4, mp, mode="reflect")),
        ("nn.depth_to_space", A.SubPixelAttrs(block_size=2, mode="DCR"), [d2s_in],
         d2s_in.reshape(1, 2, 2, 2, 2, 3).transpose(0, 3, 4, 1, 5, 2).reshape(1, 2, 4, 6)),
        ("nn.depth_to_space", A.SubPixelAttrs(block_size=2, mode="CRD"), [d2s_in],
         F.pixel_shuffle(t(d2s_in), 2).numpy()),
        ("nn.space_to_depth", A.SubPixelAttrs(block_size=2), [X4[:, :, :6]],
         X4[:, :, :6].reshape(2, 4, 3, 2, 3, 2).transpose(0, 3, 5, 1, 2, 4).reshape(
             2, 16, 3, 3)),
        ("nn.upsampling", A.UpSamplingAttrs(scale_h=2.0, scale_w=3.0), [X4],
         X4.repeat(2, 2).repeat(3, 3)),
        ("nn.upsampling", A.UpSamplingAttrs(scale_h=2.0, scale_w=2.0, method="bilinear",
                                            align_corners=True), [X4],
         F.interpolate(t(X4), scale_factor=2, mode="bilinear", align_corners=True).numpy()),
        ("nn.dropout", A.DropoutAttrs(rate=0.3), [X4], X4),
    ]
    results = run_cases([c[:3] for c in cases], target)
    for (name, _, _, want), outs in zip(cases, results):
        np.testing.assert_allclose(outs[0], want, rtol=1e-5, atol=1e-5, err_msg=name)


def _onnx_resize(x, sizes, mode, ctm, nearest_mode="floor", cubic_a=-0.75, exclude=0,
                 roi=None, extrapolation=0.0):
    import onnxruntime as ort
    from onnx import TensorProto, helper

    node = helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode=mode,
                            coordinate_transformation_mode=ctm, nearest_mode=nearest_mode,
                            cubic_coeff_a=cubic_a, exclude_outside=exclude,
                            extrapolation_value=extrapolation)
    roi = np.array(roi if roi is not None else [], "float32")
    graph = helper.make_graph(
        [node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("roi", TensorProto.FLOAT, roi.shape, roi),
         helper.make_tensor("sizes", TensorProto.INT64, [len(sizes)], sizes)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def test_resize_matches_onnxruntime(target):
    x = f32(1, 2, 4, 5)
    x1 = f32(1, 2, 6)
    roi = [0, 0, 0.2, 0.1, 1, 1, 0.9, 0.8]
    specs = [
        ("image.resize2d", dict(size=(7, 3), method="linear",
                                coordinate_transformation_mode="half_pixel"), x,
         ("linear", "half_pixel")),
        ("image.resize2d", dict(size=(8, 10), method="nearest_neighbor",
                                coordinate_transformation_mode="asymmetric",
                                rounding_method="floor"), x,
         ("nearest", "asymmetric", "floor")),
        ("image.resize2d", dict(size=(6, 9), method="nearest_neighbor",
                                coordinate_transformation_mode="half_pixel",
                                rounding_method="round_prefer_ceil"), x,
         ("nearest", "half_pixel", "round_prefer_ceil")),
        ("image.resize2d", dict(size=(6, 7), method="cubic", cubic_alpha=-0.75,
                                coordinate_transformation_mode="align_corners"), x,
         ("cubic", "align_corners", "floor", -0.75)),
        ("image.resize2d", dict(size=(5, 8), method="cubic", cubic_alpha=-0.5,
                                cubic_exclude=1,
                                coordinate_transformation_mode="pytorch_half_pixel"), x,
         ("cubic", "pytorch_half_pixel", "floor", -0.5, 1)),
        ("image.resize2d", dict(size=(5, 6), method="linear", roi=roi[2:4] + roi[6:],
                                coordinate_transformation_mode="tf_crop_and_resize",
                                extrapolation_value=-3.0), x,
         ("linear", "tf_crop_and_resize", "floor", -0.75, 0, roi, -3.0)),
        ("image.resize1d", dict(size=(11,), method="linear", layout="NCW",
                                coordinate_transformation_mode="asymmetric"), x1,
         ("linear", "asymmetric")),
    ]
    cases = [(n, (A.Resize2DAttrs if n.endswith("2d") else A.Resize1DAttrs)(**kw), [data])
             for n, kw, data, _ in specs]
    results = run_cases(cases, target)
    for (_, kw, data, onnx_args), (out,) in zip(specs, results):
        sizes = list(data.shape[:2]) + list(kw["size"])
        want = _onnx_resize(data, sizes, *onnx_args)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=str(onnx_args))


def test_winograd_and_gemm_convolutions_match_torch(target):
    x, w = f32(1, 3, 7, 9), f32(4, 3, 3, 3)
    u = run_cases([("nn.contrib_conv2d_winograd_weight_transform",
                    A.ConvWinogradWeightTransformAttrs(tile_size=4), [w])], target)[0][0]
    assert u.shape == (6, 6, 4, 3)
    conv = run_cases([("nn.contrib_conv2d_winograd_without_weight_transform",
                       A.Conv2DWinogradAttrs(tile_size=4, padding=(1, 1, 1, 1), channels=4,
                                             kernel_size=(3, 3)), [x, u])], target,
                     tol=1e-4)[0][0]  # Winograd's transforms reassociate the sums
    ref = F.conv2d(t(x), t(w), padding=1).numpy()
    np.testing.assert_allclose(conv, ref, rtol=1e-4, atol=1e-4)
    w_hwio = w.transpose(2, 3, 1, 0).copy()
    packed = run_cases([("nn.contrib_conv2d_gemm_weight_transform",
                         A.ConvGemmWeightTransformAttrs(tile_N=4, tile_K=8), [w_hwio])],
                       target)[0][0]
    assert packed.shape == (1, 4, 4, 8)
    xn = x.transpose(0, 2, 3, 1).copy()
    attrs = A.Conv2DAttrs(strides=(2, 1), padding=(1, 1, 0, 0), channels=4,
                          kernel_size=(3, 3), data_layout="NHWC", kernel_layout="HWIO")
    got = run_cases([("nn.contrib_conv2d_gemm_without_weight_transform", attrs,
                      [xn, packed])], target)[0][0]
    ref2 = F.conv2d(F.pad(t(x), (1, 0, 1, 0)), t(w), stride=(2, 1)).permute(0, 2, 3, 1)
    np.testing.assert_allclose(got, ref2.numpy(), rtol=1e-4, atol=1e-4)
