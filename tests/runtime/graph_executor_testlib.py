"""Hand-written packed C kernels and graph JSON builders shared by the graph executor tests."""

from __future__ import annotations

import json
from pathlib import Path

KERNELS_C = r"""
#include <tvm/runtime/c_backend_api.h>
#include <stdint.h>

static int64_t numel(const DLTensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

static float* f32(TVMValue* args, int i) {
  DLTensor* t = (DLTensor*)args[i].v_handle;
  return (float*)((char*)t->data + t->byte_offset);
}

static int check(int* codes, int n, int expected, const char* name) {
  if (n != expected) {
    TVMAPISetLastError(name);
    return -1;
  }
  for (int i = 0; i < n; ++i) {
    if (codes[i] != kTVMDLTensorHandle) {
      TVMAPISetLastError("argument is not a DLTensor handle");
      return -1;
    }
  }
  return 0;
}

int add_f32(TVMValue* args, int* codes, int n, TVMValue* r, int* rc, void* res) {
  if (check(codes, n, 3, "add_f32 expects 3 arguments")) return -1;
  int64_t m = numel((DLTensor*)args[2].v_handle);
  float *a = f32(args, 0), *b = f32(args, 1), *c = f32(args, 2);
  for (int64_t i = 0; i < m; ++i) c[i] = a[i] + b[i];
  return 0;
}

int mul_f32(TVMValue* args, int* codes, int n, TVMValue* r, int* rc, void* res) {
  if (check(codes, n, 3, "mul_f32 expects 3 arguments")) return -1;
  int64_t m = numel((DLTensor*)args[2].v_handle);
  float *a = f32(args, 0), *b = f32(args, 1), *c = f32(args, 2);
  for (int64_t i = 0; i < m; ++i) c[i] = a[i] * b[i];
  return 0;
}

int relu_f32(TVMValue* args, int* codes, int n, TVMValue* r, int* rc, void* res) {
  if (check(codes, n, 2, "relu_f32 expects 2 arguments")) return -1;
  int64_t m = numel((DLTensor*)args[1].v_handle);
  float *a = f32(args, 0), *c = f32(args, 1);
  for (int64_t i = 0; i < m; ++i) c[i] = a[i] > 0 ? a[i] : 0;
  return 0;
}

/* Two outputs: sum and difference. */
int addsub_f32(TVMValue* args, int* codes, int n, TVMValue* r, int* rc, void* res) {
  if (check(codes, n, 4, "addsub_f32 expects 4 arguments")) return -1;
  int64_t m = numel((DLTensor*)args[2].v_handle);
  float *a = f32(args, 0), *b = f32(args, 1), *s = f32(args, 2), *d = f32(args, 3);
  for (int64_t i = 0; i < m; ++i) { s[i] = a[i] + b[i]; d[i] = a[i] - b[i]; }
  return 0;
}

/* Doubles its input, but only accepts flattened (1-D) tensors. */
int double_flat_f32(TVMValue* args, int* codes, int n, TVMValue* r, int* rc, void* res) {
  if (check(codes, n, 2, "double_flat_f32 expects 2 arguments")) return -1;
  DLTensor* in = (DLTensor*)args[0].v_handle;
  DLTensor* out = (DLTensor*)args[1].v_handle;
  if (in->ndim != 1 || out->ndim != 1) {
    TVMAPISetLastError("double_flat_f32 needs flattened 1-D tensors");
    return -1;
  }
  float *a = f32(args, 0), *c = f32(args, 1);
  for (int64_t i = 0; i < in->shape[0]; ++i) c[i] = 2 * a[i];
  return 0;
}

int always_fails(TVMValue* args, int* codes, int n, TVMValue* r, int* rc, void* res) {
  TVMAPISetLastError("always_fails: deliberate kernel failure");
  return -1;
}
"""


def build_kernel_library(directory: Path):
    """Compile KERNELS_C into a shared library with the toolchain driver and load it."""
    from kiln.runtime import cc
    from kiln.runtime.module import load_module
    from kiln.runtime.native import load_runtime_lib

    load_runtime_lib()  # kernels resolve TVMAPISetLastError against the support library
    source = directory / "kernels.c"
    source.write_text(KERNELS_C)
    return load_module(cc.create_shared(str(directory / "kernels.so"), [str(source)]))


def op_node(name: str, func: str, inputs: list[list[int]], num_outputs: int = 1,
            flatten: str = "0") -> dict:
    return {
        "op": "tvm_op",
        "name": name,
        "attrs": {"func_name": func, "num_inputs": str(len(inputs)),
                  "num_outputs": str(num_outputs), "flatten_data": flatten},
        "inputs": [[nid, index, 0] for nid, index in inputs],
    }


def input_node(name: str) -> dict:
    return {"op": "null", "name": name, "inputs": []}


def graph(nodes: list[dict], heads: list[list[int]], shapes: list, storage_ids: list[int],
          dtypes: list[str] | None = None, device_index: list[int] | None = None) -> dict:
    """A graph dict in TVM's layout; ``node_row_ptr`` is derived from ``num_outputs``."""
    row_ptr = [0]
    for node in nodes:
        row_ptr.append(row_ptr[-1] + int(node.get("attrs", {}).get("num_outputs", "1")))
    count = row_ptr[-1]
    attrs = {
        "dltype": ["list_str", dtypes or ["float32"] * count],
        "shape": ["list_shape", shapes],
        "storage_id": ["list_int", storage_ids],
    }
    if device_index is not None:
        attrs["device_index"] = ["list_int", device_index]
    return {
        "nodes": nodes,
        "arg_nodes": [i for i, n in enumerate(nodes) if n["op"] == "null"],
        "heads": [[nid, index, 0] for nid, index in heads],
        "attrs": attrs,
        "node_row_ptr": row_ptr,
    }


def relu_add_graph(shape=(2, 3)) -> dict:
    """y = relu(x + p0)."""
    nodes = [input_node("x"), input_node("p0"), op_node("fused_add", "add_f32", [[0, 0], [1, 0]]),
             op_node("fused_relu", "relu_f32", [[2, 0]])]
    return graph(nodes, [[3, 0]], [list(shape)] * 4, [0, 1, 2, 3])


def reuse_graph(shape=(4,)) -> dict:
    """a = x + p0; b = relu(a); y = b * p0 -- ``y`` reuses ``a``'s storage (id 2)."""
    nodes = [input_node("x"), input_node("p0"), op_node("fused_add", "add_f32", [[0, 0], [1, 0]]),
             op_node("fused_relu", "relu_f32", [[2, 0]]),
             op_node("fused_mul", "mul_f32", [[3, 0], [1, 0]])]
    return graph(nodes, [[4, 0]], [list(shape)] * 5, [0, 1, 2, 3, 2])


def dumps(g: dict) -> str:
    return json.dumps(g)
