"""Every pass on programs with lets, ifs, closures, tuples, ADTs, recursion, many functions,
and on 5,000-node graphs: results unchanged (reference interpreter), IR well formed."""

from __future__ import annotations

import time

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.ir.structural import assert_structural_equal
from kiln.ir.transform import PassContext
from kiln.relay import transform as T
from kiln.relay.backend.interpreter import evaluate

PASSES = {
    "FoldConstant": lambda: T.FoldConstant(),
    "DeadCodeElimination": lambda: T.DeadCodeElimination(),
    "DeadCodeElimination_inline_once": lambda: T.DeadCodeElimination(inline_once=True),
    "EliminateCommonSubexpr": lambda: T.EliminateCommonSubexpr(),
    "SimplifyInference": lambda: T.SimplifyInference(),
    "SimplifyExpr": lambda: T.SimplifyExpr(),
    "FoldScaleAxis": lambda: T.FoldScaleAxis(),
    "CanonicalizeOps": lambda: T.CanonicalizeOps(),
    "ToANormalForm": lambda: T.ToANormalForm(),
    "ToGraphNormalForm": lambda: T.ToGraphNormalForm(),
    "ToBasicBlockNormalForm": lambda: T.ToBasicBlockNormalForm(),
    "LambdaLift": lambda: T.LambdaLift(),
    "Inline": lambda: T.Inline(),
    "EtaExpand": lambda: T.EtaExpand(expand_constructor=True, expand_global_var=True),
    "RemoveUnusedFunctions": lambda: T.RemoveUnusedFunctions(),
    "FuseOps": lambda: T.FuseOps(),
    "FuseOps_then_DefuseOps": lambda: kiln.transform.Sequential([T.FuseOps(), T.DefuseOps()]),
    "LabelOps": lambda: kiln.transform.Sequential([T.FuseOps(), T.LabelOps()]),
    "AnnotateSpans": lambda: T.AnnotateSpans(),
}


def rich_module():
    """main: lets, a closure, tuples, an if, a recursive global over a List ADT, helpers."""
    mod = kiln.IRModule()
    mod.import_from_std("prelude.rly")
    list_var, ctor_a, ctor_b = mod.get_type("List")
    cons, nil = (ctor_a, ctor_b) if ctor_a.name_hint == "Cons" else (ctor_b, ctor_a)
    tensor = relay.TensorType((3,), "float32")
    sum_list = relay.GlobalVar("sum_list")
    items = relay.var("items", relay.TypeCall(list_var, [tensor]))
    head, tail = relay.var("h", tensor), relay.var("t", relay.TypeCall(list_var, [tensor]))
    mod[sum_list] = relay.Function([items], relay.Match(items, [
        relay.Clause(relay.PatternConstructor(cons, [relay.PatternVar(head),
                                                     relay.PatternVar(tail)]),
                     relay.add(head, sum_list(tail))),
        relay.Clause(relay.PatternConstructor(nil, []), relay.zeros((3,), "float32")),
    ]), tensor)
    helpers = []
    for i in range(12):
        p = relay.var("p", shape=(3,))
        gv = relay.GlobalVar(f"helper{i}")
        mod[gv] = relay.Function([p], relay.add(p, relay.const(float(i)))).with_attr(
            "Inline", 1) if i % 2 else relay.Function([p], relay.multiply(p, relay.const(1.0)))
        helpers.append(gv)
    x = relay.var("x", shape=(3,))
    a, f, t = relay.var("a"), relay.var("f"), relay.var("t")
    y = relay.var("y", shape=(3,))
    closure = relay.Function([y], relay.multiply(y, a))
    scaled = relay.add(f(x), relay.exp(relay.const(np.zeros(3, "float32"))))
    picked = relay.If(relay.greater(relay.sum(x), relay.const(0.0)),
                      sum_list(cons(relay.TupleGetItem(t, 0), cons(relay.TupleGetItem(t, 1),
                                                                   nil()))),
                      relay.negative(relay.TupleGetItem(t, 0)))
    acc = picked
    for gv in helpers:
        acc = gv(acc)
    unused = relay.var("unused")
    body = relay.Let(a, relay.exp(x), relay.Let(f, closure, relay.Let(
        t, relay.Tuple([scaled, relay.transpose(relay.transpose(a))]),
        relay.Let(unused, relay.exp(a), relay.add(acc, relay.exp(x))))))
    mod["main"] = relay.Function([x], body)
    return mod


@pytest.fixture(scope="module")
def reference():
    mod = rich_module()
    inputs = [np.array([0.3, -0.2, 0.5], "float32"), np.array([-1.0, -0.5, 0.2], "float32")]
    return mod, inputs, [evaluate(mod["main"], mod)(v).numpy() for v in inputs]


@pytest.mark.parametrize("name", sorted(PASSES))
def test_pass_keeps_meaning_of_rich_program(name, reference):
    mod, inputs, expected = reference
    with PassContext(opt_level=3):
        after = PASSES[name]()(mod)
    for func in after.functions.values():
        assert relay.analysis.well_formed(func)
    for value, want in zip(inputs, expected):
        np.testing.assert_allclose(evaluate(after["main"], after)(value).numpy(), want,
                                   rtol=1e-6)


def big_graph(nodes=5000):
    x = relay.var("x", shape=(4,))
    values = [x]
    for i in range(nodes):
        a = values[-1]
        b = values[max(0, len(values) - 7)]
        values.append(relay.add(a, b) if i % 3 else relay.multiply(relay.exp(a), b))
    return kiln.IRModule.from_expr(relay.Function([x], values[-1]))


@pytest.mark.parametrize("name", ["FoldConstant", "DeadCodeElimination",
                                  "EliminateCommonSubexpr", "SimplifyExpr", "FuseOps",
                                  "ToANormalForm", "ToBasicBlockNormalForm", "LambdaLift",
                                  "FuseOps_then_DefuseOps", "AnnotateSpans"])
def test_pass_is_fast_on_5000_nodes(name):
    mod = T.InferType()(big_graph())
    start = time.perf_counter()
    with PassContext(opt_level=3):
        after = PASSES[name]()(mod)
    assert time.perf_counter() - start < 15
    assert "main" in after


def test_anf_then_graph_form_round_trips_a_5000_node_graph():
    mod = T.InferType()(big_graph())
    anf = T.ToANormalForm()(mod)
    assert isinstance(anf["main"].body, relay.Let)
    assert_structural_equal(T.ToGraphNormalForm()(anf), mod)


def test_bad_input_raises_clear_errors():
    with pytest.raises(TypeError, match="IRModule"):
        T.FuseOps()(relay.var("x"))
    x = relay.var("x", shape=(2, 3))
    ill_typed = kiln.IRModule.from_expr(relay.Function([x], relay.add(x, relay.ones((4,),
                                                                               "float32"))))
    for make in (T.FuseOps, T.FoldConstant, T.SimplifyInference, T.FoldScaleAxis):
        with pytest.raises(kiln.TVMError):
            make()(ill_typed)
    mod = kiln.IRModule.from_expr(relay.Function([x], x))
    with pytest.raises(kiln.TVMError, match="not in the module"):
        T.RemoveUnusedFunctions(["mian"])(mod)
