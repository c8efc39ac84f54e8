"""TIR passes on hand-built functions: flattening, simplification, loop partitioning,
vectorization, unrolling, intrinsic lowering, no-op removal and the packed API."""

from __future__ import annotations

import pytest

from kiln import tir
from kiln.ir.expr import GlobalVar
from kiln.ir.module import IRModule
from kiln.tir import transform
from kiln.tir.stmt_functor import post_order_visit


def nodes(stmt, cls):
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, cls) else None)
    return found


def loop_func(extent, kind, body_fn, shape=(64,)):
    A = tir.decl_buffer(shape, "float32", name="A")
    B = tir.decl_buffer(shape, "float32", name="B")
    i = tir.Var("i", "int32")
    body = tir.For(i, 0, extent, kind, body_fn(A, B, i))
    return tir.PrimFunc([A.data, B.data], body, buffer_map={A.data: A, B.data: B})


def test_storage_flatten_makes_one_index_and_allocates_realized_buffers():
    A = tir.decl_buffer((4, 8), "float32", name="A")
    T = tir.decl_buffer((4, 8), "float32", name="T")
    i, j = tir.Var("i", "int32"), tir.Var("j", "int32")
    inner = tir.For(j, 0, 8, tir.ForKind.SERIAL, tir.BufferStore(T, A[i, j], [i, j]))
    body = tir.BufferRealize(T, [tir.Range(0, 4), tir.Range(0, 8)], True,
                             tir.For(i, 0, 4, tir.ForKind.SERIAL, inner))
    f = transform.StorageFlatten()(tir.PrimFunc([A.data], body, buffer_map={A.data: A}))
    alloc = nodes(f.body, tir.Allocate)[0]
    assert alloc.extents[0].value == 32 and alloc.buffer_var is T.data
    store = nodes(f.body, tir.BufferStore)[0]
    assert len(store.indices) == 1 and tir.script(store.indices[0]) == "i * 8 + j"
    assert f.buffer_map[A.data].shape[1].value == 8  # params keep their N-D buffers


def test_flatten_offsets_realize_region():
    T = tir.decl_buffer((64,), "float32", name="T")
    o, i = tir.Var("o", "int32"), tir.Var("i", "int32")
    region = [tir.Range.from_min_extent(o * 16, 16)]
    store = tir.BufferStore(T, 1.0, [o * 16 + i])
    body = tir.For(o, 0, 4, tir.ForKind.SERIAL,
                   tir.BufferRealize(T, region, True,
                                     tir.For(i, 0, 16, tir.ForKind.SERIAL, store)))
    f = transform.StorageFlatten()(tir.PrimFunc([], body))
    assert nodes(f.body, tir.Allocate)[0].extents[0].value == 16
    assert tir.script(nodes(f.body, tir.BufferStore)[0].indices[0]) == "i"


def test_simplify_folds_branches_and_unit_loops():
    def body(A, B, i):
        j = tir.Var("j", "int32")
        inner = tir.For(j, 0, 1, tir.ForKind.SERIAL, tir.BufferStore(B, A[i + j], [i]))
        return tir.IfThenElse(i < 100, inner, tir.Evaluate(tir.call_extern("int32", "never")))

    f = transform.Simplify()(loop_func(64, tir.ForKind.SERIAL, body))
    assert not nodes(f.body, tir.IfThenElse)
    assert len(nodes(f.body, tir.For)) == 1
    assert tir.script(nodes(f.body, tir.BufferStore)[0].value) == "A[i]"


def test_loop_partition_removes_tail_check_from_main_loop():
    A = tir.decl_buffer((1000,), "float32", name="A")
    o, i = tir.Var("o", "int32"), tir.Var("i", "int32")
    guarded = tir.IfThenElse(tir.likely(o * 32 + i < 1000),
                             tir.BufferStore(A, 0.0, [o * 32 + i]))
    body = tir.For(o, 0, 32, tir.ForKind.SERIAL, tir.For(i, 0, 32, tir.ForKind.SERIAL, guarded))
    f = tir.PrimFunc([A.data], body, buffer_map={A.data: A})
    f = transform.Simplify()(transform.LoopPartition()(f))
    loops = nodes(f.body, tir.For)
    main = [lp for lp in loops if lp.loop_var.name == "o"][0]
    assert main.extent.value == 31 and not nodes(main, tir.IfThenElse)
    tail_loops = [lp for lp in loops if lp.loop_var.name == "i" and lp not in nodes(main, tir.For)]
    assert [lp.extent.value for lp in tail_loops] == [8]
    assert not nodes(f.body, tir.IfThenElse)


def test_loop_partition_splits_an_int64_loop_at_a_symbolic_bound():
    # a symbolic batch: int64 loop vars and extents; the guard on the group loop peels off
    m = tir.Var("m", "int64")
    A = tir.decl_buffer((m,), "float32", name="A")
    g = tir.Var("g", "int64")
    four = tir.const(4, "int64")
    guarded = tir.IfThenElse(tir.likely(g < tir.floordiv(m, four)),
                             tir.BufferStore(A, 0.0, [g * four]))
    body = tir.For(g, tir.const(0, "int64"), tir.floordiv(m + 3, four), tir.ForKind.SERIAL,
                   guarded)
    f = tir.PrimFunc([A.data, m], body, buffer_map={A.data: A})
    f = transform.Simplify()(transform.LoopPartition()(f))
    # the main loop runs unguarded; the tail, where the guard never holds, simplifies away
    assert [tir.script(lp.extent) for lp in nodes(f.body, tir.For)] == ["m // T.int64(4)"]
    assert not nodes(f.body, tir.IfThenElse)


def test_loop_partition_peels_padding_head_and_tail_from_serial_loop():
    # a padded read: out[o * 4 + i] = A[o * 4 + i - 1] where 0 <= o * 4 + i - 1 < 30
    A = tir.decl_buffer((30,), "float32", name="A")
    B = tir.decl_buffer((32,), "float32", name="B")
    o, i = tir.Var("o", "int32"), tir.Var("i", "int32")
    col = o * 4 + i - 1
    read = tir.if_then_else(tir.likely(tir.all(col >= 0, col < 30)), A[col], 0.0)
    body = tir.For(o, 0, 8, tir.ForKind.SERIAL,
                   tir.For(i, 0, 4, tir.ForKind.SERIAL, tir.BufferStore(B, read, [o * 4 + i])))
    f = tir.PrimFunc([A.data, B.data], body, buffer_map={A.data: A, B.data: B})
    f = transform.Simplify()(transform.LoopPartition()(f))
    outer = [lp for lp in nodes(f.body, tir.For) if lp.loop_var.name == "o"]
    # head o = 0 inlined, main o in [1, 7) without a condition, tail o = 7 inlined
    assert [(lp.min.value, lp.extent.value) for lp in outer] == [(1, 6)]
    # the head and tail iterations are partitioned again on the inner loop: no check is left
    assert [tir.script(st) for st in nodes(f.body, tir.BufferStore)] == [
        "B[0] = 0.0", "B[i] = A[i - 1]", "B[o * 4 + i] = A[o * 4 + i - 1]",
        "B[i + 28] = A[i + 27]", "B[31] = 0.0"]


def test_loop_partition_keeps_parallel_loop_whole_on_lower_bounds():
    A = tir.decl_buffer((30,), "float32", name="A")
    B = tir.decl_buffer((32,), "float32", name="B")
    o = tir.Var("o", "int32")
    read = tir.if_then_else(tir.likely(o - 1 >= 0), A[o - 1], 0.0)
    body = tir.For(o, 0, 31, tir.ForKind.PARALLEL, tir.BufferStore(B, read, [o]))
    f = tir.PrimFunc([A.data, B.data], body, buffer_map={A.data: A, B.data: B})
    f = transform.LoopPartition()(f)
    assert [lp.extent.value for lp in nodes(f.body, tir.For)] == [31]


def test_vectorize_turns_loop_into_ramp_access():
    def body(A, B, i):
        return tir.BufferStore(B, A[i] * 2.0 + 1.0, [i])

    f = transform.VectorizeLoop()(loop_func(8, tir.ForKind.VECTORIZED, body, shape=(8,)))
    assert not nodes(f.body, tir.For)
    store = f.body
    assert isinstance(store.indices[0], tir.Ramp) and store.indices[0].lanes == 8
    assert store.value.dtype == "float32x8"


def test_vectorize_folds_ramp_arithmetic():
    def body(A, B, i):
        return tir.BufferStore(B, A[i * 4 + 3], [i])

    f = transform.VectorizeLoop()(loop_func(8, tir.ForKind.VECTORIZED, body))
    load = nodes(f.body, tir.BufferLoad)[0]
    ramp = load.indices[0]
    assert isinstance(ramp, tir.Ramp) and ramp.base.value == 3 and ramp.stride.value == 4


def test_vectorize_falls_back_to_serial_on_branches():
    def body(A, B, i):
        return tir.IfThenElse(A[i] > 0.0, tir.BufferStore(B, 1.0, [i]))

    f = transform.VectorizeLoop()(loop_func(8, tir.ForKind.VECTORIZED, body, shape=(8,)))
    assert nodes(f.body, tir.For)[0].kind == tir.ForKind.SERIAL


def test_unroll_replicates_body():
    def body(A, B, i):
        return tir.BufferStore(B, A[i], [i])

    f = transform.UnrollLoop()(loop_func(4, tir.ForKind.UNROLLED, body, shape=(4,)))
    stores = nodes(f.body, tir.BufferStore)
    assert [s.indices[0].value for s in stores] == [0, 1, 2, 3]


def test_unroll_loop_decides_the_selects_its_copies_make_constant():
    """A select on the unrolled index (a constant-matrix row, as in Winograd's transforms)
    is one arm in each copy; a select on data stays."""
    def body(A, B, i):
        row = tir.if_then_else(i == 0, A[0] * 2.0,
                               tir.if_then_else(tir.floormod(i + 1, 3) == 2, A[1], A[2]))
        return tir.BufferStore(B, tir.if_then_else(A[i] > 0.0, row, 0.0), [i])

    f = transform.UnrollLoop()(loop_func(4, tir.ForKind.UNROLLED, body, shape=(4,)))
    stores = nodes(f.body, tir.BufferStore)
    arms = [s.value.args[1] for s in stores]
    assert all(s.value.op == "tir.if_then_else" for s in stores)  # the data select stays
    assert isinstance(arms[0], tir.Mul)
    assert [a.indices[0].value for a in arms[1:]] == [1, 2, 2]
    assert not [c for a in arms for c in nodes(a, tir.Call)]


def test_lower_intrin_rewrites_floordiv_and_sigmoid():
    def body(A, B, i):
        return tir.BufferStore(B, tir.sigmoid(A[tir.floordiv(i, 4)]), [tir.floormod(i, 4)])

    f = transform.LowerIntrin()(loop_func(64, tir.ForKind.SERIAL, body))
    assert not nodes(f.body, tir.FloorDiv) and not nodes(f.body, tir.FloorMod)
    assert nodes(f.body, tir.Div) and nodes(f.body, tir.Mod)
    ops = {c.op for c in nodes(f.body, tir.Call)}
    assert "tir.sigmoid" not in ops and "tir.exp" in ops


def test_remove_no_op_deletes_empty_loops():
    i = tir.Var("i", "int32")
    f = tir.PrimFunc([], tir.For(i, 0, 8, tir.ForKind.SERIAL, tir.Evaluate(0)))
    assert isinstance(transform.RemoveNoOp()(f).body, tir.Evaluate)


def test_passes_run_on_ir_modules():
    def body(A, B, i):
        return tir.BufferStore(B, A[i + 0], [i])

    mod = IRModule({GlobalVar("main"): loop_func(4, tir.ForKind.UNROLLED, body, shape=(4,))})
    out = transform.UnrollLoop()(mod)
    assert len(nodes(out["main"].body, tir.BufferStore)) == 4
    assert nodes(mod["main"].body, tir.For)  # the input module is unchanged


def _packed(func):
    return transform.make_packed_api(func.with_attr("global_symbol", "f"))


def test_make_packed_api_params_and_checks():
    n = tir.Var("n", "int32")
    A = tir.decl_buffer((n, 4), "float32", name="A")
    B = tir.decl_buffer((n, 4), "float32", name="B")
    i = tir.Var("i", "int32")
    body = tir.For(i, 0, n * 4, tir.ForKind.SERIAL, tir.BufferStore(B, 1.0, [i]))
    f = _packed(tir.PrimFunc([A.data, B.data], body, buffer_map={A.data: A, B.data: B}))
    assert [p.name for p in f.params] == ["args", "arg_type_ids", "num_args", "out_ret_value",
                                          "out_ret_tcode", "resource_handle"]
    assert f.attrs["calling_conv"] == 1 and not f.buffer_map
    messages = [a.message.value for a in nodes(f.body, tir.AssertStmt)]
    assert "f: num_args should be 2" in messages
    assert "f.A.ndim is expected to equal 2" in messages
    assert "f.B.dtype is expected to be float32" in messages
    assert any(m.startswith("Argument f.A.shape[1] has an unsatisfied constraint") for m in
               messages)
    assert any(m.startswith("Argument f.B.shape[0]") for m in messages)  # n bound by A
    lets = {s.var.name: s for s in nodes(f.body, tir.LetStmt)}
    assert lets["n"].var is n  # the symbolic shape is read from A's DLTensor shape
    assert lets["A"].var is A.data
    getters = [c for c in nodes(f.body, tir.Call) if c.op == "tir.tvm_struct_get"]
    kinds = {c.args[2].value for c in getters}
    assert {tir.op.kArrData, tir.op.kArrShape, tir.op.kArrNDim, tir.op.kArrTypeCode,
            tir.op.kTVMValueContent} <= kinds


def test_make_packed_api_scalar_params():
    x = tir.Var("x", "int32")
    f = _packed(tir.PrimFunc([x], tir.Evaluate(tir.call_extern("int32", "use", x))))
    messages = [a.message.value for a in nodes(f.body, tir.AssertStmt)]
    assert "f: Expect arg[0] to be int" in messages
    assert any(let.var is x for let in nodes(f.body, tir.LetStmt))


@pytest.mark.parametrize("kind", [tir.ForKind.PARALLEL, tir.ForKind.VECTORIZED])
def test_convert_for_loops_to_serial(kind):
    def body(A, B, i):
        return tir.BufferStore(B, A[i], [i])

    f = transform.ConvertForLoopsToSerial()(loop_func(8, kind, body, shape=(8,)))
    assert f.body.kind == tir.ForKind.SERIAL


def test_make_packed_api_binds_symbolic_strides_and_elem_offset():
    s0 = tir.Var("s0", "int32")
    A = tir.decl_buffer((4, 4), "float32", name="A", strides=[s0, 1], offset_factor=1)
    body = tir.BufferStore(A, 1.0, [0, 0])
    f = _packed(tir.PrimFunc([A.data], body, buffer_map={A.data: A}))
    bound = {let.var.name: let for let in nodes(f.body, tir.LetStmt)}
    assert bound["s0"].var is s0 and bound["A_elem_offset"].var is A.elem_offset
    messages = [a.message.value for a in nodes(f.body, tir.AssertStmt)]
    assert not any("byte_offset" in m or "compact" in m for m in messages)
