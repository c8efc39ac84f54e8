"""Tensor expressions built with ``kiln.build`` (C target) and run, compared with NumPy:
elementwise, broadcast, reductions, argmax, scheduled matmul, conv2d, scan, symbolic shapes,
extern calls, tensorize and rfactor."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir


def run(s, args, inputs, outputs, name="f", target="c"):
    """Build ``s`` for ``target``, call it on NumPy inputs, return the output arrays."""
    func = kiln.build(s, args, target=target, name=name)
    nd_args = [kiln.nd.array(x) for x in inputs]
    nd_args += [kiln.nd.empty(shape, dtype=dtype) for shape, dtype in outputs]
    func[name](*nd_args)
    return [a.numpy() for a in nd_args[len(inputs):]]


@pytest.fixture
def rand():
    gen = np.random.default_rng(0)
    return lambda *shape: gen.random(shape, dtype=np.float32)


def test_elementwise_with_fused_split_vectorized_parallel_loop(rand):
    A = te.placeholder((37, 19), name="A")
    B = te.compute((37, 19), lambda i, j: te.exp(A[i, j]) * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    fused = s[B].fuse(*B.op.axis)
    outer, inner = s[B].split(fused, factor=16)
    s[B].vectorize(inner)
    s[B].parallel(outer)
    a = rand(37, 19)
    (b,) = run(s, [A, B], [a], [((37, 19), "float32")])
    np.testing.assert_allclose(b, np.exp(a) * 2 + 1, rtol=1e-5)


def test_broadcast_add_with_inlined_stage(rand):
    A = te.placeholder((8, 16), name="A")
    bias = te.placeholder((16,), name="bias")
    T = te.compute((8, 16), lambda i, j: A[i, j] + bias[j], name="T")
    R = te.compute((8, 16), lambda i, j: te.max(T[i, j], tir.const(0.0)), name="R")
    s = te.create_schedule(R.op)
    s[T].compute_inline()
    a, b = rand(8, 16) - 0.5, rand(16) - 0.5
    (r,) = run(s, [A, bias, R], [a, b], [((8, 16), "float32")])
    np.testing.assert_allclose(r, np.maximum(a + b, 0), rtol=1e-6)


def test_row_sum_and_max_reductions(rand):
    A = te.placeholder((13, 21), name="A")
    k = te.reduce_axis((0, 21), name="k")
    S = te.compute((13,), lambda i: te.sum(A[i, k], axis=k), name="S")
    k2 = te.reduce_axis((0, 21), name="k2")
    M = te.compute((13,), lambda i: te.max(A[i, k2], axis=k2), name="M")
    s = te.create_schedule([S.op, M.op])
    a = rand(13, 21)
    sums, maxes = run(s, [A, S, M], [a], [((13,), "float32"), ((13,), "float32")])
    np.testing.assert_allclose(sums, a.sum(1), rtol=1e-5)
    np.testing.assert_array_equal(maxes, a.max(1))


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_argmax_tuple_reducer(rand, target):
    def combine(x, y):
        take_x = x[1] >= y[1]
        return tir.Select(take_x, x[0], y[0]), tir.Select(take_x, x[1], y[1])

    def identity(t0, t1):
        return tir.const(-1, t0), te.min_value(t1)

    argmax = te.comm_reducer(combine, identity, name="argmax")
    n, m = 9, 17
    idx = te.placeholder((n, m), name="idx", dtype="int32")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    T0, T1 = te.compute((n,), lambda i: argmax((idx[i, k], A[i, k]), axis=k), name="T")
    s = te.create_schedule(T0.op)
    a = rand(n, m)
    indices = np.tile(np.arange(m, dtype="int32"), (n, 1))
    pos, val = run(s, [idx, A, T0, T1], [indices, a], [((n,), "int32"), ((n,), "float32")],
                   target=target)
    np.testing.assert_array_equal(pos, a.argmax(1))
    np.testing.assert_array_equal(val, a.max(1))


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_gemm_tutorial_schedule(rand, target):
    M = N = K = 64
    bn = 16
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
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=4)
    s[CC].reorder(ko, mc, ki, nc)
    s[CC].vectorize(nc)
    s[CC].unroll(ki)
    s[C].vectorize(ni)
    s[C].parallel(mo)
    s[packedB].vectorize(s[packedB].op.axis[2])
    s[packedB].parallel(s[packedB].op.axis[0])
    a, b = rand(M, K), rand(K, N)
    (c,) = run(s, [A, B, C], [a, b], [((M, N), "float32")], name="mmult", target=target)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)


def test_conv2d_with_padding_computed_at_rows(rand):
    N, CI, H, W, CO, KS = 1, 3, 8, 8, 4, 3
    D = te.placeholder((N, CI, H, W), name="D")
    Wt = te.placeholder((CO, CI, KS, KS), name="Wt")
    pad = te.compute((N, CI, H + 2, W + 2), lambda b, c, y, x: te.if_then_else(
        te.all(y >= 1, y < H + 1, x >= 1, x < W + 1), D[b, c, y - 1, x - 1], 0.0), name="pad")
    rc = te.reduce_axis((0, CI), "rc")
    ry = te.reduce_axis((0, KS), "ry")
    rx = te.reduce_axis((0, KS), "rx")
    Out = te.compute((N, CO, H, W), lambda b, f, y, x: te.sum(
        pad[b, rc, y + ry, x + rx] * Wt[f, rc, ry, rx], axis=[rc, ry, rx]), name="Out")
    s = te.create_schedule(Out.op)
    s[pad].compute_at(s[Out], Out.op.axis[2])
    d, w = rand(N, CI, H, W), rand(CO, CI, KS, KS)
    (out,) = run(s, [D, Wt, Out], [d, w], [((N, CO, H, W), "float32")])
    padded = np.pad(d, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((N, CO, H, W), dtype=np.float32)
    for y in range(H):
        for x in range(W):
            window = padded[:, :, y:y + KS, x:x + KS]
            ref[:, :, y, x] = np.einsum("bcij,fcij->bf", window, w)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_scan_cumulative_sum(rand):
    m, n = 6, 5
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    res = te.scan(init, update, state, [X], name="cumsum")
    s = te.create_schedule(res.op)
    x = rand(m, n)
    (out,) = run(s, [X, res], [x], [((m, n), "float32")])
    np.testing.assert_allclose(out, np.cumsum(x, 0), rtol=1e-5)


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_symbolic_shapes_read_from_the_tensor(rand, target):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] + 3.0, name="B")
    s = te.create_schedule(B.op)
    AL = s.cache_read(A, "local", [B])
    jo, ji = s[B].split(B.op.axis[1], factor=4)
    s[AL].compute_at(s[B], jo)
    func = kiln.build(s, [A, B], target=target, name="f")
    for shape in ((5, 10), (3, 8), (1, 1)):
        a = rand(*shape)
        b = kiln.nd.empty(shape)
        func["f"](kiln.nd.array(a), b)
        np.testing.assert_allclose(b.numpy(), a + 3)
    with pytest.raises(kiln.TVMError):
        func["f"](kiln.nd.array(rand(5, 10)), kiln.nd.empty((5, 9)))


def test_extern_call_and_import_c(rand):
    source = ("int32_t add_one(float* a, float* b, int32_t n) "
              "{ for (int i = 0; i < n; ++i) b[i] = a[i] + 1.0f; return 0; }")
    A = te.placeholder((8,), name="A")
    B = te.extern((8,), [A], lambda ins, outs: tir.call_extern(
        "int32", "add_one", ins[0].access_ptr("r"), outs[0].access_ptr("w"), 8), name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[C].pragma(C.op.axis[0], "import_c", source)
    a = rand(8)
    (c,) = run(s, [A, C], [a], [((8,), "float32")])
    np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)


GEMV_SOURCE = """
int32_t gemv_update(float* cc, float* aa, float* bb, int32_t m, int32_t l, int32_t stride) {
  for (int i = 0; i < m; ++i) for (int j = 0; j < l; ++j) cc[i] += aa[j] * bb[i * stride + j];
  return 0;
}
int32_t gemv_reset(float* cc, int32_t m) { for (int i = 0; i < m; ++i) cc[i] = 0.0f; return 0; }
"""


def gemv_intrin(m, length):
    a = te.placeholder((length,), name="a")
    b = te.placeholder((m, length), name="b")
    k = te.reduce_axis((0, length), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    binds = {
        a: tir.decl_buffer(a.shape, a.dtype, name="A", offset_factor=1, strides=[1]),
        b: tir.decl_buffer(b.shape, b.dtype, name="B", offset_factor=1,
                           strides=[te.var("s1"), 1]),
        c: tir.decl_buffer(c.shape, c.dtype, name="C", offset_factor=1, strides=[1]),
    }

    def implement(ins, outs):
        aa, bb = ins
        cc = outs[0]
        update = tir.call_extern("int32", "gemv_update", cc.access_ptr("w"),
                                 aa.access_ptr("r"), bb.access_ptr("r"), m, length,
                                 bb.strides[0])
        reset = tir.call_extern("int32", "gemv_reset", cc.access_ptr("w"), m)
        return update, reset, update

    return te.decl_tensor_intrin(c.op, implement, binds=binds)


def test_tensorize_with_extern_micro_kernel(rand):
    N, M, K = 8, 16, 64
    A = te.placeholder((N, K), name="A")
    B = te.placeholder((M, K), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=16)
    s[C].reorder(x, yo, ko, yi, ki)
    s[C].tensorize(yi, gemv_intrin(8, 16))
    s[C].pragma(x, "import_c", GEMV_SOURCE)
    a, b = rand(N, K), rand(M, K)
    (c,) = run(s, [A, B, C], [a, b], [((N, M), "float32")])
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-4)


def test_rfactor_reduction(rand):
    A = te.placeholder((64,), name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((1,), lambda _: te.sum(A[k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(s[B].op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    assert BF.shape[0].value == 16
    a = rand(64)
    (b,) = run(s, [A, B], [a], [((1,), "float32")])
    np.testing.assert_allclose(b, [a.sum()], rtol=1e-5)


def test_lowered_module_builds_like_the_schedule(rand):
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: te.sqrt(A[i]), name="B")
    mod = kiln.lower(te.create_schedule(B.op), [A, B], name="root")
    func = kiln.build(mod, target="c")
    a = rand(16)
    b = kiln.nd.empty((16,))
    func["root"](kiln.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), np.sqrt(a), rtol=1e-6)


def test_extern_packed_function_call(rand):
    def add_one(src, dst):
        dst.copyfrom(src.numpy() + 1)

    kiln.register_func("tests.te.add_one", add_one, override=True)
    A = te.placeholder((8,), name="A")
    B = te.extern((8,), [A], lambda ins, outs: tir.call_packed("tests.te.add_one", ins[0],
                                                                 outs[0]), name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    a = rand(8)
    (c,) = run(s, [A, C], [a], [((8,), "float32")])
    np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)


def test_reduction_over_offset_axis_split_with_tail(rand):
    A = te.placeholder((6, 20), name="A")
    k = te.reduce_axis((3, 17), name="k")
    B = te.compute((6,), lambda i: te.sum(A[i, k] * 2.0, axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=5)
    s[B].reorder(ko, B.op.axis[0], ki)
    a = rand(6, 20)
    (b,) = run(s, [A, B], [a], [((6,), "float32")])
    np.testing.assert_allclose(b, (a[:, 3:17] * 2).sum(1), rtol=1e-5)


def test_lower_accepts_primfunc_modules():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    mod = kiln.lower(te.create_schedule(B.op), [A, B], name="g")
    again = kiln.lower(mod)
    assert isinstance(again["g"], tir.PrimFunc)


def test_int64_shapes_and_scalar_tensors(rand):
    four, six = tir.const(4, "int64"), tir.const(6, "int64")
    A = te.placeholder((four, six), name="A")
    k = te.reduce_axis((0, six), name="k")
    B = te.compute((four,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=2)
    assert s[B].leaf_iter_vars[1].var.dtype == "int64" and k.var.dtype == "int64"
    a = rand(4, 6)
    (b,) = run(s, [A, B], [a], [((4,), "float32")])
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5)
    S = te.placeholder((), name="S")
    T = te.compute((), lambda: S() * 2.0, name="T")
    (t,) = run(te.create_schedule(T.op), [S, T], [np.array(3.0, dtype="float32")],
               [((), "float32")])
    assert t == 6.0
