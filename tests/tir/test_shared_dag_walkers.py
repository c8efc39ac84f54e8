"""TIR walkers on expressions that share sub-expressions (DAGs).

A chain where each level uses the previous one twice (``x1 = x0 + x0``,
``x2 = floormod(x1 * x1, 1009)``, ...) has 2**60 paths through 60 levels but ~90 distinct
nodes. Every walker must work per distinct node: calls are counted, each walk runs under
a deadline (an exponential walk fails instead of hanging), results are evaluated against
the same arithmetic done directly in Python, and a rewrite keeps the sharing. Assertions
compare plain values (counts, ids, names, numbers): pytest's failure report prints what an
assertion mentions, and printing a 60-level DAG as text is itself exponential.
"""

from __future__ import annotations

import contextlib
import signal

import pytest

from kiln import tir
from kiln.runtime.error import TVMError

LEVELS = 60
MODULUS = 1009


def _chain(leaf, levels=LEVELS, modulus=MODULUS):
    """Level k: ``e + e`` (k even) or ``floormod(e * e, modulus)`` (k odd); one modulus node."""
    m = tir.IntImm("int32", modulus)
    e = leaf
    for level in range(levels):
        e = tir.Add(e, e) if level % 2 == 0 else tir.FloorMod(tir.Mul(e, e), m)
    return e


def _chain_value(x: int, levels=LEVELS, modulus=MODULUS) -> int:
    """The chain's value computed directly, without kiln."""
    v = x
    for level in range(levels):
        v = v + v if level % 2 == 0 else (v * v) % modulus
    return v


# var + (30 Add + 30 Mul + 30 FloorMod) + the modulus immediate
DISTINCT_NODES = 1 + 3 * (LEVELS // 2) + 1

_ARITH = {tir.Add: lambda a, b: a + b, tir.Sub: lambda a, b: a - b,
          tir.Mul: lambda a, b: a * b, tir.FloorMod: lambda a, b: a % b}


def _evaluate(expr, env: dict[str, int]) -> int:
    """Evaluate an integer expression, each distinct node once (the test's own oracle walk)."""
    values: dict[int, int] = {}

    def value(node):
        key = id(node)
        if key not in values:
            if isinstance(node, tir.Var):
                values[key] = env[node.name]
            elif isinstance(node, tir.IntImm):
                values[key] = node.value
            else:
                values[key] = _ARITH[type(node)](value(node.a), value(node.b))
        return values[key]

    return value(expr)


class _Expired(Exception):
    pass


@contextlib.contextmanager
def _within(seconds: float):
    """Fail (rather than hang) when the block runs longer than ``seconds``."""
    def expire(signum, frame):
        raise _Expired

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Expired:
        # a fresh error: the interrupted frames can be deep inside a walk
        raise AssertionError(f"took longer than {seconds} s: not linear in distinct "
                             "nodes") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _assert_sharing(expr, levels=LEVELS):
    """Every level of a rewritten chain still uses one object for both operands."""
    e = expr
    for level in reversed(range(levels)):
        pair = e if level % 2 == 0 else e.a
        shared = pair.a is pair.b
        assert shared, f"level {level} lost its sharing"
        e = pair.a


def _visit_order(walk, expr):
    """The nodes ``walk`` calls its function on, checked distinct, with their positions."""
    seen = []
    with _within(1.0):
        walk(expr, seen.append)
    calls, distinct = len(seen), len({id(n) for n in seen})
    assert calls == distinct == DISTINCT_NODES
    position = {id(n): i for i, n in enumerate(seen)}
    pairs = [(position[id(child)], position[id(node)]) for node in seen
             for child in (getattr(node, "a", None), getattr(node, "b", None))
             if child is not None]
    return seen, pairs


def test_post_order_visit_calls_each_distinct_node_once_children_first():
    e = _chain(tir.Var("x", "int32"))
    seen, pairs = _visit_order(tir.post_order_visit, e)
    assert all(child < parent for child, parent in pairs)
    root_last = seen[-1] is e
    assert root_last


def test_pre_order_visit_once_per_node_parents_first_and_pruning():
    e = _chain(tir.Var("x", "int32"))
    seen, pairs = _visit_order(tir.pre_order_visit, e)
    assert all(child > parent for child, parent in pairs)
    root_first = seen[0] is e
    assert root_first
    pruned = []
    tir.pre_order_visit(e, lambda n: pruned.append(n) or False)
    pruned_ids = [id(n) for n in pruned]
    assert pruned_ids == [id(e)]


def test_post_order_visit_skips_a_node_met_again_in_another_statement():
    x = tir.Var("x", "int32")
    e = _chain(x, levels=4)
    stmt = tir.SeqStmt([tir.Evaluate(e), tir.Evaluate(e)])
    kinds = []
    tir.post_order_visit(stmt, lambda n: kinds.append(type(n).__name__))
    # TVM's PostOrderVisit: one call per distinct node of the whole walk
    assert kinds.count("Var") == 1 and kinds.count("Add") == 2
    assert kinds.count("Evaluate") == 2 and kinds[-1] == "SeqStmt"


class _CountingVisitor(tir.StmtExprVisitor):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def visit_Add(self, node):
        self.calls += 1
        self.generic_visit(node)

    visit_Mul = visit_FloorMod = visit_Add


def test_visitor_visits_each_distinct_expression_node_once():
    x = tir.Var("x", "int32")
    visitor = _CountingVisitor()
    with _within(1.0):
        visitor.visit(_chain(x))
    assert visitor.calls == 3 * (LEVELS // 2)


def test_visitor_walks_a_shared_expression_again_in_each_statement():
    # a statement may set context (an enclosing loop): what one statement saw is forgotten
    x = tir.Var("x", "int32")
    e = _chain(x, levels=LEVELS)
    visitor = _CountingVisitor()
    with _within(1.0):
        visitor.visit(tir.SeqStmt([tir.Evaluate(e), tir.Evaluate(e)]))
    assert visitor.calls == 2 * 3 * (LEVELS // 2)


class _ChangeModulus(tir.StmtExprMutator):
    def __init__(self, old: int, new: int):
        super().__init__()
        self.old, self.new, self.calls = old, new, 0

    def visit_IntImm(self, node):
        self.calls += 1
        return tir.IntImm(node.dtype, self.new) if node.value == self.old else node


def test_mutator_rewrites_each_node_once_and_keeps_sharing():
    x = tir.Var("x", "int32")
    e = _chain(x)
    mutator = _ChangeModulus(MODULUS, 997)
    with _within(1.0):
        out = mutator.visit(e)
    assert mutator.calls == 1  # one IntImm node, used by 30 FloorMods
    _assert_sharing(out)
    moduli = {id(node.b) for node in _nodes_of_kind(out, tir.FloorMod)}
    assert len(moduli) == 1  # the one new modulus node is shared by every level
    inputs = (0, 1, 5, 12)
    got = [_evaluate(out, {"x": v}) for v in inputs]
    assert got == [_chain_value(v, modulus=997) for v in inputs]
    unchanged = [_evaluate(e, {"x": v}) for v in inputs]
    assert unchanged == [_chain_value(v) for v in inputs]  # the input is untouched


def _nodes_of_kind(expr, kind):
    found = []
    tir.post_order_visit(expr, lambda n: found.append(n) if isinstance(n, kind) else None)
    return found


def test_mutator_leaves_an_unchanged_dag_as_the_same_object():
    x, y = tir.Var("x", "int32"), tir.Var("y", "int32")
    e = _chain(x)
    with _within(1.0):
        kept_by_mutator = _ChangeModulus(7, 8).visit(e) is e
        kept_by_substitute = tir.substitute(e, {y: 3}) is e
    assert kept_by_mutator and kept_by_substitute


def test_substitute_on_shared_chain_keeps_sharing_and_value():
    x, y = tir.Var("x", "int32"), tir.Var("y", "int32")
    e = _chain(x)
    with _within(1.0):
        out = tir.substitute(e, {x: y + 3})
    _assert_sharing(out)
    var_names = [v.name for v in _nodes_of_kind(out, tir.Var)]
    assert var_names == ["y"]
    got = [_evaluate(out, {"y": v}) for v in (0, 2, 9)]
    assert got == [_chain_value(v + 3) for v in (0, 2, 9)]


def test_substitute_in_a_statement_rewrites_the_shared_value_once_per_store():
    x, i = tir.Var("x", "int32"), tir.Var("i", "int32")
    buf = tir.decl_buffer((4,), "int32", name="B")
    e = _chain(x)
    loop = tir.For(i, 0, 4, tir.ForKind.SERIAL, tir.BufferStore(buf, e, [i]))
    with _within(1.0):
        out = tir.substitute(loop, {x: i * 2})
    value = out.body.value
    _assert_sharing(value)
    got = [_evaluate(value, {"i": i}) for i in range(4)]
    assert got == [_chain_value(2 * i) for i in range(4)]


def test_ir_transform_callbacks_see_each_distinct_node_once():
    x = tir.Var("x", "int32")
    e = _chain(x)
    calls = []

    def mul_to_add(node):
        calls.append(node)
        return tir.Add(node.a, node.b) if isinstance(node, tir.Mul) else None

    with _within(1.0):
        out = tir.ir_transform(e, None, mul_to_add)
    call_count = len(calls)
    assert call_count == DISTINCT_NODES
    _assert_sharing(out)
    expected = []
    for v in (1, 3, 8):
        for level in range(LEVELS):
            v = 2 * v if level % 2 == 0 else (2 * v) % MODULUS
        expected.append(v)
    got = [_evaluate(out, {"x": v}) for v in (1, 3, 8)]
    assert got == expected
    calls.clear()
    with _within(1.0):
        tir.ir_transform(e, None, mul_to_add, ["tir.Mul"])
    call_count = len(calls)
    assert call_count == LEVELS // 2


class _BindToLoop(tir.StmtExprMutator):
    """Replaces ``x`` by the loop variable of the enclosing loop (statement context)."""

    def __init__(self, x):
        super().__init__()
        self.x, self.loop_var = x, None

    def visit_For(self, node):
        outer, self.loop_var = self.loop_var, node.loop_var
        try:
            return self.generic_visit(node)
        finally:
            self.loop_var = outer

    def visit_Var(self, node):
        return self.loop_var if node is self.x else node


def test_mutator_memo_does_not_carry_one_statement_context_into_another():
    x, i, j = (tir.Var(n, "int32") for n in "xij")
    buf = tir.decl_buffer((4,), "int32", name="B")
    e = _chain(x, levels=6)  # the same expression object in both loops
    stmt = tir.SeqStmt([tir.For(i, 0, 4, tir.ForKind.SERIAL, tir.BufferStore(buf, e, [i])),
                        tir.For(j, 0, 4, tir.ForKind.SERIAL, tir.BufferStore(buf, e, [j]))])
    with _within(1.0):
        out = _BindToLoop(x).visit(stmt)
    first, second = (loop.body.value for loop in out.seq)
    first_vars = {v.name for v in _nodes_of_kind(first, tir.Var)}
    second_vars = {v.name for v in _nodes_of_kind(second, tir.Var)}
    assert (first_vars, second_vars) == ({"i"}, {"j"})


class _FailOnMul(tir.StmtExprMutator):
    def __init__(self):
        super().__init__()
        self.fail = True

    def visit_Mul(self, node):
        if self.fail:
            raise TVMError("refused")
        return self.generic_visit(node)


def test_mutator_is_reusable_after_an_exception_mid_expression():
    x, y = tir.Var("x", "int32"), tir.Var("y", "int32")
    mutator = _FailOnMul()
    with pytest.raises(TVMError, match="refused"):
        mutator.visit(_chain(x, levels=4))
    mutator.fail = False
    out = mutator.visit(tir.Mul(y, y))  # a fresh expression: no stale memo entries
    assert out.a is y and out.b is y


def test_walking_something_that_is_not_ir_is_a_clear_error():
    with pytest.raises(TVMError, match="cannot walk 5"):
        tir.post_order_visit(5, lambda n: None)
    with pytest.raises(TVMError, match="cannot walk"):
        tir.StmtExprMutator().visit("not an expression")


def test_substitute_rejects_keys_that_are_not_vars_and_unconvertible_values():
    x = tir.Var("x", "int32")
    with pytest.raises(TVMError, match="keys of vmap must be tir.Var"):
        tir.substitute(x + 1, {"x": 2})
    with pytest.raises(TVMError, match="cannot convert"):
        tir.substitute(x + 1, {x: object()})


def test_child_nodes_opens_lists_and_ranges_and_skips_iter_vars():
    from kiln.tir.stmt_functor import child_nodes

    x, n = tir.Var("x", "int32"), tir.Var("n", "int32")
    buf = tir.decl_buffer((4,), "float32", name="A")
    index = x + 1
    assert child_nodes(buf[index]) == [index]  # the Buffer is not walked
    store = tir.BufferStore(buf, tir.const(1.0, "float32"), [x])
    assert [id(c) for c in child_nodes(store)] == [id(store.value), id(x)]
    lo, extent = tir.IntImm("int32", 0), n * 2
    realize = tir.BufferRealize(buf, [tir.Range.from_min_extent(lo, extent)],
                                tir.const(True, "bool"), store)
    assert [id(c) for c in child_nodes(realize)] == \
        [id(lo), id(extent), id(realize.condition), id(store)]
    iv = tir.IterVar(tir.Range(0, 8), tir.Var("i", "int32"), 0)
    attr = tir.AttrStmt(iv, "pragma", tir.IntImm("int32", 1), store)
    assert [id(c) for c in child_nodes(attr)] == [id(attr.value), id(store)]
