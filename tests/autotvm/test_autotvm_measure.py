"""Measurement: parallel builds, timing in a worker, failures recorded with their error."""

from __future__ import annotations

import os

import numpy as np
import pytest
from autotvm_templates import faulty_scale  # noqa: F401  (registers the template)

import kiln as tvm
from kiln import autotvm, te
from kiln.autotvm.measure import MeasureErrorNo, MeasureInput
from kiln.autotvm.measure.worker import WorkerPool
from kiln.autotvm.task.task import default_config_index


def _exit_with(code):
    os._exit(code)


def test_worker_pool_reports_errors_crashes_and_timeouts_and_recovers():
    pool = WorkerPool(2)
    try:
        out = pool.run([(pow, (2, 10)), (_exit_with, (3,)), (int, ("x",)),
                        (__import__("time").sleep, (30,)), (pow, (3, 2))], timeout=3)
        assert out[0] == ("ok", 1024) and out[4] == ("ok", 9)
        assert out[1] == ("crash", 3)
        assert out[2][0] == "error" and "invalid literal" in out[2][1]
        assert out[3] == ("timeout", 3)
        assert pool.run([(pow, (5, 2))], timeout=3) == [("ok", 25)]
    finally:
        pool.close()


def test_failing_candidates_are_recorded_and_the_rest_measured():
    task = autotvm.task.create("test_autotvm.faulty_scale", (64, "float32"), "c")
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(timeout=4, n_parallel=2),
        runner=autotvm.LocalRunner(number=2, repeat=3, cooldown_interval=0))
    batch = autotvm.create_measure_batch(task, option)
    try:
        inputs = [MeasureInput(task.target, task, task.config_space.get(i)) for i in range(5)]
        results = batch(inputs)
    finally:
        option["builder"].close()
        option["runner"].close()
    errors = [r.error_no for r in results]
    assert errors == [MeasureErrorNo.NO_ERROR, MeasureErrorNo.INSTANTIATION_ERROR,
                      MeasureErrorNo.COMPILE_HOST, MeasureErrorNo.BUILD_TIMEOUT,
                      MeasureErrorNo.NO_ERROR]
    assert "rejected by the template" in results[1].costs[0]
    assert len(results[0].costs) == 1  # three repeats, fastest and slowest dropped
    assert all(0 < c < 1e-2 for r in (results[0], results[4]) for c in r.costs)


def test_tuning_real_candidates_logs_every_trial(tmp_path):
    x, w = te.placeholder((2, 32)), te.placeholder((16, 32))
    task = autotvm.task.create("dense_pack.x86", (x, w, None, "float32"), "c")
    log = tmp_path / "dense.log"
    tuner = autotvm.tuner.RandomTuner(task, seed=0)
    tuner.tune(4, autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2),
        runner=autotvm.LocalRunner(number=5, repeat=1, cooldown_interval=0)),
        callbacks=[autotvm.callback.log_to_file(str(log))])
    records = list(autotvm.record.load_from_file(log))
    assert len(records) == 4 and all(r.error_no == 0 for _, r in records)
    assert records[0][0].config.index == default_config_index(task)  # measured first
    best = min(records, key=lambda ir: np.mean(ir[1].costs))
    assert tuner.best_flops == pytest.approx(task.flop / np.mean(best[1].costs))
    # the tuned config builds a correct dense through the relay-free template path
    with autotvm.apply_history_best(str(log)), tvm.target.Target("llvm"):
        sch, bufs = autotvm.task.TASK_TABLE["dense_pack.x86"](*task.args)
    a = np.random.default_rng(0).random((2, 32)).astype("float32")
    b = np.random.default_rng(1).random((16, 32)).astype("float32")
    nds = [tvm.nd.array(v) for v in (a, b, np.zeros((2, 16), "float32"))]
    tvm.build(sch, bufs, "llvm")["default_function"](*nds)
    np.testing.assert_allclose(nds[2].numpy(), a @ b.T, rtol=1e-5)


def test_measure_option_rejects_what_is_not_a_builder_or_runner():
    with pytest.raises(tvm.TVMError, match="builder must be"):
        autotvm.measure_option(builder=object(), runner="local")
    with pytest.raises(tvm.TVMError, match="number and repeat"):
        autotvm.LocalRunner(number=0)


def test_rpc_runner_measures_through_a_tracker_and_reports_a_missing_device():
    from kiln import rpc

    tracker = rpc.Tracker(port=0, port_end=0, silent=True)
    server = rpc.Server(port=0, port_end=0, tracker_addr=("127.0.0.1", tracker.port),
                        key="autotvm-test", silent=True)
    try:
        x, w = te.placeholder((2, 32)), te.placeholder((16, 32))
        task = autotvm.task.create("dense_pack.x86", (x, w, None, "float32"), "c")
        runner = autotvm.RPCRunner("autotvm-test", "127.0.0.1", tracker.port, number=2,
                                   repeat=1, cooldown_interval=0, timeout=20)
        option = autotvm.measure_option(autotvm.LocalBuilder(n_parallel=1), runner)
        batch = autotvm.create_measure_batch(task, option)
        results = batch([MeasureInput(task.target, task, task.config_space.get(0))])
        option["builder"].close()
        assert results[0].error_no == MeasureErrorNo.NO_ERROR and results[0].costs[0] > 0
        with pytest.raises(tvm.TVMError, match="no free device with key 'absent'"):
            autotvm.RPCRunner("absent", "127.0.0.1", tracker.port).set_task(task)
    finally:
        server.terminate()
        tracker.terminate()


def test_time_candidate_with_cache_flush_in_process(tmp_path):
    from kiln.autotvm.measure.measure_methods import build_candidate, time_candidate

    x, w = te.placeholder((2, 32)), te.placeholder((16, 32))
    task = autotvm.task.create("dense_pack.x86", (x, w, None, "float32"), "c")
    built = build_candidate(MeasureInput(task.target, task, task.config_space.get(0)),
                            str(tmp_path))
    assert built.error is None and built.filename.endswith(".so")
    data, weight, out = built.arg_info
    assert data == ((2, 32), "float32") and out == ((2, 16), "float32")
    assert len(weight[0]) == 3  # tuning measures the packed weight layout, as Relay runs it
    flushed = time_candidate(built.filename, built.arg_info, 1, 4, 0, True)
    plain = time_candidate(built.filename, built.arg_info, 2, 4, 0, False)
    assert len(flushed) == len(plain) == 2  # four measurements, fastest and slowest dropped
    assert all(0 < c < 1e-2 for c in flushed + plain)
