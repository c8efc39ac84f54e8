"""The C target: readable source, bare-metal compilability, cache reuse, errors, debug output."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import kiln
from kiln import tir
from kiln.runtime import cc, native
from kiln.runtime.error import TVMError
from kiln.target import Target
from kiln.target.build import build_module
from kiln.target.codegen_c import CodeGenC, emit_c


@pytest.fixture(scope="module")
def source(kernels):
    text, names = emit_c(dict(kernels), Target("c"))
    return text


def test_source_is_readable(source):
    assert "/* exp_scale: kernel over A[n, 4] float32, B[n, 4] float32 */" in source
    assert ("int32_t exp_scale_unpacked(float* restrict A, float* restrict B, int32_t n) {"
            in source)
    assert ("    for (int32_t i = i_start; i < i_stop; ++i) {\n"
            "      for (int32_t j = 0; j < 4; ++j) {") in source
    assert "B[i * 4 + j] = (kiln_expf(A[i * 4 + j]) * 2.0f);" in source


def test_packed_wrapper_calls_unpacked_twin(source):
    assert ("int32_t exp_scale(TVMValue* args, int* type_codes, int num_args, "
            "TVMValue* out_ret_value, int* out_ret_tcode, void* resource_handle)") in source
    call = "return exp_scale_unpacked(arg_A_data, arg_B_data, (int32_t)(arg_A_tensor->shape[0]));"
    assert call in source


def test_parallel_vectorized_unrolled_and_allocations(source):
    # parallel loops: lambdas on the runtime's thread pool claim chunks from an atomic counter
    assert "TVMBackendParallelLaunch(" in source and "#pragma omp" not in source
    assert "__atomic_fetch_add(&closure->next, i_chunk, __ATOMIC_RELAXED);" in source
    assert "#pragma GCC ivdep" in source
    assert "#pragma GCC unroll 12" in source
    assert "float acc[1] __attribute__((aligned(64)));" in source
    assert "TVMBackendAllocWorkspace(1, 0, (uint64_t)" in source
    assert "TVMBackendFreeWorkspace(1, 0, scratch);" in source
    assert "typedef float float32x8 __attribute__((vector_size(32)));" in source


def test_import_c_source_is_emitted_verbatim(source, micro_kernel_c):
    assert micro_kernel_c.strip() in source
    assert source.count("static inline int32_t gemv4_update") == 1


def test_same_source_compiles_freestanding_without_openmp(tmp_path, kernels):
    text, _ = emit_c(dict(kernels), Target("c -mcpu=cortex-m7"))
    assert "#pragma omp" not in text and "TVMBackendAllocWorkspace" not in text
    host_text, _ = emit_c(dict(kernels), Target("c"))
    for name, code in (("bare.c", text), ("host.c", host_text)):
        path = tmp_path / name
        path.write_text(code)
        cmd = [cc.find_compiler(), "-ffreestanding", "-fno-openmp", "-nostdlib", "-std=gnu11",
               "-O2", "-c", *[f"-I{d}" for d in native.include_dirs()], str(path),
               "-o", str(tmp_path / (name + ".o"))]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


class _Mystery:
    dtype = "float32"


def test_node_without_rule_names_it():
    with pytest.raises(TVMError, match="no rule for TIR expression node _Mystery"):
        CodeGenC().expr(_Mystery())
    with pytest.raises(TVMError, match="no rule for TIR statement node _Mystery"):
        CodeGenC().emit_stmt(_Mystery())


def test_unlowered_nodes_are_rejected():
    A = tir.decl_buffer((4,), "float32", name="A")
    reduce_like = tir.BufferRealize(A, [kiln.ir.expr.Range(0, 4)], tir.const(1, "bool"),
                                    tir.Evaluate(0))
    f = tir.PrimFunc([A], reduce_like).with_attr("global_symbol", "f")
    with pytest.raises(TVMError, match="BufferRealize must be flattened"):
        emit_c(f)


def test_undefined_variable_is_reported():
    A = tir.decl_buffer((4,), "float32", name="A")
    ghost = tir.Var("ghost", "int32")
    f = tir.PrimFunc([A], tir.BufferStore(A, tir.const(1.0, "float32"), [ghost]))
    with pytest.raises(TVMError, match="variable 'ghost' is used but never defined"):
        emit_c(f.with_attr("global_symbol", "f"))


def _tiny_func(value: float):
    A = tir.decl_buffer((2,), "float32", name="A")
    f = tir.PrimFunc([A], tir.BufferStore(A, tir.const(value, "float32"), [1]))
    return f.with_attr("global_symbol", "tiny")


def test_identical_builds_reuse_the_cached_library():
    first = build_module(_tiny_func(5.0), Target("c"))
    second = build_module(_tiny_func(5.0), Target("c"))
    third = build_module(_tiny_func(6.0), Target("c"))
    assert first.library_path == second.library_path
    assert third.library_path != first.library_path
    out = kiln.nd.array(np.zeros(2, "float32"))
    third["tiny"](out)
    assert out.numpy().tolist() == [0.0, 6.0]


def test_get_source_and_debug_level_4(monkeypatch, capfd):
    monkeypatch.setenv("KILN_DEBUG", "4")
    module = build_module(_tiny_func(7.25), Target("c"))
    err = capfd.readouterr().err
    assert "A[1] = 7.25f;" in err
    assert "[kiln codegen] library" in err and ".so" in err
    assert "A[1] = 7.25f;" in module.get_source()
    assert module.get_source("c") == module.get_source()
    with pytest.raises(TVMError, match="no source of format 'll'"):
        module.get_source("ll")


def test_export_library_and_load_back(tmp_path):
    module = build_module(_tiny_func(3.5), Target("c"))
    path = tmp_path / "tiny.so"
    module.export_library(str(path))
    loaded = kiln.runtime.load_module(str(path))
    out = kiln.nd.array(np.zeros(2, "float32"))
    loaded["tiny"](out)
    assert out.numpy().tolist() == [0.0, 3.5]


def test_invalid_function_name():
    with pytest.raises(TVMError, match="not a valid C function name"):
        emit_c(_tiny_func(1.0).with_attr("global_symbol", "bad-name"))
    # a C keyword is mangled in C and still exported under its own name
    source, _ = emit_c(_tiny_func(1.0).with_attr("global_symbol", "double"))
    assert '__asm__("double")' in source


def test_buffers_named_like_c_keywords_still_compile():
    data = tir.decl_buffer((2,), "float32", name="float")
    out = tir.decl_buffer((2,), "float32", name="int")
    i = tir.Var("_l", "int32")
    body = tir.For(i, 0, 2, tir.ForKind.SERIAL, tir.BufferStore(out, data[i] + 1.0, [i]))
    f = tir.PrimFunc([data, out], body).with_attr("global_symbol", "keywords")
    module = build_module(f, Target("c"))
    result = kiln.nd.array(np.zeros(2, "float32"))
    module["keywords"](kiln.nd.array(np.array([1, 2], "float32")), result)
    assert result.numpy().tolist() == [2.0, 3.0]
