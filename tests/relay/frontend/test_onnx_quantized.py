"""Quantized ONNX models on kiln's integer path vs onnxruntime on the same model: QLinearConv,
QLinearMatMul, MatMulInteger, ConvInteger, com.microsoft QLinearAdd/Mul, and QDQ models
written by ``onnxruntime.quantization.quantize_static``.

Outputs are equal, or within one integer step where the requantize rounding differs: kiln
rounds the fixed-point product half up (TVM's UPWARD), onnxruntime a float product half to
even, so ties and last-bit float differences can land one step apart.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.relay.frontend import from_onnx
from kiln.runtime.error import TVMError

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402


def _model(nodes, inputs, outputs, inits, ms=False):
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid("com.microsoft", 1)]
                                              if ms else [])
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _kiln(model, feeds, kind="graph"):
    mod, params = from_onnx(model, {k: v.shape for k, v in feeds.items()},
                            dtype={k: str(v.dtype) for k, v in feeds.items()})
    with kiln.transform.PassContext(opt_level=3):
        run = relay.create_executor(kind, mod=mod, target="llvm", params=params).evaluate()
        out = run(**feeds)
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [o.numpy() for o in outs], mod


def _ops(mod):
    names = set()
    relay.analysis.post_order_visit(mod["main"], lambda n: names.add(
        n.op.name) if hasattr(n, "op") and hasattr(n.op, "name") else None)
    return names


def _info(name, dtype, shape):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                         shape)


def _assert_within_one_step(got, want, mostly_equal=True):
    diff = np.abs(got.astype("int64") - want.astype("int64"))
    assert diff.max() <= 1, f"max difference {diff.max()}"
    if mostly_equal:  # one rounding on each side: only ties and last-bit cases differ
        assert np.mean(diff == 0) > 0.9


@pytest.mark.parametrize("kind", ["graph", "vm"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv_matches_onnxruntime(kind, per_channel):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (1, 3, 9, 9)).astype("uint8")
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype("int8")
    w_scale = (rng.uniform(0.002, 0.01, 4) if per_channel else np.array(0.005)).astype(
        "float32")
    inits = {"xs": np.array(0.02, "float32"), "xz": np.array(120, "uint8"), "w": w,
             "ws": w_scale, "wz": np.zeros(w_scale.shape, "int8"),
             "ys": np.array(0.05, "float32"), "yz": np.array(100, "uint8"),
             "b": rng.integers(-500, 500, 4).astype("int32")}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                            ["y"], pads=[1, 1, 1, 1], strides=[2, 1])
    model = _model([node], [_info("x", "uint8", x.shape)], [_info("y", "uint8", (1, 4, 5, 9))],
                   inits)
    (got,), mod = _kiln(model, {"x": x}, kind)
    assert "qnn.conv2d" in _ops(mod) and "nn.conv2d" not in _ops(mod)
    _assert_within_one_step(got, _ort(model, {"x": x})[0])


@pytest.mark.parametrize("b_shape", [(6, 5), (2, 6, 5)])
def test_qlinear_matmul_matches_onnxruntime(b_shape):
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (2, 3, 6)).astype("uint8")
    b = rng.integers(-128, 128, b_shape).astype("int8")
    inits = {"as": np.array(0.03, "float32"), "az": np.array(128, "uint8"), "b": b,
             "bs": np.array(0.01, "float32"), "bz": np.array(3, "int8"),
             "ys": np.array(0.1, "float32"), "yz": np.array(120, "uint8")}
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                            ["y"])
    model = _model([node], [_info("a", "uint8", a.shape)], [_info("y", "uint8", (2, 3, 5))], inits)
    (got,), mod = _kiln(model, {"a": a})
    assert _ops(mod) & {"qnn.dense", "qnn.batch_matmul"}
    _assert_within_one_step(got, _ort(model, {"a": a})[0])


def test_matmul_integer_and_conv_integer_equal_onnxruntime():
    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (4, 8)).astype("uint8")
    b = rng.integers(-128, 128, (8, 3)).astype("int8")
    x = rng.integers(0, 256, (1, 2, 5, 5)).astype("uint8")
    w = rng.integers(0, 256, (3, 2, 3, 3)).astype("uint8")
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["m"]),
             helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["c"], pads=[1, 1, 1, 1])]
    inits = {"b": b, "az": np.array(7, "uint8"), "bz": np.array(-2, "int8"), "w": w,
             "xz": np.array(128, "uint8"), "wz": np.array(120, "uint8")}
    model = _model(nodes, [_info("a", "uint8", a.shape), _info("x", "uint8", x.shape)],
                   [_info("m", "int32", (4, 3)), _info("c", "int32", (1, 3, 5, 5))], inits)
    got, mod = _kiln(model, {"a": a, "x": x})
    assert {"qnn.dense", "qnn.conv2d"} <= _ops(mod)
    for g, want in zip(got, _ort(model, {"a": a, "x": x})):
        np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_microsoft_qlinear_binary_ops_match_onnxruntime(op):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (2, 5)).astype("uint8")
    b = rng.integers(0, 256, (2, 5)).astype("uint8")
    inits = {"as": np.array(0.05, "float32"), "az": np.array(100, "uint8"),
             "bs": np.array(0.02, "float32"), "bz": np.array(130, "uint8"),
             "cs": np.array(0.08, "float32"), "cz": np.array(90, "uint8")}
    node = helper.make_node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["c"],
                            domain="com.microsoft")
    model = _model([node], [_info("a", "uint8", a.shape), _info("b", "uint8", b.shape)],
                   [_info("c", "uint8", (2, 5))], inits, ms=True)
    (got,), mod = _kiln(model, {"a": a, "b": b})
    assert {"add": "qnn.add", "mul": "qnn.mul"}[op[7:].lower()] in _ops(mod)
    # qnn.add (TVM's) requantizes each input to the output parameters and rounds each, while
    # onnxruntime sums the two scaled values and rounds once: more values land one step apart
    _assert_within_one_step(got, _ort(model, {"a": a, "b": b})[0],
                            mostly_equal=op != "QLinearAdd")


# ---- QDQ models written by onnxruntime.quantization.quantize_static ------------------------
def _float_cnn(rng):
    """conv-relu-maxpool-conv-add(residual)-globalavgpool-flatten-gemm, float32."""
    inits = {"w1": rng.standard_normal((8, 3, 3, 3)).astype("float32") * 0.3,
             "b1": rng.standard_normal(8).astype("float32") * 0.1,
             "w2": rng.standard_normal((8, 8, 3, 3)).astype("float32") * 0.2,
             "b2": rng.standard_normal(8).astype("float32") * 0.1,
             "fw": rng.standard_normal((8, 5)).astype("float32") * 0.5,
             "fb": rng.standard_normal(5).astype("float32") * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "p1"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"])]
    return _model(nodes, [_info("x", "float32", (1, 3, 12, 12))],
                  [_info("y", "float32", (1, 5))], inits)


def _quantize_static(float_model, batches, tmp_path, per_channel=False):
    """``float_model`` quantized by onnxruntime's quantize_static (QDQ, uint8 activations,
    int8 weights) calibrated on ``batches`` of its input ``x``."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter({"x": b} for b in batches)

        def get_next(self):
            return next(self.it, None)

    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(float_model, src)
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=per_channel)
    return onnx.load(dst)


def _assert_within_one_output_step(model, got, want):
    """The output is dequantized: one integer step is one output scale."""
    out_scale = [numpy_helper.to_array(i) for i in model.graph.initializer
                 if i.name.startswith("y_scale")][0]
    assert np.max(np.abs(got - want)) <= float(out_scale) * 1.01


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_static_qdq_model_runs_on_integers_and_matches_onnxruntime(tmp_path,
                                                                            per_channel):
    rng = np.random.default_rng(4)
    batches = [rng.standard_normal((1, 3, 12, 12)).astype("float32") for _ in range(8)]
    model = _quantize_static(_float_cnn(rng), batches, tmp_path, per_channel)
    x = batches[0]
    (got,), mod = _kiln(model, {"x": x})
    ops = _ops(mod)
    assert {"qnn.conv2d", "qnn.dense", "qnn.add"} <= ops
    assert not ops & {"nn.conv2d", "nn.dense", "nn.matmul"}  # no float conv/matmul left
    _assert_within_one_output_step(model, got, _ort(model, {"x": x})[0])


MOBILENET_LAYERS = [(3, 8, 3, 2, 1), (8, 8, 3, 1, 8), (8, 16, 1, 1, 1), (16, 16, 3, 2, 16),
                    (16, 24, 1, 1, 1)]  # (in, out, kernel, stride, groups)
# channel counts that are not multiples of 4 or 16 (the x86 kernels' lane groups and blocks)
ODD_LAYERS = [(3, 6, 3, 2, 1), (6, 6, 3, 1, 6), (6, 18, 1, 1, 1), (18, 18, 3, 2, 18),
              (18, 21, 1, 1, 1)]


def _float_mobilenet(rng, layers=MOBILENET_LAYERS):
    """A MobileNet-v1 style float32 net: a 3x3 stride-2 stem, depthwise 3x3 + pointwise 1x1
    blocks (stride 1 and 2), global average pool, a classifier; relu after every conv."""
    nodes, inits, prev = [], {}, "x"
    for i, (cin, cout, k, stride, groups) in enumerate(layers):
        inits[f"w{i}"] = (rng.standard_normal((cout, cin // groups, k, k)) * 0.4).astype(
            "float32")
        inits[f"b{i}"] = (rng.standard_normal(cout) * 0.1).astype("float32")
        nodes += [helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"],
                                   pads=[k // 2] * 4, strides=[stride] * 2, group=groups),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev = f"r{i}"
    inits.update(fw=(rng.standard_normal((layers[-1][1], 10)) * 0.3).astype("float32"),
                 fb=(rng.standard_normal(10) * 0.1).astype("float32"))
    nodes += [helper.make_node("GlobalAveragePool", [prev], ["g"]),
              helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("Gemm", ["f", "fw", "fb"], ["y"])]
    return _model(nodes, [_info("x", "float32", (1, 3, 72, 72))],
                  [_info("y", "float32", (1, 10))], inits)


# the host (AVX512-VNNI quads here), AVX2 only (int16 pairs); odd channels, per-channel scales
@pytest.mark.parametrize("target, layers, per_channel", [
    ("llvm", MOBILENET_LAYERS, False), ("llvm -mcpu=core-avx2", MOBILENET_LAYERS, False),
    ("llvm", ODD_LAYERS, True), ("llvm -mcpu=core-avx2", ODD_LAYERS, True)])
def test_quantized_mobilenet_stays_integer_between_layers_and_matches_onnxruntime(
        tmp_path, target, layers, per_channel):
    """The int8 depthwise-separable net runs on the x86 8-bit kernels with uint8 tensors
    between layers: float only at the input (quantized by the first kernel) and the output,
    no layout_transform at run time (kernels are packed at compile time)."""
    import json

    rng = np.random.default_rng(6)
    batches = [rng.standard_normal((1, 3, 72, 72)).astype("float32") for _ in range(4)]
    model = _quantize_static(_float_mobilenet(rng, layers), batches, tmp_path, per_channel)
    x = batches[1]
    mod, params = from_onnx(model, {"x": x.shape})
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    graph = json.loads(lib.get_graph_json())
    kernels = [n["attrs"]["func_name"] for n in graph["nodes"] if n["op"] == "tvm_op"]
    dtypes = graph["attrs"]["dltype"][1]
    assert sum(name.startswith("tvmgen_default_fused_nn_conv2d") for name in kernels) == 5
    assert not [name for name in kernels if "layout_transform" in name or "quantize" in name]
    assert dtypes.count("float32") == 2 and dtypes[0] == dtypes[-1] == "float32"
    from kiln.contrib.graph_executor import GraphModule

    gmod = GraphModule(lib["default"](kiln.cpu(0)))
    gmod.run(x=x)
    _assert_within_one_output_step(model, gmod.get_output(0).numpy(),
                                   _ort(model, {"x": x})[0])


# ---- bad input ---------------------------------------------------------------------------
def test_qlinear_conv_with_a_mismatched_kernel_scale_is_refused():
    inits = {"xs": np.array(0.02, "float32"), "xz": np.array(0, "uint8"),
             "w": np.ones((4, 3, 1, 1), "int8"), "ws": np.full(3, 0.1, "float32"),
             "wz": np.zeros(3, "int8"), "ys": np.array(0.05, "float32"),
             "yz": np.array(0, "uint8")}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
                            ["y"])
    model = _model([node], [_info("x", "uint8", (1, 3, 4, 4))],
                   [_info("y", "uint8", (1, 4, 4, 4))], inits)
    with pytest.raises(TVMError, match="3 values"):
        from_onnx(model, {"x": (1, 3, 4, 4)}, dtype="uint8")


def test_dequantize_with_a_zero_point_outside_its_type_is_refused():
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])
    inits = {"s": np.array(0.1, "float32"), "z": np.array(3, "int32")}
    model = _model([node], [_info("x", "int8", (4,))], [_info("y", "float32", (4,))], inits)
    mod, params = from_onnx(model, {"x": (4,)}, dtype="int8")
    # an int32 zero point holding an int8-range value is fine; 300 is not
    inits["z"] = np.array(300, "int32")
    model = _model([node], [_info("x", "int8", (4,))], [_info("y", "float32", (4,))], inits)
    with pytest.raises(TVMError, match="outside"):
        mod, params = from_onnx(model, {"x": (4,)}, dtype="int8")
        relay.create_executor("graph", mod=mod, target="llvm", params=params).evaluate()(
            np.zeros(4, "int8"))


@pytest.mark.parametrize("bias_kind", ["float", "other_scale"])
def test_qdq_conv_with_a_float_or_differently_scaled_bias_stays_integer(bias_kind):
    """quantize_static leaves some biases float, and a bias initializer shared by two convs is
    dequantized with the first conv's scale: both are rounded to the accumulator's scale."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (1, 4, 6, 6)).astype("uint8")
    bias = rng.standard_normal(4).astype("float32")
    inits = {"xs": np.array(0.05, "float32"), "xz": np.array(128, "uint8"),
             "w": rng.integers(-127, 128, (4, 1, 3, 3)).astype("int8"),
             "ws": np.array(0.02, "float32"), "wz": np.array(0, "int8"),
             "ys": np.array(0.1, "float32"), "yz": np.array(0, "uint8")}
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"])]
    if bias_kind == "float":
        inits["b"] = bias
    else:  # stored at scale 0.003 (not 0.05 * 0.02)
        inits.update(bq=np.round(bias / 0.003).astype("int32"), bs=np.array(0.003, "float32"),
                     bz=np.array(0, "int32"))
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["b"]))
    nodes += [helper.make_node("Conv", ["xf", "wf", "b"], ["c"], pads=[1, 1, 1, 1], group=4),
              helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["y"])]
    model = _model(nodes, [_info("x", "uint8", x.shape)], [_info("y", "uint8", (1, 4, 6, 6))],
                   inits)
    (got,), mod = _kiln(model, {"x": x})
    assert "qnn.conv2d" in _ops(mod) and "nn.conv2d" not in _ops(mod)
    _assert_within_one_step(got, _ort(model, {"x": x})[0])
