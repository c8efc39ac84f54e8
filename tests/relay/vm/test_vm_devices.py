"""Heterogeneous execution on the Relay VM: the compiler's device indexes (executable device
list, LoadConst/AllocStorage/DeviceCopy, param and constant device indexes) and running on
two CPU devices, cpu(0) and cpu(1), against NumPy and the interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.runtime.vm import Executable, VirtualMachine
from kiln.runtime.vm import bytecode as bc

CPU0, CPU1 = tvm.cpu(0), tvm.cpu(1)
RNG = np.random.default_rng(11)


def _on(expr, device, **kwargs):
    return relay.annotation.on_device(expr, device, **kwargs)


def _compile(func, target=None):
    return relay.vm.compile(tvm.IRModule.from_expr(func), target or {"cpu": "c"})


def _instructions(exe, kind):
    main = exe.functions[exe.global_map["main"]]
    return [i for i in main.instructions if isinstance(i, kind)]


def _interpret(func, *args):
    return relay.create_executor("debug", tvm.IRModule.from_expr(func)).evaluate()(*args)


def _seed_function():
    x = relay.var("x", shape=(1, 5))
    y = relay.var("y", shape=(1, 5))
    return relay.Function([x, y], relay.log(_on(relay.add(x, y), CPU1)))


@pytest.fixture(scope="module")
def seed_exe():
    return _compile(_seed_function())


def test_executable_lists_the_devices_and_marks_params(seed_exe):
    assert seed_exe.virtual_devices == [CPU0, CPU1]
    assert seed_exe.host_device_index == 0
    main = seed_exe.functions[seed_exe.global_map["main"]]
    assert main.param_device_indexes == (1, 1)


def test_copy_and_allocations_carry_device_indexes(seed_exe):
    (copy,) = _instructions(seed_exe, bc.DeviceCopy)
    assert (copy.src_device_index, copy.dst_device_index) == (1, 0)
    storage_devices = sorted(i.device_index for i in _instructions(seed_exe, bc.AllocStorage))
    assert storage_devices == [0, 1]  # the add's output on cpu(1), the log's on cpu(0)


def test_seed_runs_on_two_cpu_devices(seed_exe):
    x = RNG.random((1, 5), dtype="float32")
    y = RNG.random((1, 5), dtype="float32")
    vm = VirtualMachine(seed_exe, [CPU0, CPU1])
    out = vm.run(x, y)
    np.testing.assert_allclose(out.numpy(), np.log(x + y), rtol=1e-6)
    assert out.device == CPU0


def test_one_device_serves_every_virtual_device_of_its_type(seed_exe):
    x = RNG.random((1, 5), dtype="float32")
    vm = VirtualMachine(seed_exe, CPU0)
    np.testing.assert_allclose(vm.run(x, x).numpy(), np.log(2 * x), rtol=1e-6)


def test_constants_load_on_their_device():
    x = relay.var("x", shape=(4,))
    weight = np.arange(4, dtype="float32")
    func = relay.Function([x], relay.exp(_on(relay.multiply(x, relay.const(weight)), CPU1)))
    exe = _compile(func)
    (load,) = _instructions(exe, bc.LoadConst)
    assert exe.virtual_devices[load.device_index] == CPU1
    assert exe.const_device_indexes == [load.device_index]
    out = VirtualMachine(exe, [CPU0, CPU1]).run(np.ones(4, "float32"))
    np.testing.assert_allclose(out.numpy(), np.exp(weight), rtol=1e-6)


def test_diamond_copies_both_ways_and_matches_the_interpreter():
    x = relay.var("x", shape=(3, 4))
    a = relay.exp(x)
    func = relay.Function([x], relay.add(_on(relay.sqrt(_on(a, CPU0)), CPU1), a))
    exe = _compile(func)
    copies = {(i.src_device_index, i.dst_device_index)
              for i in _instructions(exe, bc.DeviceCopy)}
    assert copies == {(0, 1), (1, 0)}
    xv = RNG.random((3, 4), dtype="float32")
    out = VirtualMachine(exe, [CPU0, CPU1]).run(xv).numpy()
    np.testing.assert_allclose(out, np.sqrt(np.exp(xv)) + np.exp(xv), rtol=1e-5)
    np.testing.assert_allclose(out, _interpret(func, xv).numpy(), rtol=1e-5)


def test_tuples_cross_devices():
    x = relay.var("x", shape=(4, 6))
    parts = _on(relay.split(relay.exp(x), 2, axis=1).astuple(), CPU1)
    pair = relay.Tuple([relay.TupleGetItem(parts, 0), relay.log(relay.TupleGetItem(parts, 1))])
    exe = _compile(relay.Function([x], pair))
    assert len(_instructions(exe, bc.DeviceCopy)) == 2
    xv = RNG.random((4, 6), dtype="float32")
    first, second = VirtualMachine(exe, [CPU0, CPU1]).run(xv)
    np.testing.assert_allclose(first.numpy(), np.exp(xv[:, :3]), rtol=1e-6)
    np.testing.assert_allclose(second.numpy(), xv[:, 3:], rtol=1e-5)


def test_a_branch_on_the_second_device():
    x = relay.var("x", shape=(3,))
    cond = relay.greater(relay.sum(x), relay.const(0.0))
    branch = _on(relay.If(cond, relay.exp(x), relay.negative(x)), CPU1)
    func = relay.Function([x], relay.add(branch, relay.const(1.0)))
    exe = _compile(func)
    vm = VirtualMachine(exe, [CPU0, CPU1])
    for xv in (np.array([1, 2, 3], "float32"), np.array([-1, -2, -3], "float32")):
        np.testing.assert_allclose(vm.run(xv).numpy(), _interpret(func, xv).numpy(),
                                   rtol=1e-6)


def test_saved_executable_keeps_its_devices(seed_exe):
    code, lib = seed_exe.save()
    loaded = Executable.load_exec(code, lib)
    assert loaded.virtual_devices == [CPU0, CPU1]
    assert loaded.functions[loaded.global_map["main"]].param_device_indexes == (1, 1)
    assert loaded.bytecode == seed_exe.bytecode
    x = RNG.random((1, 5), dtype="float32")
    out = VirtualMachine(loaded, [CPU0, CPU1]).run(x, x)
    np.testing.assert_allclose(out.numpy(), np.log(2 * x), rtol=1e-6)


def test_export_then_load_in_a_fresh_process(seed_exe, tmp_path):
    path = str(tmp_path / "hetero_vm.so")
    seed_exe.mod.export_library(path)
    script = textwrap.dedent(f"""
        import numpy as np, kiln
        from kiln.runtime.vm import VirtualMachine
        mod = kiln.runtime.load_module({path!r})
        vm = VirtualMachine(mod, [kiln.cpu(0), kiln.cpu(1)])
        assert vm.devices == [kiln.cpu(0), kiln.cpu(1)], vm.devices
        x = np.full((1, 5), 0.5, "float32")
        np.save({str(tmp_path / "out.npy")!r}, vm.run(x, x).numpy())
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), np.zeros((1, 5)), atol=1e-6)


def test_conflicting_constraints_are_an_error():
    x = relay.var("x", shape=(2,))
    func = relay.Function([x], relay.add(_on(x, CPU0, constrain_result=True),
                                         _on(x, CPU1, constrain_result=True)))
    with pytest.raises(tvm.TVMError, match="conflicting device constraints"):
        _compile(func)


def test_a_device_without_a_target_is_an_error():
    x = relay.var("x", shape=(2,))
    func = relay.Function([x], relay.log(_on(relay.exp(x), tvm.cuda(0))))
    with pytest.raises(tvm.TVMError, match="no target was given for device type 2"):
        _compile(func)


def test_a_vm_without_a_device_of_a_needed_type_is_an_error():
    x = relay.var("x", shape=(2,))
    exe = _compile(relay.Function([x], relay.log(_on(relay.exp(x), CPU1))))
    with pytest.raises(tvm.TVMError, match="needs a"):
        VirtualMachine(exe, [tvm.cuda(0)])


def test_an_opencl_region_compiles_and_runs_in_device_memory():
    x = relay.var("x", shape=(1, 5))
    func = relay.Function([x], relay.log(_on(relay.exp(x), tvm.opencl(0))))
    exe = _compile(func, {"cpu": "c", "opencl": "opencl"})
    assert exe.virtual_devices == [CPU0, tvm.opencl(0)]
    assert exe.lib.imports[0].type_key == "opencl"
    (copy,) = _instructions(exe, bc.DeviceCopy)
    assert (copy.src_device_index, copy.dst_device_index) == (1, 0)
    vm = VirtualMachine(exe, [CPU0, tvm.opencl(0)])
    data = np.full((1, 5), 0.5, "float32")
    np.testing.assert_allclose(vm.run(data).numpy(), data, rtol=1e-5)  # log(exp(x))
