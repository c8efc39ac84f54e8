"""from_tflite on float32 models, each operator vs LiteRT on the same bytes (within 1e-5)."""

from __future__ import annotations

import numpy as np
import pytest
from tflite_helpers import check_float

from kiln.relay.testing.tflite import TFLiteModelBuilder

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def single_op(op, in_shapes, out_shape, consts=(), options=None, out_dtype="float32", **fields):
    """A model with one operator over inputs ``in_shapes`` and constant inputs ``consts``."""
    b = TFLiteModelBuilder()
    ins = [b.add_input(f"in{i}", s) for i, s in enumerate(in_shapes)]
    ins += [b.add_const(f"c{i}", c) if c is not None else -1 for i, c in enumerate(consts)]
    out = b.add_tensor("out", out_shape, out_dtype)
    b.add_operator(op, ins, [out], options, **fields)
    b.add_output(out)
    return b.finish()


@pytest.mark.parametrize("padding,stride,dilation,act", [
    (0, 1, 1, 0), (1, 2, 1, 1), (0, 2, 1, 3), (1, 1, 2, 2), (0, 1, 2, 2)])
def test_conv2d(padding, stride, dilation, act):
    from kiln.relay.frontend.tflite_ops import same_padding

    h = 9
    eff = 2 * dilation + 1
    out_h = (h + stride - 1) // stride if padding == 0 else (h - eff) // stride + 1
    assert same_padding(h, 3, stride, dilation)[0] >= 0
    model = single_op("CONV_2D", [(1, h, h, 3)], (1, out_h, out_h, 5),
                      [rand(5, 3, 3, 3), rand(5)], "Conv2DOptions", Padding=padding,
                      StrideH=stride, StrideW=stride, DilationHFactor=dilation,
                      DilationWFactor=dilation, FusedActivationFunction=act)
    check_float(model, [rand(1, h, h, 3)])


@pytest.mark.parametrize("multiplier,padding,stride", [(1, 0, 1), (2, 1, 2), (1, 0, 2)])
def test_depthwise_conv2d(multiplier, padding, stride):
    c, h = 4, 8
    out_h = (h + stride - 1) // stride if padding == 0 else (h - 3) // stride + 1
    model = single_op("DEPTHWISE_CONV_2D", [(1, h, h, c)], (1, out_h, out_h, c * multiplier),
                      [rand(1, 3, 3, c * multiplier), rand(c * multiplier)],
                      "DepthwiseConv2DOptions", Padding=padding, StrideH=stride, StrideW=stride,
                      DepthMultiplier=multiplier, DilationHFactor=1, DilationWFactor=1,
                      FusedActivationFunction=3)
    check_float(model, [rand(1, h, h, c)])


@pytest.mark.parametrize("keep", [False, True])
def test_fully_connected(keep):
    out_shape = (2, 3, 6) if keep else (6, 6)
    model = single_op("FULLY_CONNECTED", [(2, 3, 4)], out_shape, [rand(6, 4), rand(6)],
                      "FullyConnectedOptions", FusedActivationFunction=1, KeepNumDims=keep)
    check_float(model, [rand(2, 3, 4)])


def test_fully_connected_without_bias():
    model = single_op("FULLY_CONNECTED", [(3, 4)], (3, 2), [rand(2, 4), None])
    check_float(model, [rand(3, 4)])


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
@pytest.mark.parametrize("padding,stride", [(0, 2), (1, 2), (0, 1)])
def test_pool2d(op, padding, stride):
    out_h = (7 + stride - 1) // stride if padding == 0 else (7 - 3) // stride + 1
    model = single_op(op, [(1, 7, 7, 3)], (1, out_h, out_h, 3), (), "Pool2DOptions",
                      Padding=padding, StrideH=stride, StrideW=stride, FilterHeight=3,
                      FilterWidth=3, FusedActivationFunction=0)
    check_float(model, [rand(1, 7, 7, 3)])


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM",
                                "SQUARED_DIFFERENCE"])
def test_binary_broadcast(op):
    options = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions",
               "DIV": "DivOptions"}.get(op)
    fields = {"FusedActivationFunction": 1} if options else {}
    model = single_op(op, [(2, 3, 4)], (2, 3, 4), [rand(1, 3, 1)], options, **fields)
    check_float(model, [rand(2, 3, 4)])


@pytest.mark.parametrize("op", ["LOGISTIC", "TANH", "RELU", "RELU6", "RELU_N1_TO_1", "EXP",
                                "ABS", "NEG", "FLOOR", "CEIL", "SQUARE", "HARD_SWISH", "ELU",
                                "SIN", "COS", "ROUND"])
def test_unary(op):
    check_float(single_op(op, [(2, 5)], (2, 5)), [3 * rand(2, 5)])


@pytest.mark.parametrize("op", ["SQRT", "RSQRT", "LOG"])
def test_unary_positive(op):
    check_float(single_op(op, [(2, 5)], (2, 5)), [np.abs(rand(2, 5)) + 0.1])


def test_softmax_beta_and_log_softmax():
    check_float(single_op("SOFTMAX", [(2, 7)], (2, 7), (), "SoftmaxOptions", Beta=0.5),
                [rand(2, 7)])
    check_float(single_op("LOG_SOFTMAX", [(2, 7)], (2, 7)), [rand(2, 7)])


def test_leaky_relu():
    check_float(single_op("LEAKY_RELU", [(3, 4)], (3, 4), (), "LeakyReluOptions", Alpha=0.1),
                [rand(3, 4)])


def test_reshape_transpose_squeeze_expand():
    b = TFLiteModelBuilder()
    x = b.add_input("x", (1, 2, 3, 4))
    r = b.add_tensor("r", (1, 6, 4))
    b.add_operator("RESHAPE", [x, b.add_const("s", np.array([1, -1, 4], "int32"))], [r])
    t = b.add_tensor("t", (4, 6, 1))
    b.add_operator("TRANSPOSE", [r, b.add_const("p", np.array([2, 1, 0], "int32"))], [t])
    s = b.add_tensor("sq", (4, 6))
    b.add_operator("SQUEEZE", [t], [s], "SqueezeOptions", SqueezeDims=[2])
    e = b.add_tensor("e", (4, 1, 6))
    b.add_operator("EXPAND_DIMS", [s, b.add_const("a", np.array([1], "int32"))], [e])
    b.add_output(e)
    check_float(b.finish(), [rand(1, 2, 3, 4)])


def test_reshape_from_options():
    model = single_op("RESHAPE", [(2, 6)], (3, 4), (), "ReshapeOptions", NewShape=[3, 4])
    check_float(model, [rand(2, 6)])


@pytest.mark.parametrize("begin,end,strides,bmask,emask,shrink,out", [
    ([0, 1, 0], [2, 3, 4], [1, 1, 2], 0, 0, 0, (2, 2, 2)),
    ([0, -1, 0], [0, 0, 0], [1, -1, 1], 1, 7, 0, (2, 3, 4)),
    ([0, -1, 0], [0, 0, 0], [1, -1, 1], 1, 5, 0, (2, 2, 4)),
    ([1, 0, 1], [2, 3, 3], [1, 1, 1], 0, 0, 1, (3, 2)),
    ([0, 2, -1], [2, 0, 0], [1, -1, 1], 0, 0, 4, (2, 2)),
])
def test_strided_slice(begin, end, strides, bmask, emask, shrink, out):
    consts = [np.array(v, "int32") for v in (begin, end, strides)]
    model = single_op("STRIDED_SLICE", [(2, 3, 4)], out, consts, "StridedSliceOptions",
                      BeginMask=bmask, EndMask=emask, ShrinkAxisMask=shrink)
    check_float(model, [rand(2, 3, 4)])


def test_slice_and_pad():
    model = single_op("SLICE", [(3, 5)], (2, 4), [np.array([1, 1], "int32"),
                                                 np.array([-1, 4], "int32")])
    check_float(model, [rand(3, 5)])
    pads = np.array([[0, 1], [2, 0]], "int32")
    check_float(single_op("PAD", [(3, 5)], (4, 7), [pads]), [rand(3, 5)])
    check_float(single_op("PADV2", [(3, 5)], (4, 7), [pads, np.array(1.5, "float32")]),
                [rand(3, 5)])


@pytest.mark.parametrize("op,keep", [("MEAN", True), ("MEAN", False), ("SUM", False),
                                     ("REDUCE_MAX", True), ("REDUCE_MIN", False)])
def test_reductions(op, keep):
    out = (2, 1, 1, 4) if keep else (2, 4)
    model = single_op(op, [(2, 3, 5, 4)], out, [np.array([1, 2], "int32")], "ReducerOptions",
                      KeepDims=keep)
    check_float(model, [rand(2, 3, 5, 4)])


def test_concatenation_and_pack():
    b = TFLiteModelBuilder()
    x, y = b.add_input("x", (2, 3)), b.add_input("y", (2, 2))
    c = b.add_tensor("c", (2, 5))
    b.add_operator("CONCATENATION", [x, y], [c], "ConcatenationOptions", Axis=-1)
    p = b.add_tensor("p", (2, 2, 5))
    b.add_operator("PACK", [c, c], [p], "PackOptions", ValuesCount=2, Axis=1)
    b.add_output(p)
    check_float(b.finish(), [rand(2, 3), rand(2, 2)])


def test_small_cnn_on_the_vm():
    """A conv -> pool -> fc -> softmax chain agrees with LiteRT on the VM too."""
    b = TFLiteModelBuilder()
    x = b.add_input("x", (1, 8, 8, 1))
    c = b.add_tensor("c", (1, 8, 8, 4))
    b.add_operator("CONV_2D", [x, b.add_const("w", rand(4, 3, 3, 1)), b.add_const("b", rand(4))],
                   [c], "Conv2DOptions", Padding=0, StrideH=1, StrideW=1,
                   FusedActivationFunction=1)
    p = b.add_tensor("p", (1, 4, 4, 4))
    b.add_operator("MAX_POOL_2D", [c], [p], "Pool2DOptions", Padding=1, StrideH=2, StrideW=2,
                   FilterHeight=2, FilterWidth=2)
    f = b.add_tensor("f", (1, 10))
    b.add_operator("FULLY_CONNECTED", [p, b.add_const("fw", rand(10, 64)),
                                       b.add_const("fb", rand(10))], [f])
    s = b.add_tensor("s", (1, 10))
    b.add_operator("SOFTMAX", [f], [s], "SoftmaxOptions", Beta=1.0)
    b.add_output(s)
    for executor in ("graph", "vm"):
        check_float(b.finish(), [rand(1, 8, 8, 1)], executor=executor)


@pytest.mark.parametrize("op", ["FLOOR_DIV", "FLOOR_MOD", "POW"])
def test_more_binary(op):
    model = single_op(op, [(3, 4)], (3, 4), [np.abs(rand(3, 4)) + 0.5])
    check_float(model, [np.abs(rand(3, 4)) * 3])


@pytest.mark.parametrize("op", ["ARG_MAX", "ARG_MIN"])
def test_arg_max_min(op):
    options = "ArgMaxOptions" if op == "ARG_MAX" else "ArgMinOptions"
    model = single_op(op, [(3, 7)], (3,), [np.array([1], "int32")], options, out_dtype="int64",
                      OutputType=4)
    check_float(model, [rand(3, 7)])


def test_cast_and_reduce_prod():
    check_float(single_op("CAST", [(2, 5)], (2, 5), out_dtype="int32"), [5 * rand(2, 5)])
    model = single_op("REDUCE_PROD", [(2, 3, 4)], (2, 4), [np.array([1], "int32")],
                      "ReducerOptions", KeepDims=False)
    check_float(model, [rand(2, 3, 4)])


@pytest.mark.parametrize("mode", [0, 1])
def test_mirror_pad(mode):
    pads = np.array([[1, 2], [2, 1]], "int32")
    model = single_op("MIRROR_PAD", [(4, 5)], (7, 8), [pads], "MirrorPadOptions", Mode=mode)
    check_float(model, [rand(4, 5)])


def multi_output(op, in_shapes, out_shapes, consts=(), options=None, const_first=False,
                 **fields):
    b = TFLiteModelBuilder()
    ins = [b.add_input(f"in{i}", s) for i, s in enumerate(in_shapes)]
    cs = [b.add_const(f"c{i}", c) for i, c in enumerate(consts)]
    outs = [b.add_tensor(f"out{i}", s) for i, s in enumerate(out_shapes)]
    b.add_operator(op, cs + ins if const_first else ins + cs, outs, options, **fields)
    for o in outs:
        b.add_output(o)
    return b.finish()


@pytest.mark.parametrize("op", ["EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER",
                                "GREATER_EQUAL"])
def test_comparisons(op):
    model = single_op(op, [(3, 4)], (3, 4), [np.round(rand(1, 4))], out_dtype="bool")
    check_float(model, [np.round(rand(3, 4))])


def test_select_add_n_zeros_like_tile():
    b = TFLiteModelBuilder()
    x, y = b.add_input("x", (2, 3)), b.add_input("y", (2, 3))
    c = b.add_tensor("c", (2, 3), "bool")
    b.add_operator("GREATER", [x, y], [c])
    s = b.add_tensor("s", (2, 3))
    b.add_operator("SELECT_V2", [c, x, y], [s])
    n = b.add_tensor("n", (2, 3))
    b.add_operator("ADD_N", [s, x, y], [n])
    t = b.add_tensor("t", (4, 9))
    b.add_operator("TILE", [n, b.add_const("m", np.array([2, 3], "int32"))], [t])
    b.add_output(t)
    check_float(b.finish(), [rand(2, 3), rand(2, 3)])


def test_split_split_v_unpack():
    check_float(multi_output("SPLIT", [(4, 6)], [(4, 2)] * 3, [np.array(1, "int32")],
                             "SplitOptions", const_first=True, NumSplits=3), [rand(4, 6)])
    check_float(multi_output("SPLIT_V", [(4, 6)], [(1, 6), (3, 6)],
                             [np.array([1, -1], "int32"), np.array(0, "int32")],
                             "SplitVOptions", NumSplits=2), [rand(4, 6)])
    check_float(multi_output("UNPACK", [(3, 2, 4)], [(3, 4), (3, 4)], (), "UnpackOptions",
                             Num=2, Axis=1), [rand(3, 2, 4)])


def test_gather_and_batch_matmul():
    model = single_op("GATHER", [(5, 3)], (4, 3), [np.array([4, 0, 2, 2], "int32")],
                      "GatherOptions", Axis=0)
    check_float(model, [rand(5, 3)])
    model = multi_output("BATCH_MATMUL", [(2, 3, 4), (2, 5, 4)], [(2, 3, 5)], (),
                         "BatchMatMulOptions", AdjX=False, AdjY=True)
    check_float(model, [rand(2, 3, 4), rand(2, 5, 4)])
