"""Parallel loops handed out in chunks through a shared atomic counter (c and llvm codegens).

Every kernel is checked against NumPy with the runtime's thread count set to 1 and to 2, over
extents that leave threads without a chunk, split unevenly or are empty.  Kernels that add into
their output (``B[i] += ...``) also catch an iteration run twice or skipped.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import kiln as tvm
from kiln import te, tir
from kiln.runtime import config
from kiln.runtime.error import TVMError
from kiln.runtime.native import load_runtime_lib
from kiln.target import Target
from kiln.target.build import NativeModule, build_module
from kiln.target.codegen_c import compile_options, emit_c
from kiln.target.codegen_llvm import CodeGenLLVM

SERIAL, PARALLEL = tir.ForKind.SERIAL, tir.ForKind.PARALLEL
EXTENTS = [0, 1, 2, 3, 5, 7, 13, 31, 97, 1000]
ROWS = 3  # serial outer loop of the parallel-in-serial kernel
OFFSET = 2  # min of the loop that does not start at zero


def make_kernels() -> dict[str, tir.PrimFunc]:
    """name -> PrimFunc over a symbolic extent ``n``; the oracles are in the tests."""
    n = tir.SizeVar("n", "int32")
    i, o = tir.Var("i", "int32"), tir.Var("o", "int32")
    A = tir.decl_buffer((n,), "float32", name="A")
    B = tir.decl_buffer((n,), "float32", name="B")
    funcs = {}
    # B[i] += 2 * A[i]: a missed or repeated iteration changes the result
    funcs["accumulate"] = tir.PrimFunc([A, B], tir.For(
        i, 0, n, PARALLEL, tir.BufferStore(B, B[i] + A[i] * 2.0, [i])))
    # a loop starting at OFFSET: B[i] += A[i] + 1 for i in [OFFSET, n)
    funcs["offset"] = tir.PrimFunc([A, B], tir.For(
        i, OFFSET, n - OFFSET, PARALLEL, tir.BufferStore(B, B[i] + A[i] + 1.0, [i])))
    # one launch per row of a serial loop: the counter starts at zero for every launch
    M_in = tir.decl_buffer((ROWS, n), "float32", name="M_in")
    M_out = tir.decl_buffer((ROWS, n), "float32", name="M_out")
    scale = tir.Cast("float32", o + 1)
    funcs["parallel_in_serial"] = tir.PrimFunc([M_in, M_out], tir.For(
        o, 0, ROWS, SERIAL, tir.For(i, 0, n, PARALLEL, tir.BufferStore(
            M_out, M_out[o, i] + M_in[o, i] * scale, [o, i]))))
    # a parallel loop inside a parallel loop runs serially inside the outer chunk
    funcs["parallel_in_parallel"] = tir.PrimFunc([M_in, M_out], tir.For(
        i, 0, n, PARALLEL, tir.For(o, 0, ROWS, PARALLEL, tir.BufferStore(
            M_out, M_out[o, i] + M_in[o, i] - 1.0, [o, i]))))
    # 64-bit loop variable and extent
    n64 = tir.SizeVar("n64", "int64")
    L_in = tir.decl_buffer((n64,), "float64", name="L_in")
    L_out = tir.decl_buffer((n64,), "float64", name="L_out")
    i64 = tir.Var("i64", "int64")
    funcs["wide_index"] = tir.PrimFunc([L_in, L_out], tir.For(
        i64, 0, n64, PARALLEL, tir.BufferStore(L_out, L_out[i64] + L_in[i64] * 3.0, [i64])))
    return {name: f.with_attr("global_symbol", name) for name, f in funcs.items()}


def make_row_sum() -> tuple[te.Tensor, te.Tensor, te.Schedule]:
    """R[i] = sum_k X[i, k] with the row axis parallel (a reduction per iteration)."""
    n = te.var("n")
    X = te.placeholder((n, 9), name="X")
    k = te.reduce_axis((0, 9), name="k")
    R = te.compute((n,), lambda i: te.sum(X[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    s[R].parallel(R.op.axis[0])
    return X, R, s


@pytest.fixture(scope="module", params=["c", "llvm"])
def built(request):
    """(Module of the TIR kernels, te row-sum function) for one target, compiled once."""
    module = build_module(make_kernels(), Target(request.param))
    X, R, s = make_row_sum()
    return module, tvm.build(s, [X, R], request.param)


@pytest.fixture(params=[1, 2])
def threads(request):
    """Run the test with the runtime's thread count set to 1 or 2, restored afterwards."""
    lib = load_runtime_lib()
    lib.KilnRuntimeSetNumThreads(ctypes.c_int(request.param))
    yield request.param
    lib.KilnRuntimeSetNumThreads(ctypes.c_int(config.num_threads()))


def _random(shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


@pytest.mark.parametrize("extent", EXTENTS)
def test_every_iteration_runs_once(built, threads, extent):
    module, _ = built
    a, b = _random(extent), _random(extent, seed=1)
    out = tvm.nd.array(b)
    module["accumulate"](tvm.nd.array(a), out)
    np.testing.assert_allclose(out.numpy(), b + 2 * a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("extent", [OFFSET, OFFSET + 1, OFFSET + 2, OFFSET + 5, 61])
def test_loop_with_nonzero_min(built, threads, extent):
    module, _ = built
    a, b = _random(extent), _random(extent, seed=1)
    out = tvm.nd.array(b)
    module["offset"](tvm.nd.array(a), out)
    expected = b.copy()
    expected[OFFSET:] += a[OFFSET:] + 1
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("extent", [0, 1, 3, 17])
def test_parallel_loop_inside_serial_loop(built, threads, extent):
    module, _ = built
    m_in, m_out = _random((ROWS, extent)), _random((ROWS, extent), seed=1)
    out = tvm.nd.array(m_out)
    module["parallel_in_serial"](tvm.nd.array(m_in), out)
    scale = np.arange(1, ROWS + 1, dtype="float32")[:, None]
    np.testing.assert_allclose(out.numpy(), m_out + m_in * scale, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("extent", [1, 2, 11])
def test_parallel_loop_inside_parallel_loop(built, threads, extent):
    module, _ = built
    m_in, m_out = _random((ROWS, extent)), _random((ROWS, extent), seed=1)
    out = tvm.nd.array(m_out)
    module["parallel_in_parallel"](tvm.nd.array(m_in), out)
    np.testing.assert_allclose(out.numpy(), m_out + m_in - 1, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("extent", [0, 1, 7, 300])
def test_int64_loop_variable(built, threads, extent):
    module, _ = built
    l_in, l_out = _random(extent, "float64"), _random(extent, "float64", seed=1)
    out = tvm.nd.array(l_out)
    module["wide_index"](tvm.nd.array(l_in), out)
    np.testing.assert_allclose(out.numpy(), l_out + 3 * l_in, rtol=1e-12)


@pytest.mark.parametrize("extent", [1, 2, 3, 23, 256])
def test_reduction_into_per_iteration_outputs(built, threads, extent):
    _, row_sum = built
    x = _random((extent, 9))
    out = tvm.nd.array(np.full(extent, np.nan, "float32"))
    row_sum(tvm.nd.array(x), out)
    np.testing.assert_allclose(out.numpy(), x.sum(axis=1), rtol=1e-5, atol=1e-6)


def test_wrong_argument_dtype_is_a_kiln_error(built):
    module, _ = built
    with pytest.raises(TVMError, match="float32"):
        module["accumulate"](tvm.nd.array(np.zeros(4, "float64")),
                             tvm.nd.array(np.zeros(4, "float32")))


def test_c_source_launches_lambdas_on_the_thread_pool():
    """The c target outlines parallel loops like the llvm one: a lambda over a closure struct,
    launched with TVMBackendParallelLaunch, whose tasks claim chunks from an atomic counter."""
    source, _ = emit_c(make_kernels(), Target("c"))
    assert "static int32_t accumulate_compute_1(int task_id, TVMParallelGroupEnv* penv, " \
           "void* cdata) {" in source
    assert "if (TVMBackendParallelLaunch(accumulate_compute_1, &closure_1, 0) != 0) return -1;" \
        in source
    assert "__atomic_fetch_add(&closure->next, i_chunk, __ATOMIC_RELAXED);" in source
    assert "#pragma omp" not in source and "-fopenmp" not in compile_options(Target("c"))


def test_llvm_lambda_claims_chunks_with_atomic_add():
    ll = build_module(make_kernels(), Target("llvm")).get_source("ll")
    assert "atomicrmw add ptr" in ll
    assert "call i32 @TVMBackendParallelLaunch(ptr nonnull @accumulate_compute_1" in ll


def test_llvm_chunk_keeps_the_buffers_noalias():
    """A chunk of the loop runs in a function whose buffer parameters are ``noalias`` like the
    kernel's own: loaded from the closure they would not be, and LLVM could not vectorize or
    hoist loads across the output's stores."""
    cg = CodeGenLLVM()
    cg.add_function(make_kernels()["accumulate"], "accumulate")
    defines = [line for line in str(cg.module).splitlines() if line.startswith("define")]
    chunk = [line for line in defines if "accumulate_compute_1_chunk" in line]
    assert len(chunk) == 1 and chunk[0].startswith("define internal i32")
    assert chunk[0].count("float* noalias") == 2  # A and B; n and the chunk bounds are ints


def test_bare_metal_c_keeps_a_serial_loop_and_runs():
    """``c -keys=arm_cpu -mcpu=cortex-m7`` has no threads: plain loops, no atomics, no OpenMP."""
    funcs = make_kernels()
    source, names = emit_c(funcs, Target("c -keys=arm_cpu -mcpu=cortex-m7"))
    assert "__atomic" not in source and "#pragma omp" not in source
    assert "for (int32_t i = 0; i < n; ++i) {" in source
    # the same source built for this host computes the same results
    module = NativeModule.from_c_source(source, names, compile_options(Target("c")), kind="c")
    a, b = _random(13), _random(13, seed=1)
    out = tvm.nd.array(b)
    module["accumulate"](tvm.nd.array(a), out)
    np.testing.assert_allclose(out.numpy(), b + 2 * a, rtol=1e-5, atol=1e-6)
