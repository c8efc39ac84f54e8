"""Simplifying expressions that share subexpressions (DAGs) takes linear, not exponential,
time: each shared node is simplified and keyed once per simplification."""

from __future__ import annotations

import time

import numpy as np

from kiln import arith, tir
from kiln.arith.canonical import structural_key


def _shared_select_chain(depth: int):
    x, y = tir.Var("x", "float32"), tir.Var("y", "float32")
    i = tir.Var("i", "int32")
    e = x
    for _ in range(depth):  # both arms reuse e: 2**depth paths, depth distinct nodes
        e = tir.Select(i > 3, tir.max(e, y), tir.min(e, y) * 2.0)
    return e, (x, y, i)


def _evaluate(e, env):
    table = {tir.Select: lambda n: _evaluate(n.true_value if _evaluate(n.condition, env)
                                             else n.false_value, env),
             tir.Max: lambda n: max(_evaluate(n.a, env), _evaluate(n.b, env)),
             tir.Min: lambda n: min(_evaluate(n.a, env), _evaluate(n.b, env)),
             tir.Mul: lambda n: _evaluate(n.a, env) * _evaluate(n.b, env),
             tir.GT: lambda n: _evaluate(n.a, env) > _evaluate(n.b, env)}
    if isinstance(e, tir.Var):
        return env[e.name]
    if isinstance(e, tir.IntImm | tir.FloatImm):
        return e.value
    return table[type(e)](e)


def test_shared_chain_simplifies_fast_and_keeps_value():
    e, _ = _shared_select_chain(40)
    start = time.perf_counter()
    out = arith.Analyzer().simplify(e)
    assert time.perf_counter() - start < 5.0  # was 2**40 visits
    small, _ = _shared_select_chain(6)
    simplified = arith.Analyzer().simplify(small)
    for env in ({"x": 1.5, "y": 0.5, "i": 5}, {"x": -2.0, "y": 3.0, "i": 0}):
        np.testing.assert_allclose(_evaluate(simplified, env), _evaluate(small, env))
    assert out.dtype == "float32"


def test_structural_key_of_shared_chain_is_linear_and_equal_for_equal_trees():
    a, _ = _shared_select_chain(60)
    start = time.perf_counter()
    structural_key(a)
    assert time.perf_counter() - start < 5.0  # 2**60 paths: only a linear walk finishes
    # equality of two separately built keys walks every path, so compare shallow chains
    b, _ = _shared_select_chain(8)
    assert structural_key(b) == structural_key(b)  # two separately built keys
    assert structural_key(b) != structural_key(b.true_value)
    x = tir.Var("x", "int32")
    assert structural_key(x + 1) == structural_key(x + 1)
    assert structural_key(x + 1) != structural_key(x + 2)
