"""PackedFunc and the C ABI bridge: kernels called from Python, Python called from C.

The C side is a hand-written library of packed-signature functions compiled once per module.
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from kiln.contrib import cc
from kiln.runtime import ndarray
from kiln.runtime.device import Device
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.runtime.module import Module, load_module
from kiln.runtime.native import runtime_sources
from kiln.runtime.packed_func import (
    PackedFunc,
    TVMValue,
    convert,
    get_last_error,
    set_last_error,
)
from kiln.runtime.registry import register_func, remove_global_func

PARALLEL_C = r"""
#include <tvm/runtime/c_backend_api.h>
#include <stdint.h>

/* Each task writes its id into its share of an int32 tensor, then checks the barrier. */
typedef struct { int32_t* out; int64_t size; int32_t* tasks_seen; } FillJob;

static int fill_task(int task_id, TVMParallelGroupEnv* env, void* cdata) {
  FillJob* job = (FillJob*)cdata;
  int64_t chunk = (job->size + env->num_task - 1) / env->num_task;
  for (int64_t i = task_id * chunk; i < job->size && i < (task_id + 1) * chunk; ++i)
    job->out[i] = task_id;
  __atomic_add_fetch(job->tasks_seen, 1, __ATOMIC_SEQ_CST);
  TVMBackendParallelBarrier(task_id, env);
  /* After the barrier every task has arrived. */
  return __atomic_load_n(job->tasks_seen, __ATOMIC_SEQ_CST) == env->num_task ? 0 : 1;
}

int parallel_fill(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  DLTensor* t = (DLTensor*)args[0].v_handle;
  int32_t seen = 0;
  FillJob job = {(int32_t*)t->data, t->shape[0], &seen};
  if (TVMBackendParallelLaunch(fill_task, &job, (int)args[1].v_int64) != 0) {
    TVMAPISetLastError("parallel_fill: a task failed"); return -1;
  }
  ret->v_int64 = seen;
  *ret_code = kTVMArgInt;
  return 0;
}

"""

KERNELS_C = PARALLEL_C + r"""

void* __tvm_module_ctx = NULL;

/* c = a + b for float32 tensors of any shape. */
int add_f32(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  if (n != 3) { TVMAPISetLastError("add_f32: expected 3 arguments"); return -1; }
  for (int i = 0; i < 3; ++i) {
    if (codes[i] != kTVMNDArrayHandle && codes[i] != kTVMDLTensorHandle) {
      TVMAPISetLastError("add_f32: arguments must be tensors"); return -1;
    }
  }
  DLTensor* a = (DLTensor*)args[0].v_handle;
  DLTensor* b = (DLTensor*)args[1].v_handle;
  DLTensor* c = (DLTensor*)args[2].v_handle;
  int64_t size = 1;
  for (int i = 0; i < a->ndim; ++i) size *= a->shape[i];
  for (int64_t i = 0; i < size; ++i)
    ((float*)c->data)[i] = ((const float*)a->data)[i] + ((const float*)b->data)[i];
  return 0;
}

int always_fails(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  TVMAPISetLastError("always_fails: the kernel detected a shape mismatch (3 vs 4)");
  return -1;
}

int fails_silently(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* r) {
  return 7;
}

/* Return the first argument unchanged (round-trips every value kind). */
int echo(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  *ret = args[0];
  *ret_code = codes[0];
  return 0;
}

/* Look up the global Python function "test.env_callback" and call it with (7, "seven"). */
int call_env_callback(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code,
                      void* res) {
  TVMFunctionHandle f;
  if (TVMBackendGetFuncFromEnv(__tvm_module_ctx, "test.env_callback", &f) != 0) return -1;
  TVMValue call_args[2];
  int call_codes[2] = {kTVMArgInt, kTVMStr};
  call_args[0].v_int64 = 7;
  call_args[1].v_str = "seven";
  return TVMFuncCall(f, call_args, call_codes, 2, ret, ret_code);
}

/* args[0] is a function handle: call it with the remaining arguments. */
int call_argument(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  if (codes[0] != kTVMPackedFuncHandle) {
    TVMAPISetLastError("call_argument: first argument must be a function"); return -1;
  }
  return TVMFuncCall(args[0].v_handle, args + 1, codes + 1, n - 1, ret, ret_code);
}

static int bump(void* counter) { ++*(int64_t*)counter; return 0; }

/* Run bump through TVMBackendRunOnce three times; the counter must end at 1. */
int run_once_count(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* r) {
  static void* once = NULL;
  int64_t counter = 0;
  for (int i = 0; i < 3; ++i) TVMBackendRunOnce(&once, bump, &counter, 0);
  ret->v_int64 = counter;
  *ret_code = kTVMArgInt;
  return 0;
}

/* Allocate workspaces of awkward sizes; return the OR of their addresses mod 64. */
int workspace_alignment(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code,
                        void* res) {
  uint64_t sizes[4] = {1, 63, 1000, 1 << 20};
  int64_t misaligned = 0;
  for (int i = 0; i < 4; ++i) {
    char* p = (char*)TVMBackendAllocWorkspace(kDLCPU, 0, sizes[i], kDLFloat, 32);
    if (p == NULL) return -1;
    p[sizes[i] - 1] = 1; /* the whole request is usable */
    misaligned |= (int64_t)((uintptr_t)p % 64);
    TVMBackendFreeWorkspace(kDLCPU, 0, p);
  }
  ret->v_int64 = misaligned;
  *ret_code = kTVMArgInt;
  return 0;
}
"""


@pytest.fixture(scope="module")
def kernels() -> Module:
    return load_module(cc.cached_shared_library({"kernels.c": KERNELS_C}))


def test_native_kernel_adds_float32_ndarrays(kernels: Module, rng) -> None:
    a_np, b_np = rng.standard_normal((3, 5), dtype=np.float32), rng.random((3, 5), np.float32)
    a, b = ndarray.array(a_np), ndarray.array(b_np)
    c = ndarray.empty((3, 5), "float32")
    kernels["add_f32"](a, b, c)
    np.testing.assert_array_equal(c.numpy(), a_np + b_np)


def test_kernel_error_message_crosses_as_tvm_error(kernels: Module) -> None:
    with pytest.raises(TVMError, match=r"shape mismatch \(3 vs 4\)"):
        kernels["always_fails"]()
    with pytest.raises(TVMError, match="expected 3 arguments"):
        kernels["add_f32"](ndarray.empty((1,), "float32"))


def test_failure_without_message_does_not_repeat_an_old_message(kernels: Module) -> None:
    with pytest.raises(TVMError, match="shape mismatch"):
        kernels["always_fails"]()
    with pytest.raises(TVMError, match="fails_silently returned 7 without setting an error"):
        kernels["fails_silently"]()
    with pytest.raises(TVMError, match="fails_silently returned 7 without setting an error"):
        kernels["fails_silently"].prepare()()


def test_python_callback_is_reachable_from_c_via_env_lookup(kernels: Module) -> None:
    calls = []

    def callback(number, word):
        calls.append((number, word))
        return f"{word}={number}"

    register_func("test.env_callback", callback, override=True)
    try:
        assert kernels["call_env_callback"]() == "seven=7"
    finally:
        remove_global_func("test.env_callback")
    assert calls == [(7, "seven")]


def test_missing_env_function_is_a_clear_error(kernels: Module) -> None:
    with pytest.raises(TVMError, match="Cannot find function test.env_callback"):
        kernels["call_env_callback"]()


@pytest.mark.parametrize(
    "value",
    [0, -(2**63), 2**63 - 1, 2.5, -0.0, None, "héllo", "", b"\x00bytes\xff", b""],
)
def test_scalar_values_round_trip_through_c(kernels: Module, value) -> None:
    result = kernels["echo"](value)
    assert result == value and type(result) is type(value)


def test_bool_and_numpy_scalars_travel_as_numbers(kernels: Module) -> None:
    assert kernels["echo"](True) == 1
    assert kernels["echo"](np.int16(-5)) == -5
    assert kernels["echo"](np.float32(0.5)) == 0.5


def test_dtype_and_device_round_trip_through_c(kernels: Module) -> None:
    for dtype in ("float32", "int8", "uint16x4", "bool", "float16"):
        assert kernels["echo"](DataType(dtype)) == DataType(dtype)
    assert kernels["echo"](Device(4, 3)) == Device(4, 3)
    assert kernels["echo"](Device(1, 0)) == Device(1, 0)


def test_objects_round_trip_through_c_as_the_same_object(kernels: Module) -> None:
    func = PackedFunc(lambda: 1)
    assert kernels["echo"](func) is func
    assert kernels["echo"](kernels) is kernels
    array = convert([1, 2])
    assert kernels["echo"](array) is array
    assert list(kernels["echo"]((3, 4))) == [3, 4]  # a tuple travels as an Array


def test_ndarray_returned_from_c_views_the_same_memory(kernels: Module) -> None:
    source = ndarray.array(np.arange(6, dtype=np.int32).reshape(2, 3))
    view = kernels["echo"](source)
    np.testing.assert_array_equal(view.numpy(), np.arange(6).reshape(2, 3))
    assert view.dtype == "int32" and tuple(view.shape) == (2, 3)


def test_c_calls_a_python_function_passed_as_argument(kernels: Module) -> None:
    assert kernels["call_argument"](lambda x, y: x * y, 6, 7) == 42
    assert kernels["call_argument"](convert(lambda s: s[::-1]), "abc") == "cba"


def test_python_exception_in_callback_becomes_tvm_error(kernels: Module) -> None:
    def explode(x):
        raise ValueError(f"bad value {x}")

    with pytest.raises(TVMError, match="ValueError: bad value 5") as info:
        kernels["call_argument"](explode, 5)
    assert isinstance(info.value.__cause__, ValueError)


def test_python_function_c_address_is_callable_from_c() -> None:
    doubler = PackedFunc(lambda x: 2 * x)
    kernel = ctypes.CFUNCTYPE(
        ctypes.c_int, *[ctypes.c_void_p] * 2, ctypes.c_int, *[ctypes.c_void_p] * 3
    )(doubler.c_address)
    args, codes = (TVMValue * 1)(), (ctypes.c_int * 1)(0)
    args[0].v_int64 = 21
    ret, ret_code = TVMValue(), ctypes.c_int(-1)
    assert kernel(args, codes, 1, ctypes.byref(ret), ctypes.byref(ret_code), None) == 0
    assert (ret.v_int64, ret_code.value) == (42, 0)


def test_python_exception_from_raw_c_call_sets_last_error() -> None:
    def fail():
        raise KeyError("nope")

    kernel = ctypes.CFUNCTYPE(
        ctypes.c_int, *[ctypes.c_void_p] * 2, ctypes.c_int, *[ctypes.c_void_p] * 3
    )(PackedFunc(fail).c_address)
    ret, ret_code = TVMValue(), ctypes.c_int()
    assert kernel(None, None, 0, ctypes.byref(ret), ctypes.byref(ret_code), None) == -1
    assert get_last_error() == "KeyError: 'nope'"


@pytest.mark.parametrize("bad", [object(), {1, 2}, np.zeros(3), 1j])
def test_unsupported_argument_type_raises_naming_the_type(kernels: Module, bad) -> None:
    with pytest.raises(TypeError, match=type(bad).__qualname__):
        kernels["echo"](bad)


def test_int_outside_int64_is_rejected(kernels: Module) -> None:
    with pytest.raises(TVMError, match="does not fit in int64"):
        kernels["echo"](2**63)


def test_prepared_call_reuses_packed_arguments(kernels: Module) -> None:
    a = ndarray.array(np.ones(4, np.float32))
    c = ndarray.empty((4,), "float32")
    call = kernels["add_f32"].prepare(a, a, c)
    call()
    np.testing.assert_array_equal(c.numpy(), np.full(4, 2, np.float32))
    c.copyfrom(np.zeros(4, np.float32))
    call()
    np.testing.assert_array_equal(c.numpy(), np.full(4, 2, np.float32))


def test_native_functions_expose_their_c_address(kernels: Module) -> None:
    func = kernels["echo"]
    assert func.is_native
    assert func.c_address == ctypes.cast(kernels.lib.echo, ctypes.c_void_p).value


@pytest.mark.parametrize("num_task", [0, 1, 2, 5])
def test_parallel_launch_covers_every_element_and_barrier_waits(kernels: Module, num_task):
    out = ndarray.array(np.full(1000, -1, np.int32))
    tasks = kernels["parallel_fill"](out, num_task)
    values = out.numpy()
    assert tasks >= 1 and (values >= 0).all() and set(np.unique(values)) == set(range(tasks))
    if num_task > 0:
        assert tasks <= num_task


def test_workspace_is_64_byte_aligned(kernels: Module) -> None:
    assert kernels["workspace_alignment"]() == 0


def test_python_packed_func_calls_directly_and_has_a_handle() -> None:
    func = convert(lambda *xs: sum(xs))
    assert isinstance(func, PackedFunc) and not func.is_native
    assert func(1, 2, 3) == 6
    assert PackedFunc.from_handle(func.handle) is func


def test_parallel_launch_pthread_fallback_without_openmp() -> None:
    # The support library built without -fopenmp, linked with the kernel and bound locally
    # (-Bsymbolic) so the kernel uses this copy's pthread launcher, not the loaded one.
    runtime_c = next(p for p in runtime_sources() if p.name == "kiln_runtime.c")
    path = cc.cached_shared_library(
        {"kiln_runtime.c": runtime_c.read_text(), "parallel.c": PARALLEL_C},
        ["-O2", "-fPIC", "-std=gnu11", "-Wl,-Bsymbolic"],
    )
    assert b"GOMP_parallel" not in path.read_bytes()
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
    parallel_fill = PackedFunc.from_c_address(
        ctypes.cast(lib.parallel_fill, ctypes.c_void_p).value, owner=lib
    )
    for num_task in (3, 1):
        out = ndarray.array(np.full(999, -1, np.int32))
        assert parallel_fill(out, num_task) == num_task
        np.testing.assert_array_equal(out.numpy(), np.repeat(np.arange(num_task), 999 // num_task))


def test_kiln_num_threads_sets_the_default_team_size(kernels: Module) -> None:
    library = kernels.path
    script = (
        "import numpy as np\n"
        "from kiln.runtime import ndarray\n"
        "from kiln.runtime.module import load_module\n"
        f"lib = load_module({library!r})\n"
        "print(lib['parallel_fill'](ndarray.array(np.zeros(64, np.int32)), 0))\n"
    )
    env = dict(os.environ, KILN_NUM_THREADS="3")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3"


def test_env_lookup_survives_the_module_that_set_the_context() -> None:
    # Loading one library path twice shares one dlopen copy and one __tvm_module_ctx.
    path = cc.cached_shared_library({"kernels.c": KERNELS_C})
    first, second = load_module(path), load_module(path)
    del second
    gc.collect()
    register_func("test.env_callback", lambda number, word: number * 2, override=True)
    try:
        assert first["call_env_callback"]() == 14
    finally:
        remove_global_func("test.env_callback")


def test_run_once_runs_its_function_once(kernels: Module) -> None:
    assert kernels["run_once_count"]() == 1


def test_last_error_is_per_thread(kernels: Module) -> None:
    seen = {}

    def fail_in_thread() -> None:
        try:
            kernels["always_fails"].prepare()()
        except TVMError:
            pass
        set_last_error("thread-local marker")
        seen["thread"] = get_last_error()

    set_last_error("main thread marker")
    worker = threading.Thread(target=fail_in_thread)
    worker.start()
    worker.join()
    assert seen["thread"] == "thread-local marker"
    assert get_last_error() == "main thread marker"
