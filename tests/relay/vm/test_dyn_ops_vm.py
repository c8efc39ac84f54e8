"""Every ``dyn.*`` op and ``argwhere`` through ``relay.vm.compile`` + VirtualMachine, on llvm
and c, each at several run-time shapes from one executable (oracle: NumPy, and the ONNX
reference evaluator for linear resize). Bad run-time shape values raise a TVMError."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.runtime.vm import VirtualMachine

ANY = relay.Any()


def _var(name, shape, dtype="float32"):
    return relay.var(name, shape=shape, dtype=dtype)


def _functions():
    """name -> Relay function; one module holds them all, so each target compiles once."""
    x2 = _var("x", (ANY, ANY))
    s2 = _var("s", (2,), "int64")
    x4 = _var("x", (ANY, 2, ANY, ANY))
    scalar_i64 = _var("a", (), "int64")
    b, e, st = (_var(n, (2,), "int64") for n in ("b", "e", "st"))
    like = _var("like", (ANY, ANY))
    fill = _var("fill", ())
    idx = _var("idx", (ANY,), "int32")
    depth = _var("depth", (), "int32")
    widths = _var("widths", (2, 2), "int64")
    k = _var("k", (), "int32")
    roi = _var("roi", (4,), "float32")
    scale_h, scale_w = _var("sh", (), "float64"), _var("sw", (), "float64")
    x3 = _var("x", (ANY, ANY, ANY))
    axes1 = _var("axes", (1,), "int64")
    s3 = _var("s", (3,), "int64")
    return {
        "reshape": ([x2, s2], relay.reshape(x2, s2)),
        "expand_dims": ([x2, scalar_i64], relay.expand_dims(x2, scalar_i64)),
        "squeeze": ([x3, axes1], relay.squeeze(x3, axes1)),
        "broadcast_to": ([x2, s3], relay.broadcast_to(x2, s3)),
        "zeros": ([s2], relay.zeros(s2, "float32")),
        "ones": ([s2], relay.ones(s2, "int32")),
        "full": ([fill, s2], relay.full(fill, s2, "float32")),
        "tile": ([x2, s2], relay.tile(x2, s2)),
        "one_hot": ([idx, depth], relay.one_hot(idx, relay.const(5.0), relay.const(-1.0),
                                                depth, -1, "float32")),
        "pad": ([x2, widths, fill], relay.nn.pad(x2, widths, fill)),
        "strided_slice": ([x2, b, e, st], relay.strided_slice(x2, b, e, st)),
        "topk": ([x2, k], relay.topk(x2, k, axis=1, ret_type="both").astuple()),
        "topk_ascending_values": ([x2, k], relay.topk(x2, k, axis=0, ret_type="values",
                                                      is_ascend=True)),
        "resize_nearest": ([x4, s2], relay.image.resize2d(
            x4, s2, None, "NCHW", "nearest_neighbor", "asymmetric", "floor")),
        "resize_linear": ([x4, s2, roi], relay.image.resize2d(x4, s2, roi, "NCHW", "linear",
                                                              "half_pixel")),
        "resize_crop": ([x4, s2, roi], relay.image.resize2d(
            x4, s2, roi, "NCHW", "linear", "tf_crop_and_resize", extrapolation_value=-3.0)),
        "upsampling": ([x4, scale_h, scale_w], relay.nn.upsampling(x4, scale_h, scale_w)),
        "argwhere": ([x2], relay.argwhere(relay.greater(x2, relay.const(0.0)))),
        "argwhere_3d": ([x3], relay.argwhere(x3)),
        "layout_nhwc": ([x4], relay.layout_transform(x4, "NCHW", "NHWC")),
        "layout_blocked": ([x4], relay.layout_transform(x4, "NCHW", "NCHW2c")),
        "slice_like": ([x2, like], relay.slice_like(x2, like)),
        "slice_like_axis": ([x2, like], relay.slice_like(x2, like, axes=[1])),
    }


@pytest.fixture(scope="module", params=["llvm", "c"])
def vm(request):
    mod = kiln.IRModule()
    names = []
    for name, (params, body) in _functions().items():
        names.append(relay.GlobalVar(name))
        mod[names[-1]] = relay.Function(params, body)
    # main refers to every function, so none is removed as unreachable
    mod[relay.GlobalVar("main")] = relay.Function([], relay.Tuple(names))
    exe = relay.vm.compile(mod, request.param)
    return VirtualMachine(exe, kiln.cpu(0))


def _run(vm, name, *args):
    out = vm.invoke(name, *args)
    if isinstance(out, list | tuple) or hasattr(out, "fields"):
        return [o.numpy() for o in out]
    return out.numpy()


def _i64(*values):
    return np.array(values, "int64")


def _data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def _check(actual, expected):
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, newshape", [((2, 3), (3, 2)), ((1, 6), (-1, 2)),
                                             ((3, 4), (0, -1)), ((4, 0), (2, 0)),
                                             ((1, 1), (1, 1))])
def test_dyn_reshape(vm, shape, newshape):
    """0 copies the input extent at its position, -1 infers one."""
    data = _data(shape)
    expected = data.reshape([d if d else shape[k] for k, d in enumerate(newshape)])
    _check(_run(vm, "reshape", data, _i64(*newshape)), expected)


@pytest.mark.parametrize("shape, axis", [((2, 3), 0), ((1, 0), -1), ((4, 1), 1), ((3, 2), 2)])
def test_dyn_expand_dims(vm, shape, axis):
    data = _data(shape)
    _check(_run(vm, "expand_dims", data, np.int64(axis)), np.expand_dims(data, axis))


@pytest.mark.parametrize("shape, axis", [((2, 1, 3), 1), ((1, 4, 1), -1), ((0, 1, 2), 1),
                                         ((1, 1, 1), 0)])
def test_dyn_squeeze(vm, shape, axis):
    data = _data(shape)
    _check(_run(vm, "squeeze", data, _i64(axis)), data.squeeze(axis))


@pytest.mark.parametrize("shape, target", [((1, 3), (2, 5, 3)), ((1, 1), (1, 2, 4)),
                                           ((1, 0), (3, 1, 0)), ((4, 1), (2, 4, 3))])
def test_dyn_broadcast_to(vm, shape, target):
    data = _data(shape)
    _check(_run(vm, "broadcast_to", data, _i64(*target)), np.broadcast_to(data, target))


@pytest.mark.parametrize("shape", [(3, 2), (1, 1), (0, 4)])
def test_dyn_zeros_ones_full(vm, shape):
    _check(_run(vm, "zeros", _i64(*shape)), np.zeros(shape, "float32"))
    _check(_run(vm, "ones", _i64(*shape)), np.ones(shape, "int32"))
    _check(_run(vm, "full", np.float32(2.5), _i64(*shape)), np.full(shape, 2.5, "float32"))


@pytest.mark.parametrize("shape, reps", [((2, 3), (2, 1)), ((1, 1), (3, 4)), ((0, 2), (2, 2)),
                                         ((2, 2), (1, 0))])
def test_dyn_tile(vm, shape, reps):
    data = _data(shape)
    _check(_run(vm, "tile", data, _i64(*reps)), np.tile(data, reps))


@pytest.mark.parametrize("indices, depth", [([0, 2, 1], 4), ([], 3), ([5, 0], 1), ([1], 2)])
def test_dyn_one_hot(vm, indices, depth):
    idx = np.array(indices, "int32")
    expected = np.where(idx[:, None] == np.arange(depth)[None, :], 5.0, -1.0).astype("float32")
    _check(_run(vm, "one_hot", idx, np.int32(depth)), expected)


@pytest.mark.parametrize("shape, widths", [((2, 3), [[1, 0], [2, 1]]), ((1, 1), [[0, 0], [0, 3]]),
                                           ((0, 2), [[1, 1], [0, 0]])])
def test_dyn_pad(vm, shape, widths):
    data = _data(shape)
    out = _run(vm, "pad", data, np.array(widths, "int64"), np.float32(-7.0))
    _check(out, np.pad(data, widths, constant_values=-7.0))


@pytest.mark.parametrize("shape, begin, end, strides", [
    ((6, 4), [1, 0], [-1, 4], [2, 3]),
    ((5, 3), [4, 2], [-6, -4], [-2, -1]),
    ((1, 1), [0, 0], [1, 1], [1, 1]),
    ((4, 5), [3, 9], [1, 20], [1, 1]),  # empty rows, clamped columns
    ((0, 3), [0, -2], [5, 3], [1, 1]),
])
def test_dyn_strided_slice(vm, shape, begin, end, strides):
    data = _data(shape)
    expected = data[begin[0]:end[0]:strides[0], begin[1]:end[1]:strides[1]]
    _check(_run(vm, "strided_slice", data, _i64(*begin), _i64(*end), _i64(*strides)), expected)


@pytest.mark.parametrize("shape, k", [((3, 5), 2), ((1, 4), 4), ((2, 3), 0), ((4, 1), 1)])
def test_dyn_topk(vm, shape, k):
    data = _data(shape, seed=3)
    order = np.argsort(-data, axis=1, kind="stable")[:, : (k or shape[1])]
    values, indices = _run(vm, "topk", data, np.int32(k))
    _check(values, np.take_along_axis(data, order, axis=1))
    _check(indices, order.astype("int32"))
    down = min(k, shape[0])
    smallest = np.sort(data, axis=0)[: (down or shape[0])]
    _check(_run(vm, "topk_ascending_values", data, np.int32(down)), smallest)


@pytest.mark.parametrize("shape, size", [((1, 2, 3, 4), (6, 2)), ((2, 2, 1, 1), (3, 1)),
                                         ((1, 2, 4, 4), (4, 4))])
def test_dyn_resize2d_nearest(vm, shape, size):
    data = _data(shape)
    rows = (np.arange(size[0]) * shape[2]) // size[0]  # asymmetric + floor, exact for ints
    cols = (np.arange(size[1]) * shape[3]) // size[1]
    _check(_run(vm, "resize_nearest", data, _i64(*size)), data[:, :, rows][:, :, :, cols])


@pytest.mark.parametrize("shape, size, mode, roi", [
    ((1, 2, 3, 4), (6, 2), "half_pixel", [0.0] * 4),
    ((1, 2, 5, 2), (2, 7), "half_pixel", [0.0] * 4),
    ((1, 2, 4, 4), (3, 5), "tf_crop_and_resize", [0.2, -0.25, 0.9, 1.2]),  # reads outside too
    ((1, 2, 2, 3), (1, 4), "tf_crop_and_resize", [0.5, 0.0, 0.5, 1.0]),
])
def test_dyn_resize2d_linear_matches_onnx(vm, shape, size, mode, roi):
    """size and roi are run-time tensors; ONNX's roi spans every axis, ours the spatial ones."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    data = _data(shape)
    node = helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode="linear",
                            coordinate_transformation_mode=mode, extrapolation_value=-3.0)
    inputs = [helper.make_tensor_value_info(n, t, None) for n, t in (
        ("x", TensorProto.FLOAT), ("roi", TensorProto.FLOAT), ("sizes", TensorProto.INT64))]
    graph = helper.make_graph([node], "resize", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx_roi = np.array([0, 0, *roi[:2], 1, 1, *roi[2:]], "float32")
    (expected,) = ReferenceEvaluator(model).run(None, {"x": data, "roi": onnx_roi,
                                                       "sizes": _i64(*shape[:2], *size)})
    name = "resize_crop" if mode == "tf_crop_and_resize" else "resize_linear"
    out = _run(vm, name, data, _i64(*size), np.array(roi, "float32"))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, scales", [((1, 2, 2, 3), (2.0, 3.0)), ((1, 2, 4, 2), (0.5, 1.0)),
                                           ((2, 2, 1, 1), (2.0, 2.0))])
def test_dyn_upsampling_nearest(vm, shape, scales):
    data = _data(shape)
    out_h, out_w = (round(d * s) for d, s in zip(shape[2:], scales))
    rows = (np.arange(out_h) * shape[2]) // out_h
    cols = (np.arange(out_w) * shape[3]) // out_w
    out = _run(vm, "upsampling", data, np.float64(scales[0]), np.float64(scales[1]))
    _check(out, data[:, :, rows][:, :, :, cols])


@pytest.mark.parametrize("shape", [(3, 4), (1, 1), (0, 3), (2, 5)])
def test_argwhere_counts_at_run_time(vm, shape):
    for data in (_data(shape), -np.abs(_data(shape)), np.abs(_data(shape)) + 1):
        _check(_run(vm, "argwhere", data), np.argwhere(data > 0).astype("int32"))


def test_argwhere_of_a_3d_tensor(vm):
    data = (_data((2, 3, 4)) > 0.5).astype("float32")
    _check(_run(vm, "argwhere_3d", data), np.argwhere(data).astype("int32"))


@pytest.mark.parametrize("shape", [(2, 2, 3, 4), (1, 2, 1, 1), (0, 2, 2, 2)])
def test_layout_transform_with_any_dims(vm, shape):
    data = _data(shape)
    _check(_run(vm, "layout_nhwc", data), data.transpose(0, 2, 3, 1))
    blocked = data.reshape(shape[0], 1, 2, shape[2], shape[3]).transpose(0, 1, 3, 4, 2)
    _check(_run(vm, "layout_blocked", data), blocked)


@pytest.mark.parametrize("shape, like_shape", [((4, 5), (2, 3)), ((3, 3), (3, 1)),
                                               ((2, 2), (0, 2))])
def test_slice_like_with_any_dims(vm, shape, like_shape):
    data, like = _data(shape), _data(like_shape)
    _check(_run(vm, "slice_like", data, like), data[: like_shape[0], : like_shape[1]])
    _check(_run(vm, "slice_like_axis", data, like), data[:, : like_shape[1]])


# -- bad run-time values: a TVMError from the VM, never a crash or a wrong answer ---------------


@pytest.mark.parametrize("name, args, message", [
    ("zeros", (_i64(-1, 3),), "non-negative"),
    ("reshape", (np.zeros((2, 3), "float32"), _i64(4, 2)), "element count"),  # 6 into 8
    ("reshape", (np.zeros((2, 3), "float32"), _i64(-1, -1)), "at most one -1"),
    ("strided_slice", (np.zeros((4, 4), "float32"), _i64(0, 0), _i64(4, 4), _i64(1, 0)),
     "non-zero"),
    ("broadcast_to", (np.zeros((2, 3), "float32"), _i64(1, 4, 3)), "1 or the target"),
    ("squeeze", (np.zeros((2, 3, 1), "float32"), _i64(1)), "extent 1"),
    ("squeeze", (np.zeros((2, 1, 1), "float32"), _i64(3)), "in range"),
    ("topk", (np.zeros((2, 3), "float32"), np.int32(4)), "k must not exceed"),
    ("tile", (np.zeros((2, 3), "float32"), _i64(-1, 2)), "non-negative"),
    ("one_hot", (np.array([0, 1], "int32"), np.int32(-2)), "depth"),
    ("pad", (np.zeros((2, 2), "float32"), np.array([[-3, 0], [0, 0]], "int64"),
             np.float32(0)), "non-negative"),
])
def test_bad_shape_values_raise_a_tvm_error(vm, name, args, message):
    with pytest.raises(kiln.TVMError, match=message):
        _run(vm, name, *args)


def test_a_shape_tensor_of_the_wrong_length_is_rejected(vm):
    with pytest.raises(kiln.TVMError, match="expects|shape"):
        _run(vm, "zeros", _i64(2, 3, 4))
    with pytest.raises(kiln.TVMError):
        _run(vm, "reshape", np.zeros((2, 3), "float32"), np.zeros((1, 2), "int64"))


def test_a_shape_tensor_of_the_wrong_rank_fails_to_compile():
    s = _var("s", (2, 2), "int64")
    with pytest.raises(kiln.TVMError):
        relay.vm.compile(kiln.IRModule.from_expr(relay.Function([s], relay.zeros(s, "float32"))),
                         "c")
    x, b = _var("x", (ANY, ANY)), _var("b", (1,), "int64")
    with pytest.raises(kiln.TVMError, match="strided_slice"):
        relay.vm.compile(kiln.IRModule.from_expr(
            relay.Function([x, b], relay.strided_slice(x, b, b, b))), "c")
