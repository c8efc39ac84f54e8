"""Seed document 001 (TVM runtime design): ``myadd`` and ``callhello`` run on kiln.

The C side plays the role of ``TVM_REGISTER_GLOBAL``: a constructor in the library registers
both functions through ``TVMFuncRegisterGlobal`` when the library is loaded, and ``callhello``
calls its PackedFunc argument with ``TVMFuncCall``.
"""

from __future__ import annotations

import pytest

import kiln as tvm
from kiln.contrib import cc
from kiln.runtime.module import load_module

SEED_C = r"""
#include <tvm/runtime/c_backend_api.h>

/* int c = args[0] + args[1] */
static int MyAdd(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* r) {
  if (n != 2 || codes[0] != kTVMArgInt || codes[1] != kTVMArgInt) {
    TVMAPISetLastError("myadd expects two ints");
    return -1;
  }
  ret->v_int64 = args[0].v_int64 + args[1].v_int64;
  *ret_code = kTVMArgInt;
  return 0;
}

/* PackedFunc f = args[0]; f("hello world"); */
static int CallHello(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* r) {
  if (n != 1 || codes[0] != kTVMPackedFuncHandle) {
    TVMAPISetLastError("callhello expects a function");
    return -1;
  }
  TVMValue msg;
  int msg_code = kTVMStr;
  msg.v_str = "hello world";
  return TVMFuncCall(args[0].v_handle, &msg, &msg_code, 1, ret, ret_code);
}

__attribute__((constructor)) static void register_seed_globals(void) {
  TVMFunctionHandle f;
  KilnFuncCreate(MyAdd, NULL, NULL, &f);
  TVMFuncRegisterGlobal("myadd", f, 1);
  KilnFuncCreate(CallHello, NULL, NULL, &f);
  TVMFuncRegisterGlobal("callhello", f, 1);
}
"""


@pytest.fixture(scope="module", autouse=True)
def seed_library():
    return load_module(cc.cached_shared_library({"seed001.c": SEED_C}))


def test_myadd_registered_from_c_returns_3() -> None:
    myadd = tvm.get_global_func("myadd")
    assert myadd(1, 2) == 3


def test_callhello_calls_a_converted_python_callback(capsys) -> None:
    def callback(msg):
        print(msg)

    f = tvm.convert(callback)
    callhello = tvm.get_global_func("callhello")
    callhello(f)
    assert capsys.readouterr().out == "hello world\n"


def test_myadd_rejects_non_int_arguments() -> None:
    with pytest.raises(tvm.TVMError, match="myadd expects two ints"):
        tvm.get_global_func("myadd")("1", 2)
