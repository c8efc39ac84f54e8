"""Kernels and arguments whose names clash with C: repeated tensor names, C keywords and
libm/stdlib function names as kernel names, on both the c and the llvm targets."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.target.c_abi import c_function_identifier

TARGETS = ["c", "llvm"]


def _build(target, name, dtype="float32", n=5):
    a = te.placeholder((n,), name="A", dtype=dtype)
    b = te.placeholder((n,), name="A", dtype=dtype)  # same tensor name twice
    total = te.compute((n,), lambda i: te.exp(a[i]) + b[i], name="C")
    diff = te.compute((n,), lambda i: te.sqrt(a[i]) - b[i], name="C")
    sched = te.create_schedule([total.op, diff.op])
    return tvm.build(sched, [a, b, total, diff], target, name=name)


def _check(func, dtype="float32", n=5):
    x = np.linspace(0.5, 2.0, n).astype(dtype)
    y = np.arange(n).astype(dtype)
    out_total, out_diff = tvm.nd.empty((n,), dtype), tvm.nd.empty((n,), dtype)
    func(tvm.nd.array(x), tvm.nd.array(y), out_total, out_diff)
    np.testing.assert_allclose(out_total.numpy(), np.exp(x) + y, rtol=1e-6)
    np.testing.assert_allclose(out_diff.numpy(), np.sqrt(x) - y, rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_repeated_tensor_names_compile_and_bind_by_position(target):
    _check(_build(target, "twice_named"))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["exp", "sqrtf", "for", "int"])
def test_kernel_named_like_c_keyword_or_libm(target, name):
    # the kernel itself calls exp/sqrt: the exported symbol must not replace libm's
    mod = _build(target, name, dtype="float64")
    _check(mod[name], dtype="float64")
    _check(mod.entry_func, dtype="float64")


def test_mangled_identifier_keeps_exported_symbol_name():
    assert c_function_identifier("conv") == "conv"
    for name in ("exp", "logf", "while", "malloc"):
        assert c_function_identifier(name) == f"kiln_fn_{name}"
    source = _build("c", "exp").get_source()
    assert 'kiln_fn_exp(TVMValue* args' in source and '__asm__("exp")' in source


def test_invalid_kernel_name_is_a_clear_error():
    with pytest.raises(tvm.TVMError, match="not a valid C function name"):
        _build("c", "9lives")
