"""The VM interpreter on hand-assembled programs; oracles are NumPy and hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from vm_programs import alloc_tensor

import kiln
from kiln.runtime import ndarray as nd
from kiln.runtime.container import ADT
from kiln.runtime.error import TVMError
from kiln.runtime.module import Module
from kiln.runtime.vm import Executable, VirtualMachine, VMClosure, VMFunction
from kiln.runtime.vm.bytecode import (
    AllocADT,
    AllocClosure,
    AllocStorage,
    AllocTensor,
    AllocTensorReg,
    DeviceCopy,
    Fatal,
    GetField,
    GetTag,
    Goto,
    If,
    Invoke,
    InvokeClosure,
    InvokePacked,
    KillRegister,
    LoadConst,
    LoadConsti,
    Move,
    ReshapeTensor,
    Ret,
    ShapeOf,
)

PRIMS = ["add_f32", "mul_f32", "add_i64", "sub_i64", "less_i64", "greater_f32"]
ADD_F32, MUL_F32, ADD_I64, SUB_I64, LESS_I64, GREATER_F32 = range(len(PRIMS))


class PyKernels(Module):
    """A kernel library of Python functions (to observe the VM from inside a run)."""

    type_key = "test.PyKernels"

    def __init__(self, **funcs):
        super().__init__()
        self.funcs = funcs

    def _get_function(self, name):
        return self.funcs.get(name)


def binary_op_main(prim, shape=(2, 3), dtype="float32"):
    """main(x, y) = prim(x, y) with a freshly allocated output."""
    return VMFunction(
        "main", ["x", "y"],
        [*alloc_tensor(shape, dtype, 2, 3, 4, 5), InvokePacked(prim, 1, (0, 1, 5)), Ret(5)],
        6, param_types=[(shape, dtype), (shape, dtype)],
    )


@pytest.fixture(params=["naive", "pooled"])
def memory_cfg(request):
    return request.param


def test_add_kernel_matches_numpy(kernels, rng, memory_cfg):
    exe = Executable([binary_op_main(ADD_F32)], primitive_names=PRIMS, lib=kernels)
    vm = VirtualMachine(exe, kiln.cpu(0), memory_cfg)
    x, y = rng.standard_normal((2, 3), dtype="float32"), rng.standard_normal((2, 3), "float32")
    out = vm.run(x, y)
    assert isinstance(out, nd.NDArray)
    np.testing.assert_allclose(out.numpy(), x + y, rtol=1e-6)
    # A second run gives a fresh result (pooled memory reuse must not alias the first one).
    out2 = vm.run(y, y)
    np.testing.assert_allclose(out.numpy(), x + y, rtol=1e-6)
    np.testing.assert_allclose(out2.numpy(), 2 * y, rtol=1e-6)


def if_else_program():
    """main(x, y) = x + y if x > y (scalars) else x * y."""
    return VMFunction("main", ["x", "y"], [
        *alloc_tensor((), "bool", 2, 3, 4, 5),
        InvokePacked(GREATER_F32, 1, (0, 1, 5)),
        LoadConsti(1, 6),
        If(5, 6, 1, 8),
        *alloc_tensor((), "float32", 7, 8, 9, 10),          # 8..11: then
        InvokePacked(ADD_F32, 1, (0, 1, 10)),
        Move(10, 15),
        Goto(7),
        *alloc_tensor((), "float32", 11, 12, 13, 14),       # 15..18: else
        InvokePacked(MUL_F32, 1, (0, 1, 14)),
        Move(14, 15),
        Ret(15),
    ], 16)


@pytest.mark.parametrize("x, y", [(3.0, 2.0), (2.0, 3.0), (-1.5, -1.5)])
def test_if_else_on_tensor_condition(kernels, x, y):
    exe = Executable([if_else_program()], primitive_names=PRIMS, lib=kernels)
    out = VirtualMachine(exe, kiln.cpu(0)).run(np.float32(x), np.float32(y))
    assert out.numpy() == pytest.approx(x + y if x > y else x * y)


def recursive_sum_function():
    """sum(n) = 0 if n == 0 else n + sum(n - 1), on int64 tensors of shape (1,)."""
    return VMFunction("sum", ["n"], [
        LoadConsti(0, 1),
        If(0, 1, 1, 2),
        Ret(1),
        LoadConsti(1, 2),
        *alloc_tensor((1,), "int64", 3, 4, 5, 6),
        InvokePacked(SUB_I64, 1, (0, 2, 6)),
        Invoke(0, (6,), 7),
        *alloc_tensor((1,), "int64", 8, 9, 10, 11),
        InvokePacked(ADD_I64, 1, (0, 7, 11)),
        Ret(11),
    ], 12)


def test_recursive_sum_via_invoke(kernels):
    exe = Executable([recursive_sum_function()], primitive_names=PRIMS, lib=kernels)
    vm = VirtualMachine(exe, kiln.cpu(0))
    for n in (0, 1, 7, 300):
        out = vm.invoke("sum", np.array([n], dtype="int64"))
        assert int(out.numpy()[0]) == n * (n + 1) // 2
    assert vm.frame_depth == 0


def test_while_loop_with_less_than_kernel(kernels):
    """main(n) = sum(range(n)) as a Goto loop whose condition is a bool less_i64 result."""
    main = VMFunction("main", ["n"], [
        LoadConsti(0, 1),                                   # i
        LoadConsti(0, 2),                                   # acc
        LoadConsti(1, 3),                                   # one
        LoadConsti(1, 4),                                   # true
        *alloc_tensor((1,), "bool", 5, 6, 7, 8),            # 4: loop head
        InvokePacked(LESS_I64, 1, (1, 0, 8)),
        If(8, 4, 1, 14),
        *alloc_tensor((1,), "int64", 9, 10, 11, 12),
        InvokePacked(ADD_I64, 1, (2, 1, 12)),
        Move(12, 2),
        *alloc_tensor((1,), "int64", 13, 14, 15, 16),
        InvokePacked(ADD_I64, 1, (1, 3, 16)),
        Move(16, 1),
        Goto(-18),
        Ret(2),                                             # 23
    ], 17)
    vm = VirtualMachine(Executable([main], primitive_names=PRIMS, lib=kernels), kiln.cpu(0))
    for n in (0, 1, 10, 250):
        assert int(vm.run(np.array([n], "int64")).numpy()[0]) == sum(range(n))


def test_closure_captures_and_is_invoked(kernels, rng):
    adder = VMFunction("add_captured", ["c", "x"], [
        *alloc_tensor((4,), "float32", 2, 3, 4, 5), InvokePacked(ADD_F32, 1, (0, 1, 5)), Ret(5),
    ], 6)
    main = VMFunction("main", ["c", "x"], [
        AllocClosure(0, (0,), 2), InvokeClosure(2, (1,), 3), Ret(3),
    ], 4)
    exe = Executable([adder, main], primitive_names=PRIMS, lib=kernels)
    vm = VirtualMachine(exe, kiln.cpu(0))
    c, x = rng.standard_normal(4, dtype="float32"), rng.standard_normal(4, dtype="float32")
    np.testing.assert_allclose(vm.run(c, x).numpy(), c + x, rtol=1e-6)


def test_closure_value_returned_to_python():
    ident = VMFunction("ident", ["a"], [Ret(0)], 1)
    main = VMFunction("main", ["x"], [AllocClosure(0, (), 1), Ret(1)], 2)
    closure = VirtualMachine(Executable([ident, main]), kiln.cpu(0)).run(np.zeros(1))
    assert isinstance(closure, VMClosure) and closure.func_index == 0 and closure.free_vars == ()


def option_match_program():
    """main(opt) = match opt { Some(v) => v, None => default constant }; tag 0 None, 1 Some."""
    return VMFunction("main", ["opt"], [
        GetTag(0, 1),
        LoadConsti(1, 2),
        If(1, 2, 1, 3),
        GetField(0, 0, 3),
        Ret(3),
        LoadConst(0, 0, 4),
        Ret(4),
    ], 5)


def test_adt_match_with_gettag_and_getfield():
    default = nd.array(np.array([-1.0, -2.0], dtype="float32"))
    exe = Executable([option_match_program()], constants=[default])
    vm = VirtualMachine(exe, kiln.cpu(0))
    some = ADT(1, [nd.array(np.array([5.0, 6.0], dtype="float32"))])
    np.testing.assert_array_equal(vm.run(some).numpy(), [5.0, 6.0])
    np.testing.assert_array_equal(vm.run(ADT(0, [])).numpy(), [-1.0, -2.0])


def test_non_exhaustive_match_reaches_fatal():
    main = VMFunction("main", ["opt"], [
        GetTag(0, 1), LoadConsti(1, 2), If(1, 2, 1, 3), GetField(0, 0, 3), Ret(3), Fatal(),
    ], 4)
    vm = VirtualMachine(Executable([main]), kiln.cpu(0))
    with pytest.raises(TVMError, match="VM encountered fatal error"):
        vm.run(ADT(0, []))
    # The VM is usable again after an error.
    assert vm.run(ADT(1, [np.ones(2)])).numpy().tolist() == [1.0, 1.0]


def test_tuples_in_and_out_and_adt_flattening(kernels, rng):
    main = VMFunction("main", ["t"], [
        *alloc_tensor((3,), "float32", 1, 2, 3, 4),
        InvokePacked(ADD_F32, 1, (0, 4)),        # the tuple register is flattened to (x, y)
        GetField(0, 0, 5),
        GetField(0, 1, 6),
        *alloc_tensor((3,), "float32", 7, 8, 9, 10),
        InvokePacked(MUL_F32, 1, (5, 6, 10)),
        AllocADT(0, (4, 10), 11),
        Ret(11),
    ], 12)
    vm = VirtualMachine(Executable([main], primitive_names=PRIMS, lib=kernels), kiln.cpu(0))
    x, y = rng.standard_normal(3, dtype="float32"), rng.standard_normal(3, dtype="float32")
    out = vm.run((x, y))
    assert isinstance(out, ADT) and out.tag == 0 and len(out) == 2
    np.testing.assert_allclose(out[0].numpy(), x + y, rtol=1e-6)
    np.testing.assert_allclose(out[1].numpy(), x * y, rtol=1e-6)
    assert vm.get_num_outputs() == 2 and len(vm.get_outputs()) == 2
    np.testing.assert_allclose(vm.get_output(1).numpy(), x * y, rtol=1e-6)


def test_storage_views_shape_of_and_reshape(kernels, rng):
    newshape = nd.array(np.array([6], dtype="int64"))
    main = VMFunction("main", ["x", "y"], [
        ShapeOf(0, 2),                                  # [2, 3]
        LoadConsti(64, 3),
        AllocStorage(3, 64, "float32", 0, 4),           # one 64-byte block for two tensors
        LoadConsti(0, 5),
        AllocTensorReg(4, 5, 2, "float32", 6),          # x + y at offset 0
        LoadConsti(32, 7),
        AllocTensor(4, 7, (2, 3), "float32", 8),        # x * y at offset 32
        InvokePacked(ADD_F32, 1, (0, 1, 6)),
        InvokePacked(MUL_F32, 1, (0, 1, 8)),
        LoadConst(0, 0, 9),
        ReshapeTensor(6, 9, 10),
        AllocADT(0, (10, 8, 2), 11),
        Ret(11),
    ], 12)
    exe = Executable([main], constants=[newshape], primitive_names=PRIMS, lib=kernels)
    x, y = rng.standard_normal((2, 3), dtype="float32"), rng.standard_normal((2, 3), "float32")
    flat, product, shape = VirtualMachine(exe, kiln.cpu(0)).run(x, y)
    np.testing.assert_allclose(flat.numpy(), (x + y).reshape(6), rtol=1e-6)
    np.testing.assert_allclose(product.numpy(), x * y, rtol=1e-6)
    assert shape.numpy().tolist() == [2, 3] and shape.dtype == "int64"
    assert product.data_ptr - flat.data_ptr == 32          # both view the one storage block


def test_alloc_storage_by_shape(kernels, rng):
    main = VMFunction("main", ["x", "y"], [
        AllocStorage(0, 64, "float32", 0, 2, shape=(4,)),   # size register unused: shaped form
        LoadConsti(0, 3),
        AllocTensor(2, 3, (4,), "float32", 4),
        InvokePacked(MUL_F32, 1, (0, 1, 4)),
        Ret(4),
    ], 5)
    vm = VirtualMachine(Executable([main], primitive_names=PRIMS, lib=kernels), kiln.cpu(0))
    x, y = rng.standard_normal(4, dtype="float32"), rng.standard_normal(4, dtype="float32")
    np.testing.assert_allclose(vm.run(x, y).numpy(), x * y, rtol=1e-6)


def test_tensor_outside_its_storage_is_an_error():
    main = VMFunction("main", [], [
        LoadConsti(16, 0), AllocStorage(0, 64, "float32", 0, 1), LoadConsti(8, 2),
        AllocTensor(1, 2, (4,), "float32", 3), Ret(3),
    ], 4)
    with pytest.raises(TVMError, match="does not fit in a storage of 16 bytes"):
        VirtualMachine(Executable([main]), kiln.cpu(0)).run()


def test_reshape_to_a_different_size_is_an_error():
    newshape = nd.array(np.array([5], dtype="int64"))
    main = VMFunction("main", ["x"], [LoadConst(0, 0, 1), ReshapeTensor(0, 1, 2), Ret(2)], 3)
    vm = VirtualMachine(Executable([main], constants=[newshape]), kiln.cpu(0))
    with pytest.raises(TVMError, match="cannot view a tensor of shape"):
        vm.run(np.zeros((2, 3), "float32"))


def test_device_copy_between_cpu0_and_cpu1():
    main = VMFunction("main", ["x"], [DeviceCopy(0, 0, 1, 1), Ret(1)], 2)
    exe = Executable([main], virtual_devices=[kiln.cpu(0), kiln.cpu(1)])
    vm = VirtualMachine(exe, [kiln.cpu(0), kiln.cpu(1)])
    x = np.arange(5, dtype="float32")
    out = vm.run(x)
    assert out.device == kiln.cpu(1)
    np.testing.assert_array_equal(out.numpy(), x)
    # An input on another device is copied to the parameter's device first (as TVM does).
    np.testing.assert_array_equal(vm.run(nd.array(x, kiln.cpu(1))).numpy(), x)
    wrong = VMFunction("main", ["x"], [DeviceCopy(0, 1, 0, 1), Ret(1)], 2)
    vm = VirtualMachine(Executable([wrong], virtual_devices=[kiln.cpu(0), kiln.cpu(1)]),
                        [kiln.cpu(0), kiln.cpu(1)])
    with pytest.raises(TVMError, match="source tensor is on cpu\\(0\\), the instruction says "
                                       "cpu\\(1\\)"):
        vm.run(x)


def test_kill_register_releases_memory():
    readings = []
    big = 1 << 20
    vm_box = []

    def probe(out):
        readings.append(vm_box[0].memory_in_use())

    main = VMFunction("main", [], [
        *alloc_tensor((4,), "float32", 0, 1, 2, 3),       # a small tensor the probe writes
        LoadConsti(big, 4),
        AllocStorage(4, 64, "float32", 0, 5),
        LoadConsti(0, 6),
        AllocTensor(5, 6, (big // 4,), "float32", 7),
        InvokePacked(0, 1, (3,)),
        KillRegister(7),
        KillRegister(5),
        InvokePacked(0, 1, (3,)),
        Ret(3),
    ], 8)
    for kind in ("naive", "pooled"):
        readings.clear()
        exe = Executable([main], primitive_names=["probe"], lib=PyKernels(probe=probe))
        vm_box[:] = [VirtualMachine(exe, kiln.cpu(0), kind)]
        vm_box[0].run()
        assert readings[0] - readings[1] >= big, (kind, readings)


def tail_walk_functions(tail_call_shape):
    """walk(list, last): the last head of a cons list (tag 1 = Cons(head, tail), 0 = Nil).

    ``tail_call_shape`` is how the compiler put the recursive call: ``"invoke_ret"`` is
    Invoke directly followed by Ret; ``"move_goto"`` moves the result into a merge register
    and jumps to a shared Ret, as a compiled ``if`` does. The base case calls the ``probe``
    kernel, which records the VM's frame depth.
    """
    base = [InvokePacked(0, 1, (1,)), Ret(1)]
    if tail_call_shape == "invoke_ret":
        body = [GetTag(0, 2), LoadConsti(0, 3), If(2, 3, 1, 3), *base,
                GetField(0, 0, 4), GetField(0, 1, 5), KillRegister(2), Invoke(0, (5, 4), 6),
                Ret(6)]
    else:
        body = [GetTag(0, 2), LoadConsti(0, 3), If(2, 3, 1, 4), InvokePacked(0, 1, (1,)),
                Move(1, 7), Goto(5),
                GetField(0, 0, 4), GetField(0, 1, 5), Invoke(0, (5, 4), 6), Move(6, 7),
                Ret(7)]
    walk = VMFunction("walk", ["list", "last"], body, 8)
    main = VMFunction("main", ["list", "init"], [Invoke(0, (0, 1), 2), Ret(2)], 3)
    return [walk, main]


@pytest.mark.parametrize("tail_call_shape", ["invoke_ret", "move_goto"])
def test_tail_recursive_loop_of_100000_steps_runs_in_constant_frame_depth(tail_call_shape):
    depths = []
    vm_box = []
    lib = PyKernels(probe=lambda out: depths.append(vm_box[0].frame_depth))
    exe = Executable(tail_walk_functions(tail_call_shape), primitive_names=["probe"], lib=lib)
    vm = VirtualMachine(exe, kiln.cpu(0))
    vm_box.append(vm)
    steps = 100_000
    ordinary, final = nd.array(np.zeros(1, "float32")), nd.array(np.ones(1, "float32"))
    cells = ADT(0, [])
    for i in range(steps):
        cells = ADT(1, [final if i == 0 else ordinary, cells])
    out = vm.run(cells, nd.array(np.full(1, -1.0, "float32")))
    assert out.numpy().tolist() == [1.0]
    # main's own Invoke+Ret is a tail call too: one frame serves main and all 100,001 walks.
    assert depths == [1]


def test_non_tail_recursion_grows_frames():
    depths = []
    vm_box = []
    walk = VMFunction("walk", ["list", "last"], [
        GetTag(0, 2), LoadConsti(0, 3), If(2, 3, 1, 3), InvokePacked(0, 1, (1,)), Ret(1),
        GetField(0, 0, 4), GetField(0, 1, 5), Invoke(0, (5, 4), 6), Move(6, 7),
        AllocADT(0, (7,), 8), GetField(8, 0, 9), Ret(9),           # not a tail call
    ], 10)
    main = VMFunction("main", ["list", "init"], [Invoke(0, (0, 1), 2), Ret(2)], 3)
    lib = PyKernels(probe=lambda out: depths.append(vm_box[0].frame_depth))
    vm = VirtualMachine(Executable([walk, main], primitive_names=["probe"], lib=lib), kiln.cpu(0))
    vm_box.append(vm)
    cells = ADT(0, [])
    for _ in range(50):
        cells = ADT(1, [nd.array(np.zeros(1)), cells])
    vm.run(cells, np.zeros(1))
    assert depths == [51]   # main's frame reused by the first walk, then one per cell


def counter_loop_functions():
    """loop(i, acc) = acc if i == 0 else loop(i - 1, acc + i), tail-recursive with kernels."""
    loop = VMFunction("loop", ["i", "acc"], [
        LoadConsti(0, 2), If(0, 2, 1, 2), Ret(1),
        LoadConsti(1, 3),
        *alloc_tensor((1,), "int64", 4, 5, 6, 7),
        InvokePacked(SUB_I64, 1, (0, 3, 7)),
        *alloc_tensor((1,), "int64", 8, 9, 10, 11),
        InvokePacked(ADD_I64, 1, (1, 0, 11)),
        Invoke(0, (7, 11), 12),
        Ret(12),
    ], 13)
    main = VMFunction("main", ["n"], [LoadConsti(0, 1), Invoke(0, (0, 1), 2), Ret(2)], 3)
    return [loop, main]


def test_tail_recursive_counter_with_kernels(kernels):
    exe = Executable(counter_loop_functions(), primitive_names=PRIMS, lib=kernels)
    vm = VirtualMachine(exe, kiln.cpu(0), "pooled")
    n = 3000
    assert int(vm.run(np.array([n], "int64")).numpy()[0]) == n * (n + 1) // 2
    # 6000 tensors were allocated; only the result's page is still held (for get_output).
    assert vm.memory_in_use() == 4096


def test_wrong_register_contents_are_tvm_errors_with_location():
    main = VMFunction("main", ["x"], [LoadConsti(0, 1), GetField(0, 0, 2), Ret(2)], 3)
    vm = VirtualMachine(Executable([main]), kiln.cpu(0))
    with pytest.raises(TVMError, match="GetField: register \\$0 holds NDArray, not an ADT\n"
                                       "  in @main instruction 1 \\(GetField\\)"):
        vm.run(np.zeros(1))
    callee = VMFunction("callee", ["a"], [Move(0, 0), If(0, 0, 1, 2), Ret(0), Ret(0)], 1)
    caller = VMFunction("main", ["x"], [Invoke(0, (0,), 1), Move(1, 0), Ret(0)], 2)
    vm = VirtualMachine(Executable([callee, caller]), kiln.cpu(0))
    with pytest.raises(TVMError, match="expected an integer scalar tensor, got float32\n"
                                       "  in @callee instruction 1 \\(If\\)"):
        vm.run(np.zeros(1, "float32"))
    assert vm.frame_depth == 0


def test_python_scalars_convert_like_tvm():
    vm = VirtualMachine(Executable([VMFunction("main", ["a"], [Ret(0)], 1)]), kiln.cpu(0))
    for value, dtype in ((3, "int32"), (2.5, "float32"), (True, "bool")):
        out = vm.run(value)
        assert out.dtype == dtype and out.shape == () and out.numpy() == value
    with pytest.raises(TVMError, match="cannot pass a str"):
        vm.run("text")


def test_wrong_arguments_are_clear_errors(kernels):
    exe = Executable([binary_op_main(ADD_F32)], primitive_names=PRIMS, lib=kernels)
    vm = VirtualMachine(exe, kiln.cpu(0))
    x = np.zeros((2, 3), "float32")
    with pytest.raises(TVMError, match=r"@main takes 2 arguments \['x', 'y'\], got 3"):
        vm.run(x, x, x)
    with pytest.raises(TVMError, match="Cannot find function 'nope'"):
        vm.invoke("nope", x, x)
    with pytest.raises(TVMError, match=r"argument 1 \('y'\) expects Tensor\[\(2, 3\), float32\], "
                                       r"got Tensor\[\(3, 2\), float32\]"):
        vm.run(x, np.zeros((3, 2), "float32"))
    with pytest.raises(TVMError, match=r"got Tensor\[\(2, 3\), int32\]"):
        vm.run(x, np.zeros((2, 3), "int32"))
    with pytest.raises(TVMError, match="has no parameter 'z'"):
        vm.run(x, z=x)


def test_kernel_error_names_the_primitive(kernels):
    main = VMFunction("main", ["x", "y"], [
        *alloc_tensor((2,), "float32", 2, 3, 4, 5), InvokePacked(ADD_F32, 1, (0, 1, 5)), Ret(5),
    ], 6)
    vm = VirtualMachine(Executable([main], primitive_names=PRIMS, lib=kernels), kiln.cpu(0))
    with pytest.raises(TVMError, match="kernel 'add_f32' failed: elementwise kernel: operand "
                                       "sizes differ\n  in @main instruction 4 \\(InvokePacked"):
        vm.run(np.zeros(2, "float32"), np.zeros(3, "float32"))
    assert vm.frame_depth == 0


def test_zero_sized_output_skips_the_kernel(kernels):
    main = VMFunction("main", ["x", "y"], [
        *alloc_tensor((0, 3), "int64", 2, 3, 4, 5), InvokePacked(0, 1, (0, 1, 5)), Ret(5),
    ], 6)
    vm = VirtualMachine(Executable([main], primitive_names=["count_calls"], lib=kernels),
                        kiln.cpu(0))
    out = vm.run(np.zeros((0, 3), "int64"), np.zeros((0, 3), "int64"))
    assert out.shape == (0, 3)   # count_calls would have written out[0]; it was never called


def test_missing_kernel_and_unloaded_constants_fail_at_init(kernels, tmp_path):
    main = VMFunction("main", ["x"], [InvokePacked(0, 1, (0,)), Ret(0)], 1)
    with pytest.raises(TVMError, match="kernel 'no_such_kernel' is not in"):
        VirtualMachine(Executable([main], primitive_names=["no_such_kernel"], lib=kernels))
    const = VMFunction("main", [], [LoadConst(0, 0, 0), Ret(0)], 1)
    exe = Executable([const], constants=[nd.array(np.zeros(100, "float32"))])
    exe.move_late_bound_consts(str(tmp_path / "consts.params"), byte_limit=16)
    with pytest.raises(TVMError, match="late-bound"):
        VirtualMachine(exe, kiln.cpu(0))


def test_stateful_api(kernels, rng):
    exe = Executable([binary_op_main(MUL_F32)], primitive_names=PRIMS, lib=kernels)
    vm = VirtualMachine(exe, kiln.cpu(0))
    x, y = rng.standard_normal((2, 3), dtype="float32"), rng.standard_normal((2, 3), "float32")
    assert vm.get_input_index("y") == 1 and vm.get_input_index("w") == -1
    vm.set_input("main", y=y, x=x)
    vm.invoke_stateful("main")
    np.testing.assert_allclose(vm.get_output(0).numpy(), x * y, rtol=1e-6)
    vm.set_one_input("main", "y", x)
    vm.invoke_stateful("main")
    np.testing.assert_allclose(vm.get_output(0).numpy(), x * x, rtol=1e-6)
    assert vm.get_num_outputs() == 1
    with pytest.raises(TVMError, match="output 1 out of range"):
        vm.get_output(1)
    destination = nd.empty((2, 3), "float32")
    vm.set_outputs("main", destination)
    vm.invoke("main", x, y)
    np.testing.assert_allclose(destination.numpy(), x * y, rtol=1e-6)


def test_benchmark_and_profile(kernels, rng):
    exe = Executable([binary_op_main(ADD_F32)], primitive_names=PRIMS, lib=kernels).fuse_segments()
    vm = VirtualMachine(exe, kiln.cpu(0))
    x = rng.standard_normal((2, 3), dtype="float32")
    result = vm.benchmark(kiln.cpu(0), x, x, repeat=3, number=2)
    assert len(result.results) == 3 and 0 < result.min <= result.median <= result.max
    report = vm.profile(x, x)
    rows = {row["Name"]: row for row in report.calls}
    assert rows["add_f32"]["Count"] == 1 and rows["add_f32"]["Op"] == "InvokePacked"
    assert rows["FusedSegment"]["Count"] == 1 and rows["Ret"]["Count"] == 1
    assert sum(row["Percent"] for row in report.calls) == pytest.approx(100.0)
    assert "add_f32" in report.table()


def test_shape_of_gives_one_read_only_tensor_per_shape(rng):
    main = VMFunction("main", ["x"], [ShapeOf(0, 1), Ret(1)], 2)
    vm = VirtualMachine(Executable([main]), kiln.cpu(0))
    first = vm.run(np.zeros((2, 3), "float32"))
    again = vm.run(np.ones((2, 3), "int8"))
    other = vm.run(np.zeros((4, 5, 6), "float32"))
    np.testing.assert_array_equal(first.numpy(), [2, 3])
    np.testing.assert_array_equal(other.numpy(), [4, 5, 6])
    assert first is again and first.dtype == "int64"
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(first, copy=False)[0] = 7
    np.testing.assert_array_equal(vm.run(np.zeros((2, 3), "float32")).numpy(), [2, 3])


def test_numpy_fields_of_nested_adt_arguments_are_converted(rng):
    """A cons list built from NumPy arrays: every head, at any depth, becomes an NDArray."""
    main = VMFunction("main", ["xs"], [GetField(0, 1, 1), GetField(1, 0, 2), Ret(2)], 3)
    vm = VirtualMachine(Executable([main]), kiln.cpu(0))
    a, b = rng.standard_normal(3).astype("float32"), rng.standard_normal(2).astype("int64")
    second = vm.run(ADT(1, [a, ADT(1, [b, ADT(0, [])])]))
    assert isinstance(second, nd.NDArray)
    np.testing.assert_array_equal(second.numpy(), b)
    long_list = ADT(0, [])
    for k in range(50_000):                       # deeper than Python's recursion limit
        long_list = ADT(1, [np.array([k], "int32"), long_list])
    np.testing.assert_array_equal(vm.run(long_list).numpy(), [49_998])
    ready = ADT(1, [nd.array(a), ADT(1, [nd.array(b), ADT(0, [])])])
    vm.set_input("main", ready)
    assert vm._inputs["main"][0] is ready         # nothing to convert: taken as given
