"""BindSharedSubexprs: shared sub-expressions are bound before codegen, so no printer expands
a DAG (a 16-level shared chain took 37 s on c and > 100 s on llvm).

The oracle is NumPy, evaluating the same chain level by level; the generated code's size is
checked to be linear in the chain's depth (an exponential expansion fails at once instead of
running for minutes).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir
from kiln.target.codegen_c import emit_c
from kiln.tir.transform.shared_subexpr import bind_shared_subexprs

LEVELS, N = 16, 64


def chain(e, levels=LEVELS):
    """Level k: ``min(e + e, 100)`` (k even) or ``max(e * e, 0.5)`` (k odd): stays bounded."""
    for level in range(levels):
        if level % 2 == 0:
            e = tir.Min(tir.Add(e, e), tir.FloatImm(e.dtype, 100.0))
        else:
            e = tir.Max(tir.Mul(e, e), tir.FloatImm(e.dtype, 0.5))
    return e


def chain_reference(v: np.ndarray, levels=LEVELS) -> np.ndarray:
    for level in range(levels):
        v = np.minimum(v + v, 100) if level % 2 == 0 else np.maximum(v * v, 0.5)
    return v


def chain_schedule(vectorized: bool):
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: chain(A[i]), name="B")
    s = te.create_schedule(B.op)
    if vectorized:
        _, inner = s[B].split(B.op.axis[0], factor=8)
        s[B].vectorize(inner)
    return s, [A, B]


@pytest.mark.parametrize("target", ["c", "llvm"])
@pytest.mark.parametrize("vectorized", [False, True])
def test_a_16_level_shared_chain_builds_small_and_right(target, vectorized, rng):
    s, args = chain_schedule(vectorized)
    mod = kiln.lower(s, args, name="chain")
    source, _ = emit_c(mod)
    assert len(source) < 40_000                  # linear in the levels (was megabytes)
    f = kiln.build(mod, target=target)
    a = rng.uniform(0.1, 1.0, N).astype("float32")
    b = kiln.nd.empty((N,), "float32")
    f(kiln.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), chain_reference(a), rtol=1e-5)


def store(value, buffer_dtype="float32"):
    A = tir.decl_buffer((N,), buffer_dtype, name="A")
    B = tir.decl_buffer((N,), buffer_dtype, name="B")
    i = tir.Var("i", "int32")
    return A, B, i, tir.BufferStore(B, value(A, i), [i])


def test_statements_under_the_budget_are_left_as_they_are():
    _, _, _, stmt = store(lambda A, i: chain(A[i], levels=3))
    assert bind_shared_subexprs(stmt) is stmt


def test_over_budget_statement_binds_each_level_once_children_first():
    _, _, _, stmt = store(lambda A, i: chain(A[i]))
    out = bind_shared_subexprs(stmt)
    lets = []
    while isinstance(out, tir.LetStmt):
        lets.append(out)
        out = out.body
    assert isinstance(out, tir.BufferStore)
    assert len(lets) <= 2 * LEVELS + 1
    bound = {id(let.var) for let in lets}
    defined: set[int] = set()
    for let in lets:                             # each value reads only earlier variables
        used: list[int] = []
        tir.post_order_visit(let.value, lambda n, seen=used: seen.append(id(n)))
        assert all(u in defined for u in used if u in bound)
        defined.add(id(let.var))


def test_a_deep_clamp_chain_without_sharing_is_bound_too(rng):
    """Nested min/max: the C printer repeats each operand (a < b ? a : b)."""
    def clamps(A, i):
        e = A[i]
        for _ in range(LEVELS):
            e = tir.Min(tir.Max(e * tir.FloatImm("float32", 1.5), tir.FloatImm("float32", -4.0)),
                        tir.FloatImm("float32", 4.0))
        return e

    A, B, i, body = store(clamps)
    func = tir.PrimFunc([A, B], tir.For(i, 0, N, tir.ForKind.SERIAL, body))
    func = func.with_attr("global_symbol", "clamps")
    source, _ = emit_c(func)
    assert len(source) < 40_000
    f = kiln.build(func, target="c")
    a = rng.uniform(-1, 1, N).astype("float32")
    b = kiln.nd.empty((N,), "float32")
    f(kiln.nd.array(a), b)
    expected = a.copy()
    for _ in range(LEVELS):
        expected = np.minimum(np.maximum(expected * np.float32(1.5), -4), 4)
    np.testing.assert_allclose(b.numpy(), expected, rtol=1e-6)


def guarded_chain(A, i):
    """A 16-level chain reading A[i + 1], taken only where that is in bounds."""
    return tir.if_then_else(i < N - 1, chain(A[i + 1]), tir.FloatImm("float32", 0.0))


def test_nothing_is_hoisted_out_of_a_guarded_arm():
    """Hoisted in front of the store, the arm would read A[i + 1] past the end in the last
    iteration: its shared levels are bound inside the arm instead."""
    _, _, _, body = store(guarded_chain)
    bound = bind_shared_subexprs(body)
    assert isinstance(bound, tir.BufferStore)
    arm = bound.value.args[1]
    assert isinstance(arm, tir.Let) and arm.var.name.startswith("cse_var")


@pytest.mark.parametrize("target", ["c", "llvm"])
@pytest.mark.parametrize("vectorized", [False, True])
def test_a_guarded_shared_chain_builds_small_and_right(target, vectorized, rng):
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: guarded_chain(A, i), name="B")
    s = te.create_schedule(B.op)
    if vectorized:
        _, inner = s[B].split(B.op.axis[0], factor=8)
        s[B].vectorize(inner)
    mod = kiln.lower(s, [A, B], name="guarded")
    source, _ = emit_c(mod)
    assert len(source) < 40_000
    f = kiln.build(mod, target=target)
    a = rng.uniform(0.1, 1.0, N).astype("float32")
    b = kiln.nd.empty((N,), "float32")
    f(kiln.nd.array(a), b)
    expected = np.zeros(N, "float32")
    expected[:-1] = chain_reference(a[1:])
    np.testing.assert_allclose(b.numpy(), expected, rtol=1e-5)


def test_the_pass_runs_on_a_module_by_its_tvm_style_name():
    A, B, i, body = store(lambda A, i: chain(A[i]))
    func = tir.PrimFunc([A, B], tir.For(i, 0, N, tir.ForKind.SERIAL, body))
    out = kiln.tir.transform.BindSharedSubexprs()(kiln.IRModule({"f": func}))
    assert isinstance(out["f"].body.body, tir.LetStmt)
