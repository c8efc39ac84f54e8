"""The arithmetic simplifier: exact rewrites on index expressions, and property tests that a
simplified expression evaluates like the original (oracle: a direct Python evaluator)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import arith, tir
from kiln.runtime.error import TVMError
from kiln.tir import expr as E


def evaluate(e, env):
    """Python's integer semantics for a TIR tree (floor division, C-style trunc division)."""
    if isinstance(e, tir.IntImm):
        return e.value
    if isinstance(e, tir.Var):
        return env[e.name]
    if isinstance(e, E.Select):
        return evaluate(e.true_value if evaluate(e.condition, env) else e.false_value, env)
    a, b = evaluate(e.a, env), evaluate(e.b, env)
    if isinstance(e, E.Div):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    if isinstance(e, E.Mod):
        return a - b * evaluate(E.Div(e.a, e.b), env)
    table = {
        E.Add: lambda: a + b, E.Sub: lambda: a - b, E.Mul: lambda: a * b,
        E.FloorDiv: lambda: a // b, E.FloorMod: lambda: a % b, E.Min: lambda: min(a, b),
        E.Max: lambda: max(a, b), E.LT: lambda: int(a < b), E.LE: lambda: int(a <= b),
        E.GT: lambda: int(a > b), E.GE: lambda: int(a >= b), E.EQ: lambda: int(a == b),
        E.NE: lambda: int(a != b), E.And: lambda: int(a and b), E.Or: lambda: int(a or b),
    }
    return table[type(e)]()


X, Y, Z = tir.Var("x", "int32"), tir.Var("y", "int32"), tir.Var("z", "int32")
RANGES = {"x": (0, 64), "y": (0, 16), "z": (-8, 8)}


def analyzer():
    ana = arith.Analyzer()
    for var in (X, Y, Z):
        lo, hi = RANGES[var.name]
        ana.bind(var, tir.Range(lo, hi))
    return ana


def exprs():
    leaves = st.one_of(st.sampled_from([X, Y, Z]),
                       st.integers(-20, 20).map(lambda v: tir.const(v, "int32")))

    def extend(children):
        const = st.integers(1, 9)
        return st.one_of(
            st.tuples(children, children).map(lambda t: t[0] + t[1]),
            st.tuples(children, children).map(lambda t: t[0] - t[1]),
            st.tuples(children, st.integers(-4, 6)).map(lambda t: t[0] * t[1]),
            st.tuples(children, children).map(lambda t: E.Mul(t[0], t[1])),
            st.tuples(children, const).map(lambda t: tir.floordiv(t[0], t[1])),
            st.tuples(children, const).map(lambda t: tir.floormod(t[0], t[1])),
            st.tuples(children, children).map(lambda t: tir.min(t[0], t[1])),
            st.tuples(children, children).map(lambda t: tir.max(t[0], t[1])),
        )

    return st.recursive(leaves, extend, max_leaves=8)


points = st.fixed_dictionaries({name: st.integers(lo, hi - 1)
                                for name, (lo, hi) in RANGES.items()})


@settings(max_examples=300, deadline=None)
@given(exprs(), st.lists(points, min_size=3, max_size=3))
def test_simplify_preserves_value(expr, envs):
    simplified = analyzer().simplify(expr)
    for env in envs:
        assert evaluate(simplified, env) == evaluate(expr, env), (expr, simplified, env)


@settings(max_examples=200, deadline=None)
@given(exprs(), points)
def test_const_int_bound_contains_value(expr, env):
    bound = analyzer().const_int_bound(expr)
    assert bound.min_value <= evaluate(expr, env) <= bound.max_value


@settings(max_examples=200, deadline=None)
@given(exprs(), st.lists(points, min_size=2, max_size=2))
def test_comparison_folding_is_sound(expr, envs):
    cond = analyzer().simplify(expr < 7)
    for env in envs:
        assert bool(evaluate(cond, env)) == (evaluate(expr, env) < 7)


@settings(max_examples=150, deadline=None)
@given(exprs(), points)
def test_eval_set_covers_value(expr, env):
    dom = {Y: tir.Range(0, 16)}
    interval = arith.eval_set(expr, dom, analyzer())
    env_fixed = dict(env)
    value = evaluate(expr, env_fixed)
    if interval.min_value is not None:
        assert evaluate(interval.min_value, env_fixed) <= value
    if interval.max_value is not None:
        assert value <= evaluate(interval.max_value, env_fixed)


def script(e) -> str:
    return tir.script(e)


def test_split_index_stays_clean():
    io, ii = tir.Var("io", "int32"), tir.Var("ii", "int32")
    ana = arith.Analyzer()
    ana.bind(ii, tir.Range(0, 16))
    assert script(ana.simplify(io * 16 + ii)) == "io * 16 + ii"
    assert script(ana.simplify(tir.floordiv(io * 16 + ii, 16))) == "io"
    assert script(ana.simplify(tir.floormod(io * 16 + ii, 16))) == "ii"
    assert script(ana.simplify(tir.floordiv(io * 16, 16))) == "io"


def test_flattened_index_is_sum_of_products():
    i, j, k = (tir.Var(n, "int32") for n in "ijk")
    ana = arith.Analyzer()
    assert script(ana.simplify((i * 32 + j) * 64 + k)) == "i * 2048 + j * 64 + k"
    n = tir.Var("n", "int32")
    assert script(ana.simplify((i * n + j) * 4 - j * 4)) == "i * n * 4"


def test_divmod_recombines():
    x = tir.Var("x", "int32")
    ana = arith.Analyzer()
    assert script(ana.simplify(tir.floordiv(x, 8) * 8 + tir.floormod(x, 8))) == "x"


def test_floormod_and_floordiv_rules():
    x = tir.Var("x", "int32")
    ana = arith.Analyzer()
    assert script(ana.simplify(tir.floormod(x + 13, 4))) == "(x + 1) % 4"
    assert script(ana.simplify(tir.floormod(x * 6 + 4, 4))) == "x % 2 * 2"
    assert script(ana.simplify(tir.floordiv(tir.floordiv(x, 4), 8))) == "x // 32"
    assert script(ana.simplify(tir.floordiv(x * 8 + 3, 4))) == "x * 2"


def test_min_max_with_bounds():
    i, n = tir.Var("i", "int32"), tir.Var("n", "int32")
    ana = arith.Analyzer()
    ana.bind(i, tir.Range.from_min_extent(0, n))
    assert script(ana.simplify(tir.min(i, n - 1))) == "i"
    assert script(ana.simplify(tir.min(tir.floordiv(n, 8), tir.floordiv(n + 7, 8)))) == "n // 8"
    assert script(ana.simplify(tir.max(i + 1, i))) == "i + 1"


def test_const_int_bound_and_modular_set():
    i, j = tir.Var("i", "int32"), tir.Var("j", "int32")
    ana = arith.Analyzer()
    ana.bind(i, tir.Range(0, 64))
    ana.bind(j, tir.Range(0, 16))
    bound = ana.const_int_bound(i * 16 + j)
    assert (bound.min_value, bound.max_value) == (0, 1023)
    unbounded = ana.const_int_bound(tir.Var("free", "int32"))
    assert unbounded.max_value == arith.ConstIntBound.POS_INF
    assert ana.modular_set(i * 8 + 4) == arith.ModularSet(8, 4)
    assert ana.can_prove(i * 16 + j < 1024)
    assert not ana.can_prove(i * 16 + j < 1000)


def test_bind_to_value_substitutes():
    x, y = tir.Var("x", "int32"), tir.Var("y", "int32")
    ana = arith.Analyzer()
    ana.bind(x, y * 2)
    assert script(ana.simplify(x - y)) == "y"


def test_bind_twice_is_an_error():
    x = tir.Var("x", "int32")
    ana = arith.Analyzer()
    ana.bind(x, tir.Range(0, 4))
    with pytest.raises(TVMError, match="already bound"):
        ana.bind(x, tir.Range(0, 8))


def test_constraint_scope_is_temporary():
    x = tir.Var("x", "int32")
    ana = arith.Analyzer()
    with ana.constraint_scope(x, tir.Range(0, 4)):
        assert ana.can_prove(x < 4)
    assert not ana.can_prove(x < 4)


def test_float_expressions_fold_constants():
    f = tir.Var("f", "float32")
    ana = arith.Analyzer()
    assert script(ana.simplify(f + tir.const(1.0) * 2.0)) == "f + 2.0"
