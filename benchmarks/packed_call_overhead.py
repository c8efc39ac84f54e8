"""Packed call overhead: the cost of calling a trivial native kernel from Python.

Run: ``python benchmarks/packed_call_overhead.py``. Prints microseconds per call for

- raw ctypes: the kernel's prototype called with pre-built argument arrays (the floor);
- prepared call: ``PackedFunc.prepare(*args)()`` — kiln's fast path for executors;
- PackedFunc call: ``f(*args)`` packing the arguments on every call;
- Python PackedFunc: a Python-backed PackedFunc called from Python, for scale;
- C -> Python callback: a kernel calling a Python function through ``TVMFuncCall``.

Absolute numbers on shared machines are noise; the ratios are what matter.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from kiln.contrib import cc
from kiln.runtime import ndarray
from kiln.runtime.module import load_module
from kiln.runtime.packed_func import KERNEL_PROTOTYPE, PackedFunc, pack_args

KERNEL_C = r"""
#include <tvm/runtime/c_backend_api.h>

/* Touch the first element of three tensors: as close to "no work" as a kernel gets. */
int trivial(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  float* out = (float*)((DLTensor*)args[2].v_handle)->data;
  out[0] = ((float*)((DLTensor*)args[0].v_handle)->data)[0];
  return 0;
}

int call_back(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  return TVMFuncCall(args[0].v_handle, args + 1, codes + 1, 1, ret, ret_code);
}
"""


def per_call_us(fn, number: int = 20000, repeat: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best * 1e6


def main() -> None:
    lib = load_module(cc.cached_shared_library({"trivial.c": KERNEL_C}))
    tensors = [ndarray.array(np.zeros(4, np.float32)) for _ in range(3)]
    kernel = lib["trivial"]

    values, codes, _keep = pack_args(tensors)
    ret, ret_code = (ctypes.c_int64 * 1)(), ctypes.c_int()
    raw = KERNEL_PROTOTYPE(kernel.c_address)
    raw_args = (
        ctypes.addressof(values), ctypes.addressof(codes), 3,
        ctypes.addressof(ret), ctypes.addressof(ret_code), None,
    )
    prepared = kernel.prepare(*tensors)
    python_func = PackedFunc(lambda a, b, c: None)
    callback = lib["call_back"]
    identity = PackedFunc(lambda x: x)

    rows = [
        ("raw ctypes, pre-built arrays", per_call_us(lambda: raw(*raw_args))),
        ("prepared call (fast path)", per_call_us(prepared)),
        ("PackedFunc call, packing each time", per_call_us(lambda: kernel(*tensors))),
        ("Python PackedFunc from Python", per_call_us(lambda: python_func(*tensors))),
        ("C -> Python callback round trip", per_call_us(lambda: callback(identity, 1), 5000)),
    ]
    width = max(len(name) for name, _ in rows)
    for name, us in rows:
        print(f"{name:<{width}}  {us:8.3f} us/call")


if __name__ == "__main__":
    main()
