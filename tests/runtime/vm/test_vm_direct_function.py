"""Direct functions: a function that is one fused segment and a Ret runs without a frame,
computing every run into the one block it owns (TVM's contract: a result is valid until the
next run; copy it or use set_outputs to keep it).

The oracle is NumPy; the properties checked are the contract (copies and set_outputs
destinations keep their values, results are recomputed in place), an input that is the last
result, errors naming their instruction, and memory returning to the pool with the VM.
"""

from __future__ import annotations

import gc

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
    exe = Executable([func], primitive_names=PRIMS, lib=kernels).fuse_segments()
    return VirtualMachine(exe, kiln.cpu(0))


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


def test_every_run_recomputes_the_same_result_in_place(kernels, rng):
    vm = make_vm(kernels, single_result())
    first = vm.run(*inputs(rng, 1)[0])
    address, identity = first.data_ptr, id(first)
    for x, y in inputs(rng, 5):                   # held or not: the contract is the same
        vm.set_input("main", x, y)
        vm.invoke_stateful("main")
        out = vm.get_output(0)
        assert out.data_ptr == address and id(out) == identity
        np.testing.assert_allclose(out.numpy(), (x + y) * y, rtol=1e-6)
    assert vm.memory_in_use() == 4096 and vm.allocators[0].num_allocations == 1


COPIES = {
    "numpy()": lambda out: out.numpy(),
    "np.array": lambda out: np.array(out),
    "copyto": lambda out: out.copyto(kiln.cpu(0)),
    "dlpack of a copy": lambda out: np.from_dlpack(out.copyto(kiln.cpu(0))),
}


@pytest.mark.parametrize("how", sorted(COPIES))
def test_a_copy_of_a_result_outlives_later_runs(kernels, rng, how):
    vm = make_vm(kernels, single_result())
    (x0, y0), *rest = inputs(rng, 4)
    kept = COPIES[how](vm.run(x0, y0))
    for x, y in rest:
        np.testing.assert_allclose(vm.run(x, y).numpy(), (x + y) * y, rtol=1e-6)
    np.testing.assert_allclose(as_numpy(kept), (x0 + y0) * y0, rtol=1e-6)


def as_numpy(value) -> np.ndarray:
    return value.numpy() if isinstance(value, kiln.nd.NDArray) else np.array(value)


def test_set_outputs_gives_each_run_the_callers_own_tensors(kernels, rng):
    vm = make_vm(kernels, single_result())
    pairs = inputs(rng, 4)
    kept = []
    for x, y in pairs:
        destination = kiln.nd.empty(SHAPE, "float32")
        vm.set_outputs("main", destination)
        assert vm.run(x, y) is destination
        kept.append(destination)
    for out, (x, y) in zip(kept, pairs):
        np.testing.assert_allclose(out.numpy(), (x + y) * y, rtol=1e-6)


def test_tuple_result_is_the_same_tuple_with_new_values(kernels, rng):
    vm = make_vm(kernels, tuple_result())
    (x0, y0), (x1, y1) = inputs(rng, 2)
    first = vm.run(x0, y0)
    product = first[1].numpy()
    again = vm.run(x1, y1)
    assert again is first
    np.testing.assert_allclose(again[0].numpy(), x1 + y1, rtol=1e-6)
    np.testing.assert_allclose(again[1].numpy(), x1 * y1, rtol=1e-6)
    np.testing.assert_allclose(product, x0 * y0, rtol=1e-6)


def test_input_that_is_the_previous_result_is_read_not_overwritten(kernels, rng):
    vm = make_vm(kernels, single_result())
    x, y = inputs(rng, 1)[0]
    out = vm.run(x, y)
    expected = (x + y) * y
    for _ in range(3):                            # feed each result back in as x
        out = vm.run(out, y)
        expected = (expected + y) * y
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)


def test_memory_returns_to_the_pool_when_the_vm_goes(kernels, rng):
    vm = make_vm(kernels, single_result())
    allocator = vm.allocators[0]
    for x, y in inputs(rng, 3):
        vm.run(x, y)
    assert allocator.used_bytes == 4096
    del vm
    gc.collect()
    assert allocator.used_bytes == 0 and allocator.cached_bytes == 4096


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
    exe = Executable([single_result()], primitive_names=PRIMS, lib=kernels).fuse_segments()
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
