"""Search efficiency on a measured surface: every config of ResNet-18's first 3x3 conv
(``conv2d_nchw.x86`` 1x64x56x56 -> 64, 280 configs) timed once by ``benchmarks/tune.py``
and replayed, so each tuner and seed sees the same costs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kiln import autotvm, te
from kiln.autotvm.measure.replay import load_table, replay_option, save_table
from kiln.runtime.error import TVMError

TABLE = Path(__file__).parent / "data" / "conv2d_resnet_l1_grid.json"


@pytest.fixture(scope="module")
def task():
    data, kernel = te.placeholder((1, 64, 56, 56)), te.placeholder((64, 64, 3, 3))
    return autotvm.task.create("conv2d_nchw.x86", (data, kernel, (1, 1), (1, 1, 1, 1),
                                                   (1, 1), "float32"),
                              "llvm -mcpu=core-avx2")  # AVX-512 widens the space


@pytest.fixture(scope="module")
def table(task):
    return load_table(TABLE, task)


def _trials_to_within_5_percent(task, table, tuner) -> int:
    optimum = task.flop / min(c for c in table.values() if c is not None)
    monitor = autotvm.callback.Monitor()
    tuner.tune(len(table), replay_option(table), callbacks=[monitor])
    best = np.maximum.accumulate(monitor.trial_scores())
    return int(np.argmax(best >= 0.95 * optimum)) + 1


def test_xgb_tuner_reaches_the_grid_optimum_in_a_quarter_of_grid_search(task, table):
    # grid search measures every config to know its optimum
    quarter = len(table) // 4
    runs = [_trials_to_within_5_percent(task, table, autotvm.tuner.XGBTuner(task, seed=seed))
            for seed in range(4)]
    assert max(runs) <= quarter, runs


def test_replay_returns_the_table_and_grid_search_finds_its_optimum(task, table):
    tuner = autotvm.tuner.GridSearchTuner(task)
    tuner.tune(len(table), replay_option(table))
    best_index = min((c, i) for i, c in table.items() if c is not None)[1]
    assert tuner.best_config.index == best_index
    assert tuner.best_flops == pytest.approx(task.flop / table[best_index])


def test_a_table_of_another_workload_or_space_is_refused(task, table, tmp_path):
    path = tmp_path / "grid.json"
    save_table(path, task, table)
    assert load_table(path, task) == table
    other = autotvm.task.create("conv2d_nchw.x86", (
        te.placeholder((1, 64, 28, 28)), te.placeholder((64, 64, 3, 3)), (1, 1),
        (1, 1, 1, 1), (1, 1), "float32"),
                              "llvm -mcpu=core-avx2")  # AVX-512 widens the space
    with pytest.raises(TVMError, match="measured"):
        load_table(path, other)
    doc = json.loads(path.read_text())
    doc["space_size"] = 40
    path.write_text(json.dumps(doc))
    with pytest.raises(TVMError, match="another template version"):
        load_table(path, task)
    path.write_text("{}")
    with pytest.raises(TVMError, match="not a replay table"):
        load_table(path, task)
