"""The LLVM pipeline: vectorizers on, loops marked for LLVM's unroller, two LLVM threads."""

from __future__ import annotations

import locale
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


def _loop_options(func: tir.PrimFunc) -> list[str]:
    """The unroll option of each loop of ``func``'s LLVM (None: LLVM's heuristics), inner
    loops first (their back edges come first)."""
    cg = CodeGenLLVM()
    cg.add_function(func, "f")
    text = str(cg.module)
    options = dict(re.findall(r'^(!\d+) = !{ !"(llvm\.loop\.[\w.]+)" }', text, re.M))
    ids = dict(re.findall(r"^(!\d+) = !{ !\d+, (!\d+) }", text, re.M))
    back_edges = []  # (position, loop id or "") of each loop's last branch to its header
    for header in re.findall(r'^"?(for_[\w.]+)"?:$', text, re.M):
        if header.endswith(("_body", "_end")):
            continue
        jumps = list(re.finditer(rf'br label %"?{re.escape(header)}"?(?:, !llvm.loop (!\d+))?$',
                                 text, re.M))
        back_edges.append((jumps[-1].start(), jumps[-1].group(1) or ""))
    return [options[ids[loop_id]].rsplit(".", 1)[1] if loop_id else None
            for _, loop_id in sorted(back_edges)]


def test_small_innermost_loops_unroll_fully_other_loops_not_at_all():
    assert _loop_options(_nest(50, 4)) == ["full", "disable"]  # 4 inner iterations
    assert _loop_options(_nest(50, 64)) == ["disable", "disable"]  # over the budget
    assert _loop_options(_axpy(1024)) == ["disable"]  # long loops: the vectorizer's
    n = tir.SizeVar("n", "int32")
    A = tir.decl_buffer((n,), "float32", name="A")
    i = tir.Var("i", "int32")
    symbolic = tir.PrimFunc([A], tir.For(i, 0, n, SERIAL, tir.BufferStore(A, A[i] * 2.0, [i])))
    assert _loop_options(symbolic) == ["disable"]


def _window_max(columns: int, window: int) -> tir.PrimFunc:
    """``C[i] = max(A[2i + 9y + x])`` over a ``window`` x ``window`` nest of loops inside the
    column loop (a stride-2 max pool's row, as the x86 pool schedule leaves it)."""
    A = tir.decl_buffer((2 * columns + 10 * window,), "float32", name="A")
    C = tir.decl_buffer((columns,), "float32", name="C")
    i, y, x = (tir.Var(name, "int32") for name in "iyx")
    tap = tir.BufferStore(C, tir.max(C[i], A[i * 2 + y * 9 + x]), [i])
    return tir.PrimFunc([A, C], tir.For(i, 0, columns, SERIAL, tir.For(
        y, 0, window, SERIAL, tir.For(x, 0, window, SERIAL, tap))))


def test_a_small_nest_of_constant_loops_unrolls_fully():
    # the column loop then is innermost, and LLVM vectorizes it
    assert sorted(_loop_options(_window_max(56, 3))) == ["disable", "full", "full"]
    assert sorted(_loop_options(_window_max(56, 11))) == ["disable", "disable", "full"]
    cg = CodeGenLLVM()
    cg.add_function(_window_max(56, 3), "f")
    tm = host_target_machine(Target("llvm -mcpu=core-avx2"))
    optimized = str(parse_and_optimize(cg.module, tm, Target("llvm -mcpu=core-avx2")))
    assert re.search(r"fcmp \w+ <8 x float>", optimized)
    module = build_module({"window": _window_max(56, 3)}, Target("llvm"))
    a = rng.standard_normal(2 * 56 + 30).astype("float32")
    args = [kiln.nd.array(a), kiln.nd.array(np.full(56, -np.inf, "float32"))]
    module["window"](*args)
    taps = [a[2 * np.arange(56) + 9 * y + x] for y in range(3) for x in range(3)]
    np.testing.assert_array_equal(args[1].numpy(), np.max(taps, axis=0))


def _pack_columns(rows: int, stride: int) -> tir.PrimFunc:
    """``B[16y:16y+16] = A[160y::stride][:16]``-like: each of ``rows`` iterations copies 16 lanes
    read ``stride`` elements apart (a dense's weight pack: a gather when ``stride`` > 1)."""
    A = tir.decl_buffer((16 * stride * rows,), "float32", name="A")
    B = tir.decl_buffer((rows * 16,), "float32", name="B")
    y = tir.Var("y", "int32")
    load = tir.BufferLoad(A, [tir.Ramp(y * (16 * stride), stride, 16)])
    return tir.PrimFunc([A, B], tir.For(y, 0, rows, SERIAL, tir.BufferStore(
        B, load, [tir.Ramp(y * 16, 1, 16)])))


def test_a_gather_counts_lane_by_lane_against_the_unroll_budget():
    assert _loop_options(_pack_columns(10, 1)) == ["full"]  # 10 vector copies: cheap
    assert _loop_options(_pack_columns(10, 10)) == ["disable"]  # 160 scalar loads
    assert _loop_options(_pack_columns(4, 10)) == ["full"]
    module = build_module({"pack": _pack_columns(10, 10)}, Target("llvm"))
    a = rng.standard_normal(1600).astype("float32")
    args = [kiln.nd.array(a), kiln.nd.array(np.zeros(160, "float32"))]
    module["pack"](*args)
    expected = np.concatenate([a[y * 160:(y + 1) * 160:10] for y in range(10)])
    np.testing.assert_array_equal(args[1].numpy(), expected)


def _padded_copy(n: int) -> tir.PrimFunc:
    """``B[y, x] = A[y - 1, x - 1]`` inside a zero border: loops whose variables a branch
    tests."""
    A = tir.decl_buffer((n, n), "float32", name="A")
    B = tir.decl_buffer((n + 2, n + 2), "float32", name="B")
    y, x = tir.Var("y", "int32"), tir.Var("x", "int32")
    inside = tir.all(y >= 1, y <= n, x >= 1, x <= n)
    value = tir.if_then_else(inside, A[y - 1, x - 1], tir.const(0.0, "float32"))
    return tir.PrimFunc([A, B], tir.For(y, 0, n + 2, SERIAL, tir.For(
        x, 0, n + 2, SERIAL, tir.BufferStore(B, value, [y, x]))))


def test_loops_a_branch_tests_keep_llvms_heuristics_and_run_right():
    assert _loop_options(_padded_copy(70)) == [None, None]  # peeling takes the border out
    module = build_module({"pad": _padded_copy(70)}, Target("llvm"))
    a = rng.standard_normal((70, 70)).astype("float32")
    args = [kiln.nd.array(a), kiln.nd.array(np.full((72, 72), 7.0, "float32"))]
    module["pad"](*args)
    np.testing.assert_array_equal(args[1].numpy(), np.pad(a, 1))


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


def test_unmarked_loops_are_stock_o3_and_another_cache_entry(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(CodeGenLLVM, "mark_loops", False)
    assert _loop_options(_nest(50, 4)) == [None, None]
    target = Target("llvm")
    stock = build_module({"nest": _nest(50, 4)}, target)  # stock -O3 still builds and runs
    stock_objects = set((tmp_path / "llvm").glob("*.o"))
    monkeypatch.setattr(CodeGenLLVM, "mark_loops", True)
    build_module({"nest": _nest(50, 4)}, target)  # the kernel's other IR: another object
    assert len(set((tmp_path / "llvm").glob("*.o")) - stock_objects) == 1
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
    encoding = locale.getpreferredencoding(False)
    one, _ = _compile_all(texts, 1, monkeypatch, tmp_path)
    two, threads = _compile_all(texts, 2, monkeypatch, tmp_path)
    assert threads == 2  # llvmlite's lock was passed: two threads, not one
    # llvmlite's module printer sets the process locale to "C" and back: two threads printing
    # at once left the process in "C" (every later text read decoded as ASCII)
    assert locale.getpreferredencoding(False) == encoding
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


_FORK_CHILD = r"""
import os, signal, sys
sys.path.insert(0, {root!r})
import tests.target.test_llvm_pipeline as t
from kiln.target import Target, llvm_toolchain
from kiln.target.codegen_llvm import CodeGenLLVM

target = Target("llvm")
tm = llvm_toolchain.host_target_machine(target)
texts = []
for index in range(8):
    cg = CodeGenLLVM(f"m{{index}}")
    cg.add_function(t._axpy(4096 + 16 * index), f"axpy{{index}}")
    texts.append(str(cg.module))
waits = [llvm_toolchain.compile_in_background(text, tm, target) for text in texts]
pid = os.fork()  # while the LLVM threads work
if pid == 0:
    signal.alarm(60)  # a hung child dies of SIGALRM
    try:
        cg = CodeGenLLVM("child")
        cg.add_function(t._axpy(100), "child")
        obj, _ = llvm_toolchain.compile_cached(cg.module, tm, target)
        os._exit(0 if obj else 4)
    except BaseException:
        os._exit(3)
assert all(wait()[0] for wait in waits)
print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_fork_while_the_llvm_threads_work_leaves_the_child_able_to_compile(tmp_path):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root, "KILN_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c",
                           _FORK_CHILD.format(root=root)], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "child 0"  # -14 (SIGALRM): it hung
