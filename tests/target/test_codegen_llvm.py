"""The LLVM target: ll/asm sources, host CPU tuning, parallel lambdas, export, no llvmlite."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import kiln
from kiln import tir
from kiln.runtime.error import TVMError
from kiln.target import Target
from kiln.target.build import build_module
from kiln.target.codegen_llvm import CodeGenLLVM, emit_llvm
from kiln.target.llvm_toolchain import llvmlite_modules


@pytest.fixture(scope="module")
def llvm_module(kernels):
    return build_module(dict(kernels), Target("llvm"))


def test_ll_source_has_unpacked_kernels_and_parallel_lambdas(llvm_module):
    ll = llvm_module.get_source("ll")
    assert "define" in ll and "@exp_scale_unpacked(ptr noalias" in ll
    assert "@exp_scale_compute_1" in ll
    assert "call i32 @TVMBackendParallelLaunch(ptr nonnull @exp_scale_compute_1" in ll
    assert llvm_module.get_source() == ll


def test_asm_is_vectorized_for_the_host(llvm_module):
    asm = llvm_module.get_source("asm")
    assert "exp_scale_unpacked:" in asm
    assert "ymm" in asm  # 256-bit AVX registers: the host CPU's features were used


def test_a_second_build_reuses_the_cached_object(kernels, tmp_path, monkeypatch):
    from kiln.target import llvm_library, llvm_toolchain

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    # each kernel its own module here (test_llvm_small_modules.py: small ones linked)
    monkeypatch.setattr(llvm_library, "SMALL_MODULE_CHARS", 0)
    first = build_module(dict(kernels), Target("llvm"))
    cached = sorted(p.suffix for p in (tmp_path / "llvm").iterdir())
    # one object per kernel, and the glue module's (with its IR and their digest)
    assert cached == [".ll"] * (len(kernels) + 1) + [".o"] * (len(kernels) + 1) \
        + [".sum"] * (len(kernels) + 1)
    # gemv_import_c embeds C: gcc compiles that source (and only that) beside LLVM
    assert sorted(first.objects) == sorted([f"{name}.o" for name in kernels]
                                           + ["glue.o", "imported_c.o"])

    def no_optimizing(*args):
        raise AssertionError("LLVM optimized a module whose object is cached")

    monkeypatch.setattr(llvm_toolchain, "parse_and_optimize", no_optimizing)
    second = build_module(dict(kernels), Target("llvm"))
    assert second.objects == first.objects
    assert second.get_source("ll") == first.get_source("ll")
    assert "exp_scale_unpacked:" in second.get_source("asm")
    with pytest.raises(AssertionError, match="cached"):  # another CPU: another key
        build_module(dict(kernels), Target("llvm -mcpu=haswell"))


def test_packed_wrappers_are_llvm_and_no_c_is_compiled(llvm_module):
    ir_text = llvm_module.get_source("ll")
    assert 'define i32 @"exp_scale"(' in ir_text or "define i32 @exp_scale(" in ir_text
    assert "__kiln_arg_error" in ir_text
    # the only C is gemv_import_c's embedded source, compiled beside LLVM
    c_source = llvm_module.get_source("c")
    assert "imported by pragma import_c" in c_source
    assert "exp_scale" not in c_source and "kiln_arg_error(\"" not in c_source


def test_an_import_c_calls_constants_are_baked_into_its_c_trampoline(llvm_module):
    """``gemv4_update(y, w, x, 8)``: the constant 8 is written into the trampoline, so GCC
    specializes the C for it (the c target inlines the call; a run-time argument kept the
    depthwise int8 helper generic, 9x slower). The kernel still runs right (the ``built``
    tests compare it with NumPy on both targets)."""
    import re

    c_source = llvm_module.get_source("c")
    trampoline = re.search(r"int32_t __kiln_extern_gemv4_update__k\w+\(([^)]*)\) \{ "
                           r"return gemv4_update\(a0, a1, a2, \(\(int32_t\)\(8LL\)\)\); \}",
                           c_source)
    assert trampoline and trampoline.group(1).count(",") == 2  # three pointer parameters
    W = np.arange(64, dtype="float32").reshape(8, 8)
    x = np.arange(8, dtype="float32")
    y = kiln.nd.array(np.full(8, 5.0, "float32"))
    llvm_module["gemv_import_c"](kiln.nd.array(W), kiln.nd.array(x), y)
    np.testing.assert_allclose(y.numpy(), W @ x, rtol=1e-6)


def test_mcpu_selects_the_target_machine(kernels):
    vec = {"vec_scale": kernels["vec_scale"]}
    _, ref, tm = emit_llvm(vec, Target("llvm -mcpu=x86-64"))
    assert tm.emit_assembly(ref).count("ymm") == 0  # baseline x86-64: SSE only
    _, ref, tm = emit_llvm(vec, Target("llvm -mcpu=znver3"))
    assert "ymm" in tm.emit_assembly(ref)


def test_export_library_links_the_object_and_loads_back(tmp_path, llvm_module):
    path = tmp_path / "kernels.so"
    llvm_module.export_library(str(path))
    loaded = kiln.runtime.load_module(str(path))
    a = np.arange(8, dtype="float32").reshape(2, 4)
    out = kiln.nd.array(np.zeros_like(a))
    loaded["exp_scale"](kiln.nd.array(a), out)
    np.testing.assert_allclose(out.numpy(), np.exp(a) * 2, rtol=1e-6)


def test_save_object_file(tmp_path, llvm_module):
    path = tmp_path / "k.o"
    llvm_module.save(str(path))
    assert path.read_bytes()[:4] == b"\x7fELF"
    # one relocatable object with every kernel and its packed wrapper: it links and runs
    lib = kiln.contrib.cc.create_shared(str(tmp_path / "k.so"), [str(path)])
    a = np.arange(8, dtype="float32").reshape(2, 4)
    out = kiln.nd.array(np.zeros_like(a))
    kiln.runtime.load_module(lib)["exp_scale"](kiln.nd.array(a), out)
    np.testing.assert_allclose(out.numpy(), np.exp(a) * 2, rtol=1e-6)
    ll_path = tmp_path / "k.ll"
    llvm_module.save(str(ll_path))
    assert "exp_scale_unpacked" in ll_path.read_text()


def test_missing_llvmlite_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "llvmlite", None)
    monkeypatch.setitem(sys.modules, "llvmlite.binding", None)
    monkeypatch.setitem(sys.modules, "llvmlite.ir", None)
    with pytest.raises(TVMError, match=r"pip install kiln\[llvm\]"):
        llvmlite_modules()


def test_node_without_rule_names_it():
    class Mystery:
        dtype = "float32"

    with pytest.raises(TVMError, match="no rule for TIR expression node Mystery"):
        CodeGenLLVM().expr(Mystery())


def test_unroll_emits_straight_line_code():
    A = tir.decl_buffer((4,), "int32", name="A")
    i = tir.Var("i", "int32")
    body = tir.For(i, 0, 4, tir.ForKind.UNROLLED, tir.BufferStore(A, i * 10, [i]))
    cg = CodeGenLLVM()
    cg.add_function(tir.PrimFunc([A], body), "fill")
    text = str(cg.module)
    assert "phi" not in text and text.count("store i32") == 4


def test_cross_compilation_keeps_code_but_does_not_load(tmp_path, kernels):
    module = build_module({"vec_scale": kernels["vec_scale"]},
                          Target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"))
    assert 'target triple = "aarch64-linux-gnu"' in module.get_source("ll")
    assert not module.is_runnable and module.is_dso_exportable
    with pytest.raises(TVMError, match="holds code for aarch64-linux-gnu"):
        module["vec_scale"]
    module.save(str(tmp_path / "k.o"))
    header = (tmp_path / "k.o").read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and header[18:20] == b"\xb7\x00"  # EM_AARCH64
    with pytest.raises(TVMError, match="LLVM cannot generate code for -mtriple=nonsense"):
        build_module({"vec_scale": kernels["vec_scale"]}, Target("llvm -mtriple=nonsense-x-y"))
