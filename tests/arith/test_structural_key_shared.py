"""Structural keys, and the arith walks that use them, on expressions that share
sub-expressions (DAGs).

Keys are interned: two separately built but structurally equal expressions get the same key
object, so comparing or hashing the keys of 60-deep shared chains (2**60 paths) is O(1).
Assertions check identity first, so a regression fails at once instead of walking every
path, and compare plain values (pytest prints what an assertion mentions; a 60-level DAG's
text is exponential). The simplifier runs in a forked child under a deadline: an exponential
key comparison would spin in C, where nothing in-process can interrupt it.
"""

from __future__ import annotations

import gc
import multiprocessing
import weakref

from kiln import arith, tir
from kiln.arith.canonical import StructuralKey, structural_key

LEVELS = 60


def _chain(leaf, levels=LEVELS, moduli=None):
    """Level k: ``e + e`` (k even) or ``floormod(e * e, moduli[k])`` (k odd, default 1009)."""
    moduli = moduli or {}
    e = leaf
    for level in range(levels):
        if level % 2 == 0:
            e = tir.Add(e, e)
        else:
            e = tir.FloorMod(tir.Mul(e, e), tir.IntImm(leaf.dtype, moduli.get(level, 1009)))
    return e


def _float_chain(leaf, levels=LEVELS):
    """Level k: ``min(e + e, 100)`` (k even) or ``max(e * e, 0.5)`` (k odd): stays bounded."""
    e = leaf
    for level in range(levels):
        if level % 2 == 0:
            e = tir.Min(tir.Add(e, e), tir.FloatImm(leaf.dtype, 100.0))
        else:
            e = tir.Max(tir.Mul(e, e), tir.FloatImm(leaf.dtype, 0.5))
    return e


def _float_chain_value(v: float, levels=LEVELS) -> float:
    for level in range(levels):
        v = min(v + v, 100.0) if level % 2 == 0 else max(v * v, 0.5)
    return v


_ARITH = {tir.Add: lambda a, b: a + b, tir.Sub: lambda a, b: a - b,
          tir.Mul: lambda a, b: a * b, tir.FloorMod: lambda a, b: a % b,
          tir.Min: min, tir.Max: max}


def _evaluate(expr, env):
    """Evaluate an expression, each distinct node once (the test's own oracle walk)."""
    values = {}

    def value(node):
        if id(node) not in values:
            if isinstance(node, tir.Var):
                values[id(node)] = env[node.name]
            elif isinstance(node, tir.IntImm | tir.FloatImm):
                values[id(node)] = node.value
            else:
                values[id(node)] = _ARITH[type(node)](value(node.a), value(node.b))
        return values[id(node)]

    return value(expr)


def _run_within(seconds: float, work, *args):
    """``work(*args)`` run in a forked child; fails if it has not finished after ``seconds``.

    ``work`` is a module-level function returning plain values (they cross a pipe).
    """
    with multiprocessing.get_context("fork").Pool(1) as pool:
        pending = pool.apply_async(work, args)
        try:
            return pending.get(seconds)
        except multiprocessing.TimeoutError:
            raise AssertionError(f"took longer than {seconds} s: not linear in distinct "
                                 "nodes") from None


def test_separately_built_equal_chains_have_the_same_key_object():
    x = tir.Var("x", "int32")
    first, second = structural_key(_chain(x)), structural_key(_chain(x))
    assert isinstance(first, StructuralKey)
    assert first is second
    assert first == second and hash(first) == hash(second)
    assert {first: "chain"}[second] == "chain"


def test_chains_differing_in_one_leaf_or_constant_or_dtype_have_different_keys():
    x, other_x = tir.Var("x", "int32"), tir.Var("x", "int32")  # same name, another var
    key, again = structural_key(_chain(x)), structural_key(_chain(x))
    assert again is key
    for different in (_chain(other_x), _chain(x, moduli={31: 1013}), _chain(x, levels=59),
                      _chain(tir.Var("x", "int64"))):
        other = structural_key(different)
        assert other is not key
        assert other != key and not (other == key)
    distinct = {key, structural_key(_chain(other_x)), structural_key(_chain(x))}
    assert len(distinct) == 2


def test_lists_of_expressions_key_elementwise():
    x, y = tir.Var("x", "int32"), tir.Var("y", "int32")
    keys, chain_key = structural_key([_chain(x), y + 1]), structural_key(_chain(x))
    assert isinstance(keys, tuple) and keys[0] is chain_key
    same, other = structural_key([_chain(x), y + 1]), structural_key([_chain(x), y + 2])
    assert keys == same and keys != other
    one, two = structural_key((x,)), structural_key((x, x))
    assert one != two


def test_a_shared_subexpression_is_keyed_once_per_memo():
    x = tir.Var("x", "int32")
    shared = x * 3 + 1
    memo = {}
    whole = structural_key(tir.Max(shared, shared), memo)
    remembered, fresh = memo[id(shared)][1], structural_key(shared)
    assert remembered is fresh
    rebuilt = structural_key(tir.Max(x * 3 + 1, x * 3 + 1))
    assert whole is rebuilt


def test_the_intern_table_does_not_keep_keys_alive_but_a_key_keeps_its_vars():
    x = tir.Var("x", "int32")
    key = structural_key(_chain(x))
    dead = weakref.ref(key)
    var = weakref.ref(x)
    del x
    gc.collect()
    assert var() is not None  # the key holds the var: its id cannot be reused meanwhile
    del key
    gc.collect()
    assert dead() is None and var() is None


def _simplify_select_of_float_chains(same_leaf: bool):
    """(whether the simplified select is still a Select, its values at f in 0.25 0.75 3)."""
    f, g, i = tir.Var("f", "float32"), tir.Var("g", "float32"), tir.Var("i", "int32")
    out = arith.Analyzer().simplify(
        tir.Select(i > 3, _float_chain(f), _float_chain(f if same_leaf else g)))
    if isinstance(out, tir.Select):
        return True, []
    return False, [_evaluate(out, {"f": v}) for v in (0.25, 0.75, 3.0)]


def test_simplifier_merges_select_arms_that_are_separately_built_equal_chains():
    still_select, values = _run_within(10.0, _simplify_select_of_float_chains, True)
    assert not still_select
    assert values == [_float_chain_value(v) for v in (0.25, 0.75, 3.0)]


def test_simplifier_keeps_select_arms_that_differ_in_one_leaf():
    still_select, _ = _run_within(10.0, _simplify_select_of_float_chains, False)
    assert still_select


def _simplify_int_chain(inputs):
    out = arith.Analyzer().simplify(_chain(tir.Var("x", "int32")))
    return [_evaluate(out, {"x": v}) for v in inputs]


def test_simplifier_on_a_shared_integer_chain_is_fast_and_keeps_the_value():
    inputs = (0, 1, 6, -5)
    got = _run_within(10.0, _simplify_int_chain, inputs)
    expected = []
    for v in inputs:
        for level in range(LEVELS):
            v = v + v if level % 2 == 0 else (v * v) % 1009
        expected.append(v)
    assert got == expected


def _interval_of_shared_chain():
    x = tir.Var("x", "int32")
    chain = _chain(x, levels=LEVELS + 1)  # ends with e + e of a floormod level
    found = arith.eval_set(chain, {x: tir.Range(0, 4)})
    values = [_evaluate(chain, {"x": v}) for v in range(4)]
    return found.min_value.value, found.max_value.value, values


def test_eval_set_bounds_a_shared_chain_once_per_node_and_soundly():
    lo, hi, values = _run_within(10.0, _interval_of_shared_chain)
    assert (lo, hi) == (0, 2 * 1008)  # floormod(_, 1009) is in [0, 1008]; doubled
    assert all(lo <= v <= hi for v in values)
