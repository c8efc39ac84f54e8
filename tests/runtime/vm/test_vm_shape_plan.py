"""Per-shape plans (kiln.runtime.vm.shape_plan): a straight-line function with run-time shapes
runs as one C call list per argument signature; every case a plan cannot honour runs the
bytecode, whose results and errors the plan must reproduce exactly.

The programs are hand-assembled: ``add_i64`` kernels reading only shapes play the shape
functions (they size the storage), ``add_f32`` is the data kernel. NumPy is the oracle, and a
VM with naive memory (which never plans) is the bytecode's answer.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vm_programs import alloc_tensor

import kiln
from kiln.runtime.error import TVMError
from kiln.runtime.vm import shape_plan
from kiln.runtime.vm.bytecode import (
    AllocADT,
    AllocStorage,
    AllocTensor,
    AllocTensorReg,
    If,
    InvokePacked,
    KillRegister,
    LoadConst,
    LoadConsti,
    ReshapeTensor,
    Ret,
    ShapeOf,
)
from kiln.runtime.vm.executable import Executable, VMFunction
from kiln.runtime.vm.segment import SegmentError
from kiln.runtime.vm.vm import VirtualMachine

PRIMS = ["add_f32", "add_i64"]
ADD_F32, ADD_I64 = 0, 1


def _sized_add(x_shape_reg: int, base: int = 3) -> list:
    """Registers base..base+10: storage (in ``base + 8``) sized 4 * numel from the shape in
    ``x_shape_reg`` by two add_i64 'shape functions', and a float32 tensor of that shape in
    ``base + 10`` (13 by default) for a kernel to write."""
    b = base
    return [
        *alloc_tensor((1,), "int64", b, b + 1, b + 2, b + 3),
        InvokePacked(ADD_I64, 1, (x_shape_reg, x_shape_reg, b + 3)),   # 2n
        *alloc_tensor((1,), "int64", b + 4, b + 5, b + 6, b + 7),
        InvokePacked(ADD_I64, 1, (b + 3, b + 3, b + 7)),               # 4n bytes
        AllocStorage(b + 7, 64, "float32", 0, b + 8),
        LoadConsti(0, b + 9),
        AllocTensorReg(b + 8, b + 9, x_shape_reg, "float32", b + 10),
    ]


def add_program() -> VMFunction:
    """main(x: (n,), y: (n,)) = x + y, its output storage sized at run time."""
    main = VMFunction("main", ["x", "y"], [
        ShapeOf(0, 2), *_sized_add(2), InvokePacked(ADD_F32, 1, (0, 1, 13)), Ret(13),
    ], 14)
    return main


def reshape_program() -> VMFunction:
    """main(x: (2, n), y: (2n,)) = reshape(x, y.shape) + y: a reshaped argument."""
    return VMFunction("main", ["x", "y"], [
        ShapeOf(1, 2), *_sized_add(2),
        ReshapeTensor(0, 2, 14),
        InvokePacked(ADD_F32, 1, (14, 1, 13)), Ret(13),
    ], 15)


def make_vm(kernels, func: VMFunction, memory_cfg: str = "pooled") -> VirtualMachine:
    exe = Executable([func], primitive_names=PRIMS, lib=kernels)
    return VirtualMachine(exe, kiln.cpu(0), memory_cfg)


def vec(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype("float32")


def test_plans_match_numpy_and_the_bytecode_at_several_lengths(kernels):
    vm, bytecode = make_vm(kernels, add_program()), make_vm(kernels, add_program(), "naive")
    assert bytecode.plan_stats() is None  # naive memory never plans
    for n in (3, 5, 3, 3, 5, 1, 0, 0, 64, 64):
        x, y = vec(n, n), vec(n, n + 1)
        out = vm.run(x, y).numpy()
        np.testing.assert_array_equal(out, x + y)
        np.testing.assert_array_equal(out, bytecode.run(x, y).numpy())
    assert vm.plan_stats() == {"plans": 4, "built": 4, "disabled": False}


def test_a_plan_is_built_on_the_second_call_of_a_signature(kernels):
    vm = make_vm(kernels, add_program())
    x = vec(7, 0)
    first = vm.run(x, x)
    assert vm.plan_stats()["built"] == 0
    second = vm.run(x, x)
    assert vm.plan_stats()["built"] == 1
    third = vm.run(x, x)
    assert third is second and first is not second  # the plan hands out its own block
    np.testing.assert_array_equal(third.numpy(), 2 * x)


def test_storage_freed_by_kill_is_reused_in_the_plan_without_clobbering(kernels):
    """t1 = x + y; t2 = t1 + y; kill t1 and its storage; t3 = t2 + x: the plan lays t3 where
    t1 was, which is right only if the kernels keep their order."""
    main = VMFunction("main", ["x", "y"], [
        ShapeOf(0, 2),
        *_sized_add(2, 3), InvokePacked(ADD_F32, 1, (0, 1, 13)),     # t1 in $13 (storage $11)
        *_sized_add(2, 14), InvokePacked(ADD_F32, 1, (13, 1, 24)),   # t2 in $24
        KillRegister(13), KillRegister(11),
        *_sized_add(2, 25), InvokePacked(ADD_F32, 1, (24, 0, 35)),   # t3 in $35
        Ret(35),
    ], 36)
    vm, bytecode = make_vm(kernels, main), make_vm(kernels, main, "naive")
    for n in (6, 6, 6, 1000, 1000):
        x, y = vec(n, n), vec(n, 2 * n)
        out = vm.run(x, y).numpy()
        np.testing.assert_array_equal(out, bytecode.run(x, y).numpy())
        np.testing.assert_allclose(out, x + y + y + x, rtol=1e-6)
    assert vm.plan_stats()["built"] == 2


def test_a_program_without_kernels_never_holds_the_thread_pool(monkeypatch):
    from kiln.runtime import thread_pool

    def refuse():
        raise AssertionError("the thread pool was held for a program without kernels")

    monkeypatch.setattr(thread_pool, "hot", refuse)
    main = VMFunction("main", ["x"], [ShapeOf(0, 1), ReshapeTensor(0, 1, 2), Ret(2)], 3)
    vm = VirtualMachine(Executable([main]), kiln.cpu(0))
    x = vec(4, 0)
    for _ in range(3):
        np.testing.assert_array_equal(vm.run(x).numpy(), x)


def test_a_reshaped_argument_follows_each_new_input(kernels):
    vm = make_vm(kernels, reshape_program())
    for seed in range(4):
        x, y = vec(12, seed).reshape(2, 6), vec(12, seed + 10)
        np.testing.assert_array_equal(vm.run(x, y).numpy(), x.reshape(12) + y)
    assert vm.plan_stats()["built"] == 1


def test_a_result_passed_back_in_runs_the_bytecode(kernels):
    vm = make_vm(kernels, add_program())
    x = vec(9, 1)
    vm.run(x, x)
    out = vm.run(x, x)  # planned: lives in the plan's block
    kept = out.numpy()
    again = vm.run(out, out)  # reading its own block: the bytecode computes into new storage
    np.testing.assert_array_equal(again.numpy(), kept + kept)
    assert again is not out


def test_a_failing_kernel_in_a_plan_raises_as_the_bytecode_does(kernels):
    vm = make_vm(kernels, add_program())
    x, y = vec(4, 0), vec(5, 0)  # the shape functions size the output from x alone
    errors = []
    for _ in range(3):  # the bytecode, then the plan built for this signature, then the plan
        with pytest.raises(TVMError, match="operand sizes differ") as info:
            vm.run(x, y)
        errors.append(str(info.value))
    assert vm.plan_stats()["built"] == 1
    assert all("in @main instruction 14 (InvokePacked)" in e for e in errors), errors
    assert isinstance(info.value, SegmentError)
    np.testing.assert_array_equal(vm.run(x, x).numpy(), 2 * x)  # the VM is still usable


def test_a_size_read_from_tensor_data_disables_plans(kernels):
    main = VMFunction("main", ["n"], [
        AllocStorage(0, 64, "int64", 0, 1),  # the byte count is the argument's value
        LoadConsti(0, 2),
        AllocTensor(1, 2, (1,), "int64", 3),
        InvokePacked(ADD_I64, 1, (0, 0, 3)),
        Ret(3),
    ], 4)
    vm = make_vm(kernels, main)
    for value in (8, 8, 8, 16, 16):
        np.testing.assert_array_equal(vm.run(np.array([value])).numpy(), [2 * value])
    assert vm.plan_stats() == {"plans": 0, "built": 0, "disabled": True}


def test_a_constant_shape_is_planned_and_a_wrong_size_raises_as_the_bytecode_does():
    main = VMFunction("main", ["x"], [LoadConst(0, 0, 1), ReshapeTensor(0, 1, 2), Ret(2)], 3)
    exe = Executable([main], constants=[kiln.nd.array(np.array([2, 3], "int64"))])
    vm = VirtualMachine(exe, kiln.cpu(0))
    x = vec(6, 0)
    for _ in range(3):
        np.testing.assert_array_equal(vm.run(x).numpy(), x.reshape(2, 3))
    for _ in range(2):
        with pytest.raises(TVMError, match=r"cannot view a tensor of shape \(7,\) as shape "
                                           r"\(2, 3\)\n  in @main instruction 1"):
            vm.run(vec(7, 0))
    assert vm.plan_stats() == {"plans": 1, "built": 1, "disabled": False}


def test_a_function_with_control_flow_is_never_planned(kernels):
    main = VMFunction("main", ["x"], [
        LoadConsti(1, 1), LoadConsti(1, 2), If(1, 2, 1, 1), Ret(0),
    ], 3)
    vm = make_vm(kernels, main)
    assert vm.plan_stats() is None
    x = vec(3, 0)
    for _ in range(3):
        np.testing.assert_array_equal(vm.run(x).numpy(), x)


def test_at_most_max_plans_are_kept(kernels):
    vm = make_vm(kernels, add_program())
    lengths = range(1, shape_plan.MAX_PLANS + 4)
    for n in [*lengths, *lengths]:
        x = vec(n, n)
        np.testing.assert_array_equal(vm.run(x, x).numpy(), 2 * x)
    stats = vm.plan_stats()
    assert stats["plans"] == shape_plan.MAX_PLANS and stats["built"] == len(lengths)


def test_dropped_plans_give_their_memory_back(kernels):
    vm = make_vm(kernels, add_program())
    lengths = range(1, shape_plan.MAX_PLANS + 5)
    for n in lengths:
        x = np.ones(n * 1024, "float32")  # n pages of output
        vm.run(x, x)
        vm.run(x, x)
    # Only the kept plans' blocks stay in use (n pages of output + the shape tensors each);
    # the evicted plans' blocks and the bytecode runs' storage went back to the pool.
    kept = [n for n in lengths][-shape_plan.MAX_PLANS:]
    used = vm.allocators[0].used_bytes
    assert sum(kept) * 4096 < used <= sum(n + 1 for n in kept) * 4096


def test_set_outputs_stateful_calls_and_the_profiler_with_plans(kernels):
    vm = make_vm(kernels, add_program())
    x, y = vec(6, 2), vec(6, 3)
    vm.set_input("main", x, y)
    for _ in range(3):
        vm.invoke_stateful("main")
    np.testing.assert_array_equal(vm.get_output(0).numpy(), x + y)
    dest = kiln.nd.empty((6,), "float32")
    vm.set_outputs("main", dest)
    assert vm.invoke("main") is dest
    np.testing.assert_array_equal(dest.numpy(), x + y)
    rows = {row["Name"] for row in vm.profile(x, y).calls}
    assert {"add_f32", "add_i64", "ShapeOf"} <= rows  # the profiler times the instructions


def test_plans_run_after_save_and_load(kernels):
    exe = Executable([add_program()], primitive_names=PRIMS, lib=kernels)
    code, lib = exe.save()
    loaded = Executable.load_exec(code, lib)
    vm = VirtualMachine(loaded, kiln.cpu(0))
    x = vec(5, 4)
    for _ in range(3):
        np.testing.assert_array_equal(vm.run(x, x).numpy(), 2 * x)
    assert vm.plan_stats()["built"] == 1


def test_wrong_arguments_raise_before_and_after_a_plan(kernels):
    vm = make_vm(kernels, add_program())
    x = vec(3, 0)
    vm.run(x, x)
    vm.run(x, x)
    with pytest.raises(TVMError, match="@main takes 2 arguments"):
        vm.run(x)
    with pytest.raises(TVMError, match="cannot pass a str"):
        vm.run(x, "y")
    np.testing.assert_array_equal(vm.run(x, x).numpy(), 2 * x)


@st.composite
def _add_programs(draw):
    """A random straight-line program of adds over x, y and earlier results, killing some
    results (and their storage) on the way, returning one result or a tuple of them. Also
    returns the operands of every result register and the returned registers."""
    code = [ShapeOf(0, 2)]
    operands: dict[int, tuple[int, int]] = {}  # result register -> the two it adds
    live, storage_of = [0, 1], {}
    base = 3
    for _ in range(draw(st.integers(1, 6))):
        a, b = draw(st.sampled_from(live)), draw(st.sampled_from(live))
        code += [*_sized_add(2, base), InvokePacked(ADD_F32, 1, (a, b, base + 10))]
        operands[base + 10], storage_of[base + 10] = (a, b), base + 8
        live.append(base + 10)
        base += 11
        killable = [r for r in live[:-1] if r in storage_of]
        if killable and draw(st.booleans()):
            dead = draw(st.sampled_from(killable))
            code += [KillRegister(dead), KillRegister(storage_of[dead])]
            live.remove(dead)
    results = draw(st.lists(st.sampled_from(live), min_size=1, max_size=3))
    if len(results) == 1:
        code.append(Ret(results[0]))
    else:
        code += [AllocADT(0, tuple(results), base), Ret(base)]
        base += 1
    return VMFunction("main", ["x", "y"], code, base), operands, results


@settings(max_examples=25, deadline=None)
@given(program=_add_programs(), lengths=st.lists(st.integers(0, 40), min_size=1, max_size=3))
def test_random_add_programs_plan_as_numpy_and_the_bytecode_say(kernels, program, lengths):
    func, operands, results = program
    vm, bytecode = make_vm(kernels, func), make_vm(kernels, func, "naive")
    for n in lengths:
        values = {0: vec(n, n), 1: vec(n, n + 7)}
        for reg, (a, b) in operands.items():  # in program order: operands come first
            values[reg] = values[a] + values[b]
        for _ in range(2):  # the second call of a length runs its plan
            got, want = vm.run(values[0], values[1]), bytecode.run(values[0], values[1])
            got = got.fields if len(results) > 1 else [got]
            want = want.fields if len(results) > 1 else [want]
            for reg, g, w in zip(results, got, want, strict=True):
                np.testing.assert_array_equal(g.numpy(), values[reg])
                np.testing.assert_array_equal(w.numpy(), values[reg])
    assert vm.plan_stats()["built"] == len(set(lengths))
