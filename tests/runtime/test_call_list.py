"""The shared C call-list loop (kiln.runtime.call_list): records of packed kernel calls run
in one C call, a failing call stops the list and names its index. Both executors use it; no
VM module imports the graph executor. NumPy is the oracle."""

from __future__ import annotations

import ast
import ctypes
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.runtime.call_list import OpRecord, c_loop, record_address

N = 16
DLTENSOR_HANDLE = 7


@pytest.fixture(scope="module")
def kernels():
    """Two packed C kernels: add (A, B -> C) and scale-by-2 (A -> C), over (N,) float32."""
    A, B = te.placeholder((N,), name="A"), te.placeholder((N,), name="B")
    add = te.compute((N,), lambda i: A[i] + B[i], name="C")
    double = te.compute((N,), lambda i: A[i] * 2.0, name="D")
    add_lib = kiln.build(te.create_schedule(add.op), [A, B, add], target="c", name="add")
    double_lib = kiln.build(te.create_schedule(double.op), [A, double], target="c",
                            name="double")
    return add_lib["add"], double_lib["double"]


def call_list(calls):
    """OpRecords for ``calls``: (packed function, [NDArray arguments]) each."""
    records = (OpRecord * len(calls))()
    keep = []
    for record, (func, tensors) in zip(records, calls):
        values = (ctypes.c_void_p * len(tensors))(
            *(ctypes.addressof(t.handle.contents) for t in tensors))
        codes = (ctypes.c_int * len(tensors))(*([DLTENSOR_HANDLE] * len(tensors)))
        keep += [values, codes]
        record.fn, record.resource_handle = func.c_address, func.resource_handle
        record.args, record.type_codes = ctypes.addressof(values), ctypes.addressof(codes)
        record.num_args = len(tensors)
    return records, keep


def test_a_list_of_calls_runs_in_order_in_one_c_call(kernels, rng):
    add, double = kernels
    a, b = (rng.standard_normal(N).astype("float32") for _ in range(2))
    x, y = kiln.nd.array(a), kiln.nd.array(b)
    s, out = kiln.nd.empty((N,), "float32"), kiln.nd.empty((N,), "float32")
    records, _keep = call_list([(add, [x, y, s]), (double, [s, out])])
    failed = ctypes.c_int64(-1)
    assert c_loop().run(ctypes.addressof(records), 0, 2, ctypes.byref(failed)) == 0
    np.testing.assert_allclose(out.numpy(), (a + b) * 2, rtol=1e-6)
    np.testing.assert_allclose(s.numpy(), a + b, rtol=1e-6)
    doubled = kiln.nd.empty((N,), "float32")
    records, _keep = call_list([(add, [x, y, s]), (double, [x, doubled])])
    assert c_loop().run(record_address(records, 1), 0, 1, ctypes.byref(failed)) == 0
    np.testing.assert_allclose(doubled.numpy(), a * 2, rtol=1e-6)


def test_a_failing_call_stops_the_list_and_names_its_index(kernels, rng):
    add, double = kernels
    x = kiln.nd.array(rng.standard_normal(N).astype("float32"))
    wrong = kiln.nd.empty((N + 1,), "float32")                 # the kernel checks shapes
    out, never = kiln.nd.empty((N,), "float32"), kiln.nd.array(np.zeros(N, "float32"))
    records, _keep = call_list([(double, [x, out]), (double, [x, wrong]),
                                (double, [x, never])])
    failed = ctypes.c_int64(-1)
    assert c_loop().run(ctypes.addressof(records), 0, 3, ctypes.byref(failed)) != 0
    assert failed.value == 1
    np.testing.assert_array_equal(never.numpy(), 0)           # the third call never ran


def test_no_vm_module_imports_the_graph_executor():
    """The VM's fused segments run through kiln.runtime.call_list, not the graph executor."""
    root = Path(kiln.__file__).parent / "runtime" / "vm"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module != "kiln.runtime.graph_executor", path.name
