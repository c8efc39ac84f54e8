"""AutoTVM on a Cortex-M: arm_cpu templates measured under QEMU, the best applied to
relay.build, failing candidates recorded."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from autotvm_templates import micro_faulty  # noqa: F401  (registers the template)

import kiln as tvm
from kiln import autotvm, relay
from kiln.autotvm.measure import MeasureErrorNo, MeasureInput
from kiln.autotvm.task.task import default_config_index
from kiln.micro.board import build_standalone
from kiln.relay.backend import Executor, Runtime

pytestmark = pytest.mark.skipif(
    shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None,
    reason="needs qemu-system-arm and gcc-arm-none-eabi")

TARGET = "c -keys=arm_cpu -mcpu=cortex-m4"


def _micro_option(timeout=20):
    loader = tvm.micro.AutoTvmModuleLoader(
        tvm.micro.get_microtvm_template_projects("qemu-cortex-m"), {"board": "qemu-cortex-m4"})
    return autotvm.measure_option(
        builder=autotvm.LocalBuilder(build_func=tvm.micro.autotvm_build_func, n_parallel=2,
                                     timeout=60),
        runner=autotvm.LocalRunner(timeout=timeout, module_loader=loader))


def _close(option):
    option["builder"].close()
    option["runner"].close()


def _conv_model():
    data = relay.var("data", shape=(1, 6, 6, 4), dtype="float32")
    weight = relay.var("weight", shape=(3, 3, 4, 16), dtype="float32")
    out = relay.nn.conv2d(data, weight, padding=(1, 1), channels=16, kernel_size=(3, 3),
                          data_layout="NHWC", kernel_layout="HWIO")
    return tvm.IRModule.from_expr(relay.Function([data, weight], out))


def _numpy_conv_nhwc(x, w):
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((1, 6, 6, w.shape[3]), "float64")
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("nhwc,co->nhwo", padded[:, dy:dy + 6, dx:dx + 6, :], w[dy, dx])
    return out.astype("float32")


def _run_on_qemu(mod, params, x, tmp_path, name):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=TARGET, params=params, runtime=Runtime("crt"),
                          executor=Executor("aot", {"interface-api": "c",
                                                    "unpacked-api": True}))
    archive = tvm.micro.export_model_library_format(lib, tmp_path / f"{name}.tar")
    project = build_standalone(archive, "qemu-cortex-m4", tmp_path / name)
    return project.run({"data": x})


def test_measured_candidates_are_exact_instruction_counts_and_failures_are_recorded():
    task = autotvm.task.create("test_autotvm.micro_faulty", (16,), TARGET)
    option = _micro_option(timeout=3)
    try:
        batch = autotvm.create_measure_batch(task, option)
        results = batch([MeasureInput(task.target, task, task.config_space.get(i))
                         for i in range(4)] + [MeasureInput(task.target, task,
                                                            task.config_space.get(0))])
    finally:
        _close(option)
    assert [r.error_no for r in results] == [
        MeasureErrorNo.NO_ERROR, MeasureErrorNo.RUNTIME_DEVICE, MeasureErrorNo.RUN_TIMEOUT,
        MeasureErrorNo.COMPILE_DEVICE, MeasureErrorNo.NO_ERROR]
    assert "fault" in results[1].costs[0]
    assert "no step on this device" in results[3].costs[0]
    # virtual time under -icount: 1 ns per instruction, the same on every run
    assert results[0].costs == results[4].costs
    assert 1e-8 < results[0].costs[0] < 1e-5


def test_tuned_conv_on_qemu_applies_the_best_record_and_matches_numpy(tmp_path):
    mod = _conv_model()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 6, 6, 4)).astype("float32")
    w = rng.standard_normal((3, 3, 4, 16)).astype("float32")
    params = {"weight": w}
    tasks = autotvm.task.extract_from_program(mod, params, TARGET)
    assert [t.name for t in tasks] == ["conv2d_direct.arm_cpu"]
    task = tasks[0]
    assert default_config_index(task) is not None
    log = tmp_path / "micro.log"
    option = _micro_option()
    try:
        tuner = autotvm.tuner.GridSearchTuner(task)
        tuner.tune(n_trial=6, measure_option=option,
                   callbacks=[autotvm.callback.log_to_file(str(log))])
    finally:
        _close(option)
    records = list(autotvm.record.load_from_file(str(log)))
    assert len(records) == 6 and all(r.error_no == 0 for _, r in records)
    best_inp, best_res = min(records, key=lambda rec: rec[1].costs[0])
    worst_inp, worst_res = max(records, key=lambda rec: rec[1].costs[0])
    assert worst_res.costs[0] > best_res.costs[0]

    want = _numpy_conv_nhwc(x, w)
    runs = {}
    for name, record in (("best", (best_inp, best_res)), ("worst", (worst_inp, worst_res))):
        single = tmp_path / f"{name}.log"
        single.write_text(autotvm.record.encode(*record) + "\n")
        with autotvm.apply_history_best(str(single)):
            runs[name] = _run_on_qemu(mod, params, x, tmp_path, name)
        np.testing.assert_allclose(runs[name].outputs[0], want, rtol=1e-4, atol=1e-4)
    # the model's run call is the tuned kernel: the record's config reaches relay.build
    for name, cost in (("best", best_res.costs[0]), ("worst", worst_res.costs[0])):
        assert runs[name].seconds == pytest.approx(cost, rel=0.05)
    assert runs["best"].instructions < runs["worst"].instructions


def test_the_crt_template_measures_candidates_on_the_host():
    task = autotvm.task.create("test_autotvm.micro_faulty", (64,),
                               tvm.micro.testing.get_target("crt"))
    loader = tvm.micro.AutoTvmModuleLoader(tvm.micro.get_microtvm_template_projects("crt"))
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(build_func=tvm.micro.autotvm_build_func, n_parallel=2),
        runner=autotvm.LocalRunner(timeout=10, module_loader=loader))
    try:
        results = autotvm.create_measure_batch(task, option)(
            [MeasureInput(task.target, task, task.config_space.get(i)) for i in range(2)])
    finally:
        _close(option)
    assert [r.error_no for r in results] == [MeasureErrorNo.NO_ERROR,
                                             MeasureErrorNo.RUNTIME_DEVICE]
    assert 0 < results[0].costs[0] < 1e-2 and "SIGILL" in results[1].costs[0]


def test_module_loader_refuses_another_template_or_board(tmp_path):
    with pytest.raises(tvm.TVMError, match="template projects"):
        tvm.micro.AutoTvmModuleLoader(tmp_path / "zephyr")
    with pytest.raises(tvm.TVMError, match="unknown board 'qemu-cortex-m4' for the 'crt'"):
        tvm.micro.AutoTvmModuleLoader(tvm.micro.get_microtvm_template_projects("crt"),
                                      {"board": "qemu-cortex-m4"})
    with pytest.raises(tvm.TVMError, match="unknown board 'qemu-cortex-m0'"):
        tvm.micro.AutoTvmModuleLoader(
            tvm.micro.get_microtvm_template_projects("qemu-cortex-m"),
            {"board": "qemu-cortex-m0"})
    with pytest.raises(tvm.TVMError, match="has no QEMU board"):
        tvm.micro.autotvm.board_for_target("c -keys=arm_cpu -mcpu=cortex-a53")
