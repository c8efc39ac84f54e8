"""relay.nn ops: convolution output shapes from the textbook formula computed in the test,
layouts, padding normalization, pooling with ceil_mode, matrix products vs NumPy, norms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.ir.op import Op
from kiln.ir.type import Any, TensorType, TupleType
from kiln.relay.type_infer import infer_expr
from kiln.runtime.error import TypeInferenceError


def shape_of(ty: TensorType) -> tuple:
    return tuple("?" if isinstance(d, Any) else int(d) for d in ty.shape)


def v(shape, dtype="float32", name="x"):
    return relay.var(name, shape=shape, dtype=dtype)


def conv_out(size, kernel, pad_before, pad_after, stride, dilation):
    return (size + pad_before + pad_after - (dilation * (kernel - 1) + 1)) // stride + 1


# ---- convolution ------------------------------------------------------------------------------
def test_conv2d_defaults():
    call = relay.nn.conv2d(v((1, 3, 8, 8)), v((4, 3, 3, 3), name="w"))
    assert call.op is Op.get("nn.conv2d")
    a = call.attrs
    assert (a.strides, a.padding, a.dilation, a.groups) == ((1, 1), (0, 0, 0, 0), (1, 1), 1)
    assert (a.data_layout, a.kernel_layout, a.out_layout, a.out_dtype) == (
        "NCHW", "OIHW", "", "")


@pytest.mark.parametrize("padding,expected", [
    (1, (1, 1, 1, 1)), ((1, 2), (1, 2, 1, 2)), ((1, 2, 3, 4), (1, 2, 3, 4))])
def test_conv2d_padding_normalized_to_four(padding, expected):
    assert relay.nn.conv2d(v((1, 3, 8, 8)), v((4, 3, 3, 3), name="w"),
                           padding=padding).attrs.padding == expected


@settings(max_examples=50, deadline=None)
@given(h=st.integers(5, 20), w=st.integers(5, 20), k=st.integers(1, 4), s=st.integers(1, 3),
       d=st.integers(1, 2), pads=st.tuples(*[st.integers(0, 2)] * 4))
def test_conv2d_output_shape_formula(h, w, k, s, d, pads):
    top, left, bottom, right = pads
    call = relay.nn.conv2d(v((2, 3, h, w)), v((8, 3, k, k), name="w"), strides=s,
                           padding=pads, dilation=d)
    expected = (2, 8, conv_out(h, k, top, bottom, s, d), conv_out(w, k, left, right, s, d))
    if min(expected) <= 0:
        with pytest.raises(TypeInferenceError, match="does not fit"):
            infer_expr(call)
    else:
        assert shape_of(infer_expr(call)) == expected


def test_conv2d_nhwc_hwio_groups_and_out_dtype():
    call = relay.nn.conv2d(v((1, 9, 9, 4)), v((3, 3, 4, 6), name="w"), strides=2, padding=1,
                           data_layout="NHWC", kernel_layout="HWIO", out_dtype="float64")
    ty = infer_expr(call)
    assert shape_of(ty) == (1, 5, 5, 6) and ty.dtype == "float64"
    depthwise = relay.nn.conv2d(v((1, 8, 6, 6)), v((8, 1, 3, 3), name="w"), groups=8)
    assert shape_of(infer_expr(depthwise)) == (1, 8, 4, 4)
    grouped = relay.nn.conv2d(v((1, 8, 6, 6)), v((4, 4, 1, 1), name="w"), groups=2,
                              channels=4, kernel_size=1)
    assert shape_of(infer_expr(grouped)) == (1, 4, 6, 6)
    to_nhwc = relay.nn.conv2d(v((1, 3, 6, 6)), v((4, 3, 3, 3), name="w"), out_layout="NHWC")
    assert shape_of(infer_expr(to_nhwc)) == (1, 4, 4, 4)


def test_conv2d_any_batch_and_spatial():
    ty = infer_expr(relay.nn.conv2d(v((Any(), 3, Any(), 8)), v((4, 3, 3, 3), name="w")))
    assert shape_of(ty) == ("?", 4, "?", 6)


def test_conv2d_errors():
    with pytest.raises(TypeInferenceError, match="expects 2 input channels per group"):
        infer_expr(relay.nn.conv2d(v((1, 3, 8, 8)), v((4, 2, 3, 3), name="w")))
    with pytest.raises(TypeInferenceError, match="channels=5"):
        infer_expr(relay.nn.conv2d(v((1, 3, 8, 8)), v((4, 3, 3, 3), name="w"), channels=5))
    with pytest.raises(TypeInferenceError, match="kernel_size"):
        infer_expr(relay.nn.conv2d(v((1, 3, 8, 8)), v((4, 3, 3, 3), name="w"),
                                   kernel_size=(5, 5)))
    with pytest.raises(TypeInferenceError, match="does not have layout"):
        infer_expr(relay.nn.conv2d(v((1, 3, 8)), v((4, 3, 3, 3), name="w")))


def test_conv1d_and_conv3d():
    ty = infer_expr(relay.nn.conv1d(v((2, 3, 10)), v((5, 3, 3), name="w"), strides=2,
                                    padding=1))
    assert shape_of(ty) == (2, 5, conv_out(10, 3, 1, 1, 2, 1))
    ty = infer_expr(relay.nn.conv3d(v((1, 2, 6, 7, 8)), v((4, 2, 3, 3, 3), name="w"),
                                    padding=(1, 0, 1)))
    assert shape_of(ty) == (1, 4, 6, 5, 8)


def test_conv_transpose():
    # out = (in - 1) * stride - pad_before - pad_after + dilation * (k - 1) + 1 + output_padding
    call = relay.nn.conv2d_transpose(v((1, 4, 5, 5)), v((4, 6, 3, 3), name="w"), strides=2,
                                     padding=1, output_padding=(1, 1))
    assert call.attrs.kernel_layout == "IOHW"
    assert shape_of(infer_expr(call)) == (1, 6, (5 - 1) * 2 - 2 + 3 + 1, (5 - 1) * 2 - 2 + 3 + 1)
    one_d = relay.nn.conv1d_transpose(v((1, 4, 7)), v((4, 2, 4), name="w"), strides=(3,))
    assert shape_of(infer_expr(one_d)) == (1, 2, (7 - 1) * 3 + 4)
    with pytest.raises(TypeInferenceError, match="data has 3 channels"):
        infer_expr(relay.nn.conv2d_transpose(v((1, 3, 5, 5)), v((4, 6, 3, 3), name="w")))


def test_winograd_and_gemm_variants():
    wt = relay.nn.contrib_conv2d_winograd_weight_transform(v((8, 4, 3, 3), name="w"), 4)
    assert shape_of(infer_expr(wt)) == (6, 6, 8, 4)
    conv = relay.nn.contrib_conv2d_winograd_without_weight_transform(
        v((1, 4, 10, 10)), v((6, 6, 8, 4), name="w"), 4, padding=1, channels=8,
        kernel_size=3)
    assert shape_of(infer_expr(conv)) == (1, 8, 10, 10)
    gemm_w = relay.nn.contrib_conv2d_gemm_weight_transform(v((3, 3, 5, 10), name="w"), 4, 16)
    # K = 3*3*5 = 45 -> padded 48 -> 3 tiles of 16; N = 10 -> padded 12 -> 3 tiles of 4
    assert shape_of(infer_expr(gemm_w)) == (3, 3, 4, 16)
    gemm = relay.nn.contrib_conv2d_gemm_without_weight_transform(
        v((1, 8, 8, 5)), v((3, 3, 4, 16), name="w"), channels=10, kernel_size=(3, 3),
        data_layout="NHWC", kernel_layout="HWIO")
    assert shape_of(infer_expr(gemm)) == (1, 6, 6, 10)
    with pytest.raises(TypeInferenceError, match="channels and kernel_size must be given"):
        infer_expr(relay.nn.contrib_conv2d_winograd_without_weight_transform(
            v((1, 4, 10, 10)), v((6, 6, 8, 4), name="w"), 4))


# ---- matrix products --------------------------------------------------------------------------
def test_dense_matmul_batch_matmul_vs_numpy():
    ty = infer_expr(relay.nn.dense(v((4, 5, 8)), v((16, 8), name="w")))
    assert shape_of(ty) == (np.zeros((4, 5, 8)) @ np.zeros((16, 8)).T).shape
    assert shape_of(infer_expr(relay.nn.dense(v((Any(), 8)), v((3, 8), name="w"), units=3))) \
        == ("?", 3)
    mm = relay.nn.matmul(v((4, 8)), v((8, 6), name="w"))
    assert shape_of(infer_expr(mm)) == (4, 6)
    mm_t = relay.nn.matmul(v((8, 4)), v((6, 8), name="w"), transpose_a=True, transpose_b=True)
    assert shape_of(infer_expr(mm_t)) == (4, 6)
    bmm = relay.nn.batch_matmul(v((3, 4, 5)), v((1, 6, 5), name="y"))
    assert shape_of(infer_expr(bmm)) == (np.zeros((3, 4, 5)) @ np.zeros((1, 5, 6))).shape
    bmm_nt = relay.nn.batch_matmul(v((3, 4, 5)), v((3, 5, 6), name="y"), transpose_b=False)
    assert shape_of(infer_expr(bmm_nt)) == (3, 4, 6)
    pack = relay.nn.contrib_dense_pack(v((4, 8)), v((2, 8, 8), name="w"))
    assert shape_of(infer_expr(pack)) == (4, 16)


def test_matrix_product_errors():
    with pytest.raises(TypeInferenceError, match="reduction dims differ"):
        infer_expr(relay.nn.dense(v((4, 8)), v((16, 7), name="w")))
    with pytest.raises(TypeInferenceError, match="rank-3"):
        infer_expr(relay.nn.batch_matmul(v((4, 5)), v((1, 6, 5), name="y")))
    with pytest.raises(TypeInferenceError, match="do not broadcast"):
        infer_expr(relay.nn.batch_matmul(v((3, 4, 5)), v((2, 6, 5), name="y")))


# ---- pooling ----------------------------------------------------------------------------------
@pytest.mark.parametrize("size,pool,stride,pad,ceil", [
    (7, 2, 2, 0, False), (7, 2, 2, 0, True), (8, 3, 2, 1, True), (10, 3, 1, 1, False)])
def test_max_pool2d_formula(size, pool, stride, pad, ceil):
    window = size + 2 * pad - pool
    expected = (window + (stride - 1 if ceil else 0)) // stride + 1
    call = relay.nn.max_pool2d(v((1, 3, size, size)), pool, stride, padding=pad, ceil_mode=ceil)
    assert call.attrs.padding == (pad,) * 4
    assert shape_of(infer_expr(call)) == (1, 3, expected, expected)


def test_pool_variants():
    avg = relay.nn.avg_pool2d(v((1, 8, 8, 3)), (2, 2), (2, 2), layout="NHWC",
                              count_include_pad=True)
    assert avg.attrs.count_include_pad is True
    assert shape_of(infer_expr(avg)) == (1, 4, 4, 3)
    assert shape_of(infer_expr(relay.nn.max_pool1d(v((1, 3, 9)), 3, 2))) == (1, 3, 4)
    assert shape_of(infer_expr(relay.nn.avg_pool3d(v((1, 2, 4, 4, 4)), 2, 2))) == (1, 2, 2, 2, 2)
    blocked = relay.nn.max_pool2d(v((1, 2, 8, 8, 4)), 2, 2, layout="NCHW4c")
    assert shape_of(infer_expr(blocked)) == (1, 2, 4, 4, 4)
    assert shape_of(infer_expr(relay.nn.global_avg_pool2d(v((2, 5, 7, 7))))) == (2, 5, 1, 1)
    assert shape_of(infer_expr(relay.nn.global_max_pool2d(v((2, 7, 7, 5)), "NHWC"))) == \
        (2, 1, 1, 5)
    assert shape_of(infer_expr(relay.nn.adaptive_avg_pool2d(v((1, 3, 9, 9)), (2, 3)))) == \
        (1, 3, 2, 3)
    assert shape_of(infer_expr(relay.nn.adaptive_max_pool2d(v((1, 3, 9, 9)), 4))) == (1, 3, 4, 4)
    assert shape_of(infer_expr(relay.nn.adaptive_avg_pool1d(v((1, 3, 9)), 5))) == (1, 3, 5)
    assert shape_of(infer_expr(relay.nn.adaptive_max_pool1d(v((1, 3, 9))))) == (1, 3, 9)
    with pytest.raises(TypeInferenceError, match="does not fit"):
        infer_expr(relay.nn.max_pool2d(v((1, 3, 2, 2)), 3))
    with pytest.raises(TypeInferenceError, match="has no H axis"):
        infer_expr(relay.nn.max_pool2d(v((1, 3, 2, 2)), 1, layout="NCDW"))


# ---- other layers -----------------------------------------------------------------------------
def test_activations_and_softmax():
    for call in (relay.nn.relu(v((2, 3))), relay.nn.leaky_relu(v((2, 3)), 0.2),
                 relay.nn.softmax(v((2, 3))), relay.nn.log_softmax(v((2, 3)), 0),
                 relay.nn.fast_softmax(v((2, 3))), relay.nn.lrn(v((2, 3))),
                 relay.nn.l2_normalize(v((2, 3)), 1e-5, [1])):
        assert shape_of(infer_expr(call)) == (2, 3)
    assert relay.nn.leaky_relu(v((2,))).attrs.alpha == 0.01
    assert relay.nn.softmax(v((2,))).attrs.axis == -1
    with pytest.raises(TypeInferenceError, match="out of range"):
        infer_expr(relay.nn.softmax(v((2, 3)), axis=2))


def test_bias_add_and_prelu_check_the_vector():
    assert shape_of(infer_expr(relay.nn.bias_add(v((2, 3, 4)), v((3,), name="b")))) == (2, 3, 4)
    assert shape_of(infer_expr(relay.nn.bias_add(v((2, 4)), v((4,), name="b"), axis=-1))) == \
        (2, 4)
    with pytest.raises(TypeInferenceError, match=r"bias must have shape \(3,\)"):
        infer_expr(relay.nn.bias_add(v((2, 3, 4)), v((4,), name="b")))
    assert shape_of(infer_expr(relay.nn.prelu(v((2, 3, 4)), v((3,), name="a")))) == (2, 3, 4)
    with pytest.raises(TypeInferenceError, match="bias must have dtype float32"):
        infer_expr(relay.nn.bias_add(v((2, 3)), v((3,), "float16", "b")))


def test_batch_flatten_pad_mirror_pad():
    assert shape_of(infer_expr(relay.nn.batch_flatten(v((2, 3, 4, 5))))) == (2, 60)
    assert shape_of(infer_expr(relay.nn.batch_flatten(v((Any(), 3, 4))))) == ("?", 12)
    call = relay.nn.pad(v((2, 3)), ((1, 1), (0, 2)), pad_value=0.0)
    assert call.attrs.pad_mode == "constant" and len(call.args) == 2
    assert shape_of(infer_expr(call)) == np.pad(np.zeros((2, 3)), ((1, 1), (0, 2))).shape
    mirror = relay.nn.mirror_pad(v((2, 3)), ((1, 1), (2, 2)), mode="REFLECT")
    assert shape_of(infer_expr(mirror)) == (4, 7)
    crop = relay.nn.pad(v((4, 3)), ((-1, 0), (0, 0)))
    assert shape_of(infer_expr(crop)) == (3, 3)
    with pytest.raises(TypeInferenceError, match="negative extent"):
        infer_expr(relay.nn.pad(v((1, 3)), ((-2, 0), (0, 0))))
    with pytest.raises(TypeInferenceError, match="negative padding"):
        infer_expr(relay.nn.mirror_pad(v((4, 3)), ((-1, 0), (0, 0))))
    with pytest.raises(TypeInferenceError, match="one \\(before, after\\) pair per axis"):
        infer_expr(relay.nn.pad(v((2, 3)), ((1, 1),), pad_value=0.0))
    dyn = relay.nn.pad(v((2, 3)), v((2, 2), "int64", "p"), 0.0)
    assert dyn.op is Op.get("dyn.nn.pad") and shape_of(infer_expr(dyn)) == ("?", "?")


def test_dropout_and_batch_norm_tuples():
    out = relay.nn.dropout(v((2, 3)), 0.3)
    assert isinstance(out, relay.TupleGetItem) and out.index == 0
    ty = infer_expr(out.tuple_value)
    assert isinstance(ty, TupleType) and [shape_of(t) for t in ty.fields] == [(2, 3), (2, 3)]
    bn = relay.nn.batch_norm(v((1, 16, 4, 4)), *[v((16,), name=n) for n in "gbmv"])
    assert len(bn) == 3 and bn.astuple().attrs.epsilon == 1e-5
    ty = infer_expr(bn.astuple())
    assert [shape_of(t) for t in ty.fields] == [(1, 16, 4, 4), (16,), (16,)]
    with pytest.raises(TypeInferenceError, match="moving_var must have shape"):
        infer_expr(relay.nn.batch_norm(v((1, 16, 4, 4)), *[v((16,), name=n) for n in "gbm"],
                                       v((8,), name="v")).astuple())


def test_instance_layer_group_norm():
    gamma, beta = v((8,), name="g"), v((8,), name="b")
    assert shape_of(infer_expr(relay.nn.instance_norm(v((2, 8, 5)), gamma, beta))) == (2, 8, 5)
    assert shape_of(infer_expr(relay.nn.layer_norm(v((2, 5, 8)), gamma, beta))) == (2, 5, 8)
    assert shape_of(infer_expr(relay.nn.group_norm(v((2, 8, 5)), gamma, beta, 4))) == (2, 8, 5)
    with pytest.raises(TypeInferenceError, match="cannot be split into 3 groups"):
        infer_expr(relay.nn.group_norm(v((2, 8, 5)), gamma, beta, 3))


def test_upsampling_and_subpixel():
    call = relay.nn.upsampling(v((1, 3, 4, 5)), 2, 3)
    assert call.attrs.method == "nearest_neighbor"
    assert shape_of(infer_expr(call)) == (1, 3, 8, 15)
    nhwc = relay.nn.upsampling(v((1, 4, 5, 3)), 2.0, 2.0, layout="NHWC", method="bilinear")
    assert shape_of(infer_expr(nhwc)) == (1, 8, 10, 3)
    dyn = relay.nn.upsampling(v((1, 3, 4, 5)), v((), name="sh"), 2.0)
    assert dyn.op is Op.get("dyn.nn.upsampling")
    assert shape_of(infer_expr(dyn)) == (1, 3, "?", "?")
    assert shape_of(infer_expr(relay.nn.depth_to_space(v((1, 12, 2, 3)), 2))) == (1, 3, 4, 6)
    assert shape_of(infer_expr(relay.nn.space_to_depth(v((1, 3, 4, 6)), 2))) == (1, 12, 2, 3)
    with pytest.raises(TypeInferenceError, match="not divisible by block_size"):
        infer_expr(relay.nn.depth_to_space(v((1, 6, 2, 3)), 2))


def test_numpy_arguments_become_python_values_in_attrs():
    call = relay.nn.conv2d(v((1, 3, 8, 8)), v((4, 3, 3, 3), name="w"), strides=np.array([2, 2]),
                           padding=[np.int64(1)] * 4, channels=np.int64(4))
    assert call.attrs.strides == (2, 2) and type(call.attrs.strides[0]) is int
    assert type(call.attrs.channels) is int and call.attrs.padding == (1, 1, 1, 1)
    assert shape_of(infer_expr(call)) == (1, 4, 4, 4)
