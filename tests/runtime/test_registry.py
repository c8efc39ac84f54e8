"""The global function registry, from Python and from C, and ``convert``."""

from __future__ import annotations

import ctypes

import pytest

from kiln.contrib import cc
from kiln.runtime.container import Array, Map, String
from kiln.runtime.error import TVMError
from kiln.runtime.module import Module, load_module
from kiln.runtime.packed_func import PackedFunc, convert
from kiln.runtime.registry import (
    get_global_func,
    list_global_func_names,
    register_func,
    remove_global_func,
)

REGISTRY_C = r"""
#include <tvm/runtime/c_backend_api.h>

static int negate(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  ret->v_int64 = -args[0].v_int64 * (int64_t)(intptr_t)res;
  *ret_code = kTVMArgInt;
  return 0;
}

/* Register "test.c_negate" (resource handle 1 = plain negation) from C. */
int register_negate(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code,
                    void* res) {
  TVMFunctionHandle f;
  if (KilnFuncCreate(negate, (void*)(intptr_t)1, NULL, &f) != 0) return -1;
  int rc = TVMFuncRegisterGlobal(args[0].v_str, f, (int)args[1].v_int64);
  TVMFuncFree(f);
  return rc;
}

/* Look up a global by name and call it with one int; NULL handle -> return None. */
int call_global(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  TVMFunctionHandle f;
  if (TVMFuncGetGlobal(args[0].v_str, &f) != 0) return -1;
  if (f == NULL) { *ret_code = kTVMNullptr; return 0; }
  return TVMFuncCall(f, args + 1, codes + 1, 1, ret, ret_code);
}
"""


@pytest.fixture(scope="module")
def c_lib() -> Module:
    return load_module(cc.cached_shared_library({"registry.c": REGISTRY_C}))


def test_register_get_list_remove() -> None:
    register_func("test.reg.add", lambda a, b: a + b, override=True)
    assert get_global_func("test.reg.add")(2, 3) == 5
    assert "test.reg.add" in list_global_func_names()
    remove_global_func("test.reg.add")
    assert "test.reg.add" not in list_global_func_names()
    assert get_global_func("test.reg.add", allow_missing=True) is None


def test_decorator_forms_return_the_original_function() -> None:
    @register_func("test.reg.named", override=True)
    def named(x):
        return x + 1

    @register_func
    def test_reg_bare(x):
        return x * 10

    try:
        assert named(1) == 2 and not isinstance(named, PackedFunc)
        assert get_global_func("test.reg.named")(1) == 2
        assert get_global_func("test_reg_bare")(2) == 20
    finally:
        remove_global_func("test.reg.named")
        remove_global_func("test_reg_bare")


def test_registering_a_taken_name_needs_override() -> None:
    register_func("test.reg.once", lambda: 1, override=True)
    try:
        with pytest.raises(TVMError, match="already registered"):
            register_func("test.reg.once", lambda: 2)
        register_func("test.reg.once", lambda: 3, override=True)
        assert get_global_func("test.reg.once")() == 3
    finally:
        remove_global_func("test.reg.once")


def test_missing_function_errors_are_tvm_and_value_errors() -> None:
    with pytest.raises(TVMError, match="Cannot find global function test.reg.absent"):
        get_global_func("test.reg.absent")
    with pytest.raises(ValueError):
        get_global_func("test.reg.absent")
    with pytest.raises(TVMError, match="not registered"):
        remove_global_func("test.reg.absent")


def test_register_func_rejects_a_non_string_name() -> None:
    with pytest.raises(TypeError, match="function name"):
        register_func(42, lambda: None)


def test_c_registers_a_global_that_python_calls(c_lib: Module) -> None:
    c_lib["register_negate"]("test.c_negate", 1)
    try:
        negate = get_global_func("test.c_negate")
        assert negate.is_native and negate(5) == -5
        with pytest.raises(TVMError, match="already registered"):
            c_lib["register_negate"]("test.c_negate", 0)
    finally:
        remove_global_func("test.c_negate")


def test_c_looks_up_a_python_global(c_lib: Module) -> None:
    register_func("test.reg.square", lambda x: x * x, override=True)
    try:
        assert c_lib["call_global"]("test.reg.square", 9) == 81
    finally:
        remove_global_func("test.reg.square")
    assert c_lib["call_global"]("test.reg.square", 9) is None


def test_convert_follows_tvm_rules() -> None:
    func = convert(lambda x: x)
    assert isinstance(func, PackedFunc) and func(4) == 4
    assert convert(func) is func
    array = convert([1, "a", (2, 3)])
    assert isinstance(array, Array) and isinstance(array[2], Array) and array[1] == "a"
    mapping = convert({"k": [1]})
    assert isinstance(mapping, Map) and list(mapping["k"]) == [1]
    text = convert("hello")
    assert isinstance(text, String) and text == "hello"
    for unchanged in (3, 2.5, None):
        assert convert(unchanged) is unchanged


def test_python_function_handle_is_callable_through_tvm_func_call() -> None:
    # TVMFuncCall on a Python function's handle works straight from ctypes.
    from kiln.runtime.native import load_runtime_lib
    from kiln.runtime.packed_func import TVMValue

    lib = load_runtime_lib()
    func = PackedFunc(lambda x: x + 100)
    args, codes = (TVMValue * 1)(), (ctypes.c_int * 1)(0)
    args[0].v_int64 = 1
    ret, ret_code = TVMValue(), ctypes.c_int()
    rc = lib.TVMFuncCall(func.handle, args, codes, 1, ctypes.byref(ret), ctypes.byref(ret_code))
    assert rc == 0
    assert ret.v_int64 == 101
