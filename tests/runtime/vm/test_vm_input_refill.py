"""set_input with NumPy arguments: the VM copies into the NDArray it made last time (the VM
owns it; a result aliasing it is valid until the next set_input). NumPy is the oracle."""

from __future__ import annotations

import numpy as np

import kiln
from kiln.runtime.vm import Executable, VirtualMachine, VMFunction
from kiln.runtime.vm.bytecode import (
    AllocStorage,
    AllocTensor,
    InvokePacked,
    LoadConsti,
    Ret,
)

SHAPE = (4, 8)


def add_vm(kernels) -> VirtualMachine:
    main = VMFunction("main", ["x", "y"], [
        LoadConsti(128, 2), AllocStorage(2, 64, "float32", 0, 3),
        LoadConsti(0, 4), AllocTensor(3, 4, SHAPE, "float32", 5),
        InvokePacked(0, 1, (0, 1, 5)), Ret(5),
    ], 6)
    exe = Executable([main], primitive_names=["add_f32"], lib=kernels).fuse_segments()
    return VirtualMachine(exe, kiln.cpu(0))


def identity_vm() -> VirtualMachine:
    return VirtualMachine(Executable([VMFunction("main", ["x"], [Ret(0)], 1)]), kiln.cpu(0))


def test_numpy_inputs_refill_the_same_ndarray(kernels, rng):
    vm = add_vm(kernels)
    x, y = (rng.standard_normal(SHAPE).astype("float32") for _ in range(2))
    vm.set_input("main", x, y)
    made = [id(t) for t in vm._inputs["main"]]
    for _ in range(3):
        x, y = (rng.standard_normal(SHAPE).astype("float32") for _ in range(2))
        np.testing.assert_allclose(vm.run(x, y).numpy(), x + y, rtol=1e-6)
        assert [id(t) for t in vm._inputs["main"]] == made
    x[:] = 0                                      # the VM copied: the caller's array is theirs
    np.testing.assert_allclose(vm.run().numpy(), vm._inputs["main"][0].numpy() + y)


def test_result_aliasing_an_input_is_valid_until_the_next_set_input(rng):
    """The identity function returns the input NDArray itself: the VM's, refilled in place."""
    vm = identity_vm()
    a, b = (rng.standard_normal(SHAPE).astype("float32") for _ in range(2))
    out = vm.run(a)
    np.testing.assert_array_equal(out.numpy(), a)
    kept = out.numpy()
    vm.set_input("main", b)
    np.testing.assert_array_equal(out.numpy(), b)             # refilled, as documented
    np.testing.assert_array_equal(vm.invoke("main").numpy(), b)
    np.testing.assert_array_equal(kept, a)


def test_shape_or_dtype_change_makes_a_new_ndarray(rng):
    vm = identity_vm()
    vm.set_input("main", np.ones(SHAPE, "float32"))
    first = vm._inputs["main"][0]
    vm.set_input("main", np.ones((2, 3), "float32"))
    assert vm._inputs["main"][0] is not first and vm._inputs["main"][0].shape == (2, 3)
    vm.set_input("main", np.ones((2, 3), "int32"))
    assert vm._inputs["main"][0].dtype == "int32"
    np.testing.assert_array_equal(vm.run().numpy(), np.ones((2, 3), "int32"))


def test_user_ndarray_is_used_as_given_and_not_refilled(rng):
    vm = identity_vm()
    mine = kiln.nd.array(np.zeros(SHAPE, "float32"))
    vm.set_input("main", mine)
    vm.set_input("main", np.ones(SHAPE, "float32"))
    np.testing.assert_array_equal(mine.numpy(), 0)
    vm.set_one_input("main", 0, np.full(SHAPE, 2, "float32"))
    vm.set_input("main", np.full(SHAPE, 3, "float32"))
    np.testing.assert_array_equal(vm.run().numpy(), 3)
