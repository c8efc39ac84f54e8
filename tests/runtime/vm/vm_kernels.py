"""Hand-written packed C kernels and an exportable kernel Module for the VM tests."""

from __future__ import annotations

import os

from kiln.runtime import cc
from kiln.runtime.module import DSOModule, Module, ModuleProperty

KERNELS_C = r"""
#include <tvm/runtime/c_backend_api.h>
#include <stdint.h>

static int64_t numel(const DLTensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

static void* data(TVMValue* args, int i) {
  DLTensor* t = (DLTensor*)args[i].v_handle;
  return (char*)t->data + t->byte_offset;
}

/* Checks the argument count, that every argument is a DLTensor and that all have the same
   element count (the kernels are elementwise). */
static int check(int* codes, TVMValue* args, int n, int expected, const char* name) {
  if (n != expected) {
    TVMAPISetLastError(name);
    return -1;
  }
  for (int i = 0; i < n; ++i) {
    if (codes[i] != kTVMDLTensorHandle) {
      TVMAPISetLastError("argument is not a DLTensor handle");
      return -1;
    }
    if (numel((DLTensor*)args[i].v_handle) != numel((DLTensor*)args[0].v_handle)) {
      TVMAPISetLastError("elementwise kernel: operand sizes differ");
      return -1;
    }
  }
  return 0;
}

#define BINARY(NAME, T, OUT_T, EXPR)                                                   \
  int NAME(TVMValue* args, int* codes, int n, TVMValue* r, int* rc, void* res) {     \
    if (check(codes, args, n, 3, #NAME " expects 3 arguments")) return -1;           \
    int64_t m = numel((DLTensor*)args[2].v_handle);                                   \
    T *a = (T*)data(args, 0), *b = (T*)data(args, 1);                                 \
    OUT_T* c = (OUT_T*)data(args, 2);                                                 \
    for (int64_t i = 0; i < m; ++i) c[i] = (OUT_T)(EXPR);                             \
    return 0;                                                                         \
  }

BINARY(add_f32, float, float, a[i] + b[i])
BINARY(mul_f32, float, float, a[i] * b[i])
BINARY(add_i64, int64_t, int64_t, a[i] + b[i])
BINARY(sub_i64, int64_t, int64_t, a[i] - b[i])
BINARY(less_i64, int64_t, uint8_t, a[i] < b[i])
BINARY(greater_f32, float, uint8_t, a[i] > b[i])

/* Counts its calls into an int64 output (used to check how often the VM calls a kernel). */
static int64_t calls = 0;
int count_calls(TVMValue* args, int* codes, int n, TVMValue* r, int* rc, void* res) {
  calls += 1;
  *(int64_t*)data(args, n - 1) = calls;
  return 0;
}
"""

KERNEL_NAMES = ["add_f32", "mul_f32", "add_i64", "sub_i64", "less_i64", "greater_f32",
                "count_calls"]


class CSourceKernels(Module):
    """C source that compiles into the process on first use and exports as object code."""

    type_key = "c"
    _property_mask = ModuleProperty.RUNNABLE | ModuleProperty.DSO_EXPORTABLE

    def __init__(self, source: str = KERNELS_C) -> None:
        super().__init__()
        self.source = source
        self._library = None

    def _get_function(self, name):
        if self._library is None:
            path = cc.cached_shared_library({"vm_kernels.c": self.source})
            self._library = DSOModule(str(path))
        return self._library._get_function(name)

    def export_objects(self, workspace_dir: str) -> list[str]:
        path = os.path.join(workspace_dir, "vm_kernels.c")
        with open(path, "w") as f:
            f.write(self.source)
        return [path]

    def link_options(self) -> list[str]:
        return []
