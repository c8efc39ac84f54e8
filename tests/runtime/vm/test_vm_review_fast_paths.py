"""Review of the VM's fast paths against TVM's ownership contract, with no reference counts.

The contract (``kiln.runtime.vm.vm`` docstring): a result is valid until the next run of its
function, which may overwrite it in place; copy it, or give the VM destination tensors with
``set_outputs``, to keep it. Inputs the VM made from NumPy arrays are its own and are refilled
by the next ``set_input``. So behaviour never depends on what the caller happens to hold (a
field tuple, an iterator, a traceback): every test checks one rule against NumPy.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln.runtime.error import TVMError
from kiln.runtime.vm import Executable, VirtualMachine, VMFunction
from kiln.runtime.vm.bytecode import (
    AllocADT,
    AllocStorage,
    AllocTensor,
    Fatal,
    If,
    InvokePacked,
    KillRegister,
    LoadConsti,
    Ret,
    ShapeOf,
)

SHAPE = (4, 8)
NBYTES = 4 * 8 * 4
PRIMS = ["add_f32", "mul_f32"]


def tuple_main() -> VMFunction:
    """main(x, y) = (x + y, x * y): one segment and a Ret (a direct function)."""
    return VMFunction("main", ["x", "y"], [
        LoadConsti(2 * NBYTES, 2), AllocStorage(2, 64, "float32", 0, 3),
        LoadConsti(0, 4), AllocTensor(3, 4, SHAPE, "float32", 5),
        InvokePacked(0, 1, (0, 1, 5)),
        LoadConsti(NBYTES, 6), AllocTensor(3, 6, SHAPE, "float32", 7),
        InvokePacked(1, 1, (0, 1, 7)), AllocADT(0, (5, 7), 8), Ret(8),
    ], 9)


def single_main() -> VMFunction:
    """main(x, y) = x + y (a direct function)."""
    return VMFunction("main", ["x", "y"], [
        LoadConsti(NBYTES, 2), AllocStorage(2, 64, "float32", 0, 3),
        LoadConsti(0, 4), AllocTensor(3, 4, SHAPE, "float32", 5),
        InvokePacked(0, 1, (0, 1, 5)), Ret(5),
    ], 6)


def make_vm(kernels, *funcs: VMFunction) -> VirtualMachine:
    exe = Executable(list(funcs), primitive_names=PRIMS, lib=kernels).fuse_segments()
    return VirtualMachine(exe, kiln.cpu(0))


def pairs(rng, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(rng.standard_normal(SHAPE).astype("float32"),
             rng.standard_normal(SHAPE).astype("float32")) for _ in range(count)]


def test_no_reference_counts_anywhere_in_kiln():
    """Ownership is a documented contract, never a guess from CPython internals."""
    root = Path(kiln.__file__).parent
    # TVM's testing.object_use_count reports a reference count by definition: a diagnostic
    # for test code, which nothing in kiln calls.
    allowed = {"testing/__init__.py"}
    offenders = [str(path.relative_to(root)) for path in sorted(root.rglob("*.py"))
                 if "getrefcount" in path.read_text(encoding="utf-8")]
    assert sorted(set(offenders) - allowed) == []
    users = [str(path.relative_to(root)) for path in sorted(root.rglob("*.py"))
             if "object_use_count(" in path.read_text(encoding="utf-8")]
    assert users == ["testing/__init__.py"]


# -- direct functions: what a user holds changes nothing ------------------------------------

TUPLE_HOLDERS = {
    # name: what is kept of the result (the behaviour must not depend on it)
    "nothing": lambda out: None,
    "fields tuple": lambda out: out.fields,
    "iterator": lambda out: iter(out),
    "copy.copy": lambda out: copy.copy(out),
    "same fields in a new ADT": lambda out: kiln.runtime.container.ADT(0, out.fields),
    "generator over it": lambda out: (field for field in out),
    "list(out)": lambda out: list(out),
}


@pytest.mark.parametrize("how", sorted(TUPLE_HOLDERS))
def test_a_tuple_result_is_recomputed_in_place_whatever_is_held(kernels, rng, how):
    vm = make_vm(kernels, tuple_main())
    (x0, y0), *rest = pairs(rng, 3)
    first = vm.run(x0, y0)
    kept = TUPLE_HOLDERS[how](first)
    addresses = [field.data_ptr for field in first]
    for x, y in rest:
        again = vm.run(x, y)
        assert again is first and [field.data_ptr for field in again] == addresses
        np.testing.assert_allclose(again[0].numpy(), x + y, rtol=1e-6)
        np.testing.assert_allclose(again[1].numpy(), x * y, rtol=1e-6)
    assert vm.memory_in_use() == 4096
    del kept


COPIES = {
    # name: (a copy of the result, the sum read back from it as NumPy)
    "numpy()": (lambda out: out.numpy(), lambda kept: kept),
    "copyto": (lambda out: out.copyto(kiln.cpu(0)), lambda kept: kept.numpy()),
    "pickled": (lambda out: pickle.dumps(out), lambda kept: pickle.loads(kept).numpy()),
    "np.array": (lambda out: np.array(out), lambda kept: kept),
}


@pytest.mark.parametrize("how", sorted(COPIES))
def test_a_copy_of_a_single_result_outlives_later_runs(kernels, rng, how):
    keep, read = COPIES[how]
    vm = make_vm(kernels, single_main())
    (x0, y0), *rest = pairs(rng, 3)
    kept = keep(vm.run(x0, y0))
    for x, y in rest:
        np.testing.assert_allclose(vm.run(x, y).numpy(), x + y, rtol=1e-6)
    np.testing.assert_allclose(read(kept), x0 + y0, rtol=1e-6)


def test_set_outputs_keeps_each_tuple_run_in_the_callers_tensors(kernels, rng):
    vm = make_vm(kernels, tuple_main())
    runs = pairs(rng, 3)
    kept = []
    for x, y in runs:
        outs = [kiln.nd.empty(SHAPE, "float32") for _ in range(2)]
        vm.set_outputs("main", *outs)
        result = vm.run(x, y)
        assert list(result.fields) == outs
        kept.append(outs)
    for (total, product), (x, y) in zip(kept, runs):
        np.testing.assert_allclose(total.numpy(), x + y, rtol=1e-6)
        np.testing.assert_allclose(product.numpy(), x * y, rtol=1e-6)
    with pytest.raises(TVMError, match="returned 2 values but set_outputs gave 1 tensors"):
        vm.set_outputs("main", kiln.nd.empty(SHAPE, "float32"))
        vm.run(*runs[0])


def test_a_result_passed_back_in_is_read_before_it_is_written(kernels, rng):
    vm = make_vm(kernels, tuple_main())
    (x, y), = pairs(rng, 1)
    out = vm.run(x, y)
    expected_sum, expected_product = x + y, x * y
    for _ in range(3):                            # x := the last sum, which the run rewrites
        out = vm.run(out[0], y)
        expected_sum, expected_product = expected_sum + y, expected_sum * y
        np.testing.assert_allclose(out[0].numpy(), expected_sum, rtol=1e-5)
        np.testing.assert_allclose(out[1].numpy(), expected_product, rtol=1e-5)
    assert vm.memory_in_use() <= 2 * 4096


def double_then_mul() -> VMFunction:
    """main(x, y) = (x + x) * y: a y of another shape fails the second kernel only."""
    return VMFunction("main", ["x", "y"], [
        LoadConsti(2 * NBYTES, 2), AllocStorage(2, 64, "float32", 0, 3),
        LoadConsti(0, 4), AllocTensor(3, 4, SHAPE, "float32", 5),
        InvokePacked(0, 1, (0, 0, 5)),
        LoadConsti(NBYTES, 6), AllocTensor(3, 6, SHAPE, "float32", 7),
        InvokePacked(1, 1, (5, 1, 7)), KillRegister(5), Ret(7),
    ], 8)


def test_kernel_failing_mid_function_names_its_instruction_and_the_vm_recovers(kernels, rng):
    vm = make_vm(kernels, double_then_mul())
    (x0, y0), (x1, _), (x2, y2) = pairs(rng, 3)
    kept = vm.run(x0, y0).numpy()
    with pytest.raises(TVMError, match="instruction 7"):
        vm.run(x1, np.ones((3, 8), "float32"))
    np.testing.assert_allclose(kept, (x0 + x0) * y0, rtol=1e-6)
    np.testing.assert_allclose(vm.run(x2, y2).numpy(), (x2 + x2) * y2, rtol=1e-6)
    assert vm.frame_depth == 0 and vm.memory_in_use() == 4096


def huge_storage_main() -> VMFunction:
    """main(x, y) = x + y in a storage no machine has (2**55 bytes)."""
    return VMFunction("main", ["x", "y"], [
        LoadConsti(2**55, 2), AllocStorage(2, 64, "float32", 0, 3),
        LoadConsti(0, 4), AllocTensor(3, 4, SHAPE, "float32", 5),
        InvokePacked(0, 1, (0, 1, 5)), Ret(5),
    ], 6)


def test_storage_that_cannot_be_had_names_its_instruction(kernels, rng):
    vm = make_vm(kernels, huge_storage_main())
    assert vm._direct[0] is not None
    with pytest.raises(TVMError, match=r"cannot allocate .*\n  in @main instruction 1 "
                                       r"\(AllocStorage\)"):
        vm.run(*pairs(rng, 1)[0])
    assert vm.frame_depth == 0 and vm.memory_in_use() == 0


# -- set_input refills -----------------------------------------------------------------------

def test_failed_set_input_leaves_the_stored_inputs_as_they_were(kernels, rng):
    vm = make_vm(kernels, single_main())
    (x0, y0), (x1, _) = pairs(rng, 2)
    vm.set_input("main", x0, y0)
    with pytest.raises(TVMError, match="cannot pass a str"):
        vm.set_input("main", x1, "not an array")  # x1 would refill x0's NDArray
    vm.invoke_stateful("main")
    np.testing.assert_allclose(vm.get_output(0).numpy(), x0 + y0, rtol=1e-6)


def flag_main() -> VMFunction:
    """main(x, flag) = x if flag == 1 else (drop x; Fatal)."""
    return VMFunction("main", ["x", "flag"], [
        LoadConsti(1, 2), If(1, 2, 1, 2), Ret(0), KillRegister(0), Fatal(),
    ], 3)


def constant_main() -> VMFunction:
    return VMFunction("other", [], [LoadConsti(7, 0), Ret(0)], 1)


def test_refill_does_not_depend_on_a_kept_traceback(kernels, rng):
    """A failed run whose traceback keeps the old input list alive changes nothing: the next
    set_input refills the VM's input NDArray, which a result aliasing it then shows."""
    vm = make_vm(kernels, flag_main(), constant_main())
    x0, x1, x2 = (rng.standard_normal(SHAPE).astype("float32") for _ in range(3))
    vm.set_input("main", x0, np.array(0))
    try:
        vm.invoke_stateful("main")                # Fatal after dropping x's register
    except TVMError as err:
        kept = err
    made = vm._inputs["main"][0]
    vm.set_input("main", x1, np.array(1))
    out = vm.invoke("main")                       # the input NDArray itself
    assert out is made
    np.testing.assert_array_equal(out.numpy(), x1)
    vm.set_input("main", x2, np.array(1))
    np.testing.assert_array_equal(out.numpy(), x2)
    np.testing.assert_array_equal(vm.invoke("main").numpy(), x2)
    del kept


def test_refill_still_happens_in_the_plain_case(kernels, rng):
    vm = make_vm(kernels, single_main())
    vm.set_input("main", *pairs(rng, 1)[0])
    made = [id(t) for t in vm._inputs["main"]]
    for x, y in pairs(rng, 3):
        np.testing.assert_allclose(vm.run(x, y).numpy(), x + y, rtol=1e-6)
        assert [id(t) for t in vm._inputs["main"]] == made



# -- ShapeOf's cached shape tensors --------------------------------------------------------

def shape_vm() -> VirtualMachine:
    """main(x) = shape_of(x), the VM's cached read-only int64 tensor."""
    return VirtualMachine(Executable([VMFunction("main", ["x"], [ShapeOf(0, 1), Ret(1)], 2)]),
                          kiln.cpu(0))


def test_a_returned_shape_tensor_cannot_be_written_and_stays_right():
    vm = shape_vm()
    first = vm.run(np.zeros((3, 5), "float32"))
    with pytest.raises(TVMError, match="read-only"):
        first.copyfrom(np.array([9, 9]))
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(first, copy=False)[0] = 9
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(first._create_view((2,)), copy=False)[1] = 9
    second = vm.run(np.zeros((2, 7, 1), "float32"))
    np.testing.assert_array_equal(first.numpy(), [3, 5])
    np.testing.assert_array_equal(second.numpy(), [2, 7, 1])
    np.testing.assert_array_equal(vm.run(np.zeros((3, 5), "int8")).numpy(), [3, 5])


# -- the contract as a property: any sequence of calls, each result read before the next -----

STEPS = st.lists(st.sampled_from(["run", "feed back", "set_input+invoke", "set_outputs",
                                  "hold a field"]), min_size=1, max_size=8)


@settings(max_examples=25, deadline=None)
@given(steps=STEPS, seed=st.integers(0, 2**16))
def test_every_result_is_right_until_the_next_run_whatever_the_sequence(kernels, steps, seed):
    """Each step's result read right after it equals NumPy, whatever came before (held
    fields, results fed back in, destinations given and taken away)."""
    rng = np.random.default_rng(seed)
    vm = make_vm(kernels, tuple_main())
    last = None
    held = []
    for step in steps:
        x, y = pairs(rng, 1)[0]
        vm.set_outputs("main")                    # no destinations unless this step gives some
        if step == "feed back" and last is not None:
            x = last[0]                           # the previous sum, still in the VM's block
        if step == "set_outputs":
            vm.set_outputs("main", *(kiln.nd.empty(SHAPE, "float32") for _ in range(2)))
        if step == "set_input+invoke":
            vm.set_input("main", x, y)
            out = vm.invoke("main")
        else:
            out = vm.run(x, y)
        xv = x.numpy() if isinstance(x, kiln.nd.NDArray) else x
        np.testing.assert_allclose(out[0].numpy(), xv + y, rtol=1e-5)
        np.testing.assert_allclose(out[1].numpy(), xv * y, rtol=1e-5)
        if step == "hold a field":
            held.append(out.fields)
        last = out
    # blocks: the VM's own, one given up to an input fed back, and those fields hold
    assert vm.memory_in_use() <= (2 + len(held)) * 4096
