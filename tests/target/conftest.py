"""Hand-built TIR kernels shared by the codegen tests, built once per target per session."""

from __future__ import annotations

import pytest

from kiln import tir

SERIAL, PARALLEL, VECTORIZED, UNROLLED = (tir.ForKind.SERIAL, tir.ForKind.PARALLEL,
                                          tir.ForKind.VECTORIZED, tir.ForKind.UNROLLED)

MICRO_KERNEL_C = """
/* y[i] += sum_k W[i][k] * x[k] for a 4x4 block (hand-written micro-kernel) */
static inline int32_t gemv4_update(float* y, const float* W, const float* x, int32_t ldw) {
  for (int i = 0; i < 4; ++i) {
    float acc = 0.0f;
    for (int k = 0; k < 4; ++k) acc += W[i * ldw + k] * x[k];
    y[i] += acc;
  }
  return 0;
}
"""


def _var(name: str, dtype: str = "int32") -> tir.Var:
    return tir.Var(name, dtype)


def _loops(specs, body):
    """Nest ``For`` loops, outermost first: specs are ``(var, extent, kind)``."""
    for var, extent, kind in reversed(specs):
        body = tir.For(var, 0, extent, kind, body)
    return body


def make_kernels() -> dict[str, tir.PrimFunc]:
    """name -> PrimFunc; each test's NumPy oracle is written beside its use."""
    funcs = {}
    n = tir.SizeVar("n", "int32")
    i, j, k = _var("i"), _var("j"), _var("k")

    # exp(A) * 2 over a symbolic number of rows, parallel outer loop.
    A = tir.decl_buffer((n, 4), "float32", name="A")
    B = tir.decl_buffer((n, 4), "float32", name="B")
    funcs["exp_scale"] = tir.PrimFunc([A, B], _loops(
        [(i, n, PARALLEL), (j, 4, SERIAL)], tir.BufferStore(B, tir.exp(A[i, j]) * 2.0, [i, j])))

    # broadcast add C[i, j] = X[i, j] + Y[j] with a vectorized inner loop.
    X = tir.decl_buffer((3, 16), "float32", name="X")
    Y = tir.decl_buffer((16,), "float32", name="Y")
    Z = tir.decl_buffer((3, 16), "float32", name="Z")
    funcs["bcast_add"] = tir.PrimFunc([X, Y, Z], _loops(
        [(i, 3, SERIAL), (j, 16, VECTORIZED)], tir.BufferStore(Z, X[i, j] + Y[j], [i, j])))

    # row sums with a stack accumulator (Allocate + init + update).
    R_in = tir.decl_buffer((5, 7), "float32", name="R_in")
    R_out = tir.decl_buffer((5,), "float32", name="R_out")
    acc_var = tir.Var("acc", tir_pointer("float32", "local"))
    acc = tir.decl_buffer((1,), "float32", name="acc", data=acc_var)
    row = tir.stmt_seq(
        tir.BufferStore(acc, tir.const(0.0, "float32"), [0]),
        tir.For(j, 0, 7, SERIAL, tir.BufferStore(acc, acc[0] + R_in[i, j], [0])),
        tir.BufferStore(R_out, acc[0], [i]))
    funcs["row_sum"] = tir.PrimFunc([R_in, R_out], tir.For(
        i, 0, 5, SERIAL, tir.Allocate(acc_var, "float32", [1], tir.const(1, "bool"), row)))

    # transpose through a symbolic-size workspace buffer (TVMBackendAllocWorkspace path).
    m = tir.SizeVar("m", "int32")
    T_in = tir.decl_buffer((m, 3), "float32", name="T_in")
    T_out = tir.decl_buffer((3, m), "float32", name="T_out")
    ws_var = tir.Var("scratch", tir_pointer("float32", "global"))
    ws = tir.decl_buffer((3, m), "float32", name="scratch", data=ws_var)
    copy_in = _loops([(i, m, SERIAL), (j, 3, SERIAL)],
                     tir.BufferStore(ws, T_in[i, j] + 1.0, [j, i]))
    copy_out = _loops([(j, 3, SERIAL), (k, m, SERIAL)],
                      tir.BufferStore(T_out, ws[j, k] - 1.0, [j, k]))
    funcs["transpose_ws"] = tir.PrimFunc([T_in, T_out], tir.Allocate(
        ws_var, "float32", [3, m], tir.const(1, "bool"), tir.stmt_seq(copy_in, copy_out)))

    # explicit vectors: contiguous Ramp load/store, strided gather, Broadcast.
    V_in = tir.decl_buffer((64,), "float32", name="V_in")
    V_out = tir.decl_buffer((32,), "float32", name="V_out")
    contiguous = tir.BufferStore(
        V_out, V_in[tir.Ramp(i * 8, 1, 8)] * tir.Broadcast(tir.const(3.0, "float32"), 8),
        [tir.Ramp(i * 8, 1, 8)])
    funcs["vec_scale"] = tir.PrimFunc([V_in, V_out], tir.For(i, 0, 4, SERIAL, contiguous))
    gather = tir.BufferStore(V_out, V_in[tir.Ramp(i * 16, 2, 8)], [tir.Ramp(i * 8, 1, 8)])
    funcs["vec_gather"] = tir.PrimFunc([V_in, V_out], tir.For(i, 0, 4, SERIAL, gather))

    # vector select on a mask built from two comparisons (And of vector conditions)
    lanes = tir.Ramp(i * 8, 1, 8)
    value = V_in[lanes]
    zero = tir.Broadcast(tir.const(0.0, "float32"), 8)
    mask = tir.And(value > zero, value < tir.Broadcast(tir.const(1.0, "float32"), 8))
    funcs["vec_select"] = tir.PrimFunc([V_in, V_out], tir.For(i, 0, 4, SERIAL, tir.BufferStore(
        V_out, tir.Select(mask, value, zero - value), [lanes])))

    # integer arithmetic: floordiv/floormod with negatives, min/max, select, cast.
    I_in = tir.decl_buffer((12,), "int32", name="I_in")
    I_out = tir.decl_buffer((5, 12), "int32", name="I_out")
    x = I_in[i]
    rows = [tir.floordiv(x, 3), tir.floormod(x, 3), tir.max(tir.min(x, 4), -2),
            tir.Select(x > 0, x * 2, x - 1), tir.Cast("int32", tir.Cast("float32", x) * 0.5)]
    funcs["int_ops"] = tir.PrimFunc([I_in, I_out], tir.For(i, 0, 12, UNROLLED, tir.stmt_seq(
        *[tir.BufferStore(I_out, value, [r, i]) for r, value in enumerate(rows)])))

    # zero padding through if_then_else: the out-of-bounds side must not be read.
    P_in = tir.decl_buffer((6,), "float64", name="P_in")
    P_out = tir.decl_buffer((10,), "float64", name="P_out")
    inside = tir.all(i >= 2, i < 8)
    funcs["pad"] = tir.PrimFunc([P_in, P_out], tir.For(i, 0, 10, SERIAL, tir.BufferStore(
        P_out, tir.if_then_else(inside, P_in[i - 2], tir.const(0.0, "float64")), [i])))

    # scalar parameters: out = a * alpha + beta (float param, int param)
    alpha = tir.Var("alpha", "float32")
    shift = tir.Var("shift", "int32")
    S_in = tir.decl_buffer((8,), "float32", name="S_in")
    S_out = tir.decl_buffer((8,), "float32", name="S_out")
    funcs["axpb"] = tir.PrimFunc([S_in, S_out, alpha, shift], tir.For(
        i, 0, 8, SERIAL, tir.BufferStore(
            S_out, S_in[i] * alpha + tir.Cast("float32", shift), [i])))

    # an assertion that fails when the first element is negative
    Q = tir.decl_buffer((4,), "float32", name="Q")
    check = tir.AssertStmt(Q[0] >= 0.0, tir.StringImm("Q[0] must be non-negative"),
                           tir.BufferStore(Q, Q[0] + 1.0, [0]))
    funcs["checked"] = tir.PrimFunc([Q], check)

    # a matmul whose 4x4 blocks are done by a hand-written C micro-kernel (import_c)
    W = tir.decl_buffer((8, 8), "float32", name="W")
    xv = tir.decl_buffer((8,), "float32", name="xv")
    yv = tir.decl_buffer((8,), "float32", name="yv")
    io, ko = _var("io"), _var("ko")
    call = tir.call_extern(
        "int32", "gemv4_update",
        yv.access_ptr("rw", offset=io * 4),
        W.access_ptr("r", offset=io * 32 + ko * 4),
        xv.access_ptr("r", offset=ko * 4),
        tir.const(8, "int32"))
    zero = tir.For(i, 0, 8, SERIAL, tir.BufferStore(yv, tir.const(0.0, "float32"), [i]))
    blocks = _loops([(io, 2, SERIAL), (ko, 2, SERIAL)], tir.Evaluate(call))
    body = tir.AttrStmt(io, "pragma_import_c", tir.StringImm(MICRO_KERNEL_C),
                        tir.stmt_seq(zero, blocks))
    funcs["gemv_import_c"] = tir.PrimFunc([W, xv, yv], body)

    # a serial loop with a let, then a parallel loop: the outlined body must capture only
    # what it reads (the let's value does not dominate the second loop)
    t = tir.Var("t", "float32")
    first = tir.For(i, 0, 8, SERIAL, tir.LetStmt(t, S_in[i] * 2.0, tir.BufferStore(S_out, t, [i])))
    second = tir.For(j, 0, 8, PARALLEL, tir.BufferStore(S_out, S_out[j] + 1.0, [j]))
    funcs["let_then_parallel"] = tir.PrimFunc([S_in, S_out], tir.stmt_seq(first, second))

    # 64-bit integers
    L_in = tir.decl_buffer((4,), "int64", name="L_in")
    L_out = tir.decl_buffer((4,), "int64", name="L_out")
    funcs["int64_ops"] = tir.PrimFunc([L_in, L_out], tir.For(i, 0, 4, SERIAL, tir.BufferStore(
        L_out, L_in[i] * tir.const(3_000_000_000, "int64") + tir.floormod(L_in[i], 5), [i])))
    return {name: f.with_attr("global_symbol", name) for name, f in funcs.items()}


def tir_pointer(dtype: str, scope: str):
    from kiln.ir.type import PointerType, PrimType

    return PointerType(PrimType(dtype), scope)


@pytest.fixture(scope="session")
def kernels() -> dict[str, tir.PrimFunc]:
    return make_kernels()


@pytest.fixture(scope="session", params=["c", "llvm"])
def built(request, kernels):
    """(target name, Module holding every kernel) -- one compile per target."""
    from kiln.target import Target
    from kiln.target.build import build_module

    return request.param, build_module(dict(kernels), Target(request.param))


@pytest.fixture
def micro_kernel_c() -> str:
    """The hand-written micro-kernel the import_c kernels embed."""
    return MICRO_KERNEL_C
