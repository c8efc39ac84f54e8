"""HoistSafeArmLoads (C-family pipeline): a scalar-condition if_then_else whose arms load and
cannot fault binds them before the choice; an arm that may fault stays under it. NumPy is the
oracle for the built C kernels."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import te, tir
from kiln.tir.transform.codegen_prep import C_CODEGEN_PIPELINE, CODEGEN_PIPELINE
from kiln.tir.transform.safe_choices import HoistSafeArmLoads

N = 32


def lowered(compute):
    A, B = te.placeholder((N,), name="A"), te.placeholder((N,), name="B")
    C = te.compute((N,), lambda i: compute(A, B, i), name="C")
    return kiln.lower(te.create_schedule(C.op), [A, B, C], name="choice")


def stored_value(func):
    found = []
    tir.post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, tir.BufferStore)
                         else None)
    return found[0].value


def test_safe_loading_arms_are_bound_before_the_choice():
    func = HoistSafeArmLoads()(lowered(lambda A, B, i: tir.if_then_else(A[i] > 0, A[i], B[i]))
                               ["choice"])
    value = stored_value(func)
    assert isinstance(value, tir.Let) and isinstance(value.body, tir.Let)
    choice = value.body.body
    assert [type(a).__name__ for a in choice.args[1:]] == ["Var", "Var"]
    assert [choice.args[1], choice.args[2]] == [value.var, value.body.var]


def test_an_arm_that_may_fault_stays_under_the_choice():
    func = HoistSafeArmLoads()(lowered(
        lambda A, B, i: tir.if_then_else(i < N - 1, A[i + 1], B[i]))["choice"])
    value = stored_value(func)
    assert isinstance(value, tir.Call) and isinstance(value.args[1], tir.BufferLoad)


def test_only_the_c_family_pipeline_hoists():
    assert any(p.info.name == "tir.HoistSafeArmLoads" for p in C_CODEGEN_PIPELINE)
    assert not any(p.info.name == "tir.HoistSafeArmLoads" for p in CODEGEN_PIPELINE)


def test_hoisted_and_guarded_choices_compute_the_same_on_c(rng):
    mod = lowered(lambda A, B, i: tir.if_then_else(A[i] > 0, A[i] * 2.0,
                                                   tir.if_then_else(i < N - 1, B[i + 1], B[i])))
    f = kiln.build(mod, target="c")
    a, b = rng.standard_normal(N).astype("float32"), rng.standard_normal(N).astype("float32")
    out = kiln.nd.empty((N,), "float32")
    f(kiln.nd.array(a), kiln.nd.array(b), out)
    shifted = np.append(b[1:], b[-1])
    np.testing.assert_allclose(out.numpy(), np.where(a > 0, a * 2, shifted), rtol=1e-6)
