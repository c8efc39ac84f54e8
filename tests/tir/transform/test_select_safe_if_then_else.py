"""SelectSafeIfThenElse: a per-lane if_then_else whose arms cannot fault becomes a Select
before codegen; a guarded arm that may fault stays a choice. NumPy is the oracle for the
built kernels (c and llvm)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir
from kiln.tir.transform.safe_choices import select_safe_if_then_else

N = 64


def vectorized(compute, lanes: int = 8):
    """Lower ``compute`` (a te.compute over placeholders A, B) with its axis vectorized."""
    A, B = te.placeholder((N,), name="A"), te.placeholder((N,), name="B")
    C = te.compute((N,), lambda i: compute(A, B, i), name="C")
    s = te.create_schedule(C.op)
    _, inner = s[C].split(C.op.axis[0], factor=lanes)
    s[C].vectorize(inner)
    return kiln.lower(s, [A, B, C], name="choice")


def stored_value(mod):
    """The value of the (only) store of a lowered kernel, after the pass."""
    body = select_safe_if_then_else(mod["choice"].body)
    found = []
    tir.post_order_visit(body, lambda n: found.append(n) if isinstance(n, tir.BufferStore)
                         else None)
    return found[0].value


def run(mod, target, a, b):
    f = kiln.build(mod, target=target)
    out = kiln.nd.empty((N,), "float32")
    f(kiln.nd.array(a), kiln.nd.array(b), out)
    return out.numpy()


def safe_choice(A, B, i):
    return tir.if_then_else(A[i] > 0, A[i] * 2.0, B[i])


def border_choice(A, B, i):
    """Reads A[i + 1], out of bounds in the last lane of the last vector."""
    return tir.if_then_else(i < N - 1, A[i + 1], B[i])


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("target", ["c", "llvm"])
def test_a_choice_between_safe_arms_is_a_select_and_stays_right(lanes, target, rng):
    mod = vectorized(safe_choice, lanes)
    assert isinstance(stored_value(mod), tir.Select)
    a, b = rng.standard_normal(N).astype("float32"), rng.standard_normal(N).astype("float32")
    np.testing.assert_allclose(run(mod, target, a, b), np.where(a > 0, a * 2, b), rtol=1e-6)


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_an_arm_that_may_read_past_the_end_stays_a_choice(target, rng):
    mod = vectorized(border_choice)
    value = stored_value(mod)
    assert isinstance(value, tir.Call) and value.op == "tir.if_then_else"
    a, b = rng.standard_normal(N).astype("float32"), rng.standard_normal(N).astype("float32")
    expected = np.concatenate([a[1:], b[-1:]])
    np.testing.assert_allclose(run(mod, target, a, b), expected, rtol=1e-6)


def test_a_scalar_condition_stays_a_choice():
    A = tir.decl_buffer((N,), "float32", name="A")
    i = tir.Var("i", "int32")
    choice = tir.if_then_else(i < 4, A[i], tir.FloatImm("float32", 0.0))
    stmt = tir.For(i, 0, N, tir.ForKind.SERIAL, tir.BufferStore(A, choice, [i]))
    assert select_safe_if_then_else(stmt) is stmt


def test_an_arm_nesting_a_choice_that_may_fault_stays_a_choice():
    A = tir.decl_buffer((N,), "float32", name="A")
    io = tir.Var("io", "int32")
    ramp = tir.Ramp(io * 8, 1, 8)
    shifted = tir.Ramp(io * 8 + 1, 1, 8)                   # past the end at io == 7
    inner = tir.if_then_else(ramp < tir.Broadcast(N - 1, 8), A[shifted],
                             tir.Broadcast(tir.FloatImm("float32", 0.0), 8))
    outer = tir.if_then_else(A[ramp] > tir.Broadcast(tir.FloatImm("float32", 0.0), 8),
                             inner, A[ramp])
    stmt = tir.For(io, 0, N // 8, tir.ForKind.SERIAL, tir.BufferStore(A, outer, [ramp]))
    out = select_safe_if_then_else(stmt)
    assert out.body.value.op == "tir.if_then_else"


def test_the_loop_range_decides_what_is_in_bounds():
    """A[i + 1] is safe in a loop over N - 1 iterations, not in one over N."""
    A = tir.decl_buffer((N,), "float32", name="A")
    io = tir.Var("io", "int32")

    def loop(extent):
        base = tir.Ramp(io * 4 + 1, 1, 4)
        choice = tir.if_then_else(A[base] > tir.Broadcast(tir.FloatImm("float32", 0.0), 4),
                                  A[base], tir.Broadcast(tir.FloatImm("float32", 0.0), 4))
        return tir.For(io, 0, extent, tir.ForKind.SERIAL,
                       tir.BufferStore(A, choice, [tir.Ramp(io * 4, 1, 4)]))

    assert isinstance(select_safe_if_then_else(loop(N // 4 - 1)).body.value, tir.Select)
    assert isinstance(select_safe_if_then_else(loop(N // 4)).body.value, tir.Call)
