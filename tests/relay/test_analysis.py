"""Analyses: variable sets, well-formedness, kinds, call graph, MACs and layer depth."""

from __future__ import annotations

import pytest

import kiln
from kiln import relay
from kiln.ir.type import FuncType, GlobalTypeVar, TensorType, TupleType, TypeCall, TypeKind, TypeVar
from kiln.relay import analysis
from kiln.relay.op import nn
from kiln.relay.op.tensor import add
from kiln.runtime.error import TVMError


def test_free_bound_and_all_vars_in_reading_order():
    x, y, z, v = (relay.var(n, shape=(1,)) for n in "xyzv")
    body = relay.Let(v, add(z, x), add(v, y))
    func = relay.Function([x], body)
    assert analysis.free_vars(func) == [z, y]
    assert analysis.bound_vars(func) == [x, v]
    assert analysis.all_vars(func) == [x, v, z, y]
    assert analysis.free_vars(add(y, x)) == [y, x]


def test_pattern_vars_are_bound():
    p = relay.var("p")
    d = relay.var("d")
    match = relay.Match(d, [relay.Clause(relay.PatternVar(p), p)])
    assert analysis.free_vars(match) == [d]
    assert analysis.bound_vars(match) == [p]


def test_type_vars():
    a, b = TypeVar("a"), TypeVar("b")
    assert analysis.free_type_vars(FuncType([a], b, [a])) == [b]
    assert analysis.bound_type_vars(FuncType([a], b, [a])) == [a]
    x = relay.var("x", a)
    func = relay.Function([x], x, a, [a])
    assert analysis.free_type_vars(func) == []
    assert analysis.bound_type_vars(func) == [a]
    assert analysis.all_type_vars(relay.var("y", b)) == [b]


def test_well_formed():
    x = relay.var("x", shape=(1,))
    assert analysis.well_formed(relay.Function([x], x))
    assert analysis.well_formed(add(x, x))  # free variables are fine
    assert not analysis.well_formed(relay.Tuple([relay.Function([x], x), relay.Function([x], x)]))
    assert not analysis.well_formed(relay.Tuple([relay.Let(x, relay.const(1.0), x), x]))


def test_check_kind():
    lst = GlobalTypeVar("List")
    mod = kiln.IRModule()
    a = TypeVar("a")
    from kiln.ir.adt import Constructor, TypeData

    mod[lst] = TypeData(lst, [a], [Constructor("Nil", [], lst)])
    assert analysis.check_kind(TupleType([TensorType((1,))])) == TypeKind.Type
    assert analysis.check_kind(TypeVar("s", TypeKind.ShapeVar)) == TypeKind.ShapeVar
    assert analysis.check_kind(TypeCall(lst, [TensorType(())]), mod) == TypeKind.Type
    with pytest.raises(TVMError, match="takes 1 type arguments"):
        analysis.check_kind(TypeCall(lst, []), mod)
    with pytest.raises(TVMError, match="kind error"):
        analysis.check_kind(TupleType([lst]))
    with pytest.raises(TVMError, match="not a type"):
        analysis.check_kind(3)


def test_call_graph():
    x = relay.var("x", shape=(1,))
    mod = kiln.IRModule({"leaf": relay.Function([x], x)})
    leaf = mod.get_global_var("leaf")
    loop = relay.GlobalVar("loop")
    y = relay.var("y", shape=(1,))
    mod[loop] = relay.Function([y], relay.Call(loop, [relay.Call(leaf, [y])]))
    mod["main"] = relay.Function([y], relay.Call(leaf, [relay.Call(loop, [y])]))
    graph = analysis.CallGraph(mod)
    assert graph.ref_count(leaf) == 2
    assert graph.global_call_count("main") == 2
    assert graph.is_recursive(loop) and not graph.is_recursive("main")
    assert "@main -> [@leaf, @loop]" in str(graph) or "@main -> [@loop, @leaf]" in str(graph)


def test_mac_count_of_conv_and_dense():
    data = relay.var("data", shape=(1, 3, 8, 8))
    weight = relay.var("weight", shape=(4, 3, 3, 3))
    conv = nn.conv2d(data, weight, padding=(1, 1))
    # out 1*4*8*8 elements, each a 3*3*3 dot product
    assert analysis.get_total_mac_number(conv) == 1 * 4 * 8 * 8 * 27
    grouped = nn.conv2d(data, relay.var("w", shape=(3, 1, 3, 3)), groups=3)
    assert analysis.get_total_mac_number(grouped) == 3 * 6 * 6 * 9
    dense = nn.dense(relay.var("x", shape=(5, 16)), relay.var("w2", shape=(7, 16)))
    assert analysis.get_total_mac_number(dense) == 5 * 7 * 16
    assert analysis.get_total_mac_number(add(data, data)) == 0


def test_count_layers_takes_the_deepest_chain():
    x = relay.var("x", shape=(4,))
    one = nn.relu(x)
    three = nn.relu(nn.relu(nn.relu(x)))
    assert analysis.count_layers(add(one, three), ["nn.relu"]) == 3
    assert analysis.count_layers(add(one, three), ["add"]) == 1
