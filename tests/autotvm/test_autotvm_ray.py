"""Builds and measurements as Ray tasks on a local two-CPU Ray (loopback only)."""

from __future__ import annotations

import os

import pytest
import ray
from autotvm_templates import faulty_scale  # noqa: F401  (registers the template)

from kiln import autotvm, te
from kiln.autotvm.measure import MeasureErrorNo, MeasureInput
from kiln.autotvm.measure.ray_methods import time_from_bytes


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
    assert builder.n_parallel == 2 and runner.pinning() == {"num_cpus": 2}
    batch = autotvm.create_measure_batch(task, autotvm.measure_option(builder, runner))
    inputs = [MeasureInput(task.target, task, task.config_space.get(i)) for i in (0, 1, 2, 4)]
    results = batch(inputs)
    assert [r.error_no for r in results] == [MeasureErrorNo.NO_ERROR,
                                             MeasureErrorNo.INSTANTIATION_ERROR,
                                             MeasureErrorNo.COMPILE_HOST,
                                             MeasureErrorNo.NO_ERROR]
    assert all(0 < r.costs[0] < 1e-2 for r in (results[0], results[3]))

    # a worker lost mid-measurement is retried elsewhere; one lost twice is recorded
    builds = builder.build(inputs[:1])
    marker = str(tmp_path / "attempted")
    runner.timing_task = ray.remote(
        lambda *a: _flaky_timing(marker, *a)).options(**runner.task_options())
    assert runner.run(inputs[:1], builds)[0].error_no == MeasureErrorNo.NO_ERROR
    runner.timing_task = ray.remote(_always_dies).options(**runner.task_options())
    lost = runner.run(inputs[:1], builds)[0]
    assert lost.error_no == MeasureErrorNo.RUNTIME_DEVICE and "Worker" in lost.costs[0]


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
    assert [i.config.index for i, _ in records] == [0, 1]
    assert all(r.error_no == 0 for _, r in records) and tuner.best_flops > 0
