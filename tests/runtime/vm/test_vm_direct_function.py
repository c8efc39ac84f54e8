"""Direct functions: a function that is one fused segment and a Ret runs without a frame, and
reuses its last result's block only when nothing outside the VM can observe it.

The oracle is NumPy; the property checked throughout is that a result the user still holds
(as an NDArray, a NumPy array or view of it, a DLPack import, a tuple field) never changes
when the VM runs again.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime.error import TVMError
from kiln.runtime.vm import Executable, VirtualMachine, VMFunction
from kiln.runtime.vm.bytecode import (
    AllocADT,
    AllocStorage,
    AllocTensor,
    If,
    InvokePacked,
    KillRegister,
    LoadConsti,
    Ret,
)

PRIMS = ["add_f32", "mul_f32"]
ADD, MUL = 0, 1
SHAPE = (4, 8)
NBYTES = 4 * 8 * 4


def single_result() -> VMFunction:
    """main(x, y) = (x + y) * y; the sum is killed inside the segment."""
    return VMFunction("main", ["x", "y"], [
        LoadConsti(2 * NBYTES, 2), AllocStorage(2, 64, "float32", 0, 3),
        LoadConsti(0, 4), AllocTensor(3, 4, SHAPE, "float32", 5),
        InvokePacked(ADD, 1, (0, 1, 5)),
        LoadConsti(NBYTES, 6), AllocTensor(3, 6, SHAPE, "float32", 7),
        InvokePacked(MUL, 1, (5, 1, 7)), KillRegister(5), Ret(7),
    ], 8)


def tuple_result() -> VMFunction:
    """main(x, y) = (x + y, x * y)."""
    return VMFunction("main", ["x", "y"], [
        LoadConsti(2 * NBYTES, 2), AllocStorage(2, 64, "float32", 0, 3),
        LoadConsti(0, 4), AllocTensor(3, 4, SHAPE, "float32", 5),
        InvokePacked(ADD, 1, (0, 1, 5)),
        LoadConsti(NBYTES, 6), AllocTensor(3, 6, SHAPE, "float32", 7),
        InvokePacked(MUL, 1, (0, 1, 7)), AllocADT(0, (5, 7), 8), Ret(8),
    ], 9)


def make_vm(kernels, func: VMFunction) -> VirtualMachine:
    return VirtualMachine(Executable([func], primitive_names=PRIMS, lib=kernels), kiln.cpu(0))


def inputs(rng, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(rng.standard_normal(SHAPE).astype("float32"),
             rng.standard_normal(SHAPE).astype("float32")) for _ in range(count)]


def test_straight_line_function_is_direct_and_branching_one_is_not(kernels):
    assert make_vm(kernels, single_result())._direct[0] is not None
    assert make_vm(kernels, tuple_result())._direct[0] is not None
    branching = VMFunction("main", ["x", "y"], [
        *single_result().instructions[:8], LoadConsti(0, 8), If(8, 8, 1, 1), Ret(7),
    ], 9)
    assert make_vm(kernels, branching)._direct[0] is None


def test_dropped_result_is_recomputed_in_place(kernels, rng):
    vm = make_vm(kernels, single_result())
    first = vm.run(*inputs(rng, 1)[0])
    address, identity = first.data_ptr, id(first)
    del first                                     # only the VM holds it now
    for x, y in inputs(rng, 5):
        vm.set_input("main", x, y)
        vm.invoke_stateful("main")
        out = vm.get_output(0)
        assert out.data_ptr == address and id(out) == identity
        np.testing.assert_allclose(out.numpy(), (x + y) * y, rtol=1e-6)
        del out
    assert vm.memory_in_use() == 4096


HOLDERS = {
    "ndarray": lambda out: out,
    "numpy copy=False": lambda out: np.asarray(out, copy=False),
    "numpy view of it": lambda out: np.asarray(out, copy=False)[1:, ::2],
    "dlpack import": lambda out: np.from_dlpack(out),
    "_create_view": lambda out: out._create_view((32,)),
}


@pytest.mark.parametrize("how", sorted(HOLDERS))
def test_a_held_result_never_changes(kernels, rng, how):
    vm = make_vm(kernels, single_result())
    (x0, y0), *rest = inputs(rng, 4)
    held = HOLDERS[how](vm.run(x0, y0))
    for x, y in rest:
        np.testing.assert_allclose(vm.run(x, y).numpy(), (x + y) * y, rtol=1e-6)
    expected = HOLDERS[how](kiln.nd.array((x0 + y0) * y0))  # the same view of the oracle
    np.testing.assert_allclose(as_numpy(held), as_numpy(expected), rtol=1e-6)


def as_numpy(value) -> np.ndarray:
    return value.numpy() if isinstance(value, kiln.nd.NDArray) else np.array(value)


def test_result_kept_in_a_loop_variable_is_not_overwritten(kernels, rng):
    vm = make_vm(kernels, single_result())
    pairs = inputs(rng, 6)
    kept = [vm.run(x, y) for x, y in pairs]       # each run while the last is still held
    for out, (x, y) in zip(kept, pairs):
        np.testing.assert_allclose(out.numpy(), (x + y) * y, rtol=1e-6)
    assert len({out.data_ptr for out in kept}) == len(kept)


def test_tuple_result_field_held_alone_survives(kernels, rng):
    vm = make_vm(kernels, tuple_result())
    (x0, y0), (x1, y1), (x2, y2) = inputs(rng, 3)
    product = vm.run(x0, y0)[1]                   # the tuple itself is dropped
    first = vm.run(x1, y1)
    np.testing.assert_allclose(product.numpy(), x0 * y0, rtol=1e-6)
    np.testing.assert_allclose(first[0].numpy(), x1 + y1, rtol=1e-6)
    identity = id(first)
    del first
    again = vm.run(x2, y2)                        # nothing held: same tuple object, new values
    assert id(again) == identity
    np.testing.assert_allclose(again[0].numpy(), x2 + y2, rtol=1e-6)
    np.testing.assert_allclose(again[1].numpy(), x2 * y2, rtol=1e-6)
    np.testing.assert_allclose(product.numpy(), x0 * y0, rtol=1e-6)


def test_input_that_is_the_previous_result_is_read_not_overwritten(kernels, rng):
    vm = make_vm(kernels, single_result())
    x, y = inputs(rng, 1)[0]
    out = vm.run(x, y)
    expected = (x + y) * y
    for _ in range(3):                            # feed each result back in as x
        out = vm.run(out, y)
        expected = (expected + y) * y
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)


def test_memory_returns_to_the_pool_when_the_vm_lets_go(kernels, rng):
    vm = make_vm(kernels, single_result())
    for x, y in inputs(rng, 3):
        vm.run(x, y)
    vm._last_result = None                        # what replacing the result does
    assert vm.memory_in_use() == 0 and vm.allocators[0].cached_bytes == 4096


def test_kernel_error_in_a_direct_function_names_the_instruction_and_vm_recovers(kernels,
                                                                              rng):
    vm = make_vm(kernels, single_result())
    x, y = inputs(rng, 1)[0]
    vm.run(x, y)
    with pytest.raises(TVMError, match="operand sizes differ\n  in @main instruction 4"):
        vm.run(np.zeros((3, 8), "float32"), y)
    assert vm.frame_depth == 0
    np.testing.assert_allclose(vm.run(x, y).numpy(), (x + y) * y, rtol=1e-6)


def test_naive_allocator_runs_the_bytecode(kernels, rng):
    exe = Executable([single_result()], primitive_names=PRIMS, lib=kernels)
    vm = VirtualMachine(exe, kiln.cpu(0), "naive")
    outs = [(vm.run(x, y), (x + y) * y) for x, y in inputs(rng, 3)]
    for out, expected in outs:
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def permuted_reads() -> VMFunction:
    """main(x, y, z, unused) = (z + y) * x: the kernels read the arguments in the order
    z, y, x, and never read the last one."""
    return VMFunction("main", ["x", "y", "z", "unused"], [
        LoadConsti(2 * NBYTES, 4), AllocStorage(4, 64, "float32", 0, 5),
        LoadConsti(0, 6), AllocTensor(5, 6, SHAPE, "float32", 7),
        InvokePacked(ADD, 1, (2, 1, 7)),
        LoadConsti(NBYTES, 8), AllocTensor(5, 8, SHAPE, "float32", 9),
        InvokePacked(MUL, 1, (7, 0, 9)), KillRegister(7), Ret(9),
    ], 10)


def test_arguments_reach_the_kernels_by_register_not_by_first_read(kernels, rng):
    # The segment numbers its inputs in the order the kernels first read them (z, y, x); the
    # direct path must still hand argument i to the reads of register i.
    vm = make_vm(kernels, permuted_reads())
    assert vm._direct[0] is not None
    x, y, z, unused = (rng.standard_normal(SHAPE).astype("float32") for _ in range(4))
    for _ in range(2):  # the second run reuses the first result's block in place
        np.testing.assert_allclose(vm.run(x, y, z, unused).numpy(), (z + y) * x, rtol=1e-6)
