"""ShareVectorLoads (C-family pipeline): a contiguous vector load repeated across a run of
stores is bound once by a LetStmt before its first use. NumPy is the oracle for the kernels
built from the rewritten TIR on c and llvm."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir
from kiln.tir.transform.codegen_prep import (
    C_CODEGEN_PIPELINE,
    CODEGEN_PIPELINE,
    prepare_for_codegen,
)
from kiln.tir.transform.shared_loads import ShareVectorLoads

ROWS, N = 4, 32


def row_kernel(compute, lanes: int = 8):
    """``C[r, j] = compute(A, B, r, j)`` with the rows unrolled and ``j`` vectorized by
    ``lanes``: one run of ROWS stores per vector of columns."""
    A = te.placeholder((ROWS, N), name="A")
    B = te.placeholder((N,), name="B")
    C = te.compute((ROWS, N), lambda r, j: compute(A, B, r, j), name="C")
    sch = te.create_schedule(C.op)
    r, j = C.op.axis
    jo, ji = sch[C].split(j, factor=lanes)
    sch[C].reorder(jo, r, ji)
    sch[C].unroll(r)
    sch[C].vectorize(ji)
    return kiln.lower(sch, [A, B, C], name="rows")


def lets(func) -> list[tir.LetStmt]:
    found: list[tir.LetStmt] = []
    tir.post_order_visit(func.body, lambda n: found.append(n)
                         if isinstance(n, tir.LetStmt) else None)
    return found


def loads_of(node, name: str) -> list[tir.BufferLoad]:
    found: list[tir.BufferLoad] = []
    tir.post_order_visit(node, lambda n: found.append(n) if isinstance(n, tir.BufferLoad)
                         and n.buffer.name == name else None)
    return found


def test_a_load_every_store_of_a_run_reads_is_bound_once():
    mod = row_kernel(lambda A, B, r, j: A[r, j] * B[j])
    func = ShareVectorLoads()(mod["rows"])
    [bound] = lets(func)
    assert isinstance(bound.value, tir.BufferLoad) and bound.value.buffer.name == "B"
    assert kiln.DataType(bound.var.dtype).lanes == 8
    assert loads_of(bound.body, "B") == []  # every use reads the variable
    assert len(loads_of(bound.body, "A")) == ROWS  # A's rows differ: each read where it was


def test_loads_read_once_or_under_a_choice_are_left_in_place():
    once = row_kernel(lambda A, B, r, j: A[r, j] + 1.0)
    assert ShareVectorLoads()(once["rows"]).body is once["rows"].body
    guarded = row_kernel(lambda A, B, r, j: tir.if_then_else(A[r, j] > 0, B[j], 0.0))
    assert lets(ShareVectorLoads()(guarded["rows"])) == []


def test_a_buffer_the_run_stores_to_is_not_shared():
    """A run that stores to B and reads B twice: the second read sees the first store."""
    func = row_kernel(lambda A, B, r, j: A[r, j] * B[j])["rows"]
    stores: list[tir.BufferStore] = []
    tir.post_order_visit(func.body, lambda n: stores.append(n)
                         if isinstance(n, tir.BufferStore) else None)
    load = loads_of(stores[0].value, "B")[0]
    run = tir.SeqStmt([tir.BufferStore(load.buffer, load * 2.0, load.indices),
                       tir.BufferStore(stores[0].buffer, load + 1.0, stores[0].indices),
                       tir.BufferStore(stores[1].buffer, load + 2.0, stores[1].indices)])
    assert lets(ShareVectorLoads()(func.with_body(run))) == []


def test_the_parts_of_split_wide_stores_share_their_loads():
    """After tir.SplitWideVectors each 16-lane store is a SeqStmt of two 8-lane parts inside
    the run: both 8-lane halves of B are bound once."""
    func = prepare_for_codegen(row_kernel(lambda A, B, r, j: A[r, j] * B[j], lanes=16)["rows"],
                               C_CODEGEN_PIPELINE)
    bound = lets(func)
    assert [kiln.DataType(let.var.dtype).lanes for let in bound] == [8, 8]
    assert all(let.value.buffer.name == "B" for let in bound)


def test_only_the_c_family_pipeline_shares():
    assert any(p.info.name == "tir.ShareVectorLoads" for p in C_CODEGEN_PIPELINE)
    assert not any(p.info.name == "tir.ShareVectorLoads" for p in CODEGEN_PIPELINE)


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_shared_kernels_compute_what_numpy_does(target, rng):
    mod = ShareVectorLoads()(row_kernel(lambda A, B, r, j: A[r, j] * B[j] + B[j]))
    assert len(lets(mod["rows"])) == 1
    f = kiln.build(mod, target=target)
    a = rng.standard_normal((ROWS, N)).astype("float32")
    b = rng.standard_normal(N).astype("float32")
    out = kiln.nd.empty((ROWS, N), "float32")
    f(kiln.nd.array(a), kiln.nd.array(b), out)
    np.testing.assert_allclose(out.numpy(), a * b + b, rtol=1e-5, atol=1e-6)  # fma


def test_the_c_printer_pins_a_shared_load_in_a_register():
    source = kiln.build(row_kernel(lambda A, B, r, j: A[r, j] * B[j]), target="c").get_source()
    assert "KILN_IN_REGISTER(shared)" in source
