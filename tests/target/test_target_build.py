"""kiln.build of te programs on both targets: results equal NumPy; bad input raises."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te, tir
from kiln.runtime.error import TVMError

TARGETS = ["c", "llvm"]
rng = np.random.default_rng(1)


def nd(array):
    return tvm.nd.array(np.ascontiguousarray(array))


def _programs():
    """name -> (schedule, args); built into one module per target."""
    progs = {}

    # elementwise with a symbolic length, split/vectorize/parallel, non-divisible tail
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.exp(A[i]) * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(xi)
    s[B].parallel(xo)
    progs["elementwise"] = (s, [A, B])

    # broadcast: (m, k) + (k,) with a symbolic m
    m = te.var("m")
    X = te.placeholder((m, 12), name="X")
    Y = te.placeholder((12,), name="Y")
    Z = te.compute((m, 12), lambda i, j: X[i, j] + Y[j], name="Z")
    progs["broadcast"] = (te.create_schedule(Z.op), [X, Y, Z])

    # reduction: row sums and row max
    R = te.placeholder((6, 10), name="R")
    k = te.reduce_axis((0, 10), name="k")
    S = te.compute((6,), lambda i: te.sum(R[i, k], axis=k), name="S")
    k2 = te.reduce_axis((0, 10), name="k2")
    M = te.compute((6,), lambda i: te.max(R[i, k2], axis=k2), name="M")
    progs["row_sum"] = (te.create_schedule(S.op), [R, S])
    progs["row_max"] = (te.create_schedule(M.op), [R, M])

    # matmul, tiled with a vectorized inner loop and an unrolled reduction split
    P = te.placeholder((32, 24), name="P")
    Q = te.placeholder((24, 16), name="Q")
    kk = te.reduce_axis((0, 24), name="kk")
    C = te.compute((32, 16), lambda i, j: te.sum(P[i, kk] * Q[kk, j], axis=kk), name="C")
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].unroll(ki)
    s[C].parallel(io)
    progs["matmul"] = (s, [P, Q, C])

    # conv2d NCHW, 3x3, stride 1, zero padding 1, written in te
    data = te.placeholder((1, 2, 6, 6), name="data")
    weight = te.placeholder((3, 2, 3, 3), name="weight")
    padded = te.compute(
        (1, 2, 8, 8),
        lambda b, c, y, x: te.if_then_else(
            te.all(y >= 1, y < 7, x >= 1, x < 7), data[b, c, y - 1, x - 1],
            tvm.tir.const(0.0, "float32")),
        name="padded")
    rc = te.reduce_axis((0, 2), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    conv = te.compute(
        (1, 3, 6, 6),
        lambda b, f, y, x: te.sum(padded[b, rc, y + ry, x + rx] * weight[f, rc, ry, rx],
                                  axis=[rc, ry, rx]),
        name="conv")
    s = te.create_schedule(conv.op)
    s[padded].compute_inline()
    progs["conv2d"] = (s, [data, weight, conv])

    # scan: cumulative sum over rows
    T = te.placeholder((5, 4), name="T")
    state = te.placeholder((5, 4), name="state")
    init = te.compute((1, 4), lambda _, j: T[0, j], name="init")
    update = te.compute((5, 4), lambda t, j: state[t - 1, j] + T[t, j], name="update")
    scan = te.scan(init, update, state, inputs=[T])
    progs["scan"] = (te.create_schedule(scan.op), [T, scan])
    return progs


@pytest.fixture(scope="module", params=TARGETS)
def built(request):
    modules = {}
    for name, (s, args) in _programs().items():
        modules[name] = tvm.lower(s, args, name=name)
    merged = {}
    for mod in modules.values():
        for gvar in mod.get_global_vars():
            merged[gvar.name_hint] = mod[gvar]
    from kiln.target import Target
    from kiln.target.build import build_module

    return build_module(merged, Target(request.param))


@pytest.mark.parametrize("length", [1, 8, 37])
def test_elementwise_symbolic_length(built, length):
    a = rng.standard_normal(length).astype("float32")
    b = nd(np.zeros_like(a))
    built["elementwise"](nd(a), b)
    np.testing.assert_allclose(b.numpy(), np.exp(a) * 2 + 1, rtol=1e-5)


def test_broadcast_symbolic_rows(built):
    x = rng.standard_normal((5, 12)).astype("float32")
    y = rng.standard_normal(12).astype("float32")
    z = nd(np.zeros_like(x))
    built["broadcast"](nd(x), nd(y), z)
    np.testing.assert_allclose(z.numpy(), x + y, rtol=1e-6)


def test_reductions(built):
    r = rng.standard_normal((6, 10)).astype("float32")
    out = nd(np.zeros(6, "float32"))
    built["row_sum"](nd(r), out)
    np.testing.assert_allclose(out.numpy(), r.sum(axis=1), rtol=1e-5, atol=1e-6)
    built["row_max"](nd(r), out)
    np.testing.assert_array_equal(out.numpy(), r.max(axis=1))


def test_matmul(built):
    p = rng.standard_normal((32, 24)).astype("float32")
    q = rng.standard_normal((24, 16)).astype("float32")
    c = nd(np.zeros((32, 16), "float32"))
    built["matmul"](nd(p), nd(q), c)
    np.testing.assert_allclose(c.numpy(), p @ q, rtol=1e-4, atol=1e-5)


def test_conv2d(built):
    x = rng.standard_normal((1, 2, 6, 6)).astype("float32")
    w = rng.standard_normal((3, 2, 3, 3)).astype("float32")
    out = nd(np.zeros((1, 3, 6, 6), "float32"))
    built["conv2d"](nd(x), nd(w), out)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.zeros((1, 3, 6, 6), "float32")
    for f in range(3):
        for y in range(6):
            for xx in range(6):
                expected[0, f, y, xx] = (xp[0, :, y:y + 3, xx:xx + 3] * w[f]).sum()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_scan_cumulative_sum(built):
    t = rng.standard_normal((5, 4)).astype("float32")
    out = nd(np.zeros((5, 4), "float32"))
    built["scan"](nd(t), out)
    np.testing.assert_allclose(out.numpy(), np.cumsum(t, axis=0), rtol=1e-5, atol=1e-6)


def test_wrong_arguments_raise_naming_them(built):
    x = nd(np.zeros((5, 12), "float32"))
    with pytest.raises(TVMError, match=r"broadcast: argument Y \(#1\): expected shape\[0\] == 12"):
        built["broadcast"](x, nd(np.zeros(11, "float32")), x)
    with pytest.raises(TVMError, match=r"argument Y \(#1\): expected dtype float32"):
        built["broadcast"](x, nd(np.zeros(12, "int32")), x)
    with pytest.raises(TVMError, match=r"expected 3 arguments \(X, Y, Z\), got 1"):
        built["broadcast"](x)


# -- kiln.build entry points ---------------------------------------------------------------

def _double():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    return te.create_schedule(B.op), [A, B]


@pytest.mark.parametrize("target", TARGETS)
def test_build_schedule_primfunc_and_irmodule(target):
    s, args = _double()
    a = nd(np.arange(4, dtype="float32"))
    for inputs in (s, tvm.lower(s, args, name="dbl"), tvm.lower(s, args, name="dbl")["dbl"]):
        f = tvm.build(inputs, args, target=target, name="dbl")
        b = nd(np.zeros(4, "float32"))
        f["dbl"](a, b)
        assert b.numpy().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_c_source_carries_the_compute_expression():
    s, args = _double()
    source = tvm.build(s, args, target="c", name="dbl_src").get_source()
    assert "/* B[i] = A[i] * 2.0 */\nint32_t dbl_src_unpacked(float* restrict A, " in source


def test_build_uses_target_scope_and_dict_inputs():
    from kiln.target import Target

    s, args = _double()
    with Target("c"):
        f = tvm.build(s, args, name="scoped")
    assert f.type_key == "c"
    lowered = tvm.lower(s, args, name="from_dict")
    g = tvm.build({"c": lowered})
    assert "from_dict" in g.get_source()


def test_build_errors():
    s, args = _double()
    with pytest.raises(TVMError, match="a schedule needs `args`"):
        tvm.build(s)
    with pytest.raises(TVMError, match="expected a te.Schedule"):
        tvm.build("not a program")
    with pytest.raises(TVMError, match="cannot generate code for target kind 'cuda'"):
        tvm.build(s, args, target="cuda")
    with pytest.raises(TVMError, match="Unknown target kind"):
        tvm.build(s, args, target="nope")


@pytest.mark.parametrize("target", TARGETS)
def test_system_lib_registers_functions(target):
    s, args = _double()
    symbol = f"syslib_double_{target}"
    tvm.build(s, args, target=f"{target} -system-lib", name=symbol)
    lib = tvm.runtime.system_lib()
    a = nd(np.arange(4, dtype="float32"))
    b = nd(np.zeros(4, "float32"))
    lib[symbol](a, b)
    assert b.numpy().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_debug_level_3_prints_lowered_tir(monkeypatch, capfd):
    monkeypatch.setenv("KILN_DEBUG", "3")
    s, args = _double()
    tvm.build(s, args, target="c", name="shown")
    err = capfd.readouterr().err
    assert "lowered TIR of shown" in err and "A[i] * 2.0" in err


# -- tensorize + import_c: a micro-kernel replaces the inner block (microTVM's design) -------

GEMV_C = """
static int32_t gemv_update(float* cc, float* aa, float* bb, int32_t m, int32_t l,
                           int32_t stride) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < l; ++j) cc[i] += aa[j] * bb[i * stride + j];
  }
  return 0;
}
static int32_t gemv_reset(float* cc, int32_t m) {
  for (int i = 0; i < m; ++i) cc[i] = 0.0f;
  return 0;
}
"""


def _gemv_intrin(m, l):
    a = te.placeholder((l,), name="a")
    b = te.placeholder((m, l), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    a_buf = tir.decl_buffer(a.shape, a.dtype, name="a_buf", offset_factor=1, strides=[1])
    b_buf = tir.decl_buffer(b.shape, b.dtype, name="b_buf", offset_factor=1,
                            strides=[te.var("s1"), 1])
    c_buf = tir.decl_buffer(c.shape, c.dtype, name="c_buf", offset_factor=1, strides=[1])

    def intrin_func(ins, outs):
        aa, bb = ins
        cc = outs[0]

        def body():
            return tir.call_extern("int32", "gemv_update", cc.access_ptr("w"), aa.access_ptr("r"),
                                   bb.access_ptr("r"), m, l, bb.strides[0])

        def reset():
            return tir.call_extern("int32", "gemv_reset", cc.access_ptr("w"), m)

        return body(), reset(), body()

    return te.decl_tensor_intrin(c.op, intrin_func, binds={a: a_buf, b: b_buf, c: c_buf})


@pytest.mark.parametrize("target", TARGETS)
def test_tensorize_with_import_c_micro_kernel(target):
    N, M, L = 16, 32, 64
    A = te.placeholder((N, L), name="A")
    B = te.placeholder((M, L), name="B")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    factor = 16
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=factor)
    s[C].reorder(x, yo, yi, z)
    s[C].tensorize(yi, _gemv_intrin(factor, L))
    s[C].pragma(x, "import_c", GEMV_C)
    f = tvm.build(s, [A, B, C], target=target, name="gemm_tensorized")
    assert "gemv_update" in f.get_source("c")
    a = rng.standard_normal((N, L)).astype("float32")
    b = rng.standard_normal((M, L)).astype("float32")
    c = nd(np.zeros((N, M), "float32"))
    f["gemm_tensorized"](nd(a), nd(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b.T, rtol=1e-4, atol=1e-5)


# -- the intrinsic tables: every math function against NumPy, scalar and vectorized ---------

_UNARY = {
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(10.0, x), "log": np.log,
    "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "expm1": np.expm1,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "floor": np.floor,
    "ceil": np.ceil, "trunc": np.trunc, "round": np.round, "nearbyint": np.rint,
    "fabs": np.fabs, "erf": None,  # erf: math.erf lane by lane
}
# inputs inside every function's domain (acosh needs >= 1, asin/acos/atanh |x| < 1)
_DOMAIN = {"acosh": (1.0, 4.0), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9),
           "atanh": (-0.9, 0.9), "log": (0.1, 4.0), "log2": (0.1, 4.0), "log10": (0.1, 4.0),
           "log1p": (0.1, 4.0), "sqrt": (0.1, 4.0), "rsqrt": (0.1, 4.0)}


@pytest.fixture(scope="module", params=TARGETS)
def math_module(request):
    funcs = {}
    for name in _UNARY:
        for dtype, lanes in (("float32", 8), ("float64", 1)):
            A = te.placeholder((16,), name="A", dtype=dtype)
            fn = getattr(te, name)
            B = te.compute((16,), lambda i: fn(A[i]), name="B")  # noqa: B023 - used at once
            s = te.create_schedule(B.op)
            if lanes > 1:
                _, inner = s[B].split(B.op.axis[0], factor=lanes)
                s[B].vectorize(inner)
            symbol = f"{name}_{dtype}"
            funcs[symbol] = tvm.lower(s, [A, B], name=symbol)[symbol]
    from kiln.target import Target
    from kiln.target.build import build_module

    return build_module(funcs, Target(request.param))


@pytest.mark.parametrize("name", sorted(_UNARY))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_math_intrinsics_match_numpy(math_module, name, dtype):
    import math

    low, high = _DOMAIN.get(name, (-3.0, 3.0))
    x = np.linspace(low, high, 16).astype(dtype)
    if name in ("round", "nearbyint"):
        x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, 0.6] * 2, dtype)
    out = nd(np.zeros(16, dtype))
    math_module[f"{name}_{dtype}"](nd(x), out)
    reference = _UNARY[name] or np.vectorize(math.erf)
    expected = reference(x.astype("float64")).astype(dtype)
    tol = 2e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(out.numpy(), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("target", TARGETS)
def test_functions_already_in_packed_form(target):
    """MakePackedAPI output (tvm_struct_get, asserts) is emitted as the packed function."""
    from kiln.target import Target
    from kiln.target.build import build_module
    from kiln.tir.transform.packed_api import make_packed_api

    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    packed = make_packed_api(tvm.lower(te.create_schedule(B.op), [A, B], name="dbl")["dbl"])
    module = build_module({"dbl": packed}, Target(target))
    b = nd(np.zeros(5, "float32"))
    module["dbl"](nd(np.arange(5, dtype="float32")), b)
    assert b.numpy().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    with pytest.raises(TVMError, match=r"dbl.B.shape\[0\] has an unsatisfied constraint"):
        module["dbl"](nd(np.zeros(5, "float32")), nd(np.zeros(4, "float32")))


@pytest.mark.parametrize("target", TARGETS)
def test_extern_op_calls_a_registered_packed_function(target):
    calls = []

    @tvm.register_func("kiln_test.add_scaled", override=True)
    def add_scaled(x, y, scale):
        calls.append(scale)
        y.copyfrom(x.numpy() + scale)

    A = te.placeholder((4, 3), name="A")
    B = te.extern((4, 3), [A], lambda ins, outs: tvm.tir.call_packed(
        "kiln_test.add_scaled", ins[0], outs[0], 2.5), name="B")
    f = tvm.build(te.create_schedule(B.op), [A, B], target=target, name="ext")
    a = rng.standard_normal((4, 3)).astype("float32")
    b = nd(np.zeros((4, 3), "float32"))
    f["ext"](nd(a), b)
    np.testing.assert_allclose(b.numpy(), a + 2.5, rtol=1e-6)
    assert calls == [2.5]

    missing = te.extern((4, 3), [A], lambda ins, outs: tvm.tir.call_packed(
        "kiln_test.no_such_function", ins[0], outs[0]), name="B")
    g = tvm.build(te.create_schedule(missing.op), [A, missing], target=target, name="ext2")
    with pytest.raises(TVMError, match="kiln_test.no_such_function"):
        g["ext2"](nd(a), b)


@pytest.mark.parametrize("target", TARGETS)
def test_mixed_dtypes_bool_int8_uint8_float64(target):
    A = te.placeholder((16,), name="A", dtype="int8")
    B = te.compute((16,), lambda i: A[i] > tvm.tir.const(0, "int8"), name="B")
    C = te.compute((16,), lambda i: tvm.tir.Select(
        B[i], A[i].astype("uint8") * tvm.tir.const(3, "uint8"), tvm.tir.const(7, "uint8")),
        name="C")
    D = te.compute((16,), lambda i: C[i].astype("float64") / 2.0
                   + A[i].astype("int16").astype("float64"), name="D")
    f = tvm.build(te.create_schedule(D.op), [A, B, C, D], target=target, name="mixed")
    a = np.arange(-8, 8, dtype="int8")
    b, c, d = nd(np.zeros(16, "bool")), nd(np.zeros(16, "uint8")), nd(np.zeros(16))
    f["mixed"](nd(a), b, c, d)
    positive = a > 0
    tripled = np.where(positive, a.astype("uint8") * np.uint8(3), np.uint8(7))
    np.testing.assert_array_equal(b.numpy(), positive)
    np.testing.assert_array_equal(c.numpy(), tripled)
    np.testing.assert_allclose(d.numpy(), tripled / 2.0 + a)


@pytest.mark.parametrize("target", TARGETS)
def test_symbolic_elem_offset_binds_from_byte_offset(target):
    from test_codegen_kernels import _call_raw, _dltensor

    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    A_buf = tir.decl_buffer((4,), "float32", name="A_buf", offset_factor=1)
    f = tvm.build(te.create_schedule(B.op), [A, B], target=target, name="offset",
                  binds={A: A_buf})
    base = np.arange(5, dtype="float32")
    a_tensor, keep_a = _dltensor(base[:4])
    a_tensor.byte_offset = 4  # the view starts at base[1]
    out = np.zeros(4, "float32")
    b_tensor, keep_b = _dltensor(out)
    assert _call_raw(f["offset"], [a_tensor, b_tensor]) == 0
    np.testing.assert_array_equal(out, base[1:] * 2)
    a_tensor.byte_offset = 2
    assert _call_raw(f["offset"], [a_tensor, b_tensor]) == -1


def _tiled_gemm(size: int, bn: int = 16, mb: int = 4):
    """benchmarks/gemm.py's schedule: packed B, register tile via cache_write, unrolled."""
    A = te.placeholder((size, size), name="A")
    B = te.placeholder((size, size), name="B")
    k = te.reduce_axis((0, size), name="k")
    packed = te.compute((size // bn, size, bn), lambda x, y, z: B[y, x * bn + z], name="packed")
    C = te.compute((size, size), lambda i, j: te.sum(
        A[i, k] * packed[j // bn, k, tvm.tir.indexmod(j, bn)], axis=k), name="C")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], mb, bn)
    s[CC].compute_at(s[C], no)
    mc, nc = s[CC].op.axis
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=4)
    nco, nci = s[CC].split(nc, factor=8)
    s[CC].reorder(ko, ki, mc, nco, nci)
    s[CC].vectorize(nci)
    for axis in (nco, mc, ki):
        s[CC].unroll(axis)
    s[C].vectorize(s[C].split(ni, factor=8)[1])
    s[packed].parallel(s[packed].op.axis[0])
    s[C].parallel(mo)
    return s, [A, B, C]


@pytest.mark.parametrize("target", TARGETS)
def test_register_tiled_gemm_schedule(target):
    s, args = _tiled_gemm(64)
    f = tvm.build(s, args, target=target, name="tiled_gemm")
    if target == "c":
        source = f.get_source()
        assert "float32x8 C_local[8]" in source  # the accumulator tile is an array of vectors
        assert "KILN_IN_REGISTER(shared)" in source  # B rows are read once per k step
    a = rng.standard_normal((64, 64)).astype("float32")
    b = rng.standard_normal((64, 64)).astype("float32")
    c = nd(np.zeros((64, 64), "float32"))
    f["tiled_gemm"](nd(a), nd(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)
