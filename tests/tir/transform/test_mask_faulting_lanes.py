"""MaskFaultingLanes (every codegen's pipeline): a per-lane if_then_else whose arms may fault
becomes a Select of arms that read only their lanes' memory (tir.masked_load) and divide
safely. NumPy is the oracle for the kernels built from the rewritten TIR on c and llvm."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir
from kiln.tir.transform.codegen_prep import C_CODEGEN_PIPELINE, CODEGEN_PIPELINE
from kiln.tir.transform.lane_masks import MASKED_LOAD, MaskFaultingLanes

N, LANES = 32, 8


def vectorized(compute, dtype: str = "float32"):
    A = te.placeholder((N,), dtype, name="A")
    B = te.placeholder((N,), dtype, name="B")
    C = te.compute((N,), lambda i: compute(A, B, i), name="C")
    sch = te.create_schedule(C.op)
    _, inner = sch[C].split(C.op.axis[0], factor=LANES)
    sch[C].vectorize(inner)
    return kiln.lower(sch, [A, B, C], name="choice")


def stored_value(func):
    found = []
    tir.post_order_visit(func.body, lambda n: found.append(n)
                         if isinstance(n, tir.BufferStore) else None)
    return found[0].value


def calls(expr, op: str) -> list[tir.Call]:
    found: list[tir.Call] = []
    tir.post_order_visit(expr, lambda n: found.append(n)
                         if isinstance(n, tir.Call) and str(n.op) == op else None)
    return found


# B[i + 1] reads one past the end in the last lane of the last vector
SHIFTED = lambda A, B, i: tir.if_then_else(i < N - 1, B[i + 1], A[i])  # noqa: E731


def test_a_load_that_may_fault_becomes_a_masked_load_in_a_select():
    value = stored_value(MaskFaultingLanes()(vectorized(SHIFTED)["choice"]))
    assert isinstance(value, tir.Select)
    [masked] = calls(value, MASKED_LOAD)
    load, mask = masked.args
    assert load.buffer.name == "B" and kiln.DataType(mask.dtype).lanes == LANES
    assert isinstance(value.false_value, tir.BufferLoad)  # A[i] is in bounds: plain


def test_a_division_divides_by_one_in_the_masked_off_lanes():
    func = vectorized(lambda A, B, i: tir.if_then_else(B[i] != 0, tir.floordiv(A[i], B[i]), 7),
                      dtype="int32")["choice"]
    value = stored_value(MaskFaultingLanes()(func))
    [division] = [n for n in [value.true_value] if isinstance(n, tir.FloorDiv)]
    assert isinstance(division.b, tir.Select)
    assert calls(value, "tir.if_then_else") == []


def test_a_scalar_load_in_an_arm_runs_only_if_some_lane_needs_it():
    S = tir.decl_buffer((4,), "float32", name="S")
    k = tir.Var("k", "int32")  # not known to be in bounds
    value = MaskFaultingLanes()(tir.PrimFunc([S, k], tir.Evaluate(tir.if_then_else(
        tir.Ramp(0, 1, LANES) < 3, tir.Broadcast(S[k], LANES),
        tir.Broadcast(tir.const(0.0, "float32"), LANES))))).body.value
    [guard] = calls(value, "tir.if_then_else")
    assert kiln.DataType(guard.args[0].dtype).lanes == 1  # a branch on "any lane"
    assert isinstance(guard.args[1], tir.BufferLoad)


def test_arms_that_cannot_fault_are_selected_without_masks():
    func = vectorized(lambda A, B, i: tir.if_then_else(A[i] > 0, A[i], B[i]))["choice"]
    value = stored_value(MaskFaultingLanes()(func))
    assert isinstance(value, tir.Select) and calls(value, MASKED_LOAD) == []


def test_lane_counts_that_differ_are_refused_by_name():
    A = tir.decl_buffer((8,), "float32", name="A")
    bad = tir.if_then_else(tir.Ramp(0, 1, 8) < 4, A[tir.Ramp(0, 1, 4)],
                           tir.Broadcast(tir.const(0.0, "float32"), 4))
    with pytest.raises(kiln.TVMError, match="condition has 8 lanes but its arms have 4"):
        MaskFaultingLanes()(tir.PrimFunc([A], tir.Evaluate(bad)))


def test_every_codegen_pipeline_masks():
    for pipeline in (CODEGEN_PIPELINE, C_CODEGEN_PIPELINE):
        assert any(p.info.name == "tir.MaskFaultingLanes" for p in pipeline)


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_a_masked_shifted_load_computes_what_numpy_does(target, rng):
    masked = MaskFaultingLanes()(vectorized(SHIFTED))
    f = kiln.build(masked, target=target)
    a, b = rng.standard_normal(N).astype("float32"), rng.standard_normal(N).astype("float32")
    out = kiln.nd.empty((N,), "float32")
    f(kiln.nd.array(a), kiln.nd.array(b), out)
    np.testing.assert_array_equal(out.numpy(), np.where(np.arange(N) < N - 1,
                                                         np.append(b[1:], 0), a))


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_a_masked_division_computes_what_numpy_does(target, rng):
    """Zero divisors in the untaken lanes: a trap there would kill the process."""
    masked = MaskFaultingLanes()(vectorized(
        lambda A, B, i: tir.if_then_else(B[i] != 0, tir.floordiv(A[i], B[i]), 7), "int32"))
    f = kiln.build(masked, target=target)
    a = rng.integers(-100, 100, N).astype("int32")
    b = rng.integers(-2, 3, N).astype("int32")
    out = kiln.nd.empty((N,), "int32")
    f(kiln.nd.array(a), kiln.nd.array(b), out)
    np.testing.assert_array_equal(out.numpy(),
                                  np.where(b != 0, a // np.where(b != 0, b, 1), 7))


def test_a_per_lane_choice_that_skipped_the_pipeline_is_refused_by_the_printers():
    from kiln.target.codegen_c import CodeGenC

    func = vectorized(SHIFTED)["choice"]
    with pytest.raises(kiln.TVMError, match="per-lane if_then_else reached the printer"):
        CodeGenC().add_function(func, "raw")
