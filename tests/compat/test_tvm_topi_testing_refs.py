"""tvm.topi.testing's NumPy references against independent oracles (torch, onnxruntime)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import tvm
import tvm.testing
import tvm.topi.testing as ref

rng = np.random.default_rng(7)


def _rand(*shape):
    return rng.standard_normal(shape).astype("float32")


def _torch_conv2d(data, weight, stride, pad, groups=1):
    top, left, bottom, right = pad
    padded = F.pad(torch.from_numpy(data), (left, right, top, bottom))
    return F.conv2d(padded, torch.from_numpy(weight), stride=stride, groups=groups).numpy()


@pytest.mark.parametrize("padding, pad", [(1, (1, 1, 1, 1)), ((0, 2), (0, 2, 0, 2)),
                                           ((1, 0, 2, 1), (1, 0, 2, 1)), ("SAME", (2, 2, 1, 1)),
                                           ("VALID", (0, 0, 0, 0))])
@pytest.mark.parametrize("groups", [1, 2])
def test_conv2d_nchw_and_nhwc_match_torch(padding, pad, groups):
    kernel = (4, 4) if padding == "SAME" else (3, 3)
    data, weight = _rand(2, 4, 7, 6), _rand(6, 4 // groups, *kernel)
    expected = _torch_conv2d(data, weight, (2, 1), pad, groups)
    tvm.testing.assert_allclose(ref.conv2d_nchw_python(data, weight, (2, 1), padding, groups),
                                expected, rtol=1e-5, atol=1e-5)
    nhwc = ref.conv2d_nhwc_python(data.transpose(0, 2, 3, 1), weight.transpose(2, 3, 1, 0),
                                  (2, 1), padding, groups)
    tvm.testing.assert_allclose(nhwc, expected.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-5)


def test_depthwise_conv2d_matches_torch_grouped_conv():
    data, filt = _rand(1, 3, 6, 6), _rand(3, 2, 3, 3)
    expected = _torch_conv2d(data, filt.reshape(6, 1, 3, 3), 1, (1, 1, 1, 1), groups=3)
    tvm.testing.assert_allclose(ref.depthwise_conv2d_python_nchw(data, filt, 1, 1), expected,
                                rtol=1e-5, atol=1e-5)
    nhwc = ref.depthwise_conv2d_python_nhwc(data.transpose(0, 2, 3, 1),
                                            filt.transpose(2, 3, 0, 1), 1, 1)
    tvm.testing.assert_allclose(nhwc, expected.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-5)


def test_conv1d_ncw_matches_torch_with_dilation():
    data, weight = _rand(2, 3, 11), _rand(4, 3, 3)
    expected = F.conv1d(torch.from_numpy(data), torch.from_numpy(weight), stride=2, padding=2,
                        dilation=2).numpy()
    tvm.testing.assert_allclose(ref.conv1d_ncw_python(data, weight, 2, 2, 2), expected,
                                rtol=1e-5, atol=1e-5)


def test_conv_rejects_mismatched_channels():
    with pytest.raises(ValueError, match="channels"):
        ref.conv2d_nchw_python(_rand(1, 3, 4, 4), _rand(2, 2, 3, 3), 1, 0)
    with pytest.raises(ValueError, match="padding"):
        ref.conv2d_nchw_python(_rand(1, 2, 4, 4), _rand(2, 2, 3, 3), 1, "FULL")


def test_dense_and_batch_matmul_match_torch():
    x, w, b = _rand(3, 5), _rand(4, 5), _rand(4)
    expected = F.relu(F.linear(*(torch.from_numpy(v) for v in (x, w, b)))).numpy()
    tvm.testing.assert_allclose(ref.dense(x, w, b, use_bias=True, use_relu=True), expected,
                                rtol=1e-5, atol=1e-6)
    a, c = _rand(2, 3, 5), _rand(2, 4, 5)
    expected = torch.bmm(torch.from_numpy(a), torch.from_numpy(c).transpose(1, 2)).numpy()
    tvm.testing.assert_allclose(ref.batch_matmul(a, c), expected, rtol=1e-5, atol=1e-6)
    expected = torch.bmm(torch.from_numpy(a).transpose(1, 2), torch.from_numpy(a)).numpy()
    tvm.testing.assert_allclose(ref.batch_matmul(a, a, trans_x=True, trans_y=False), expected,
                                rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_and_log_softmax_match_torch(axis):
    x = _rand(3, 4, 5) * 10
    t = torch.from_numpy(x)
    tvm.testing.assert_allclose(ref.softmax_python(x, axis), F.softmax(t, axis).numpy(),
                                rtol=1e-5, atol=1e-7)
    tvm.testing.assert_allclose(ref.log_softmax_python(x, axis), F.log_softmax(t, axis).numpy(),
                                rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("count_include_pad", [False, True])
def test_avg_pool2d_matches_torch(ceil_mode, count_include_pad):
    x = _rand(1, 2, 7, 8)
    expected = F.avg_pool2d(torch.from_numpy(x), 3, 2, 1, ceil_mode=ceil_mode,
                            count_include_pad=count_include_pad).numpy()
    out = ref.poolnd_python(x, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), "avg",
                            count_include_pad=count_include_pad, ceil_mode=ceil_mode)
    tvm.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_max_pool_matches_torch_with_dilation_and_layout():
    x = _rand(2, 3, 9, 8)
    expected = F.max_pool2d(torch.from_numpy(x), 3, 2, 1, dilation=2).numpy()
    out = ref.poolnd_python(x, (3, 3), (2, 2), (2, 2), (1, 1), (1, 1), "max",
                            count_include_pad=False)
    tvm.testing.assert_allclose(out, expected)
    out = ref.poolnd_python(x.transpose(0, 2, 3, 1), (3, 3), (2, 2), (2, 2), (1, 1), (1, 1),
                            "max", count_include_pad=False, layout="NHWC")
    tvm.testing.assert_allclose(out, expected.transpose(0, 2, 3, 1))
    x3 = _rand(1, 2, 4, 5, 6)
    expected = F.max_pool3d(torch.from_numpy(x3), 2, 2).numpy()
    out = ref.poolnd_python(x3, (2,) * 3, (2,) * 3, (1,) * 3, (0,) * 3, (0,) * 3, "max")
    tvm.testing.assert_allclose(out, expected)
    with pytest.raises(ValueError, match="pool_type"):
        ref.poolnd_python(x, (3, 3), (2, 2), (1, 1), (0, 0), (0, 0), "l2")


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_one_hot_matches_torch(axis):
    indices = np.array([[0, 3], [2, 1], [1, 1]])
    hot = F.one_hot(torch.from_numpy(indices), 4).numpy()  # the new axis last
    expected = np.moveaxis(np.where(hot == 1, 5.0, -1.0), -1, axis)
    tvm.testing.assert_allclose(ref.one_hot(indices, 5.0, -1.0, 4, axis, "float32"), expected)


def test_gather_matches_torch():
    data = _rand(3, 4, 2)
    indices = rng.integers(0, 4, size=(3, 5, 2))
    expected = torch.gather(torch.from_numpy(data), 1, torch.from_numpy(indices)).numpy()
    tvm.testing.assert_allclose(ref.gather_python(data, 1, indices), expected)


@pytest.mark.parametrize("method, mode, torch_mode, align", [
    ("nearest_neighbor", "asymmetric", "nearest", None),
    ("linear", "half_pixel", "bilinear", False),
    ("linear", "align_corners", "bilinear", True)])
def test_resize2d_matches_torch(method, mode, torch_mode, align):
    x = _rand(1, 2, 4, 5)
    expected = F.interpolate(torch.from_numpy(x), size=(8, 10), mode=torch_mode,
                             align_corners=align).numpy()
    out = ref.resize2d_python(x, (2, 2), "NCHW", method, mode)
    tvm.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


@tvm.testing.requires_package("onnxruntime")
def test_roi_align_matches_onnxruntime():
    import onnxruntime
    from onnx import TensorProto, helper

    x = _rand(2, 3, 10, 12)
    rois = np.array([[0, 1.0, 1.5, 8.0, 7.0], [1, -2.0, 3.0, 20.0, 19.0],
                     [0, 4.0, 4.0, 4.5, 4.2]], "float32")
    node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], output_height=3,
                            output_width=2, sampling_ratio=2, spatial_scale=0.5, mode="avg")
    graph = helper.make_graph(
        [node], "roi", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                        helper.make_tensor_value_info("rois", TensorProto.FLOAT, [3, 4]),
                        helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x, "rois": rois[:, 1:].copy(),
                                     "idx": rois[:, 0].astype("int64")})
    out = ref.roi_align_nchw_python(x, rois, (3, 2), 0.5, 2, "avg")
    tvm.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    nhwc = ref.roi_align_nhwc_python(x.transpose(0, 2, 3, 1), rois, (3, 2), 0.5, 2)
    tvm.testing.assert_allclose(nhwc, expected.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-6)


def test_roi_align_max_takes_the_largest_sample():
    # A single pixel spike: each sample in its bin sees a fraction of it; max keeps the largest.
    x = np.zeros((1, 1, 4, 4), "float32")
    x[0, 0, 1, 1] = 8.0
    rois = np.array([[0, 0.0, 0.0, 4.0, 4.0]], "float32")
    out = ref.roi_align_nchw_python(x, rois, 1, 1.0, 2, "max")
    # Samples at 1.0 and 3.0 on each axis: (1, 1) lands on the spike exactly.
    assert out[0, 0, 0, 0] == pytest.approx(8.0)
    avg = ref.roi_align_nchw_python(x, rois, 1, 1.0, 2, "avg")
    assert avg[0, 0, 0, 0] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="mode"):
        ref.roi_align_nchw_python(x, rois, 1, 1.0, 2, "min")
