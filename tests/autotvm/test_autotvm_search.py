"""Search efficiency on a measured surface: every config of ResNet-18's first 3x3 conv
(``conv2d_nchw.x86`` 1x64x56x56 -> 64, 280 configs) timed once by ``benchmarks/tune.py``
and replayed, so each tuner and seed sees the same costs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kiln import autotvm, te
from kiln.autotvm.measure.replay import load_table, measure_table, replay_option, save_table
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


@pytest.mark.parametrize("content", [
    None, b"\x00\xffgarbage", b"[1, 2]",
    b'{"format": "kiln.autotvm.replay/1", "task": ["t", []], "space_size": 1, "seconds": []}',
    b'{"format": "kiln.autotvm.replay/1", "task": ["t", []], "space_size": 1,'
    b' "seconds": {"zero": 1.0}}',
    b'{"format": "kiln.autotvm.replay/1", "task": ["t", []], "space_size": 1,'
    b' "seconds": {"0": "fast"}}',
    b'{"format": "kiln.autotvm.replay/1", "task": ["t", []], "space_size": 1,'
    b' "seconds": {"0": -1}}',
], ids=["missing", "binary", "list", "seconds-list", "bad-index", "bad-cost", "negative"])
def test_a_missing_or_garbage_table_file_raises_naming_it(tmp_path, content):
    path = tmp_path / "table.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(TVMError, match=r"table\.json is not a replay table"):
        load_table(path)


def test_measure_table_leaves_files_named_like_a_replayed_config_alone(task, table, tmp_path,
                                                                      monkeypatch):
    """A replay builder's "library" is the config's index: files of that name in the working
    directory are the user's (they were copied, timed and deleted)."""
    monkeypatch.chdir(tmp_path)
    for index in range(3):
        (tmp_path / str(index)).write_text("mine")
    measured = measure_table(task, replay_option(table))
    assert measured == table
    assert [(tmp_path / str(i)).read_text() for i in range(3)] == ["mine"] * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "1", "2"]
