"""Lowering schedules to TIR, checked structurally: loop nests, extents, clean index
expressions, the GEMM tutorial's loop structure, and errors for bad schedules."""

from __future__ import annotations

import pytest

import kiln
from kiln import te, tir
from kiln.runtime.error import TVMError
from kiln.tir.stmt_functor import post_order_visit


def nodes(stmt, cls):
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, cls) else None)
    return found


def lowered(s, args, name="main"):
    return kiln.lower(s, args, name=name)[name]


def test_lower_returns_module_with_named_primfunc():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1.0, name="B")
    mod = kiln.lower(te.create_schedule(B.op), [A, B], name="add_one")
    func = mod["add_one"]
    assert isinstance(func, tir.PrimFunc)
    assert func.attrs["global_symbol"] == "add_one" and func.attrs["tir.noalias"]
    assert [func.buffer_map[p].name for p in func.params] == ["A", "B"]


def test_split_index_is_clean_and_evenly_divided_loop_has_no_check():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=16)
    f = lowered(s, [A, B])
    loops = nodes(f.body, tir.For)
    assert sorted(lp.extent.value for lp in loops) == [4, 16]
    assert not nodes(f.body, tir.IfThenElse)
    store = nodes(f.body, tir.BufferStore)[0]
    assert tir.script(store.indices[0]) == "i.outer * 16 + i.inner"


def test_split_tail_is_partitioned():
    A = te.placeholder((100,), name="A")
    B = te.compute((100,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=32)
    f = lowered(s, [A, B])
    extents = [lp.extent.value for lp in nodes(f.body, tir.For)]
    assert sorted(extents) == [3, 4, 32]  # main: 3 x 32, tail: 4 elements
    assert not nodes(f.body, tir.IfThenElse)


def test_fused_axis_uses_div_and_mod():
    A = te.placeholder((8, 64), name="A")
    B = te.compute((8, 64), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].fuse(*B.op.axis)
    f = lowered(s, [A, B])
    (loop,) = nodes(f.body, tir.For)
    assert loop.extent.value == 512
    text = tir.script(nodes(f.body, tir.BufferStore)[0].indices[0])
    assert "i.j.fused" in text and "512" not in text


def test_gemm_tutorial_loop_structure():
    M = K = N = 1024
    bn, kfactor = 32, 4
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), "k")
    packedB = te.compute((N // bn, K, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute((M, N), lambda m, n: te.sum(
        A[m, k] * packedB[n // bn, k, tir.indexmod(n, bn)], axis=k), name="C")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "global")
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    s[CC].compute_at(s[C], no)
    mc, nc = s[CC].op.axis
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=kfactor)
    s[CC].reorder(ko, mc, ki, nc)
    s[CC].vectorize(nc)
    s[CC].unroll(ki)
    s[C].vectorize(ni)
    s[C].parallel(mo)
    x, _, z = s[packedB].op.axis
    s[packedB].vectorize(z)
    s[packedB].parallel(x)
    f = lowered(s, [A, B, C], name="mmult")
    top = f.body
    assert isinstance(top, tir.Allocate) and top.extents[0].value == N * K  # packedB
    pack_loop, main_loop = top.body.seq
    assert pack_loop.kind == tir.ForKind.PARALLEL and pack_loop.extent.value == N // bn
    assert main_loop.kind == tir.ForKind.PARALLEL and main_loop.loop_var.name == "m.outer"
    n_outer = main_loop.body
    assert n_outer.loop_var.name == "n.outer" and n_outer.extent.value == N // bn
    acc = n_outer.body
    assert isinstance(acc, tir.Allocate) and acc.extents[0].value == bn * bn
    init, ko_loop, copy = acc.body.seq
    assert init.loop_var.name == "m.c" and init.extent.value == bn
    assert isinstance(init.body.indices[0], tir.Ramp) and init.body.indices[0].lanes == bn
    assert ko_loop.loop_var.name == "k.outer" and ko_loop.extent.value == K // kfactor
    updates = ko_loop.body.body.seq  # k.inner unrolled into 4 vector updates
    assert len(updates) == kfactor
    assert all(u.value.dtype == "float32x32" for u in updates)
    assert tir.script(updates[0].indices[0]) == "T.Ramp(m.c * 32, 1, 32)"
    assert copy.loop_var.name == "m.inner"
    assert tir.script(copy.body.value) == "C.global[T.Ramp(m.inner * 32, 1, 32)]"
    assert not nodes(f.body, tir.IfThenElse)


def test_compute_at_region_is_relative_to_attach_loop():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((64,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], xo)
    f = lowered(s, [A, C])
    (alloc,) = nodes(f.body, tir.Allocate)
    assert alloc.extents[0].value == 8
    b_store = [st for st in nodes(f.body, tir.BufferStore) if st.buffer.name == "B"][0]
    assert tir.script(b_store.indices[0]) == "i"


def test_symbolic_shape_lowers_with_shape_var():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    f = lowered(te.create_schedule(B.op), [A, B])
    (loop,) = nodes(f.body, tir.For)
    assert loop.extent is n


def test_reduction_init_precedes_reduce_loop():
    A = te.placeholder((8, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    f = lowered(te.create_schedule(B.op), [A, B])
    outer = f.body
    init, update_loop = outer.body.seq
    assert isinstance(init, tir.BufferStore) and init.value.value == 0.0
    assert update_loop.loop_var.name == "k"


def test_pragma_import_c_is_an_attr_stmt():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i], name="B")
    s = te.create_schedule(B.op)
    s[B].pragma(B.op.axis[0], "import_c", "int f(void) { return 1; }")
    f = lowered(s, [A, B])
    (attr,) = nodes(f.body, tir.AttrStmt)
    assert attr.attr_key == "pragma_import_c" and attr.value.value.startswith("int f")


def test_storage_align_pads_stride():
    A = te.placeholder((16, 16), name="A")
    B = te.compute((16, 16), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((16, 16), lambda i, j: B[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[B].storage_align(B.op.axis[0], 32, 8)
    f = lowered(s, [A, C])
    (alloc,) = nodes(f.body, tir.Allocate)
    assert alloc.extents[0].value == 16 * 40
    b_store = [st for st in nodes(f.body, tir.BufferStore) if st.buffer.name == "B"][0]
    assert tir.script(b_store.indices[0]) == "i * 40 + j"


# ---- bad schedules ------------------------------------------------------------------------

@pytest.fixture
def two_stage():
    A = te.placeholder((32, 32), name="A")
    B = te.compute((32, 32), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((32, 32), lambda i, j: B[i, j] * 2.0, name="C")
    return A, B, C, te.create_schedule(C.op)


def test_split_of_axis_not_in_stage(two_stage):
    A, B, C, s = two_stage
    with pytest.raises(TVMError, match="not a loop .* of stage C"):
        s[C].split(B.op.axis[0], factor=4)


def test_split_of_already_split_axis(two_stage):
    A, B, C, s = two_stage
    s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(TVMError, match="i is not a loop"):
        s[C].split(C.op.axis[0], factor=4)


def test_compute_at_into_non_consumer(two_stage):
    A, B, C, s = two_stage
    with pytest.raises(TVMError, match="does not consume"):
        s[C].compute_at(s[B], B.op.axis[0])


def test_reorder_with_duplicate_axes(two_stage):
    A, B, C, s = two_stage
    i, j = C.op.axis
    with pytest.raises(TVMError, match="appears twice"):
        s[C].reorder(i, j, i)


def test_fuse_of_non_adjacent_axes():
    A = te.placeholder((4, 4, 4), name="A")
    B = te.compute((4, 4, 4), lambda i, j, k: A[i, j, k], name="B")
    s = te.create_schedule(B.op)
    i, j, k = B.op.axis
    with pytest.raises(TVMError, match="adjacent"):
        s[B].fuse(i, k)


def test_inline_of_reduction_is_rejected():
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis((0, 4), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    C = te.compute((4,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    with pytest.raises(TVMError, match="cannot inline the reduction"):
        s[B].compute_inline()


def test_missing_argument_is_reported(two_stage):
    A, B, C, s = two_stage
    with pytest.raises(TVMError, match="tensor A is read"):
        kiln.lower(s, [C])


def test_compute_shape_mismatch_is_reported():
    with pytest.raises(TVMError, match="takes 1 indices but the shape has 2"):
        te.compute((4, 4), lambda i: i)


def test_split_needs_factor_or_nparts(two_stage):
    A, B, C, s = two_stage
    with pytest.raises(TVMError, match="exactly one of factor= or nparts="):
        s[C].split(C.op.axis[0])


# ---- API surface ----------------------------------------------------------------------------

def test_tensor_indexing_and_properties():
    A = te.placeholder((4, 8), name="A", dtype="int8")
    assert (A.ndim, A.dtype, A.op.name) == (2, "int8", "A")
    i, j = te.var("i"), te.var("j")
    load = A[i][j]
    assert isinstance(load, tir.ProducerLoad) and load.indices[1] is j
    assert A(i, j).dtype == "int8"
    with pytest.raises(TVMError, match="has 2 dimensions"):
        A[i, j, i]
    with pytest.raises(TVMError, match="non-negative"):
        te.placeholder((-1,), name="bad")


def test_compute_names_axes_after_parameters_and_varargs():
    A = te.placeholder((2, 3, 4), name="A")
    B = te.compute((2, 3, 4), lambda *idx: A[idx] * 2.0, name="B")
    assert [iv.var.name for iv in B.op.axis] == ["i0", "i1", "i2"]
    assert B.op.input_tensors == [A]
    n = te.size_var("n")
    assert isinstance(n, tir.SizeVar)
    tx = te.thread_axis("threadIdx.x")
    assert tx.thread_tag == "threadIdx.x" and tx.iter_type == tir.IterVar.ThreadIndex


def test_split_by_nparts_and_fuse_then_split():
    A = te.placeholder((8, 16), name="A")
    B = te.compute((8, 16), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], nparts=2)
    fused = s[B].fuse(ii, B.op.axis[1])
    s[B].split(fused, factor=32)
    f = lowered(s, [A, B])
    assert [lp.extent.value for lp in nodes(f.body, tir.For)] == [32, 2, 2]


def test_cache_write_after_split_is_rejected():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=2)
    with pytest.raises(TVMError, match="before scheduling"):
        s.cache_write(B, "local")


def test_unknown_tensor_in_schedule():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    other = te.compute((8,), lambda i: A[i] * 3.0, name="other")
    s = te.create_schedule(B.op)
    with pytest.raises(TVMError, match="not part of this schedule"):
        s[other]


def test_lowering_is_deterministic_for_the_compile_cache():
    from kiln.ir.structural import structural_equal, structural_hash

    def make(scale):
        A = te.placeholder((64,), name="A")
        B = te.compute((64,), lambda i: A[i] * scale, name="B")
        s = te.create_schedule(B.op)
        s[B].split(B.op.axis[0], factor=8)
        return lowered(s, [A, B])

    first, second, different = make(2.0), make(2.0), make(3.0)
    assert structural_equal(first, second)
    assert structural_hash(first) == structural_hash(second)
    assert structural_hash(first) != structural_hash(different)
