"""Tuners on a synthetic cost surface: each searches correctly; XGBTuner needs a fraction of
grid search's trials; callbacks log, plot and show progress; history seeds the model."""

from __future__ import annotations

import io
import math
import time

import numpy as np
import pytest
from autotvm_templates import synthetic  # noqa: F401  (registers the template)

from kiln import autotvm
from kiln.autotvm.measure import BuildResult, MeasureErrorNo, MeasureResult
from kiln.autotvm.measure.measure import Builder, Runner


def seconds(config) -> float:
    """A smooth cost with one optimum: tile_y 8, tile_x 16, tile_z 4, unroll 1."""
    ty, tx, tz = (config[k].size[-1] for k in ("tile_y", "tile_x", "tile_z"))
    unroll = config["unroll"].val
    return 1e-3 * (1 + (math.log2(ty) - 3) ** 2 + 0.5 * (math.log2(tx) - 4) ** 2
                   + 0.7 * (math.log2(tz) - 2) ** 2 + 0.3 * (unroll - 1) ** 2)


class FakeBuilder(Builder):
    """Builds nothing; fails configs whose ``tile_z`` inner size is 64 (a build error)."""

    def build(self, measure_inputs):
        return [BuildResult(None, None, "too big", 0.0, MeasureErrorNo.COMPILE_HOST)
                if inp.config["tile_z"].size[-1] == 64 else BuildResult("fake", [], None, 0.0)
                for inp in measure_inputs]


class FakeRunner(Runner):
    def run(self, measure_inputs, build_results):
        now = time.time()
        return [MeasureResult((b.error,), b.error_no, 0.0, now) if b.error is not None
                else MeasureResult((seconds(i.config),), 0, 0.0, now)
                for i, b in zip(measure_inputs, build_results)]


def _task():
    return autotvm.task.create("test_autotvm.synthetic", (64, "float32"), "llvm")


def _option():
    return autotvm.measure_option(builder=FakeBuilder(n_parallel=8), runner=FakeRunner())


def _optimum(task):
    space = task.config_space
    return min((seconds(space.get(i)), i) for i in range(len(space))
               if space.get(i)["tile_z"].size[-1] != 64)


def test_grid_search_measures_every_config_in_index_order():
    task = _task()
    monitor = autotvm.callback.Monitor()
    tuner = autotvm.tuner.GridSearchTuner(task)
    tuner.tune(len(task.config_space) + 10, _option(), callbacks=[monitor])
    assert len(monitor.trial_scores()) == len(task.config_space) == 7 ** 3 * 3
    best_cost, best_index = _optimum(task)
    assert tuner.best_config.index == best_index
    assert tuner.best_flops == pytest.approx(1e9 / best_cost)
    assert monitor.trial_scores().count(0.0) == 7 * 7 * 3  # tile_z 64 fails to build


def test_random_tuner_never_repeats_and_early_stopping_stops():
    task = _task()
    tuner = autotvm.tuner.RandomTuner(task, seed=3)
    seen = []
    tuner.tune(200, _option(), callbacks=[lambda t, i, r: seen.extend(x.config.index
                                                                      for x in i)])
    assert len(seen) == len(set(seen)) == 200
    stopped = autotvm.tuner.RandomTuner(task, seed=3)
    stopped.tune(1000, _option(), early_stopping=16)
    assert stopped.best_iter + 16 <= len(stopped.visited) < stopped.best_iter + 16 + 8
    with pytest.raises(Exception, match="range_idx"):
        autotvm.tuner.GridSearchTuner(task, range_idx=(5, 10_000))


def test_ga_tuner_improves_on_its_first_generation():
    task = _task()
    monitor = autotvm.callback.Monitor()
    tuner = autotvm.tuner.GATuner(task, pop_size=32, seed=0)
    tuner.tune(256, _option(), callbacks=[monitor])
    scores = monitor.trial_scores()
    assert len(set(tuner.visited)) == len(scores) == 256
    assert max(scores[32:]) > max(scores[:32])
    assert tuner.best_flops >= 0.9 * 1e9 / _optimum(task)[0]


@pytest.mark.parametrize("loss_type", ["reg", "rank"])
def test_xgb_tuner_reaches_the_grid_optimum_in_a_quarter_of_the_trials(loss_type):
    task = _task()
    budget = len(task.config_space) // 4  # grid search needs the whole space
    tuner = autotvm.tuner.XGBTuner(task, plan_size=32, loss_type=loss_type, seed=0)
    tuner.tune(budget, _option())
    grid_best = 1e9 / _optimum(task)[0]
    assert tuner.best_flops >= 0.95 * grid_best


def test_xgb_tuner_feature_types_and_bad_arguments():
    # loop features lower every rated candidate: a small space keeps this quick
    task = autotvm.task.create("test_autotvm.synthetic", (4, "float32"), "llvm")
    for feature_type in ("itervar", "curve"):
        tuner = autotvm.tuner.XGBTuner(task, plan_size=8, feature_type=feature_type, seed=1)
        tuner.tune(24, _option())
        assert tuner.best_flops > 0 and tuner.train_ct >= 2
    with pytest.raises(Exception, match="feature_type"):
        autotvm.tuner.XGBTuner(task, feature_type="pixels")
    with pytest.raises(Exception, match="loss_type"):
        autotvm.tuner.XGBTuner(task, loss_type="hinge")


def test_load_history_seeds_the_first_plan_from_earlier_records():
    task = _task()
    log = io.StringIO()
    autotvm.tuner.RandomTuner(task, seed=5).tune(
        96, _option(), callbacks=[autotvm.callback.log_to_file(log)])
    records = list(autotvm.record.load_from_buffer(log.getvalue().splitlines()))
    assert len(records) == 96
    tuner = autotvm.tuner.XGBTuner(task, plan_size=16, seed=0)
    tuner.load_history(records, min_seed_records=50)
    first = tuner.next_batch(8)
    seed_best = 1e9 / min(seconds(i.config) for i, r in records if r.error_no == 0)
    assert max(1e9 / seconds(c) for c in first) >= 0.8 * seed_best
    cold = autotvm.tuner.XGBTuner(task, plan_size=16, seed=0)
    cold.load_history(records[:10], min_seed_records=50)  # too few: no model
    assert cold.trials == []


def test_progress_bar_and_plot(tmp_path, capsys):
    task = _task()
    monitor = autotvm.callback.Monitor()
    autotvm.tuner.RandomTuner(task, seed=0).tune(
        16, _option(), callbacks=[autotvm.callback.progress_bar(16, prefix="[synthetic]"),
                                  monitor])
    err = capsys.readouterr().err
    assert "[synthetic]" in err and "16/16" in err and "GFLOPS" in err
    png = tmp_path / "curve.png"
    autotvm.callback.plot_curves({"synthetic": monitor.trial_scores()}, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    best = np.maximum.accumulate(monitor.trial_scores())
    assert best[-1] == max(monitor.trial_scores())


def test_diversity_filter_plans_cover_distinct_knob_values():
    from kiln.autotvm.tuner.model_based_tuner import submodular_pick

    # the greedy objective: score plus one per knob value not yet in the picked set
    assert submodular_pick([0, 0, 0], [[0, 0], [0, 1], [1, 1]], 2) == [0, 2]
    assert submodular_pick([5, 0, 0], [[0, 0], [1, 1], [0, 1]], 3) == [0, 1, 2]
    task = _task()
    tuner = autotvm.tuner.XGBTuner(task, plan_size=16, diversity_filter_ratio=3, seed=0)
    tuner.tune(48, _option())
    plan = [task.config_space.point2knob(i) for i in tuner.trials]
    assert len(plan) == 16 and tuner.train_ct >= 2
    # 16 points over 4 knobs of 7, 7, 7 and 3 values: the filter spreads every knob
    assert all(len({knob[k] for knob in plan}) >= 3 for k in range(4))
    assert tuner.best_flops >= 0.8 * 1e9 / _optimum(task)[0]
    with pytest.raises(Exception, match="diversity_filter_ratio"):
        autotvm.tuner.XGBTuner(task, diversity_filter_ratio=0.5)
