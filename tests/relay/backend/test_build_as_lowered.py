"""Kernels compile as they are lowered: LLVM works on each kernel while the next one lowers."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.backend.pipeline import build_kernels, make_compilers
from kiln.runtime.error import TVMError

pytest.importorskip("llvmlite")


def _two_kernel_model():
    x = relay.var("x", shape=(4, 8))
    w = relay.var("w", shape=(6, 8))
    body = relay.tanh(relay.nn.dense(relay.exp(x), w))
    return kiln.IRModule.from_expr(relay.Function([x, w], body))


def _lower(build_as_lowered):
    """The fused model's kernels, lowered by compilers made with ``build_as_lowered``."""
    from kiln.relay.backend.graph_executor_codegen import codegen
    from kiln.relay.build_module import optimize

    target = kiln.target.Target("llvm")
    with kiln.transform.PassContext(opt_level=3), target:
        mod = optimize(_two_kernel_model(), target, None, kiln.cpu(0))
        compilers = make_compilers({1: target}, target, "default", build_as_lowered)
        codegen(mod["main"], compilers)
    return compilers


@pytest.fixture
def submitted(monkeypatch, tmp_path):
    """The names of the kernel objects LLVM was asked to compile, in order."""
    from kiln.target import llvm_library

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    names = []
    start = llvm_library.LLVMKernelBuilder._start

    def spy(self, cg, object_name):
        names.append(object_name)
        return start(self, cg, object_name)

    monkeypatch.setattr(llvm_library.LLVMKernelBuilder, "_start", spy)
    return names


def test_each_kernel_starts_compiling_when_it_is_lowered(submitted):
    compilers = _lower(build_as_lowered=True)
    kernels = [lowered.name for lowered in compilers[1].lowered]
    assert len(kernels) == 2 and submitted == [f"{name}.o" for name in kernels]
    with compilers[1].target:
        lib = build_kernels(compilers)
    assert submitted == [f"{name}.o" for name in kernels]  # build() only waited and linked
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype("float32")
    w = rng.standard_normal((6, 8)).astype("float32")
    exp_out = kiln.nd.array(np.empty_like(x))
    lib[kernels[0]](kiln.nd.array(x), exp_out)  # the exp kernel, lowered first
    np.testing.assert_allclose(exp_out.numpy(), np.exp(x), rtol=1e-6)
    out = kiln.nd.array(np.empty((4, 6), "float32"))
    lib[kernels[1]](exp_out, kiln.nd.array(w), out)
    np.testing.assert_allclose(out.numpy(), np.tanh(np.exp(x) @ w.T), rtol=1e-5, atol=1e-6)


def test_lowering_alone_compiles_nothing(submitted):
    compilers = _lower(build_as_lowered=False)
    assert len(compilers[1].lowered) == 2 and submitted == []
    with compilers[1].target:
        build_kernels(compilers)
    assert submitted == [f"{f.name}.o" for f in compilers[1].lowered]  # when asked


def test_relay_build_output_matches_numpy_and_keeps_one_linked_ll(submitted):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 8)).astype("float32")
    w = rng.standard_normal((6, 8)).astype("float32")
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(_two_kernel_model(), target="llvm")
    assert len(submitted) == 2
    graph = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    graph.run(x=x, w=w)
    np.testing.assert_allclose(graph.get_output(0).numpy(), np.tanh(np.exp(x) @ w.T),
                               rtol=1e-5, atol=1e-6)
    ll = lib.get_lib().get_source("ll")
    assert ll.count("target triple") == 1  # one module: the kernels' modules linked
    for name in lib.lowered:
        assert f"@{name}_unpacked(" in ll
    assert all(f"{name}_unpacked:" in lib.get_lib().get_source("asm") for name in lib.lowered)


def test_an_llvm_failure_on_the_llvm_thread_reaches_the_caller(submitted, monkeypatch):
    from kiln.target import llvm_toolchain

    def broken(*args):
        raise TVMError("LLVM codegen produced invalid IR: test")

    monkeypatch.setattr(llvm_toolchain, "parse_and_optimize", broken)
    with kiln.transform.PassContext(opt_level=3), pytest.raises(TVMError, match="invalid IR"):
        relay.build(_two_kernel_model(), target="llvm")


def test_kiln_debug_1_reports_the_llvm_threads_cpu_seconds(submitted, monkeypatch, capfd):
    import re

    monkeypatch.setenv("KILN_DEBUG", "1")
    with kiln.transform.PassContext(opt_level=3):
        relay.build(_two_kernel_model(), target="llvm")
    (line,) = [ln for ln in capfd.readouterr().err.splitlines() if "relay.build stages" in ln]
    assert float(re.search(r"llvm thread ([\d.]+) s cpu", line).group(1)) > 0
