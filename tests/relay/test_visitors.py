"""ExprVisitor / ExprMutator / post_order_visit: coverage, memoization, identity, depth."""

from __future__ import annotations

import pytest

from kiln import relay
from kiln.ir.adt import Constructor, TypeData
from kiln.ir.type import GlobalTypeVar
from kiln.relay.expr_functor import ExprMutator, ExprVisitor, VisitorError, post_order_visit
from kiln.relay.op.tensor import add, multiply


def _all_kinds():
    """An expression containing every node kind once."""
    x = relay.var("x", shape=(2,))
    v = relay.var("v")
    r = relay.var("r")
    c = relay.var("c", shape=(), dtype="bool")
    t = GlobalTypeVar("T")
    leaf = Constructor("Leaf", [], t)
    TypeData(t, [], [leaf])
    p = relay.var("p")
    match = relay.Match(leaf(), [relay.Clause(relay.PatternVar(p), relay.const(0))])
    body = relay.Let(
        v, add(x, relay.const(1.0)),
        relay.Let(r, relay.RefCreate(v),
                  relay.Tuple([relay.If(c, relay.RefRead(r), v),
                               relay.RefWrite(r, v),
                               relay.TupleGetItem(relay.Tuple([v]), 0),
                               relay.Call(relay.GlobalVar("g"), []), match])))
    return relay.Function([x, c], body), p


def test_visitor_sees_every_node_once():
    expr, pattern_var = _all_kinds()
    seen = []

    class Collect(ExprVisitor):
        def visit(self, node):
            if node not in self.memo_map:
                seen.append(type(node).__name__)
            return super().visit(node)

    Collect().visit(expr)
    for kind in ["Function", "Let", "Call", "Var", "If", "Tuple", "TupleGetItem",
                 "GlobalVar", "Op", "Constant", "RefCreate", "RefRead", "RefWrite",
                 "Constructor", "Match"]:
        assert kind in seen, kind
    assert len(seen) == len(set(map(id, _nodes(expr))))


def _nodes(expr):
    out = []
    post_order_visit(expr, out.append)
    return out


def test_post_order_puts_children_first_and_visits_shared_nodes_once():
    x = relay.var("x", shape=(1,))
    shared = add(x, x)
    top = multiply(shared, shared)
    order = _nodes(top)
    names = [getattr(n, "name_hint", None) or getattr(getattr(n, "op", None), "name", None)
             or getattr(n, "name", None) for n in order]
    assert order[-1] is top
    assert order.index(shared) < order.index(top)
    assert order.index(x) < order.index(shared)
    assert len(order) == len(set(map(id, order))) == 5, names  # x, add, shared, multiply, top


def test_mutator_without_changes_returns_the_same_object():
    expr, _ = _all_kinds()
    assert ExprMutator().visit(expr) is expr


def test_mutator_rebuilds_only_changed_path():
    x, y = relay.var("x", shape=(1,)), relay.var("y", shape=(1,))
    untouched = multiply(y, y)
    top = relay.Tuple([add(x, x), untouched])

    class XtoY(ExprMutator):
        def visit_var(self, var):
            return y if var is x else var

    out = XtoY().visit(top)
    assert out is not top
    assert out.fields[1] is untouched
    assert out.fields[0].args[0] is y and out.fields[0].args[1] is y


def test_mutator_memoizes_shared_nodes():
    x = relay.var("x", shape=(1,))
    shared = add(x, x)

    class Count(ExprMutator):
        calls = 0

        def visit_call(self, node):
            Count.calls += 1
            return super().visit_call(node)

    Count().visit(relay.Tuple([shared, shared]))
    assert Count.calls == 1


def test_deep_chains_do_not_overflow():
    x = relay.var("x", shape=(1,))
    expr = x
    for _ in range(20000):
        expr = add(expr, x)
    count = []

    class CountCalls(ExprVisitor):
        def visit_call(self, node):
            count.append(1)
            super().visit_call(node)

    CountCalls().visit(expr)
    assert len(count) == 20000
    assert ExprMutator().visit(expr) is expr
    assert len(_nodes(expr)) == 20002  # calls, x, and the add op


def test_unexpected_errors_name_the_node():
    class Broken(ExprVisitor):
        def visit_constant(self, node):
            raise KeyError("boom")

    with pytest.raises(VisitorError, match=r"KeyError: .boom.\n  while visiting Constant"):
        Broken().visit(relay.Tuple([relay.const(1.0)]))
