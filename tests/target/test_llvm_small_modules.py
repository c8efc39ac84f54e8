"""Small kernel modules of an ``llvm`` build are linked into one module (one object, one
pass pipeline) before LLVM compiles them; big ones still go alone. Every kernel still runs
as NumPy says, the library's IR still holds every kernel, bad linked IR still raises."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.runtime.error import TVMError
from kiln.target import Target, llvm_library, llvm_toolchain
from kiln.target.llvm_library import LLVMKernelBuilder


def _add_const(n: int, value: float):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + value, name="B")
    return tvm.lower(te.create_schedule(B.op), [A, B], name="k")["k"]


def _matmul(n: int):
    A = te.placeholder((n, n), name="A")
    W = te.placeholder((n, n), name="W")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].vectorize(s[C].op.axis[1])
    return tvm.lower(s, [A, W, C], name="mm")["mm"]


def _build(monkeypatch, tmp_path, batch_chars: int):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(llvm_library, "SMALL_BATCH_CHARS", batch_chars)
    builder = LLVMKernelBuilder(Target("llvm"))
    for index in range(5):
        builder.add(f"small{index}", _add_const(7 + index, float(index)))
    builder.add("big", _matmul(16))
    return builder, builder.finish()


def _big_is_big(monkeypatch) -> None:
    """The matmul's module counts as big, the add_const ones as small."""
    big, small = (len(_module_text(name, f)) for name, f in
                  (("big", _matmul(16)), ("small9", _add_const(20, 1.0))))
    assert small < big
    monkeypatch.setattr(llvm_library, "SMALL_MODULE_CHARS", big)


def test_small_kernels_share_one_object_and_each_runs_right(monkeypatch, tmp_path):
    _big_is_big(monkeypatch)
    builder, lib = _build(monkeypatch, tmp_path, batch_chars=10**9)
    assert sorted(builder.objects) == sorted(
        ["big.o", "glue.o", "small0+small1+small2+small3+small4.o"])
    for index in range(5):
        a = np.arange(7 + index, dtype="float32")
        out = tvm.nd.empty(a.shape, "float32")
        lib[f"small{index}"](tvm.nd.array(a), out)
        np.testing.assert_allclose(out.numpy(), a + index)
    rng = np.random.default_rng(0)
    a, w = (rng.standard_normal((16, 16)).astype("float32") for _ in range(2))
    c = tvm.nd.empty((16, 16), "float32")
    lib["big"](tvm.nd.array(a), tvm.nd.array(w), c)
    np.testing.assert_allclose(c.numpy(), a @ w, rtol=1e-5, atol=1e-5)
    ir_text = lib.get_source("ll")
    assert all(re.search(rf'define [^\n]*@"?small{index}_unpacked"?\(', ir_text)
               for index in range(5))
    # a packed wrapper still checks its call (the glue is not among the small modules)
    with pytest.raises(TVMError, match="small3: argument A"):
        lib["small3"](tvm.nd.array(np.zeros(4, "float32")), tvm.nd.empty((10,), "float32"))


def test_a_second_build_reads_the_linked_small_modules_from_the_cache(monkeypatch, tmp_path):
    _big_is_big(monkeypatch)
    first, _ = _build(monkeypatch, tmp_path, batch_chars=10**9)

    def no_optimizing(*args):
        raise AssertionError("LLVM optimized a module whose object is cached")

    monkeypatch.setattr(llvm_toolchain, "parse_and_optimize", no_optimizing)
    second, _ = _build(monkeypatch, tmp_path, batch_chars=10**9)
    assert {name: wait() for name, wait in second.objects.items()} == \
        {name: wait() for name, wait in first.objects.items()}


def test_small_kernels_start_in_batches_of_the_batch_size(monkeypatch, tmp_path):
    _big_is_big(monkeypatch)
    size = len(_module_text("small0", _add_const(7, 0.0)))
    builder, _ = _build(monkeypatch, tmp_path, batch_chars=2 * size)  # two a batch
    small = sorted(name for name in builder.objects if name.startswith("small"))
    assert small == ["small0+small1.o", "small2+small3.o", "small4.o"]


def test_no_batching_when_every_module_counts_as_big(monkeypatch, tmp_path):
    monkeypatch.setattr(llvm_library, "SMALL_MODULE_CHARS", 0)
    builder, _ = _build(monkeypatch, tmp_path, batch_chars=10**9)
    assert sorted(builder.objects) == ["big.o", "glue.o"] + [f"small{i}.o" for i in range(5)]


def test_linked_modules_that_clash_raise_a_tvm_error(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    texts = ("define i32 @f() {\n  ret i32 0\n}\n", "define i32 @f() {\n  ret i32 1\n}\n")
    wait = llvm_toolchain.compile_in_background(texts, None, Target("llvm"))
    with pytest.raises(TVMError, match="invalid IR"):
        wait()


def _module_text(symbol: str, func) -> str:
    from kiln.target.codegen_llvm import CodeGenLLVM
    from kiln.tir.transform.codegen_prep import prepare_for_codegen

    cg = CodeGenLLVM(symbol)
    cg.add_function(prepare_for_codegen(func), symbol)
    return str(cg.module)
