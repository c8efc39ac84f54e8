"""InferType against hand-written expected types."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.ir.adt import Constructor, TypeData
from kiln.ir.type import (
    Any,
    FuncType,
    GlobalTypeVar,
    IncompleteType,
    RelayRefType,
    TensorType,
    TupleType,
    TypeCall,
    TypeRelation,
    TypeVar,
)
from kiln.relay.op import nn
from kiln.relay.op.tensor import add, equal, multiply, subtract
from kiln.runtime.error import TypeInferenceError


def infer(expr):
    return relay.transform.InferTypeLocal(expr)


def infer_mod(mod):
    return relay.transform.InferType()(mod)


def test_add_chain_types_every_node():
    x = relay.var("x", shape=(2, 3))
    y = relay.var("y", shape=(3,))
    first = add(x, y)
    second = multiply(first, relay.const(2.0))
    mod = infer_mod(kiln.IRModule.from_expr(relay.Function([x, y], second)))
    expected = TensorType((2, 3), "float32")
    assert first.checked_type == expected
    assert second.checked_type == expected
    assert x.checked_type == expected
    assert mod["main"].checked_type == FuncType([expected, TensorType((3,))], expected)
    assert mod.get_global_var("main").checked_type == mod["main"].checked_type


def test_conv2d_shape():
    x = relay.var("x", shape=(1, 3, 16, 16))
    w = relay.var("w", shape=(8, 3, 3, 3))
    out = nn.conv2d(x, w, strides=(2, 2), padding=(1, 1))
    # (16 + 2*1 - 3) // 2 + 1 = 8
    assert infer(out) == TensorType((1, 8, 8, 8), "float32")


def test_constants_follow_numpy_dtypes():
    assert infer(relay.const(1.5)) == TensorType((), "float32")
    assert infer(relay.const(3)) == TensorType((), "int32")
    assert infer(relay.const(np.zeros((2, 2), "float64"))) == TensorType((2, 2), "float64")


def test_let_chain_and_if():
    x = relay.var("x", shape=(4,))
    a, b = relay.var("a"), relay.var("b")
    cond = relay.var("c", shape=(), dtype="bool")
    body = relay.Let(a, add(x, x), relay.Let(b, multiply(a, a), relay.If(cond, a, b)))
    func = relay.Function([x, cond], body)
    ty = infer(func)
    assert ty == FuncType([TensorType((4,)), TensorType((), "bool")], TensorType((4,)))
    assert a.checked_type == TensorType((4,))


def test_if_condition_must_be_bool_scalar():
    x = relay.var("x", shape=(4,))
    with pytest.raises(TypeInferenceError, match="condition"):
        infer(relay.If(x, x, x))


def test_if_branches_must_agree():
    c = relay.var("c", shape=(), dtype="bool")
    with pytest.raises(TypeInferenceError, match="branches"):
        infer(relay.If(c, relay.const(1.0), relay.const(1)))


def test_tuples_and_getitem():
    x = relay.var("x", shape=(2,))
    y = relay.var("y", shape=(3,), dtype="int8")
    tup = relay.Tuple([x, y])
    assert infer(relay.TupleGetItem(tup, 1)) == TensorType((3,), "int8")
    assert tup.checked_type == TupleType([TensorType((2,)), TensorType((3,), "int8")])
    with pytest.raises(TypeInferenceError, match="out of range"):
        infer(relay.TupleGetItem(relay.Tuple([x]), 3))


def test_getitem_of_a_tuple_typed_later():
    # t's type is only known once the let binding is unified: the getitem waits for it.
    t = relay.var("t")
    x = relay.var("x", shape=(5,))
    f = relay.Function([t], relay.TupleGetItem(t, 0))
    call = relay.Call(f, [relay.Tuple([x, x])])
    assert infer(call) == TensorType((5,))


def test_backward_inference_of_unannotated_var():
    # %v is unannotated; unifying with the parameter of a typed function fixes its type,
    # and the pending add relation is solved afterwards.
    v = relay.var("v")
    p = relay.var("p", shape=(3,))
    g = relay.Function([p], p)
    body = relay.Let(relay.var("unused"), relay.Call(g, [v]), add(v, v))
    ty = infer(relay.Function([v], body))
    assert ty == FuncType([TensorType((3,))], TensorType((3,)))


def test_unresolvable_var_is_reported_by_name():
    w = relay.var("w")
    with pytest.raises(TypeInferenceError, match="cannot infer the type of %w"):
        infer(relay.Function([w], relay.const(1)))


def test_broadcast_error_names_op_and_shapes():
    x = relay.var("x", shape=(3,))
    y = relay.var("y", shape=(4,))
    with pytest.raises(TypeInferenceError) as err:
        infer(x + y)
    message = str(err.value)
    assert "add" in message
    assert "Tensor[(3,), float32]" in message and "Tensor[(4,), float32]" in message
    assert "%x" in message and "%y" in message


def test_op_arity_is_checked():
    x = relay.var("x", shape=(3,))
    with pytest.raises(TypeInferenceError, match="expects 2 arguments"):
        infer(relay.Call(kiln.ir.Op.get("add"), [x]))


def test_annotation_mismatch_in_let():
    v = relay.var("v", shape=(2,))
    with pytest.raises(TypeInferenceError, match="mismatch"):
        infer(relay.Let(v, relay.const(np.zeros(3, "float32")), v))


def test_polymorphic_identity_is_instantiated_per_call():
    a = TypeVar("a")
    x = relay.var("x", a)
    mod = kiln.IRModule()
    ident = relay.GlobalVar("id")
    mod[ident] = relay.Function([x], x, a, [a])
    y = relay.var("y", shape=(2,))
    mod["main"] = relay.Function(
        [y], relay.Tuple([relay.Call(ident, [y]), relay.Call(ident, [relay.const(1)])]))
    mod = infer_mod(mod)
    assert mod["main"].checked_type.ret_type == TupleType(
        [TensorType((2,)), TensorType((), "int32")])
    assert mod["id"].checked_type == FuncType([a], a, [a])


def test_polymorphic_local_function_call():
    a = TypeVar("a")
    x = relay.var("x", a)
    ident = relay.Function([x], x, a, [a])
    assert infer(relay.Call(ident, [relay.const(2.0)])) == TensorType((), "float32")


def test_recursive_sum_over_a_counter():
    mod = kiln.IRModule()
    total = relay.GlobalVar("sum")
    n = relay.var("n", shape=(), dtype="int32")
    one = relay.const(1)
    body = relay.If(equal(n, relay.const(0)), relay.const(0),
                    add(n, relay.Call(total, [subtract(n, one)])))
    mod[total] = relay.Function([n], body)  # no return annotation: found by unification
    mod = infer_mod(mod)
    scalar = TensorType((), "int32")
    assert mod["sum"].checked_type == FuncType([scalar], scalar)
    assert total.checked_type == FuncType([scalar], scalar)


def test_mutually_recursive_globals():
    mod = kiln.IRModule()
    even, odd = relay.GlobalVar("even"), relay.GlobalVar("odd")
    n = relay.var("n", shape=(), dtype="int32")
    m = relay.var("m", shape=(), dtype="int32")
    zero = relay.const(0)
    mod[even] = relay.Function([n], relay.If(equal(n, zero), relay.const(True),
                                             relay.Call(odd, [subtract(n, relay.const(1))])))
    mod[odd] = relay.Function([m], relay.If(equal(m, zero), relay.const(False),
                                            relay.Call(even, [subtract(m, relay.const(1))])))
    mod = infer_mod(mod)
    expected = FuncType([TensorType((), "int32")], TensorType((), "bool"))
    assert mod["even"].checked_type == expected
    assert mod["odd"].checked_type == expected


def test_closure_captures_outer_variable():
    x = relay.var("x", shape=(3,))
    k = relay.var("k")
    inner = relay.Function([], multiply(x, x))
    func = relay.Function([x], relay.Let(k, inner, relay.Call(k, [])))
    assert infer(func) == FuncType([TensorType((3,))], TensorType((3,)))
    assert k.checked_type == FuncType([], TensorType((3,)))


def test_references():
    r = relay.var("r")
    body = relay.Let(r, relay.RefCreate(relay.const(1.0)),
                     relay.Let(relay.var("u"), relay.RefWrite(r, relay.const(2.0)),
                               relay.RefRead(r)))
    assert infer(body) == TensorType((), "float32")
    assert r.checked_type == RelayRefType(TensorType((), "float32"))
    with pytest.raises(TypeInferenceError):
        infer(relay.RefWrite(relay.RefCreate(relay.const(1.0)), relay.const(1)))


def _list_module():
    mod = kiln.IRModule()
    lst = GlobalTypeVar("List")
    a = TypeVar("a")
    cons = Constructor("Cons", [a, TypeCall(lst, [a])], lst)
    nil = Constructor("Nil", [], lst)
    mod[lst] = TypeData(lst, [a], [cons, nil])
    return mod, lst, cons, nil


def test_adt_list_map_via_match():
    mod, lst, cons, nil = _list_module()
    fmap = relay.GlobalVar("map")
    a, b = TypeVar("a"), TypeVar("b")
    f = relay.var("f", FuncType([a], b))
    xs = relay.var("xs", TypeCall(lst, [a]))
    head, tail = relay.var("h"), relay.var("t")
    match = relay.Match(xs, [
        relay.Clause(relay.PatternConstructor(cons, [relay.PatternVar(head),
                                                     relay.PatternVar(tail)]),
                     cons(relay.Call(f, [head]), relay.Call(fmap, [f, tail]))),
        relay.Clause(relay.PatternConstructor(nil), nil()),
    ])
    mod[fmap] = relay.Function([f, xs], match, TypeCall(lst, [b]), [a, b])
    z = relay.var("z", shape=(), dtype="int32")
    to_float = relay.Function([z], relay.const(1.0))
    mod["main"] = relay.Function([], relay.Call(fmap, [to_float, cons(relay.const(7), nil())]))
    mod = infer_mod(mod)
    assert mod["main"].checked_type == FuncType([], TypeCall(lst, [TensorType((), "float32")]))
    assert head.checked_type == a  # inside the polymorphic function, h has the type param
    assert match.checked_type == TypeCall(lst, [b])


def test_constructor_pattern_arity_error():
    mod, lst, cons, nil = _list_module()
    xs = relay.var("xs", TypeCall(lst, [TensorType(())]))
    bad = relay.Match(xs, [relay.Clause(relay.PatternConstructor(cons, [relay.PatternWildcard()]),
                                        relay.const(0))])
    mod["main"] = relay.Function([xs], bad)
    with pytest.raises(TypeInferenceError, match="Cons has 2 fields"):
        infer_mod(mod)


def test_tuple_pattern_binds_fields():
    x = relay.var("x", shape=(2,))
    p, q = relay.var("p"), relay.var("q")
    match = relay.Match(relay.Tuple([x, relay.const(1)]),
                        [relay.Clause(relay.PatternTuple([relay.PatternVar(p),
                                                          relay.PatternVar(q)]), p)])
    assert infer(match) == TensorType((2,))
    assert q.checked_type == TensorType((), "int32")


def test_any_dims_flow_through_relations():
    x = relay.var("x", shape=(Any(), 4))
    y = relay.var("y", shape=(1, 4))
    ty = infer(add(x, y))
    assert len(ty.shape) == 2 and isinstance(ty.shape[0], Any) and ty.shape[1] == 4
    assert ty.is_dynamic


def test_any_unifies_with_concrete_dim():
    v = relay.var("v", shape=(Any(),))
    ty = infer(relay.Let(v, relay.const(np.zeros(3, "float32")), v))
    assert isinstance(ty.shape[0], Any)


def test_call_arity_mismatch():
    x = relay.var("x", shape=(1,))
    f = relay.Function([x], x)
    with pytest.raises(TypeInferenceError, match="expects 1 arguments, got 2"):
        infer(relay.Call(f, [x, x]))


def test_calling_a_tensor_is_an_error():
    x = relay.var("x", shape=(1,))
    with pytest.raises(TypeInferenceError, match="cannot call"):
        infer(relay.Call(x, []))


def test_function_type_relation_constraint():
    def same_as_first(inputs, attrs):
        return inputs[0]

    out = IncompleteType()
    a = TensorType((2,), "int8")
    fn_var = relay.var("g", FuncType([a], out, [], [TypeRelation(same_as_first, [a, out], 1)]))
    assert infer(relay.Call(fn_var, [relay.const(np.zeros(2, "int8"))])) == a


def test_incremental_reinference_keeps_typed_functions():
    x = relay.var("x", shape=(2,))
    mod = infer_mod(kiln.IRModule.from_expr(relay.Function([x], add(x, x))))
    main = mod["main"]
    again = infer_mod(mod)
    assert again["main"] is main
    # A new function reusing typed sub-expressions gets types for the new nodes only.
    wrapper = relay.Function([x], multiply(main.body, x))
    assert infer(wrapper) == FuncType([TensorType((2,))], TensorType((2,)))


def test_deep_chain_of_5000_nodes():
    x = relay.var("x", shape=(8,))
    expr = x
    for _ in range(5000):
        expr = add(expr, x)
    mod = infer_mod(kiln.IRModule.from_expr(expr))
    assert mod["main"].body.checked_type == TensorType((8,))


def test_type_of_untyped_node_raises_clear_error():
    with pytest.raises(kiln.TVMError, match="InferType"):
        _ = relay.var("x").checked_type


def test_replacing_a_callee_retypes_its_callers():
    x = relay.var("x", shape=(2,))
    mod = kiln.IRModule({"f": relay.Function([x], x)})
    f = mod.get_global_var("f")
    y = relay.var("y", shape=(2,))
    mod["main"] = relay.Function([y], relay.Call(f, [y]))
    mod = infer_mod(mod)
    assert mod["main"].checked_type.ret_type == TensorType((2,))
    z = relay.var("z", shape=(2,))
    mod["f"] = relay.Function([z], relay.Tuple([z, z]))  # new signature
    mod = infer_mod(mod)
    pair = TupleType([TensorType((2,)), TensorType((2,))])
    assert mod["main"].checked_type.ret_type == pair
    assert mod["main"].body.checked_type == pair


def test_polymorphic_global_without_return_annotation():
    a = TypeVar("a")
    x = relay.var("x", a)
    mod = kiln.IRModule()
    y = relay.var("y", shape=(3,))
    ident = relay.GlobalVar("id")
    mod["main"] = relay.Function([y], relay.Tuple([relay.Call(ident, [y]),
                                                   relay.Call(ident, [relay.const(1)])]))
    mod[ident] = relay.Function([x], x, type_params=[a])  # defined after its caller
    mod = infer_mod(mod)
    assert mod["main"].checked_type.ret_type == TupleType(
        [TensorType((3,)), TensorType((), "int32")])
