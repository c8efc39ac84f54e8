"""The LLVM pass pipeline: vectorizers on, LLVM's unroller only on the loops codegen marks."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln import tir
from kiln.target import Target
from kiln.target.build import build_module
from kiln.target.codegen_llvm import CodeGenLLVM
from kiln.target.llvm_toolchain import host_target_machine, llvm_available, parse_and_optimize

pytestmark = pytest.mark.skipif(not llvm_available(), reason="needs llvmlite")

SERIAL, VECTORIZED = tir.ForKind.SERIAL, tir.ForKind.VECTORIZED
rng = np.random.default_rng(0)


def _axpy(n: int, kind=SERIAL) -> tir.PrimFunc:
    """``C[i] = A[i] * B[i] + C[i]`` over ``n`` elements, one loop of ``kind``."""
    A, B, C = (tir.decl_buffer((n,), "float32", name=name) for name in "ABC")
    i = tir.Var("i", "int32")
    return tir.PrimFunc([A, B, C], tir.For(i, 0, n, kind,
                                           tir.BufferStore(C, A[i] * B[i] + C[i], [i])))


def _run_axpy(module, name: str, n: int) -> None:
    a, b, c = (rng.standard_normal(n).astype("float32") for _ in range(3))
    args = [kiln.nd.array(x) for x in (a, b, c)]
    module[name](*args)
    np.testing.assert_allclose(args[2].numpy(), a * b + c, rtol=1e-5, atol=1e-6)


def _vector_fmas(func: tir.PrimFunc, target: str, register: str) -> int:
    """How many FMAs on ``register`` vectors the optimized kernel's assembly has (emitted
    straight from LLVM: the C glue's compiler may not know a newer ``-mcpu``)."""
    cg = CodeGenLLVM()
    cg.add_function(func, "f")
    tm = host_target_machine(Target(target))
    asm = tm.emit_assembly(parse_and_optimize(cg.module, tm, Target(target)))
    return len(re.findall(rf"vfmadd\w+\s[^\n]*%{register}", asm))


def test_scalar_loop_is_vectorized_into_ymm_fmas_on_avx2():
    assert _vector_fmas(_axpy(1024), "llvm -mcpu=core-avx2", "ymm") > 0  # loop vectorizer
    assert _vector_fmas(_axpy(1024), "llvm -mcpu=core-avx2", "zmm") == 0
    _run_axpy(build_module({"axpy": _axpy(1024)}, Target("llvm -mcpu=core-avx2")), "axpy", 1024)


def test_scalar_loop_is_vectorized_into_zmm_fmas_on_avx512():
    assert _vector_fmas(_axpy(1024), "llvm -mcpu=znver4", "zmm") > 0


def test_tir_vectorized_loop_is_one_zmm_fma_on_avx512():
    assert _vector_fmas(_axpy(16, VECTORIZED), "llvm -mcpu=znver4", "zmm") == 1
    assert _vector_fmas(_axpy(16, VECTORIZED), "llvm -mcpu=core-avx2", "ymm") == 2
    # the host may lack AVX-512: run the kernel built for the host
    _run_axpy(build_module({"axpy16": _axpy(16, VECTORIZED)}, Target("llvm")), "axpy16", 16)


def _nest(outer: int, inner: int) -> tir.PrimFunc:
    """``C[i, j] += A[i, j] * B[j]``: an outer loop around an innermost one."""
    A = tir.decl_buffer((outer, inner), "float32", name="A")
    B = tir.decl_buffer((inner,), "float32", name="B")
    C = tir.decl_buffer((outer, inner), "float32", name="C")
    i, j = tir.Var("i", "int32"), tir.Var("j", "int32")
    body = tir.BufferStore(C, C[i, j] + A[i, j] * B[j], [i, j])
    return tir.PrimFunc([A, B, C], tir.For(i, 0, outer, SERIAL, tir.For(j, 0, inner, SERIAL,
                                                                         body)))


def _loops_marked(func: tir.PrimFunc) -> int:
    cg = CodeGenLLVM()
    cg.add_function(func, "f")
    return str(cg.module).count("!llvm.loop")


def test_only_small_innermost_constant_loops_are_marked_for_unrolling():
    assert _loops_marked(_nest(50, 4)) == 1  # the 4-iteration inner loop, not the outer one
    assert _loops_marked(_nest(50, 64)) == 0  # 64 iterations of its body: over the budget
    assert _loops_marked(_axpy(1024)) == 0  # long loops stay loops for the vectorizer
    n = tir.SizeVar("n", "int32")
    A = tir.decl_buffer((n,), "float32", name="A")
    i = tir.Var("i", "int32")
    symbolic = tir.PrimFunc([A], tir.For(i, 0, n, SERIAL, tir.BufferStore(A, A[i] * 2.0, [i])))
    assert _loops_marked(symbolic) == 0


def _recurrence() -> tir.PrimFunc:
    """``A[i + 1] = A[i] * 0.5 + B[i]`` for 4 steps: a loop no vectorizer can remove."""
    A = tir.decl_buffer((5,), "float32", name="A")
    B = tir.decl_buffer((4,), "float32", name="B")
    i = tir.Var("i", "int32")
    return tir.PrimFunc([A, B], tir.For(i, 0, 4, SERIAL, tir.BufferStore(
        A, A[i] * 0.5 + B[i], [i + 1])))


@pytest.mark.parametrize("budget", [0, CodeGenLLVM.llvm_unroll_budget])
def test_marked_loop_is_unrolled_and_unmarked_stays_a_loop(monkeypatch, budget):
    monkeypatch.setattr(CodeGenLLVM, "llvm_unroll_budget", budget)
    cg = CodeGenLLVM()
    cg.add_function(_recurrence(), "f")
    tm = host_target_machine(Target("llvm"))
    optimized = str(parse_and_optimize(cg.module, tm, Target("llvm")))
    assert (" phi " in optimized) == (budget == 0)


def test_marked_loop_runs_right():
    module = build_module({"rec": _recurrence()}, Target("llvm"))
    a = rng.standard_normal(5).astype("float32")
    b = rng.standard_normal(4).astype("float32")
    expected = a.copy()
    for i in range(4):
        expected[i + 1] = np.float32(expected[i] * np.float32(0.5) + b[i])
    args = [kiln.nd.array(a), kiln.nd.array(b)]
    module["rec"](*args)
    np.testing.assert_allclose(args[0].numpy(), expected, rtol=1e-6)


def test_stock_unroller_is_a_separate_cache_entry(monkeypatch, tmp_path):
    from kiln.target import llvm_toolchain

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    target = Target("llvm")
    text = "; empty module\n"
    ours = llvm_toolchain.object_cache_path(text, target)
    monkeypatch.setattr(llvm_toolchain, "LLVM_UNROLLER", True)
    assert llvm_toolchain.object_cache_path(text, target) != ours
    stock = build_module({"nest": _nest(50, 4)}, target)  # stock -O3 still builds and runs
    a, b, c = (np.ones((50, 4), "float32"), np.ones(4, "float32"), np.ones((50, 4), "float32"))
    args = [kiln.nd.array(x) for x in (a, b, c)]
    stock["nest"](*args)
    np.testing.assert_array_equal(args[2].numpy(), np.full((50, 4), 2.0, "float32"))


def _compile_all(texts, threads, monkeypatch, tmp_path):
    """Every IR text compiled through kiln's LLVM pool of ``threads`` threads, all at once."""
    from kiln.target import llvm_toolchain

    monkeypatch.setattr(llvm_toolchain, "LLVM_THREADS", threads)
    monkeypatch.setattr(llvm_toolchain, "_LLVM_POOL", None)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / f"threads{threads}"))
    target = Target("llvm")
    tm = host_target_machine(target)
    waits = [llvm_toolchain.compile_in_background(text, tm, target) for text in texts]
    return [wait() for wait in waits], llvm_toolchain.llvm_thread_count()


def test_two_llvm_threads_give_the_objects_one_thread_gives(monkeypatch, tmp_path):
    texts = []
    for index in range(12):  # distinct modules: no two share a cache entry
        cg = CodeGenLLVM(f"m{index}")
        cg.add_function(_nest(50 + index, 4), f"nest{index}")
        cg.add_function(_axpy(1024 + 16 * index), f"axpy{index}")
        texts.append(str(cg.module))
    one, _ = _compile_all(texts, 1, monkeypatch, tmp_path)
    two, threads = _compile_all(texts, 2, monkeypatch, tmp_path)
    assert threads == 2  # llvmlite's lock was passed: two threads, not one
    assert [obj for obj, _ in two] == [obj for obj, _ in one]
    assert [ir for _, ir in two] == [ir for _, ir in one]
    module = build_module({"axpy": _axpy(1024)}, Target("llvm"))  # and a whole build runs
    _run_axpy(module, "axpy", 1024)


def test_invalid_ir_on_an_llvm_thread_raises_a_tvm_error(monkeypatch, tmp_path):
    from kiln.runtime.error import TVMError
    from kiln.target import llvm_toolchain

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    target = Target("llvm")
    wait = llvm_toolchain.compile_in_background("define i32 @f() { ret i64 0 }", None, target)
    with pytest.raises(TVMError, match="invalid IR"):
        wait()
