"""Fused segments: straight-line kernel work run from one prebuilt C call list.

The segments are recorded by ``Executable.fuse_segments`` (what the VM compiler calls). The
oracle is NumPy (and, for a compiled model, the graph executor); the properties checked are
the ones fusion must not change: results, the ownership contract (a result is valid until the
next run), memory release, errors and the pcs they name, and the profiler's per-kernel rows.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import kiln
from kiln.runtime.container import ADT
from kiln.runtime.error import TVMError
from kiln.runtime.vm import Executable, VirtualMachine, VMFunction
from kiln.runtime.vm.bytecode import (
    AllocADT,
    AllocStorage,
    AllocTensor,
    Goto,
    If,
    InvokePacked,
    KillRegister,
    LoadConsti,
    Ret,
)
from kiln.runtime.vm.memory import PooledAllocator

PRIMS = ["add_f32", "mul_f32"]
ADD, MUL = 0, 1
SHAPE = (4, 8)
NBYTES = 4 * 8 * 4


def add_then_mul(checked: bool = True) -> VMFunction:
    """main(x, y) = (x + y) * y, the sum in the same storage as the result and killed."""
    return VMFunction("main", ["x", "y"], [
        LoadConsti(2 * NBYTES, 2),
        AllocStorage(2, 64, "float32", 0, 3),
        LoadConsti(0, 4),
        AllocTensor(3, 4, SHAPE, "float32", 5),
        InvokePacked(ADD, 1, (0, 1, 5)),
        LoadConsti(NBYTES, 6),
        AllocTensor(3, 6, SHAPE, "float32", 7),
        InvokePacked(MUL, 1, (5, 1, 7)),
        KillRegister(5),
        Ret(7),
    ], 8, param_types=[(SHAPE, "float32"), (SHAPE, "float32")] if checked else ())


def fused_vm(kernels, main: VMFunction) -> VirtualMachine:
    """A VM for ``main`` with its segments recorded, as the VM compiler records them."""
    exe = Executable([main], primitive_names=PRIMS, lib=kernels).fuse_segments()
    return VirtualMachine(exe, kiln.cpu(0))


@pytest.fixture
def vm(kernels):
    return fused_vm(kernels, add_then_mul())


@pytest.fixture
def xy(rng):
    return (rng.standard_normal(SHAPE).astype("float32"),
            rng.standard_normal(SHAPE).astype("float32"))


def fused_entries(vm) -> list[int]:
    return [pc for pc, (handler, _) in enumerate(vm._code[0])
            if handler.__name__ == "_op_fused"]


def test_straight_line_kernels_fuse_into_one_segment(vm, xy):
    x, y = xy
    assert fused_entries(vm) == [0]
    for _ in range(3):
        np.testing.assert_allclose(vm.run(x, y).numpy(), (x + y) * y, rtol=1e-6)


def test_output_is_valid_until_the_next_run_and_a_copy_is_kept(vm, xy, rng):
    x, y = xy
    first = vm.run(x, y)
    kept = first.numpy()                                     # a copy: the caller's to keep
    np.testing.assert_allclose(first.numpy(), (x + y) * y, rtol=1e-6)
    x2 = rng.standard_normal(SHAPE).astype("float32")
    second = vm.run(x2, y)
    np.testing.assert_allclose(second.numpy(), (x2 + y) * y, rtol=1e-6)
    np.testing.assert_allclose(kept, (x + y) * y, rtol=1e-6)


def test_every_run_computes_into_the_same_block_with_one_call_list(vm, xy):
    x, y = xy
    first = vm.run(x, y)
    address, identity = first.data_ptr, id(first)
    out = vm.run(y, x)
    assert out.data_ptr == address and id(out) == identity
    assert len(out._np.base.storage.plans) == 1
    np.testing.assert_allclose(out.numpy(), (y + x) * x, rtol=1e-6)
    assert vm.memory_in_use() == 4096 and vm.allocators[0].num_allocations == 1


def test_memory_follows_changing_input_shapes_through_fused_programs(kernels):
    pool = PooledAllocator(kiln.cpu(0), idle_release_after=8)
    for n in range(1, 40):
        shape = (n * 1024,)                                  # n pages per tensor
        nbytes = n * 4096
        main = VMFunction("main", ["x", "y"], [
            LoadConsti(2 * nbytes, 2), AllocStorage(2, 64, "float32", 0, 3),
            LoadConsti(0, 4), AllocTensor(3, 4, shape, "float32", 5),
            InvokePacked(ADD, 1, (0, 1, 5)),
            LoadConsti(nbytes, 6), AllocTensor(3, 6, shape, "float32", 7),
            InvokePacked(MUL, 1, (5, 0, 7)), KillRegister(5), Ret(7),
        ], 8)
        vm = fused_vm(kernels, main)
        vm.allocators[0] = pool
        x = np.full(shape, 2, "float32")
        for _ in range(2):
            np.testing.assert_array_equal(vm.run(x, x).numpy(), (x + x) * x)
        del vm                                   # a VM keeps its direct function's block
        gc.collect()
    assert pool.used_bytes == 0
    assert pool.cached_bytes <= sum(2 * n * 4096 for n in range(39 - 8 - 16, 40))


def test_kernel_error_inside_a_segment_names_its_instruction_and_vm_stays_usable(kernels, xy):
    x, y = xy
    vm = fused_vm(kernels, add_then_mul(checked=False))
    np.testing.assert_allclose(vm.run(x, y).numpy(), (x + y) * y, rtol=1e-6)
    bad = np.zeros((3, 8), "float32")
    with pytest.raises(TVMError, match="kernel 'add_f32' failed: elementwise kernel: operand "
                                       "sizes differ\n  in @main instruction 4 \\(InvokePacked"):
        vm.run(bad, y)
    assert vm.frame_depth == 0
    np.testing.assert_allclose(vm.run(x, y).numpy(), (x + y) * y, rtol=1e-6)


def test_second_kernel_failing_reports_the_second_instruction(kernels, xy):
    x, y = xy
    main = add_then_mul()
    instrs = list(main.instructions)
    instrs[6] = AllocTensor(3, 6, (2, 8), "float32", 7)       # too small for mul's output
    exe = Executable([VMFunction("main", ["x", "y"], instrs, 8)], primitive_names=PRIMS,
                     lib=kernels).fuse_segments()
    vm = VirtualMachine(exe, kiln.cpu(0))
    assert fused_entries(vm) == [0]
    with pytest.raises(TVMError, match="sizes differ\n  in @main instruction 7 \\(InvokePacked"):
        vm.run(x, y)
    assert vm.frame_depth == 0


def test_tuple_input_runs_unfused_and_flattens_like_invoke_packed(kernels, xy):
    x, y = xy
    main = VMFunction("main", ["pair"], [
        LoadConsti(NBYTES, 1), AllocStorage(1, 64, "float32", 0, 2),
        LoadConsti(0, 3), AllocTensor(2, 3, SHAPE, "float32", 4),
        InvokePacked(ADD, 1, (0, 4)),                         # the pair flattens to x, y
        Ret(4),
    ], 5)
    vm = fused_vm(kernels, main)
    assert fused_entries(vm) == [0]
    for _ in range(2):
        np.testing.assert_allclose(vm.run((x, y)).numpy(), x + y, rtol=1e-6)
    with pytest.raises(TVMError, match="a tuple argument holds ADT, not a tensor\n  in @main "
                                       "instruction 4"):
        vm.run(ADT(0, [ADT(0, []), kiln.nd.array(y)]))


@pytest.mark.parametrize("kind", ["naive", "pooled"])
def test_registers_after_a_segment_match_the_unfused_program(kernels, xy, kind):
    """The segment leaves the tuple's fields, the storage and killed registers as expected."""
    x, y = xy
    instrs = list(add_then_mul().instructions)
    instrs[8:] = [AllocADT(0, (5, 7), 8), Ret(8)]            # return the sum and the product
    exe = Executable([VMFunction("main", ["x", "y"], instrs, 9)], primitive_names=PRIMS,
                     lib=kernels).fuse_segments()
    vm = VirtualMachine(exe, kiln.cpu(0), kind)
    for _ in range(3):
        result = vm.run(x, y)
        np.testing.assert_allclose(result.fields[0].numpy(), x + y, rtol=1e-6)
        np.testing.assert_allclose(result.fields[1].numpy(), (x + y) * y, rtol=1e-6)
    # Naive: one AllocStorage per run; pooled: the direct function keeps its one block.
    assert vm.allocators[0].num_allocations == (3 if kind == "naive" else 1)


def test_profile_times_each_kernel_of_a_fused_program(vm, xy):
    x, y = xy
    assert fused_entries(vm) == [0]
    report = vm.profile(x, y)
    rows = {row["Name"]: row for row in report.calls}
    assert set(rows) == {"add_f32", "mul_f32", "FusedSegment", "Ret", "(dispatch)"}
    for kernel in ("add_f32", "mul_f32"):
        assert rows[kernel]["Count"] == 1 and rows[kernel]["Op"] == "InvokePacked"
        assert rows[kernel]["Output Shapes"] == "[(4, 8)]" and rows[kernel]["Duration (us)"] > 0
    assert rows["FusedSegment"]["Count"] == 1
    assert sum(row["Percent"] for row in report.calls) == pytest.approx(100.0)
    np.testing.assert_allclose(vm.run(x, y).numpy(), (x + y) * y, rtol=1e-6)


def test_profile_of_a_segment_that_runs_unfused_times_its_instructions(kernels, xy):
    x, y = xy
    exe = Executable([add_then_mul()], primitive_names=PRIMS, lib=kernels).fuse_segments()
    report = VirtualMachine(exe, kiln.cpu(0), "naive").profile(x, y)
    rows = {row["Name"]: row for row in report.calls}
    assert "FusedSegment" not in rows
    assert rows["AllocTensor"]["Count"] == 2 and rows["KillRegister"]["Count"] == 1
    assert rows["add_f32"]["Count"] == 1 and rows["add_f32"]["Output Shapes"] == "[(4, 8)]"
    assert sum(row["Percent"] for row in report.calls) == pytest.approx(100.0)


def test_tuple_made_and_consumed_inside_a_segment(kernels, xy):
    """AllocADT of two views passed to a kernel (flattened), then returned: all fused."""
    x, y = xy
    main = VMFunction("main", ["x", "y"], [
        LoadConsti(2 * NBYTES, 2), AllocStorage(2, 64, "float32", 0, 3),
        LoadConsti(0, 4), AllocTensor(3, 4, SHAPE, "float32", 5),
        InvokePacked(ADD, 1, (0, 1, 5)),                      # s = x + y
        AllocADT(0, (5, 1), 6),                               # (s, y)
        LoadConsti(NBYTES, 7), AllocTensor(3, 7, SHAPE, "float32", 8),
        InvokePacked(MUL, 1, (6, 8)),                         # p = s * y, from the tuple
        KillRegister(5),
        AllocADT(0, (6, 8), 9),                               # ((s, y), p)
        KillRegister(6),
        Ret(9),
    ], 10)
    vm = fused_vm(kernels, main)
    assert fused_entries(vm) == [0]
    for _ in range(3):
        result = vm.run(x, y)
        (total, second), product = result.fields[0].fields, result.fields[1]
        np.testing.assert_allclose(total.numpy(), x + y, rtol=1e-6)
        np.testing.assert_array_equal(second.numpy(), y)
        np.testing.assert_allclose(product.numpy(), (x + y) * y, rtol=1e-6)


def test_jump_into_the_middle_of_a_segment_sees_every_register_it_left(kernels, xy):
    """A loop re-enters at the segment's second kernel, which reads the first one's result
    (a register nothing outside reads): the fused entry must still leave it set."""
    x, y = xy
    main = VMFunction("main", ["x", "y"], [
        LoadConsti(0, 9),                                     # flag = 0
        LoadConsti(2 * NBYTES, 2), AllocStorage(2, 64, "float32", 0, 3),
        LoadConsti(0, 4), AllocTensor(3, 4, SHAPE, "float32", 5),
        InvokePacked(ADD, 1, (0, 1, 5)),                      # s = x + y
        LoadConsti(NBYTES, 6),                                # pc 6: the loop re-enters here
        AllocTensor(3, 6, SHAPE, "float32", 7),
        InvokePacked(MUL, 1, (5, 1, 7)),                      # p = s * y
        LoadConsti(1, 10),
        If(9, 10, 1, 2),                                      # flag == 1 ? Ret : loop
        Ret(7),
        LoadConsti(1, 9),
        Goto(-7),
    ], 11)
    vm = fused_vm(kernels, main)
    assert fused_entries(vm) == [0]
    for _ in range(2):
        np.testing.assert_allclose(vm.run(x, y).numpy(), (x + y) * y, rtol=1e-6)


def test_unfused_calls_see_new_argument_tensors_every_run(kernels, rng):
    """The naive allocator runs unfused: each run's new tensors reach the kernels."""
    exe = Executable([add_then_mul()], primitive_names=PRIMS, lib=kernels).fuse_segments()
    vm = VirtualMachine(exe, kiln.cpu(0), "naive")
    assert fused_entries(vm) == []
    for _ in range(3):
        x, y = (rng.standard_normal(SHAPE).astype("float32") for _ in range(2))
        np.testing.assert_allclose(vm.run(x, y).numpy(), (x + y) * y, rtol=1e-6)
