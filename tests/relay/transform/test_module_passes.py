"""LambdaLift, Inline, EtaExpand, RemoveUnusedFunctions, DefuseOps, LabelOps, AnnotateSpans."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import relay
from kiln.ir.structural import assert_structural_equal, structural_hash
from kiln.relay.backend.interpreter import evaluate
from kiln.relay.transform import (
    AnnotateSpans,
    DefuseOps,
    EtaExpand,
    FuseOps,
    InferType,
    Inline,
    LabelOps,
    LambdaLift,
    RemoveUnusedFunctions,
)


def tensor(name, shape=(2,), dtype="float32"):
    return relay.var(name, shape=shape, dtype=dtype)


def functions_of(mod):
    return sorted(gv.name_hint for gv in mod.get_global_vars())


# -- LambdaLift ------------------------------------------------------------------------------
def test_lambda_lift_closure_captures_free_variables():
    x, y = tensor("x"), tensor("y")
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.Function([y], x + y)(x)))
    lifted = LambdaLift()(mod)
    (name,) = [n for n in functions_of(lifted) if n != "main"]
    x2, y2 = tensor("x"), tensor("y")
    expected_global = relay.Function([x2], relay.Function([y2], x2 + y2).with_attr(
        "Closure", 1))
    assert_structural_equal(lifted[name], expected_global, map_free_vars=True)
    x3 = tensor("x")
    gv = lifted.get_global_var(name)
    assert_structural_equal(lifted["main"].body, relay.Call(gv(x3), [x3]), map_free_vars=True)
    xv = np.array([1.0, 2.0], "float32")
    np.testing.assert_allclose(evaluate(lifted["main"], lifted)(xv).numpy(), xv + xv)


def test_lambda_lift_function_without_free_vars_becomes_a_global_reference():
    x, y = tensor("x"), tensor("y")
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.Function([y], relay.exp(y))(x)))
    lifted = LambdaLift()(mod)
    assert isinstance(lifted["main"].body.op, relay.GlobalVar)
    assert lifted[lifted["main"].body.op.name_hint].attrs is None or \
        not lifted[lifted["main"].body.op.name_hint].get_attr("Closure")


def test_lambda_lift_recursive_let_and_nested_closures():
    n = tensor("n", (), "int32")
    k = tensor("k", (), "int32")
    f = relay.var("f")
    loop = relay.Function([k], relay.If(relay.less(k, relay.const(1)), n,
                                        f(relay.subtract(k, relay.const(1)))))
    mod = kiln.IRModule.from_expr(relay.Function([n], relay.Let(f, loop, f(n))))
    lifted = LambdaLift()(mod)
    assert len(lifted.functions) == 2
    relay.analysis.post_order_visit(
        lifted["main"], lambda node: (not isinstance(node, relay.Function)) or
        node is lifted["main"] or (_ for _ in ()).throw(AssertionError("literal left")))
    assert int(evaluate(lifted["main"], lifted)(np.array(4, "int32")).numpy()) == 4


def test_lambda_lift_leaves_primitive_functions():
    p, x = tensor("p"), tensor("x")
    prim = relay.Function([p], relay.exp(p)).with_attr("Primitive", 1)
    mod = kiln.IRModule.from_expr(relay.Function([x], prim(x)))
    assert functions_of(LambdaLift()(mod)) == ["main"]


# -- Inline -------------------------------------------------------------------------------------
def test_inline_replaces_calls_and_drops_the_inlined_function():
    mod = kiln.IRModule()
    a, b = tensor("a"), tensor("b")
    t = relay.var("t")
    mod["axpy"] = relay.Function([a, b], relay.Let(t, a * b, t + b)).with_attr("Inline", 1)
    x = tensor("x")
    axpy = mod.get_global_var("axpy")
    mod["main"] = relay.Function([x], axpy(axpy(x, x), x))
    after = Inline()(mod)
    assert functions_of(after) == ["main"]
    assert relay.analysis.well_formed(after["main"])
    xv = np.array([2.0, 3.0], "float32")
    y = xv * xv + xv
    np.testing.assert_allclose(evaluate(after["main"], after)(xv).numpy(), y * xv + xv)


def test_inline_skips_unmarked_and_recursive_functions():
    mod = kiln.IRModule()
    n = tensor("n", (), "int32")
    rec = relay.GlobalVar("rec")
    mod[rec] = relay.Function([n], relay.If(relay.less(n, relay.const(1)), n, rec(
        relay.subtract(n, relay.const(1))))).with_attr("Inline", 1)
    m = tensor("m", (), "int32")
    mod["plain"] = relay.Function([m], m)
    k = tensor("k", (), "int32")
    mod["main"] = relay.Function([k], mod.get_global_var("plain")(rec(k)))
    after = Inline()(mod)
    assert functions_of(after) == ["main", "plain", "rec"]
    assert_structural_equal(after["main"], InferType()(mod)["main"])


# -- EtaExpand ---------------------------------------------------------------------------------
def test_eta_expand_global_var_used_as_a_value():
    mod = kiln.IRModule()
    x = tensor("x")
    mod["neg"] = relay.Function([x], relay.negative(x))
    neg = mod.get_global_var("neg")
    y = tensor("y")
    mod["main"] = relay.Function([y], relay.Tuple([neg, neg(y)]))
    after = EtaExpand(expand_global_var=True)(mod)
    x0, y2 = tensor("x0"), tensor("y")
    expected = relay.Function([y2], relay.Tuple([relay.Function([x0], neg(x0)), neg(y2)]))
    assert_structural_equal(after["main"], expected, map_free_vars=True)
    assert isinstance(EtaExpand()(mod)["main"].body.fields[0], relay.GlobalVar)


def test_eta_expand_constructor():
    mod = kiln.IRModule()
    mod.import_from_std("prelude.rly")
    cons = mod.get_type("List")[2] if mod.get_type("List")[1].name_hint == "Nil" else \
        mod.get_type("List")[1]
    mod["main"] = relay.Function([], cons)
    after = EtaExpand(expand_constructor=True)(mod)
    func = after["main"].body
    assert isinstance(func, relay.Function) and len(func.params) == 2
    assert func.body.op is cons


# -- RemoveUnusedFunctions ---------------------------------------------------------------------
def test_remove_unused_functions_keeps_what_entries_reach():
    mod = kiln.IRModule()
    x = tensor("x")
    mod["leaf"] = relay.Function([x], x)
    mod["mid"] = relay.Function([x], mod.get_global_var("leaf")(x))
    mod["orphan"] = relay.Function([x], x)
    mod["other"] = relay.Function([x], x)
    mod["main"] = relay.Function([x], relay.Tuple([mod.get_global_var("mid")]))
    assert functions_of(RemoveUnusedFunctions()(mod)) == ["leaf", "main", "mid"]
    assert functions_of(RemoveUnusedFunctions(["main", "other"])(mod)) == \
        ["leaf", "main", "mid", "other"]


# -- DefuseOps / LabelOps ------------------------------------------------------------------------
def resnet_like():
    x, w = tensor("x", (1, 4, 6, 6)), tensor("w", (4, 4, 3, 3))
    y = relay.nn.relu(relay.add(relay.nn.conv2d(x, w, padding=(1, 1)), relay.const(1.0)))
    return kiln.IRModule.from_expr(relay.Function([x, w], relay.exp(relay.transpose(y))))


def test_defuse_undoes_fuse():
    mod = resnet_like()
    fused = FuseOps(2)(mod)
    assert_structural_equal(DefuseOps()(fused), InferType()(mod))


def test_label_ops_hash_and_name():
    fused = FuseOps(2)(resnet_like())
    labeled = LabelOps()(fused)
    calls = []
    relay.analysis.post_order_visit(labeled["main"], lambda n: isinstance(n, relay.Call) and
                                    isinstance(n.op, relay.Function) and calls.append(n.op))
    names = sorted(f.attrs["func_name"] for f in calls)
    assert names == ["fused_nn_conv2d_add_nn_relu", "fused_transpose_exp"]
    for func in calls:
        label = func.attrs["hash"]
        assert len(label) == 16 and int(label, 16) == \
            structural_hash(func.without_attr("hash").without_attr("func_name")) & (2**64 - 1)
    again = LabelOps()(FuseOps(2)(resnet_like()))
    first = sorted(f.attrs["hash"] for f in calls)
    second = []
    relay.analysis.post_order_visit(again["main"], lambda n: isinstance(n, relay.Call) and
                                    isinstance(n.op, relay.Function) and
                                    second.append(n.op.attrs["hash"]))
    assert sorted(second) == first


# -- AnnotateSpans ---------------------------------------------------------------------------------
def test_annotate_spans_point_at_printed_lines():
    x = tensor("x")
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.add(relay.nn.relu(relay.exp(x)),
                                                                relay.const(1.0))))
    after = AnnotateSpans()(mod)
    lines = after.astext().splitlines()
    seen = []

    def check(node):
        if isinstance(node, relay.Call):
            assert node.span is not None and node.span.source_name.name == "GeneratedSource"
            assert f"{node.op.name}(" in lines[node.span.line - 1]
            seen.append(node.span.line)
    relay.analysis.post_order_visit(after["main"], check)
    assert seen == sorted(seen) and len(set(seen)) == 3
    assert_structural_equal(after, InferType()(mod))
