"""SplitWideVectors (C-family pipeline): a contiguous, lane-wise store of a vector wider than a
native register becomes one store per native-width part. NumPy is the oracle for the kernels
built from the rewritten TIR on c and llvm."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir
from kiln.tir.transform.codegen_prep import C_CODEGEN_PIPELINE, CODEGEN_PIPELINE
from kiln.tir.transform.wide_vectors import SplitWideVectors, native_lanes

N = 64


def vectorized(compute, lanes: int = 16, dtype: str = "float32", inputs: int = 2):
    args = [te.placeholder((N,), dtype, name=name) for name in "ABM"[:inputs]]
    out = te.compute((N,), lambda i: compute(*args, i), name="C")
    sch = te.create_schedule(out.op)
    _, inner = sch[out].split(out.op.axis[0], factor=lanes)
    sch[out].vectorize(inner)
    return kiln.lower(sch, [*args, out], name="wide"), args


def stores(func) -> list[tir.BufferStore]:
    found: list[tir.BufferStore] = []
    tir.post_order_visit(func.body, lambda n: found.append(n)
                         if isinstance(n, tir.BufferStore) else None)
    return found


def lanes_of_loads(expr) -> set[int]:
    found: set[int] = set()
    tir.post_order_visit(expr, lambda n: found.add(kiln.DataType(n.dtype).lanes)
                         if isinstance(n, tir.BufferLoad) else None)
    return found


def test_native_lanes_splits_only_whole_registers():
    f32 = kiln.DataType("float32")
    assert native_lanes(f32, 16) == 8 and native_lanes(f32, 8) == 8
    assert native_lanes(f32, 12) == 12  # not whole registers: left to the C compiler
    assert native_lanes(kiln.DataType("int8"), 64) == 32
    assert native_lanes(f32, 16, native_bits=512) == 16


def test_a_wide_lanewise_store_becomes_native_parts():
    mod, _ = vectorized(lambda A, B, i: tir.max(A[i] * 2.0, B[i]) + 1.0)
    [before] = stores(mod["wide"])
    assert kiln.DataType(before.value.dtype).lanes == 16
    parts = stores(SplitWideVectors()(mod["wide"]))
    assert [kiln.DataType(p.value.dtype).lanes for p in parts] == [8, 8]
    assert all(lanes_of_loads(p.value) == {8} for p in parts)
    ramps = [p.indices[0] for p in parts]
    assert kiln.ir.structural_equal(ramps[1].base, ramps[0].base + 8)


def test_a_store_that_does_not_work_lane_by_lane_is_kept():
    # a cast changes the lane width: not sliced (the printer emits the whole vector)
    mod, _ = vectorized(lambda A, B, i: (A[i] + B[i]).astype("float64").astype("float32"))
    assert SplitWideVectors()(mod["wide"]).body is mod["wide"].body


def test_a_native_width_store_is_left_alone():
    mod, _ = vectorized(lambda A, B, i: A[i] + B[i], lanes=8)
    assert SplitWideVectors()(mod["wide"]).body is mod["wide"].body


def test_only_the_c_family_pipeline_splits():
    assert any(p.info.name == "tir.SplitWideVectors" for p in C_CODEGEN_PIPELINE)
    assert not any(p.info.name == "tir.SplitWideVectors" for p in CODEGEN_PIPELINE)


CASES = {
    "arithmetic": (lambda A, B, M, i: tir.min(A[i] - B[i], A[i] * B[i]) / 2.0,
                   lambda a, b, m: np.minimum(a - b, a * b) / 2),
    "select on a comparison": (
        lambda A, B, M, i: tir.Select(tir.all(A[i] > B[i], M[i] > 0), A[i], B[i] + 1.0),
        lambda a, b, m: np.where((a > b) & (m > 0), a, b + 1)),
    # the else arm reads one past the end in lane 63: each part keeps its own choice
    "per-lane choice that may fault": (
        lambda A, B, M, i: tir.if_then_else(i < N - 1, A[i] + B[i + 1], A[i]),
        lambda a, b, m: np.where(np.arange(N) < N - 1, a + np.append(b[1:], b[-1]), a)),
}


@pytest.mark.parametrize("target", ["c", "llvm"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_split_kernels_compute_what_numpy_does(case, target, rng):
    compute, reference = CASES[case]
    mod, _ = vectorized(compute, inputs=3)
    split = SplitWideVectors()(mod)
    assert all(kiln.DataType(s.value.dtype).lanes == 8 for s in stores(split["wide"]))
    f = kiln.build(split, target=target)
    a, b, m = (rng.standard_normal(N).astype("float32") for _ in range(3))
    out = kiln.nd.empty((N,), "float32")
    f(kiln.nd.array(a), kiln.nd.array(b), kiln.nd.array(m), out)
    np.testing.assert_allclose(out.numpy(), reference(a, b, m), rtol=1e-6)


def test_a_wide_accumulator_is_kept_as_native_vectors_in_c(rng):
    """A 16-lane local accumulator tile, split in every access, is an array of 8-lane
    vectors in AVX2 C text (what gcc keeps in registers)."""
    K = 8
    A = te.placeholder((4, K), name="A")
    B = te.placeholder((K, 16), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((4, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = te.create_schedule(C.op)
    CC = sch.cache_write(C, "local")
    i, j = sch[C].op.axis
    sch[CC].compute_at(sch[C], i)
    jc = sch[CC].op.axis[1]
    sch[CC].reorder(sch[CC].op.reduce_axis[0], jc)
    sch[CC].vectorize(jc)
    sch[C].vectorize(j)
    f = kiln.build(sch, [A, B, C], target="c -mcpu=core-avx2", name="acc")
    source = f.get_source()
    assert "float32x8 C_local[2]" in source and "float32x16" not in source
    a, b = rng.standard_normal((4, K)).astype("float32"), rng.standard_normal((K, 16)).astype(
        "float32")
    out = kiln.nd.empty((4, 16), "float32")
    f(kiln.nd.array(a), kiln.nd.array(b), out)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5)
