"""from_onnx: loading, parameters, symbolic dims, opset-versioned converters, control flow and
errors. Hand-built ONNX graphs are checked against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_frontend_helpers import evaluate_main

from kiln import relay
from kiln.ir.type import Any as AnyDim
from kiln.relay.frontend import from_onnx
from kiln.runtime.error import OpNotImplemented, TVMError

F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _info(name, shape, elem=F32):
    return helper.make_tensor_value_info(name, elem, shape)


def _check_against_reference(model, feeds: dict, rtol=1e-5, atol=1e-6, **kwargs):
    expected = ReferenceEvaluator(model).run(None, feeds)
    mod, params = from_onnx(model, shape={k: v.shape for k, v in feeds.items()}, **kwargs)
    got = evaluate_main(mod, *feeds.values(), *(v.numpy() for v in params.values()))
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    return mod


RNG = np.random.default_rng(0)


def test_gemm_with_initializers_frozen_and_as_params():
    w = numpy_helper.from_array(RNG.standard_normal((4, 3)).astype("float32"), "w")
    b = numpy_helper.from_array(RNG.standard_normal(3).astype("float32"), "b")
    model = _model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], alpha=0.5)],
                   [_info("x", [2, 4])], [_info("y", [2, 3])], [w, b])
    x = RNG.standard_normal((2, 4)).astype("float32")
    _check_against_reference(model, {"x": x})
    mod = _check_against_reference(model, {"x": x}, freeze_params=False)
    assert [p.name_hint for p in mod["main"].params] == ["x", "w", "b"]
    _, params = from_onnx(model)
    assert params == {}


def test_symbolic_dims_become_any_unless_pinned():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_info("x", ["batch", 3])],
                   [_info("y", ["batch", 3])])
    mod, _ = from_onnx(model)
    dims = mod["main"].params[0].type_annotation.shape
    assert isinstance(dims[0], AnyDim) and int(dims[1]) == 3
    mod, _ = from_onnx(model, shape={"x": (5, 3)})
    assert [int(d) for d in mod["main"].params[0].type_annotation.shape] == [5, 3]


def test_reads_a_path_with_external_data(tmp_path):
    weight = RNG.standard_normal((64, 64)).astype("float32")
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_info("x", [1, 64])],
                   [_info("y", [1, 64])], [numpy_helper.from_array(weight, "w")])
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").stat().st_size == weight.nbytes
    x = RNG.standard_normal((1, 64)).astype("float32")
    mod, _ = from_onnx(str(path))
    np.testing.assert_allclose(evaluate_main(mod, x)[0], x @ weight, rtol=1e-5)


@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_axis_semantics_follow_the_opset(opset):
    model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [_info("x", [2, 3, 4])],
                   [_info("y", [2, 3, 4])], opset=opset)
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    # NumPy oracle: before 13 the axes from `axis` on are flattened into one (ONNX spec; the
    # reference evaluator applies the opset-13 rule to both)
    rows = x.reshape(2, 12) if opset < 13 else np.moveaxis(x, 1, -1)
    e = np.exp(rows - rows.max(-1, keepdims=True))
    expected = e / e.sum(-1, keepdims=True)
    expected = expected.reshape(2, 3, 4) if opset < 13 else np.moveaxis(expected, -1, 1)
    mod, _ = from_onnx(model)
    np.testing.assert_allclose(evaluate_main(mod, x)[0], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [1 << 40, 1 << 28, 3, -4])
def test_softmax_axis_out_of_range_is_a_clear_error(opset, axis):
    model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)],
                   [_info("x", [2, 3, 4])], [_info("y", [2, 3, 4])], opset=opset)
    with pytest.raises(TVMError, match=f"axis {axis} is out of range"):
        from_onnx(model)


def test_squeeze_axes_attribute_before_13_and_input_from_13():
    x = RNG.standard_normal((1, 3, 1)).astype("float32")
    old = _model([helper.make_node("Squeeze", ["x"], ["y"], axes=[0, 2])],
                 [_info("x", [1, 3, 1])], [_info("y", [3])], opset=11)
    axes = numpy_helper.from_array(np.array([0, 2], "int64"), "axes")
    new = _model([helper.make_node("Squeeze", ["x", "axes"], ["y"])], [_info("x", [1, 3, 1])],
                 [_info("y", [3])], [axes], opset=13)
    _check_against_reference(old, {"x": x})
    _check_against_reference(new, {"x": x})


@pytest.mark.parametrize("opset", [17, 18])
def test_reduce_mean_axes_attribute_or_input(opset):
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    if opset < 18:
        node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)
        inits = []
    else:
        node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)
        inits = [numpy_helper.from_array(np.array([1], "int64"), "axes")]
    model = _model([node], [_info("x", [2, 3, 4])], [_info("y", [2, 4])], inits, opset=opset)
    _check_against_reference(model, {"x": x})


def test_shape_arithmetic_folds_into_a_static_reshape():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "index"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_one"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, "int64"), "index"),
             numpy_helper.from_array(np.array([0], "int64"), "zero"),
             numpy_helper.from_array(np.array([-1], "int64"), "minus_one")]
    model = _model(nodes, [_info("x", [2, 3, 4])], [_info("y", [2, 12])], inits)
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    mod = _check_against_reference(model, {"x": x})
    assert "shape_of" not in mod.astext()


def test_if_with_a_runtime_condition_becomes_relay_if():
    then_graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [],
                                   [_info("t", [3])])
    else_graph = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                                   [_info("e", [3])])
    model = _model([helper.make_node("If", ["c"], ["y"], then_branch=then_graph,
                                     else_branch=else_graph)],
                   [_info("c", [], TensorProto.BOOL), _info("x", [3])], [_info("y", [3])])
    x = RNG.standard_normal(3).astype("float32")
    for cond in (True, False):
        mod = _check_against_reference(model, {"c": np.array(cond), "x": x})
    assert "if (" in mod.astext()


def test_loop_with_constant_trip_count_and_scan_output():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])], "body",
        [_info("i", [], TensorProto.INT64), _info("cond_in", [], TensorProto.BOOL),
         _info("acc_in", [2])],
        [_info("cond_out", [], TensorProto.BOOL), _info("acc_out", [2]), _info("scan", [2])])
    inits = [numpy_helper.from_array(np.array(3, "int64"), "m"),
             numpy_helper.from_array(np.array(True), "cond")]
    model = _model([helper.make_node("Loop", ["m", "cond", "acc0"], ["acc", "scans"],
                                     body=body)],
                   [_info("acc0", [2]), _info("x", [2])],
                   [_info("acc", [2]), _info("scans", [3, 2])], inits)
    feeds = {"acc0": np.zeros(2, "float32"), "x": np.array([1, 2], "float32")}
    _check_against_reference(model, feeds)


@pytest.mark.parametrize("trips", [0, 1, 4])
def test_loop_with_runtime_trip_count_becomes_a_recursive_function(trips):
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])], "body",
        [_info("i", [], TensorProto.INT64), _info("cond_in", [], TensorProto.BOOL),
         _info("acc_in", [2])],
        [_info("cond_out", [], TensorProto.BOOL), _info("acc_out", [2]), _info("scan", [2])])
    model = _model([helper.make_node("Loop", ["m", "", "acc0"], ["acc", "scans"], body=body)],
                   [_info("m", [], TensorProto.INT64), _info("acc0", [2]), _info("x", [2])],
                   [_info("acc", [2]), _info("scans", ["n", 2])])
    x = np.array([2, 3], "float32")
    mod, _ = from_onnx(model)
    acc, scans = evaluate_main(mod, np.array(trips, "int64"), np.ones(2, "float32"), x)
    np.testing.assert_allclose(acc, x ** trips)
    np.testing.assert_allclose(scans, np.array([x ** k for k in range(1, trips + 1)],
                                               "float32").reshape(trips, 2))
    assert any(gv.name_hint.startswith("onnx_loop") for gv in mod.get_global_vars())


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_directions_match_the_reference(direction):
    dirs, hidden, inp = (2 if direction == "bidirectional" else 1), 3, 4
    w = RNG.standard_normal((dirs, 4 * hidden, inp)).astype("float32")
    r = RNG.standard_normal((dirs, 4 * hidden, hidden)).astype("float32")
    b = RNG.standard_normal((dirs, 8 * hidden)).astype("float32")
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (r, "r"), (b, "b"))]
    node = helper.make_node("LSTM", ["x", "w", "r", "b"], ["y", "yh", "yc"],
                            hidden_size=hidden, direction=direction)
    model = _model([node], [_info("x", [5, 2, inp])],
                   [_info("y", [5, dirs, 2, hidden]), _info("yh", [dirs, 2, hidden]),
                    _info("yc", [dirs, 2, hidden])], inits)
    x = RNG.standard_normal((5, 2, inp)).astype("float32")
    _check_against_reference(model, {"x": x}, rtol=1e-4, atol=1e-5)


def test_unsupported_ops_are_listed_together():
    model = _model([helper.make_node("MaxRoiPool", ["x", "x"], ["d"], pooled_shape=[1, 1]),
                    helper.make_node("StringNormalizer", ["x"], ["u"]),
                    helper.make_node("Relu", ["x"], ["y"])],
                   [_info("x", [2, 2])], [_info("d", []), _info("u", ["n"]), _info("y", [2, 2])])
    with pytest.raises(OpNotImplemented, match="MaxRoiPool, StringNormalizer"):
        from_onnx(model)


@pytest.mark.parametrize("payload", [b"", b"\x00\xffgarbage bytes\x13\x37" * 10])
def test_garbage_bytes_raise_tvm_error(payload):
    with pytest.raises(TVMError):
        from_onnx(payload)


def test_non_onnx_file_and_missing_path_raise_tvm_error(tmp_path):
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a protobuf, just some words\n" * 20)
    with pytest.raises(TVMError):
        from_onnx(str(text))
    with pytest.raises(TVMError, match="no ONNX model file"):
        from_onnx(str(tmp_path / "missing.onnx"))
    with pytest.raises(TVMError, match="takes an onnx.ModelProto"):
        from_onnx(12345)


def test_model_failing_the_checker_raises_tvm_error():
    model = _model([helper.make_node("Add", ["x", "undefined"], ["y"])], [_info("x", [2])],
                   [_info("y", [2])])
    with pytest.raises(TVMError, match="onnx.checker"):
        from_onnx(model)


def test_bad_attribute_value_names_the_node():
    model = _model([helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")],
                   [_info("x", [2, 2])], [_info("y", [2, 4])],
                   [numpy_helper.from_array(np.array([0, 1, 0, 1], "int64"), "pads")], opset=18)
    with pytest.raises(OpNotImplemented, match="Pad.*mode 'wrap'"):
        from_onnx(model)


def test_from_onnx_is_reachable_as_relay_frontend():
    assert relay.frontend.from_onnx is from_onnx


def test_pad_accepts_a_one_element_constant_value_tensor():
    # ONNX's own function bodies (Attention's padding mask) pass constant_value as shape (1,)
    model = _model([helper.make_node("Pad", ["x", "pads", "value"], ["y"])],
                   [_info("x", [2, 3])], [_info("y", [2, 5])],
                   [numpy_helper.from_array(np.array([0, 1, 0, 1], "int64"), "pads"),
                    numpy_helper.from_array(np.array([-np.inf], "float32"), "value")], opset=18)
    _check_against_reference(model, {"x": np.arange(6, dtype="float32").reshape(2, 3)})
