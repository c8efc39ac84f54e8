"""ONNX sequences (Relay tuples) and optionals (the Option ADT) on the compiled path, against
ONNX's reference evaluator; bad positions, axes and missing input shapes raise clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import kiln
from kiln import relay
from kiln.relay.frontend import from_onnx
from kiln.relay.frontend.onnx_ops_sequence import from_vm_value, to_vm_value
from kiln.runtime.error import OpAttributeInvalid, OpNotImplemented, TVMError
from kiln.runtime.vm import VirtualMachine

FLOAT = TensorProto.FLOAT
RNG = np.random.default_rng(5)
SEQ = helper.make_sequence_type_proto(helper.make_tensor_type_proto(FLOAT, None))
OPT_SEQ = helper.make_optional_type_proto(SEQ)


def _model(nodes, inputs, outputs, opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _tensor(name, shape, elem=FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _value(name, type_proto):
    return helper.make_value_info(name, type_proto)


def _spec(value):
    if isinstance(value, list):
        return [_spec(v) for v in value]
    return None if value is None else value.shape


def _run(model, feeds: dict):
    """The model on kiln's VM (opt 3, llvm), outputs as ONNX's reference gives them."""
    mod, params = from_onnx(model, shape={k: _spec(v) for k, v in feeds.items()})
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    formal = {i.name: i.type for i in model.graph.input}
    args = [to_vm_value(mod, formal[k], v) for k, v in feeds.items()]
    result = VirtualMachine(exe, kiln.cpu(0)).invoke("main", *args)
    outputs = model.graph.output
    values = [result] if len(outputs) == 1 else list(result)
    return [from_vm_value(mod, o.type, v) for o, v in zip(outputs, values)]


def _check(model, feeds: dict):
    want = ReferenceEvaluator(model).run(None, feeds)
    got = _run(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert isinstance(g, list) and len(g) == len(w)
            for a, b in zip(g, w):
                np.testing.assert_allclose(a, b, rtol=1e-6)
        elif w is None:
            assert g is None
        else:
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-6)


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, TensorProto.INT64, np.shape(value), np.ravel(value).tolist()))


def _insert_model(position):
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]), _const("p", position),
             helper.make_node("SequenceInsert", ["s", "a", "p"], ["t"]),
             helper.make_node("SequenceAt", ["t", "p"], ["y"]),
             helper.make_node("SequenceLength", ["t"], ["n"])]
    return _model(nodes, [_tensor(n, [2, 3]) for n in "abc"],
                  [_tensor("y", [2, 3]), _tensor("n", [], TensorProto.INT64)])


@pytest.mark.parametrize("position", [0, 1, -1, -3])
def test_construct_insert_at_length(position):
    _check(_insert_model(position),
           {n: RNG.standard_normal((2, 3)).astype("float32") for n in "abc"})


def test_insert_at_the_length_appends():
    # ONNX allows position == length (append); its reference evaluator wraps it to 0
    feeds = {n: np.full((2, 3), k, "float32") for k, n in enumerate("abc")}
    y, n = _run(_insert_model(3), feeds)
    np.testing.assert_array_equal(y, feeds["a"])
    assert n == 4


@pytest.mark.parametrize("new_axis, axis", [(0, 0), (0, -1), (1, 0), (1, 2)])
def test_sequence_input_erase_and_concat(new_axis, axis):
    nodes = [_const("p", 1), helper.make_node("SequenceErase", ["s", "p"], ["t"]),
             helper.make_node("ConcatFromSequence", ["t"], ["y"], axis=axis,
                              new_axis=new_axis)]
    rank = 2 + new_axis
    model = _model(nodes, [_value("s", SEQ)], [_tensor("y", ["d"] * rank)])
    _check(model, {"s": [RNG.standard_normal((2, 3)).astype("float32") for _ in range(3)]})


@pytest.mark.parametrize("split, keepdims", [(None, 0), (None, 1), ([1, 3], 1), (2, 1)])
def test_split_to_sequence(split, keepdims):
    inputs = ["x"] if split is None else ["x", "split"]
    nodes = ([] if split is None else [_const("split", split)]) + [
        helper.make_node("SplitToSequence", inputs, ["s"], axis=1, keepdims=keepdims)]
    model = _model(nodes, [_tensor("x", [2, 4])], [_value("s", SEQ)])
    _check(model, {"x": RNG.standard_normal((2, 4)).astype("float32")})


def test_split_to_sequence_with_run_time_sizes():
    node = helper.make_node("SplitToSequence", ["x", "split"], ["s"], axis=0)
    model = _model([node], [_tensor("x", [5, 2]), _tensor("split", [2], TensorProto.INT64)],
                   [_value("s", SEQ)])
    _check(model, {"x": RNG.standard_normal((5, 2)).astype("float32"),
                   "split": np.array([3, 2], "int64")})


def test_sequence_map_over_a_sequence_and_a_tensor():
    body = helper.make_graph([helper.make_node("Add", ["e", "t"], ["o"])], "body",
                             [_tensor("e", None), _tensor("t", [3])], [_tensor("o", None)])
    node = helper.make_node("SequenceMap", ["s", "t"], ["r"], body=body)
    model = _model([node], [_value("s", SEQ), _tensor("t", [3])], [_value("r", SEQ)])
    _check(model, {"s": [RNG.standard_normal((k, 3)).astype("float32") for k in (1, 2, 4)],
                   "t": RNG.standard_normal(3).astype("float32")})


@pytest.mark.parametrize("cond", [True, False])
def test_optional_through_a_run_time_if(cond):
    then = helper.make_graph([helper.make_node("Optional", [], ["o"], type=SEQ)], "then", [],
                             [_value("o", OPT_SEQ)])
    other = helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["s"]),
                               helper.make_node("Optional", ["s"], ["o"])], "else", [],
                              [_value("o", OPT_SEQ)])
    nodes = [helper.make_node("If", ["c"], ["opt"], then_branch=then, else_branch=other),
             helper.make_node("OptionalHasElement", ["opt"], ["has"])]
    model = _model(nodes, [_tensor("c", [], TensorProto.BOOL), _tensor("x", [2])],
                   [_value("opt", OPT_SEQ), _tensor("has", [], TensorProto.BOOL)])
    x = np.array([1.0, 2.0], "float32")
    # ONNX's reference evaluator wraps an If's optional output in a list (and then finds an
    # element in an empty optional): the expected values are written out instead
    opt, has = _run(model, {"c": np.array(cond), "x": x})
    assert has.dtype == np.bool_ and bool(has) is not cond
    if cond:
        assert opt is None
    else:
        assert len(opt) == 1
        np.testing.assert_array_equal(opt[0], x)


@pytest.mark.parametrize("present", [True, False])
def test_optional_input(present):
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(FLOAT, [3]))
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"])]
    outputs = [_tensor("has", [], TensorProto.BOOL)]
    if present:
        nodes.append(helper.make_node("OptionalGetElement", ["o"], ["v"]))
        outputs.append(_tensor("v", [3]))
    model = _model(nodes, [_value("o", opt)], outputs)
    _check(model, {"o": np.arange(3, dtype="float32") if present else None})


def test_out_of_range_position_is_refused():
    nodes = [helper.make_node("SequenceConstruct", ["a"], ["s"]), _const("p", 2),
             helper.make_node("SequenceAt", ["s", "p"], ["y"])]
    model = _model(nodes, [_tensor("a", [2])], [_tensor("y", [2])])
    with pytest.raises(OpAttributeInvalid, match="position 2 is out of range"):
        from_onnx(model)


def test_concat_axis_out_of_range_is_refused():
    node = helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=3)
    model = _model([node], [_value("s", SEQ)], [_tensor("y", ["d", "e"])])
    with pytest.raises(OpAttributeInvalid, match="axis 3 is out of range for rank 2"):
        from_onnx(model, shape={"s": [(2, 3)]})


def test_sequence_input_without_shapes_is_refused():
    node = helper.make_node("SequenceLength", ["s"], ["n"])
    model = _model([node], [_value("s", SEQ)], [_tensor("n", [], TensorProto.INT64)])
    with pytest.raises(OpNotImplemented, match="sequence input 's' needs its element shapes"):
        from_onnx(model)
    with pytest.raises(TVMError, match="must be a list of shapes"):
        from_onnx(model, shape={"s": (2, 3)})


def test_get_element_of_an_empty_optional_is_refused():
    nodes = [helper.make_node("Optional", [], ["o"],
                              type=helper.make_tensor_type_proto(FLOAT, [2])),
             helper.make_node("OptionalGetElement", ["o"], ["y"])]
    model = _model(nodes, [], [_tensor("y", [2])])
    with pytest.raises(TVMError, match="OptionalGetElement of an empty optional"):
        from_onnx(model)
