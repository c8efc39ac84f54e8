"""Review of the VM's reference-count fast paths: a direct function recomputing into its last
result, and set_input refilling the NDArray it made from the last NumPy argument.

Each test holds something a user can hold (a tuple result's field tuple, an iterator over it,
a shallow copy, a traceback, a generator, ...) and checks against NumPy that what it sees
never changes when the VM runs again; and that a failed ``set_input`` changes nothing.
"""

from __future__ import annotations

import copy
import gc
import pickle

import numpy as np
import pytest
import torch

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
    exe = Executable(list(funcs), primitive_names=PRIMS, lib=kernels)
    return VirtualMachine(exe, kiln.cpu(0))


def pairs(rng, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(rng.standard_normal(SHAPE).astype("float32"),
             rng.standard_normal(SHAPE).astype("float32")) for _ in range(count)]


# -- direct functions: what a user holds of a tuple result -----------------------------------

TUPLE_HOLDERS = {
    # name: (what is kept of the result, the sum (field 0) read back from it)
    "fields tuple": (lambda out: out.fields, lambda kept: kept[0]),
    "iterator": (lambda out: iter(out), lambda kept: next(kept)),
    "copy.copy": (lambda out: copy.copy(out), lambda kept: kept[0]),
    "same fields in a new ADT": (lambda out: kiln.runtime.container.ADT(0, out.fields),
                                 lambda kept: kept[0]),
    "generator over it": (lambda out: (field for field in out), lambda kept: next(kept)),
    "list(out)": (lambda out: list(out), lambda kept: kept[0]),
    "get_outputs-like list": (lambda out: [out[0], out[1]], lambda kept: kept[0]),
}


@pytest.mark.parametrize("how", sorted(TUPLE_HOLDERS))
def test_what_is_kept_of_a_tuple_result_never_changes(kernels, rng, how):
    keep, read = TUPLE_HOLDERS[how]
    vm = make_vm(kernels, tuple_main())
    (x0, y0), *rest = pairs(rng, 3)
    kept = keep(vm.run(x0, y0))                   # the ADT itself is dropped
    for x, y in rest:
        again = vm.run(x, y)
        np.testing.assert_allclose(again[0].numpy(), x + y, rtol=1e-6)
        np.testing.assert_allclose(again[1].numpy(), x * y, rtol=1e-6)
        del again
    np.testing.assert_allclose(read(kept).numpy(), x0 + y0, rtol=1e-6)


def test_tuple_result_is_still_reused_when_nothing_is_kept(kernels, rng):
    vm = make_vm(kernels, tuple_main())
    (x0, y0), *rest = pairs(rng, 3)
    identity = id(vm.run(x0, y0))
    for x, y in rest:
        out = vm.run(x, y)
        assert id(out) == identity
        np.testing.assert_allclose(out[1].numpy(), x * y, rtol=1e-6)
        del out
    assert vm.memory_in_use() == 4096


SINGLE_HOLDERS = {
    # name: (what is kept of the result and the VM, the sum read back from it as NumPy)
    "get_output": (lambda out, vm: vm.get_output(0), lambda kept: kept.numpy()),
    "get_outputs list": (lambda out, vm: vm.get_outputs(), lambda kept: kept[0].numpy()),
    "copy.copy": (lambda out, vm: copy.copy(out), lambda kept: kept.numpy()),
    "pickled": (lambda out, vm: pickle.dumps(out), lambda kept: pickle.loads(kept).numpy()),
    "unconsumed DLPack capsule": (lambda out, vm: out.__dlpack__(),
                                  lambda kept: np.from_dlpack(_Capsule(kept))),
    "np.frombuffer": (lambda out, vm: np.frombuffer(np.asarray(out, copy=False), "float32"),
                      lambda kept: kept.reshape(SHAPE)),
    "np.asarray copy=None": (lambda out, vm: np.asarray(out, copy=None), lambda kept: kept),
}


class _Capsule:
    """Hands a kept DLPack capsule to ``np.from_dlpack``."""

    def __init__(self, capsule) -> None:
        self.capsule = capsule

    def __dlpack__(self, **_):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("how", sorted(SINGLE_HOLDERS))
def test_what_is_kept_of_a_single_result_never_changes(kernels, rng, how):
    keep, read = SINGLE_HOLDERS[how]
    vm = make_vm(kernels, single_main())
    (x0, y0), *rest = pairs(rng, 3)
    kept = keep(vm.run(x0, y0), vm)
    for x, y in rest:
        np.testing.assert_allclose(vm.run(x, y).numpy(), x + y, rtol=1e-6)
    np.testing.assert_allclose(read(kept), x0 + y0, rtol=1e-6)


def raise_with(value):
    raise ValueError("holding the value in this frame")


def test_result_held_only_by_a_traceback_never_changes(kernels, rng):
    vm = make_vm(kernels, single_main())
    (x0, y0), *rest = pairs(rng, 3)
    try:
        raise_with(vm.run(x0, y0))
    except ValueError as err:
        kept = err                                # its traceback's frame holds the result
    for x, y in rest:
        np.testing.assert_allclose(vm.run(x, y).numpy(), x + y, rtol=1e-6)
    held = kept.__traceback__.tb_next.tb_frame.f_locals["value"]
    np.testing.assert_allclose(held.numpy(), x0 + y0, rtol=1e-6)


def test_result_captured_by_a_suspended_generator_never_changes(kernels, rng):
    vm = make_vm(kernels, single_main())
    (x0, y0), *rest = pairs(rng, 3)

    def later():
        out = vm.run(x0, y0)
        yield
        yield out.numpy()

    gen = later()
    next(gen)
    for x, y in rest:
        np.testing.assert_allclose(vm.run(x, y).numpy(), x + y, rtol=1e-6)
    np.testing.assert_allclose(next(gen), x0 + y0, rtol=1e-6)


def double_then_mul() -> VMFunction:
    """main(x, y) = (x + x) * y: a y of another shape fails the second kernel only."""
    return VMFunction("main", ["x", "y"], [
        LoadConsti(2 * NBYTES, 2), AllocStorage(2, 64, "float32", 0, 3),
        LoadConsti(0, 4), AllocTensor(3, 4, SHAPE, "float32", 5),
        InvokePacked(0, 1, (0, 0, 5)),
        LoadConsti(NBYTES, 6), AllocTensor(3, 6, SHAPE, "float32", 7),
        InvokePacked(1, 1, (5, 1, 7)), KillRegister(5), Ret(7),
    ], 8)


@pytest.mark.parametrize("hold", [True, False])
def test_kernel_failing_mid_function_leaves_results_and_memory_intact(kernels, rng, hold):
    vm = make_vm(kernels, double_then_mul())
    (x0, y0), (x1, _), (x2, y2) = pairs(rng, 3)
    first = vm.run(x0, y0)
    if not hold:
        del first                                 # the failing run may reuse its block
    with pytest.raises(TVMError, match="instruction 7"):
        vm.run(x1, np.ones((3, 8), "float32"))
    if hold:
        np.testing.assert_allclose(first.numpy(), (x0 + x0) * y0, rtol=1e-6)
        del first
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


def test_memory_stays_bounded_when_fields_are_kept_and_dropped_in_turn(kernels, rng):
    vm = make_vm(kernels, tuple_main())
    kept = None
    for step, (x, y) in enumerate(pairs(rng, 12)):
        out = vm.run(x, y)
        if kept is not None:
            np.testing.assert_allclose(kept[0][0].numpy(), kept[1], rtol=1e-6)
        kept = (out.fields, x + y) if step % 2 else None
        del out
        assert vm.memory_in_use() <= 2 * 4096
    del kept
    vm.invoke("main")
    assert vm.memory_in_use() == 4096


def test_memoryview_and_torch_import_of_a_result_never_change(kernels, rng):
    vm = make_vm(kernels, single_main())
    (x0, y0), (x1, y1), *rest = pairs(rng, 4)
    view = memoryview(np.asarray(vm.run(x0, y0), copy=False))
    imported = torch.from_dlpack(vm.run(x1, y1))
    for x, y in rest:
        np.testing.assert_allclose(vm.run(x, y).numpy(), x + y, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(view), x0 + y0, rtol=1e-6)
    np.testing.assert_allclose(imported.numpy(), x1 + y1, rtol=1e-6)


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


def test_input_seen_through_a_result_is_not_refilled_after_a_kept_error(kernels, rng):
    """A failed run whose traceback keeps the old input list alive while set_input refills
    must not leave a count that a later user reference can hide behind."""
    vm = make_vm(kernels, flag_main(), constant_main())
    x0, x1, x2 = (rng.standard_normal(SHAPE).astype("float32") for _ in range(3))
    vm.set_input("main", x0, np.array(0))
    try:
        vm.invoke_stateful("main")                # Fatal after dropping x's register
    except TVMError as err:
        kept = err
    vm.set_input("main", x1, np.array(1))         # refills x's NDArray; old list still alive
    out = vm.invoke("main")                       # the input NDArray itself
    np.testing.assert_array_equal(out.numpy(), x1)
    vm.invoke("other")                            # the VM lets go of it
    del kept
    gc.collect()
    vm.set_input("main", x2, np.array(1))
    np.testing.assert_array_equal(out.numpy(), x1)
    np.testing.assert_array_equal(vm.invoke("main").numpy(), x2)


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
