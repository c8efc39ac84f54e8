"""The Relay VM on a real second device type: OpenCL (pyopencl + pocl, which runs OpenCL on the
CPU here). Programs are compiled with ``relay.vm.compile`` for ``{"cpu": "c", "opencl":
"opencl"}`` and run by ``VirtualMachine(exe, [cpu(0), opencl(0)])``, checked against NumPy:
storage in device memory, device copies, constants copied to the device once, tuples and
``If`` branches crossing devices, results left on the device, save/load, memory returned.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.ir.transform import PassContext, pass_instrument
from kiln.runtime.device_api import DeviceNDArray
from kiln.runtime.opencl import DEVICE_API
from kiln.runtime.vm import Executable, VirtualMachine, VMFunction
from kiln.runtime.vm import bytecode as bc
from kiln.runtime.vm.memory import make_allocator
from kiln.target import Target

CPU, CL = tvm.cpu(0), tvm.opencl(0)
TARGETS = {"cpu": "c", "opencl": "opencl"}
RNG = np.random.default_rng(7)


def _on(expr, device=CL, **kwargs):
    return relay.annotation.on_device(expr, device, **kwargs)


def _compile(func, target=None, **kwargs):
    return relay.vm.compile(tvm.IRModule.from_expr(func), target or TARGETS, **kwargs)


def _vm(exe, memory_cfg=None):
    return VirtualMachine(exe, [CPU, CL], memory_cfg=memory_cfg)


def _instructions(exe, kind):
    main = exe.functions[exe.global_map["main"]]
    return [i for i in main.instructions if isinstance(i, kind)]


def _rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


# -- the seed's add -> on_device(opencl) -> log ------------------------------------------------

@pytest.fixture(scope="module")
def seed_exe():
    x = relay.var("x", shape=(1, 5))
    y = relay.var("y", shape=(1, 5))
    return _compile(relay.Function([x, y], relay.log(_on(relay.add(x, y)))))


def test_seed_model_allocates_on_the_device_and_matches_numpy(seed_exe):
    storages = _instructions(seed_exe, bc.AllocStorage)
    assert sorted({s.device_index for s in storages}) == [0, 1]
    x, y = RNG.uniform(0.5, 2, (1, 5)).astype("float32"), np.full((1, 5), 0.25, "float32")
    for memory in ("pooled", "naive"):
        out = _vm(seed_exe, memory).run(x, y)
        assert out.device == CPU and not isinstance(out, DeviceNDArray)
        np.testing.assert_allclose(out.numpy(), np.log(x + y), rtol=1e-5)


def test_inputs_are_copied_to_their_parameters_device(seed_exe):
    main = seed_exe.functions[seed_exe.global_map["main"]]
    assert main.param_device_indexes == (1, 1)
    x, y = np.full((1, 5), 1.5, "float32"), np.full((1, 5), 0.5, "float32")
    on_device = tvm.nd.array(x, CL)  # already there
    on_host = tvm.nd.array(y, CPU)  # copied
    out = _vm(seed_exe).run(on_device, on_host)
    np.testing.assert_allclose(out.numpy(), np.log(x + y), rtol=1e-6)


def test_a_wrongly_shaped_device_input_is_a_clear_error(seed_exe):
    with pytest.raises(tvm.TVMError, match="argument 0"):
        _vm(seed_exe).run(np.ones((2, 5), "float32"), np.ones((1, 5), "float32"))


def test_save_and_load_of_the_executable_runs_the_same(seed_exe):
    x, y = np.full((1, 5), 2.0, "float32"), np.full((1, 5), 1.0, "float32")
    code, lib = seed_exe.save()
    loaded = Executable.load_exec(code, lib)
    assert loaded.virtual_devices == [CPU, CL]
    assert loaded.bytecode == seed_exe.bytecode
    np.testing.assert_allclose(_vm(loaded).run(x, y).numpy(), np.log(x + y), rtol=1e-6)


def test_export_library_then_load_module_in_a_fresh_process(seed_exe, tmp_path):
    path = str(tmp_path / "seed.so")
    seed_exe.mod.export_library(path)
    script = textwrap.dedent(f"""
        import numpy as np, kiln
        from kiln.runtime.vm import VirtualMachine
        vm = VirtualMachine(kiln.runtime.load_module({path!r}), [kiln.cpu(0), kiln.opencl(0)])
        out = vm.run(np.full((1, 5), 3.0, "float32"), np.full((1, 5), 1.0, "float32"))
        print(float(out.numpy()[0, 0]))
    """)
    done = subprocess.run([sys.executable, "-c", script], check=True, env=dict(os.environ),
                          capture_output=True, text=True, timeout=120)
    assert float(done.stdout.split()[-1]) == pytest.approx(np.log(4.0), rel=1e-6)


# -- a dense + relu region with CPU ops around it ---------------------------------------------

@pytest.fixture(scope="module")
def dense_exe():
    x = relay.var("x", shape=(4, 8))
    weight = relay.const(_rand(16, 8))
    region = _on(relay.nn.relu(relay.nn.dense(relay.negative(x), weight)))
    return _compile(relay.Function([x], relay.sigmoid(region + relay.const(0.5)))), weight


def test_dense_relu_region_with_cpu_pre_and_post_ops(dense_exe):
    exe, weight = dense_exe
    x = _rand(4, 8)
    expected = 1 / (1 + np.exp(-(np.maximum(-x @ weight.data.numpy().T, 0) + 0.5)))
    vm = _vm(exe)
    for _ in range(2):
        np.testing.assert_allclose(vm.run(x).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_a_device_constant_is_copied_to_the_device_once(dense_exe, monkeypatch):
    exe, _ = dense_exe
    on_device = [c for c in _instructions(exe, bc.LoadConst) if c.device_index == 1]
    assert on_device, "the weight should be loaded on the OpenCL device"
    copies = []
    original = DEVICE_API.copy_from_host

    def counting(device, handle, offset, host):
        copies.append(host.nbytes)
        return original(device, handle, offset, host)

    monkeypatch.setattr(DEVICE_API, "copy_from_host", counting)
    vm = _vm(exe)
    x = _rand(4, 8)
    vm.run(x)
    first = list(copies)
    copies.clear()
    vm.run(x)
    weight_bytes = 16 * 8 * 4
    assert weight_bytes in first and weight_bytes not in copies


# -- tuples, If, results and reshapes on the device -------------------------------------------

def test_a_tuple_made_on_the_device_is_used_on_the_cpu():
    x = relay.var("x", shape=(3, 4))
    pair = _on(relay.Tuple([relay.exp(x), relay.negative(x)]))
    func = relay.Function([x], relay.add(relay.TupleGetItem(pair, 0),
                                         relay.TupleGetItem(pair, 1)))
    data = _rand(3, 4)
    out = _vm(_compile(func)).run(data)
    np.testing.assert_allclose(out.numpy(), np.exp(data) - data, rtol=1e-5)


def test_a_tuple_result_on_the_device_holds_device_arrays():
    x = relay.var("x", shape=(2, 3))
    pair = _on(relay.Tuple([relay.exp(x), relay.negative(x)]), constrain_result=True)
    data = _rand(2, 3)
    result = _vm(_compile(relay.Function([x], pair))).run(data)
    first, second = result[0], result[1]
    assert all(isinstance(f, DeviceNDArray) and f.device == CL for f in (first, second))
    np.testing.assert_allclose(first.numpy(), np.exp(data), rtol=1e-5)
    np.testing.assert_allclose(second.numpy(), -data)


def test_if_branches_run_on_the_device():
    cond = relay.var("cond", shape=(), dtype="bool")
    x = relay.var("x", shape=(2, 4))
    func = relay.Function([cond, x], relay.If(cond, _on(relay.exp(x)),
                                               _on(relay.negative(relay.abs(x)))))
    exe = _compile(func)
    assert {s.device_index for s in _instructions(exe, bc.AllocStorage)} == {1}
    vm = _vm(exe)
    data = _rand(2, 4)
    np.testing.assert_allclose(vm.run(np.array(True), data).numpy(), np.exp(data), rtol=1e-5)
    np.testing.assert_allclose(vm.run(np.array(False), data).numpy(), -np.abs(data))


def test_a_result_left_on_the_device_is_a_device_array():
    x = relay.var("x", shape=(2, 3))
    func = relay.Function([x], _on(relay.exp(relay.negative(x)), constrain_result=True))
    data = _rand(2, 3)
    out = _vm(_compile(func)).run(data)
    assert isinstance(out, DeviceNDArray) and out.device == CL
    np.testing.assert_allclose(out.numpy(), np.exp(-data), rtol=1e-5)
    np.testing.assert_allclose(out.copyto(CPU).numpy(), np.exp(-data), rtol=1e-5)


def test_reshape_of_a_device_tensor_is_a_view_of_device_memory():
    x = relay.var("x", shape=(2, 6))
    reshaped = _on(relay.reshape(x, (3, 4)))
    func = relay.Function([x], relay.sum(reshaped, axis=1) - relay.const(1.0))
    exe = _compile(func)
    (reshape,) = _instructions(exe, bc.ReshapeTensor)
    assert any(c.src == reshape.dst for c in _instructions(exe, bc.DeviceCopy))
    data = _rand(2, 6)
    out = _vm(exe).run(data)
    np.testing.assert_allclose(out.numpy(), data.reshape(3, 4).sum(axis=1) - 1, rtol=1e-5)


def test_shape_of_and_reshape_tensor_on_a_device_parameter_in_bytecode():
    # main(x on opencl): shape = ShapeOf(x); y = ReshapeTensor(x, [6]); (shape, y)
    code = [bc.ShapeOf(0, 1), bc.LoadConst(0, 0, 2),
            bc.ReshapeTensor(0, 2, 3), bc.AllocADT(0, [1, 3], 4), bc.Ret(4)]
    main = VMFunction("main", ["x"], code, 5, param_device_indexes=(1,))
    exe = Executable([main], [tvm.nd.array(np.array([6], "int64"))], [], None, [CPU, CL], 0,
                     [0])
    data = _rand(2, 3)
    shape, flat = _vm(exe).run(data)
    assert shape.device == CPU and shape.numpy().tolist() == [2, 3]
    assert isinstance(flat, DeviceNDArray) and flat.shape == (6,)
    np.testing.assert_array_equal(flat.numpy(), data.reshape(6))


# -- memory -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["pooled", "naive"])
def test_device_storage_hands_out_views_at_byte_offsets(kind):
    allocator = make_allocator(kind, CL)
    storage = allocator.alloc(64, 64)
    first = storage.alloc_tensor(0, (16,), "float32")
    second = storage.alloc_tensor(32, (2, 2), "float32")
    assert isinstance(second, DeviceNDArray) and second.device == CL
    first.copyfrom(np.arange(16, dtype="float32"))  # the views alias one device buffer
    np.testing.assert_array_equal(second.numpy(), [[8, 9], [10, 11]])
    second.copyfrom(np.full((2, 2), 7, "float32"))
    np.testing.assert_array_equal(first.numpy()[6:14], [6, 7, 7, 7, 7, 7, 12, 13])
    np.testing.assert_array_equal(second._create_view((4,)).numpy(), np.full(4, 7))
    with pytest.raises(tvm.TVMError, match="does not fit"):
        storage.alloc_tensor(48, (8,), "float32")
    del storage, first
    assert allocator.used_bytes > 0  # ``second`` still views the block
    del second
    assert allocator.used_bytes == 0


def test_storage_on_a_device_without_a_device_api_is_a_clear_error():
    with pytest.raises(tvm.TVMError, match="no device API for cuda"):
        make_allocator("pooled", tvm.cuda(0)).alloc(16)


@pytest.mark.parametrize("memory", ["pooled", "naive"])
def test_device_memory_is_returned_when_outputs_and_the_vm_are_dropped(memory):
    x = relay.var("x", shape=(64, 64))
    region = _on(relay.exp(relay.nn.relu(x)), constrain_result=True)
    func = relay.Function([x], relay.Tuple([region, relay.negative(x)]))
    vm = _vm(_compile(func), memory)
    host_pool, device_pool = vm.allocators
    assert device_pool.device == CL and device_pool.kind == memory
    data = _rand(64, 64)
    result = vm.run(data)
    held = device_pool.used_bytes
    assert held >= 64 * 64 * 4  # the output on the device
    for _ in range(3):  # steady state: a new run reuses what the last one freed
        result = vm.run(data)
        assert device_pool.used_bytes == held
    np.testing.assert_allclose(result[0].numpy(), np.exp(np.maximum(data, 0)), rtol=1e-5)
    del result, vm
    gc.collect()  # the VM's prepared code refers back to it
    assert device_pool.used_bytes == 0 and host_pool.used_bytes == 0
    if memory == "pooled":
        assert device_pool.cached_bytes > 0
        device_pool.release_all()
        assert device_pool.cached_bytes == 0


# -- the compiler: passes run under the CPU kernels' target -----------------------------------

@pass_instrument
class _TargetRecorder:
    def __init__(self):
        self.seen = []

    def run_before_pass(self, mod, info):
        current = Target.current(allow_none=True)
        self.seen.append(None if current is None else current.kind.name)


@pytest.mark.parametrize("target", ["c", TARGETS])
def test_passes_run_under_the_cpu_kernels_target_despite_an_explicit_target_host(target):
    x = relay.var("x", shape=(2, 2))
    func = relay.Function([x], relay.exp(_on(relay.negative(x))) if isinstance(target, dict)
                          else relay.exp(relay.negative(x)))
    recorder = _TargetRecorder()
    with PassContext(opt_level=3, instruments=[recorder]):
        exe = _compile(func, target, target_host="llvm")
    assert recorder.seen and set(recorder.seen) == {"c"}
    data = _rand(2, 2)
    devices = [CPU, CL] if isinstance(target, dict) else CPU
    out = VirtualMachine(exe, devices).run(data)
    np.testing.assert_allclose(out.numpy(), np.exp(-data), rtol=1e-5)


def test_profiler_names_the_device_of_each_kernel(seed_exe):
    x, y = RNG.uniform(0.5, 2, (1, 5)).astype("float32"), np.full((1, 5), 0.25, "float32")
    report = _vm(seed_exe).profile(x, y)
    kernels = {row["Name"]: row for row in report.calls if row["Op"] == "InvokePacked"}
    devices = {name: row["Device"] for name, row in kernels.items()}
    assert any("add" in name and dev == str(CL) for name, dev in devices.items()), devices
    assert any("log" in name and dev == str(CPU) for name, dev in devices.items()), devices
    assert all(row["Output Shapes"] == "[(1, 5)]" for row in kernels.values())
    assert sum(row["Percent"] for row in report.calls) == pytest.approx(100.0)
