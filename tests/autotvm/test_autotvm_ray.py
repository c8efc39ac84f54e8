"""Builds and measurements as Ray tasks on a local two-CPU Ray (loopback only)."""

from __future__ import annotations

import os

import pytest
import ray
from autotvm_templates import faulty_scale  # noqa: F401  (registers the template)

from kiln import autotvm, te
from kiln.autotvm.measure import MeasureErrorNo, MeasureInput
from kiln.autotvm.measure.ray_methods import time_from_bytes
from kiln.autotvm.task.task import default_config_index


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    yield ray
    ray.shutdown()


def _flaky_timing(marker, *args):
    """Kills its worker process on the first attempt (a lost worker), then times."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return time_from_bytes(*args)


def _always_dies(*args):
    os._exit(1)


def test_ray_builder_and_runner_measure_and_record_failures(local_ray, tmp_path):
    task = autotvm.task.create("test_autotvm.faulty_scale", (64, "float32"), "c")
    builder = autotvm.RayBuilder(timeout=60)
    runner = autotvm.RayRunner(number=2, repeat=1, cooldown_interval=0, timeout=60)
    assert builder.n_parallel == 2 and len(runner.timers) == 1  # one timer per node
    batch = autotvm.create_measure_batch(task, autotvm.measure_option(builder, runner))
    inputs = [MeasureInput(task.target, task, task.config_space.get(i)) for i in (0, 1, 2, 4)]
    results = batch(inputs)
    assert [r.error_no for r in results] == [MeasureErrorNo.NO_ERROR,
                                             MeasureErrorNo.INSTANTIATION_ERROR,
                                             MeasureErrorNo.COMPILE_HOST,
                                             MeasureErrorNo.NO_ERROR]
    assert all(0 < r.costs[0] < 1e-2 for r in (results[0], results[3]))

    # a timer lost mid-measurement is restarted and the candidate retried; one lost twice
    # is recorded as failed
    builds = builder.build(inputs[:1])
    marker = str(tmp_path / "attempted")
    runner.timing_function = lambda *a: _flaky_timing(marker, *a)
    assert runner.run(inputs[:1], builds)[0].error_no == MeasureErrorNo.NO_ERROR
    runner.timing_function = _always_dies
    lost = runner.run(inputs[:1], builds)[0]
    assert lost.error_no == MeasureErrorNo.RUNTIME_DEVICE and "died" in lost.costs[0]

    # close() stops the timer actors; a closed runner starts new ones when used again
    runner.close()
    assert runner.timers == []
    runner.timing_function = time_from_bytes
    assert runner.run(inputs[:1], builds)[0].error_no == MeasureErrorNo.NO_ERROR
    assert len(runner.timers) == 1


def test_tuning_on_ray_writes_a_log_the_local_path_reads(local_ray, tmp_path):
    x, w = te.placeholder((2, 32)), te.placeholder((16, 32))
    task = autotvm.task.create("dense_pack.x86", (x, w, None, "float32"), "c")
    log = tmp_path / "ray.log"
    tuner = autotvm.tuner.GridSearchTuner(task)
    tuner.tune(2, autotvm.measure_option(autotvm.RayBuilder(),
                                         autotvm.RayRunner(number=3, repeat=1,
                                                           cooldown_interval=0)),
               callbacks=[autotvm.callback.log_to_file(str(log))])
    records = list(autotvm.record.load_from_file(log))
    # the default config first, then grid order
    assert [i.config.index for i, _ in records] == [default_config_index(task), 0]
    assert all(r.error_no == 0 for _, r in records) and tuner.best_flops > 0


def test_kiln_tune_on_ray(local_ray, tmp_path, capsys):
    from kiln.driver.cli import main

    model = tmp_path / "dense.rly"
    model.write_text('#[version = "0.0.5"]\n'
                     "def @main(%x: Tensor[(2, 32), float32], %w: Tensor[(16, 32), float32]) {\n"
                     "  nn.dense(%x, %w, units=None)\n}\n")
    log = tmp_path / "tune.log"
    assert main(["tune", str(model), "--target", "c", "--trials", "2", "--tuner", "grid",
                 "--ray", "local", "--number", "2", "--repeat", "1", "-o", str(log)]) == 0
    assert "dense_pack.x86: best" in capsys.readouterr().out
    assert [r.error_no for _, r in autotvm.record.load_from_file(log)] == [0, 0]
