"""Relay expression builders, operators on expressions, bind, ScopeBuilder, the namespace."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.ir.type import TensorType, TupleType
from kiln.runtime.error import TVMError


def test_var_builder_annotations():
    x = relay.var("x", shape=(1, 10), dtype="int8")
    assert x.name_hint == "x" and x.vid.name_hint == "x"
    assert x.type_annotation == TensorType((1, 10), "int8")
    assert relay.var("s", "float16").type_annotation == TensorType((), "float16")
    assert relay.var("u").type_annotation is None
    with pytest.raises(ValueError, match="not both"):
        relay.var("x", TensorType(()), shape=(1,))
    with pytest.raises(TypeError):
        relay.var(3)


@pytest.mark.parametrize("value, dtype", [
    (1.0, "float32"), (2, "int32"), (True, "bool"), ([1, 2], "int32"), ([0.5], "float32"),
    (np.float64(1.0), "float64"), (np.zeros(2, "int64"), "int64"),
])
def test_const_follows_tvm_dtype_rules(value, dtype):
    const = relay.const(value)
    assert const.data.dtype == dtype
    np.testing.assert_array_equal(const.data.numpy(), np.asarray(value).astype(dtype))


def test_const_with_explicit_dtype_and_ndarray():
    assert relay.const(1, "float16").data.dtype == "float16"
    array = kiln.nd.array(np.arange(3, dtype="float32"))
    assert relay.const(array).data is array
    with pytest.raises(TypeError):
        relay.const(relay.var("x"))
    with pytest.raises(TypeError):
        relay.const({"a": 1})


def test_python_operators_build_op_calls():
    x = relay.var("x", shape=(3,))
    y = relay.var("y", shape=(3,))
    table = {
        "add": x + y, "subtract": x - y, "multiply": x * y, "divide": x / y,
        "less": x < y, "greater": x > y, "less_equal": x <= y, "greater_equal": x >= y,
        "negative": -x,
    }
    for name, call in table.items():
        assert isinstance(call, relay.Call) and call.op.name == name
    scaled = x * 2.0
    assert scaled.args[1].data.numpy() == np.float32(2.0)
    assert x.astype("int8").op.name == "cast"
    assert (x == x) is True and (x != y) is True  # identity, as TVM's ObjectRef


def test_tuple_indexing():
    x, y = relay.var("x"), relay.var("y")
    tup = relay.Tuple([x, y])
    assert tup[1] is y and len(tup) == 2
    with pytest.raises(IndexError):
        tup[2]
    item = relay.Call(relay.Function([], tup), [])[0]
    assert isinstance(item, relay.TupleGetItem) and item.index == 0
    with pytest.raises(TypeError):
        list(x)


def test_call_rejects_python_values():
    with pytest.raises(TypeError, match="relay.const"):
        relay.Call(kiln.ir.Op.get("add"), [relay.var("x"), 1])


def test_function_attrs_copy_on_write():
    x = relay.var("x", shape=(2,))
    func = relay.Function([x], x)
    prim = func.with_attr("Primitive", 1)
    assert prim is not func and func.attrs is None
    assert prim.attrs["Primitive"] == 1 and prim.params == func.params
    both = prim.with_attr("global_symbol", "f")
    assert both.attrs["Primitive"] == 1 and both.attrs["global_symbol"] == "f"
    assert both.without_attr("Primitive").get_attr("Primitive") is None
    with pytest.raises(TypeError):
        relay.Function([relay.const(1)], x)


def test_nodes_are_immutable():
    x = relay.var("x")
    with pytest.raises(AttributeError, match="immutable"):
        x.vid = None


def test_bind_replaces_vars_and_drops_bound_params():
    x, y = relay.var("x", shape=(2,)), relay.var("y", shape=(2,))
    func = relay.Function([x, y], x + y)
    bound = relay.bind(func, {"y": relay.const(np.ones(2, "float32"))})
    assert [p.name_hint for p in bound.params] == ["x"]
    assert isinstance(bound.body.args[1], relay.Constant)
    assert relay.bind(x + y, {x: y}).args[0] is y
    with pytest.raises(TVMError, match="no parameter named 'z'"):
        relay.bind(func, {"z": 1})


def test_scope_builder_let_chain_and_if():
    sb = relay.ScopeBuilder()
    a = sb.let("a", relay.const(1.0))
    cond = relay.var("c", shape=(), dtype="bool")
    with sb.if_scope(cond):
        sb.ret(a)
    with sb.else_scope():
        b = sb.let("b", relay.const(2.0))
        sb.ret(b)
    expr = sb.get()
    assert isinstance(expr, relay.Let) and expr.var is a
    assert isinstance(expr.body, relay.If)
    assert isinstance(expr.body.false_branch, relay.Let)
    assert relay.transform.InferTypeLocal(relay.Function([cond], expr)).ret_type == \
        TensorType((), "float32")


def test_scope_builder_misuse():
    sb = relay.ScopeBuilder()
    with pytest.raises(TVMError, match="no return value"):
        sb.get()
    with pytest.raises(TVMError, match="must follow"):
        with sb.else_scope():
            pass


def test_repr_is_readable_text():
    x = relay.var("x", shape=(2,))
    text = repr(relay.Function([x], relay.Tuple([x * x, x])))
    assert "%x: Tensor[(2,), float32]" in text and "multiply(%x, %x)" in text


def test_relay_namespace_and_op_fallback():
    assert relay.Any is kiln.ir.type.Any
    assert relay.TupleType is TupleType
    assert callable(relay.transform.InferType)
    with pytest.raises(AttributeError, match="no attribute 'not_a_real_name'"):
        _ = relay.not_a_real_name


def test_global_var_call_builds_call():
    gv = relay.GlobalVar("f")
    call = gv(relay.var("x"))
    assert isinstance(call, relay.Call) and call.op is gv


def test_constant_wraps_numpy_data_in_an_ndarray():
    const = relay.Constant(np.arange(4, dtype="int16"))
    assert isinstance(const.data, kiln.nd.NDArray) and const.data.dtype == "int16"
    with pytest.raises(TypeError, match="NDArray"):
        relay.Constant(relay.var("x"))
