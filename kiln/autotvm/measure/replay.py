"""Measurement replayed from a table: compare tuners exactly on costs measured once.

Entry points: :func:`measure_table` (every config of a task measured once: ``{index:
seconds or None}``), :func:`save_table` / :func:`load_table` (a JSON file), and
:class:`ReplayBuilder` / :class:`ReplayRunner` (a ``measure_option`` whose "measurement" of
a config is the table's cost for it). kiln's own addition (TVM has none).

Timings on a shared machine vary from run to run by more than the gaps between good
configs, so "trials until within 5% of the optimum" measured live mixes the tuner's search
with the machine's noise. Replayed against one table, every tuner and every seed sees the
same surface: the comparison is exact, and a tuner's run costs its model fits only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from kiln.autotvm.measure.measure import (
    Builder,
    BuildResult,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    Runner,
    create_measure_batch,
)
from kiln.runtime.error import TVMError

__all__ = ["measure_table", "save_table", "load_table", "ReplayBuilder", "ReplayRunner",
           "replay_option"]

_FORMAT = "kiln.autotvm.replay/1"


def measure_table(task: Any, option: dict, passes: int = 1,
                  seed: int = 0) -> dict[int, float | None]:
    """Seconds per run of every valid config of ``task`` (None where it failed): each
    config built once with ``option``'s builder, then timed ``passes`` times by its runner,
    each pass in a new random order, keeping the fastest.

    A machine's load drifts over a grid that takes minutes: timed once in index order, the
    configs measured in a quiet minute look best. Shuffled passes spread the drift over all
    configs, and the minimum discards the slow ones (load only ever slows a run).
    """
    import random
    import shutil

    space = task.config_space
    indices = [i for i in range(space.range_length) if space.is_index_valid(i)]
    inputs = {i: MeasureInput(task.target, task, space.get(i)) for i in indices}
    create_measure_batch(task, option)  # binds the task to the builder and runner
    builder, runner = option["builder"], option["runner"]
    rng = random.Random(seed)
    table: dict[int, float | None] = {}
    builds: dict = {}
    try:
        for k in range(0, len(indices), builder.n_parallel):
            chunk = indices[k:k + builder.n_parallel]
            builds.update(zip(chunk, builder.build([inputs[i] for i in chunk])))
        for _ in range(passes):
            order = list(indices)
            rng.shuffle(order)
            for index in order:
                build = builds[index]
                if _is_library(build):
                    # runners delete what they time: each pass times a copy
                    copy = f"{build.filename}.{rng.getrandbits(32):08x}.so"
                    shutil.copyfile(build.filename, copy)
                    build = build._replace(filename=copy)
                res = runner.run([inputs[index]], [build])[0]
                cost = sum(res.costs) / len(res.costs) if res.error_no == 0 else None
                old = table.get(index, float("inf"))
                table[index] = None if cost is None or old is None else min(old, cost)
    finally:
        for build in builds.values():
            if _is_library(build):
                os.remove(build.filename)
        builder.close()
        runner.close()
    return table


def _is_library(build: BuildResult) -> bool:
    """Whether ``build`` names a library file its builder wrote (an absolute path into the
    builder's temporary directory): a replay builder's "filename" is a config index, which
    may also name a file of the user's in the working directory (it was copied, timed and
    deleted), and a Ray builder's is the library's bytes."""
    name = build.filename
    return (build.error_no == MeasureErrorNo.NO_ERROR and isinstance(name, str)
            and os.path.isabs(name) and os.path.isfile(name))


def save_table(path: str | Path, task: Any, table: dict[int, float | None],
               **about: Any) -> None:
    """Write ``table`` with the task it measured (and any notes, e.g. the machine's load)."""
    doc = {"format": _FORMAT, "task": [task.name, list(task.args)], "target": str(task.target),
           "space_size": len(task.config_space), **about,
           "seconds": {str(i): c for i, c in sorted(table.items())}}
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")


def load_table(path: str | Path, task: Any | None = None) -> dict[int, float | None]:
    """The table saved by :func:`save_table`; checked against ``task``'s name, args and
    space size when given (a table of another workload or template version is refused)."""
    try:
        doc = json.loads(Path(path).read_bytes())
        seconds = doc["seconds"]
        fmt, name, size = doc["format"], doc["task"][0], int(doc["space_size"])
        table = {int(i): _cost(c) for i, c in seconds.items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
        raise TVMError(f"load_table: {path} is not a replay table "
                       f"({type(err).__name__}: {err})") from None
    if fmt != _FORMAT:
        raise TVMError(f"load_table: {path} has format {fmt!r}, expected {_FORMAT!r}")
    if task is not None:
        if name != task.name or json.loads(json.dumps(list(task.args))) != doc["task"][1]:
            raise TVMError(f"load_table: {path} measured {doc['task']}, not {task.name} "
                           f"{list(task.args)}")
        if size != len(task.config_space):
            raise TVMError(f"load_table: {path} has {size} configs, the task's space has "
                           f"{len(task.config_space)} (another template version)")
    return table


def _cost(value: Any) -> float | None:
    """A table's cost: seconds (finite, >= 0) or None (the config failed)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e30:
        raise ValueError(f"cost {value!r} is not a number of seconds")
    return float(value)


class ReplayBuilder(Builder):
    """Builds nothing: the "library" of a config is its index."""

    def __init__(self, n_parallel: int = 8) -> None:
        super().__init__(timeout=1, n_parallel=n_parallel)

    def build(self, measure_inputs: list) -> list[BuildResult]:
        return [BuildResult(str(inp.config.index), [], None, 0.0) for inp in measure_inputs]


class ReplayRunner(Runner):
    """Returns each config's cost from ``table`` (a config the table lacks or failed is a
    ``RUNTIME_DEVICE`` failure)."""

    def __init__(self, table: dict[int, float | None]) -> None:
        super().__init__(timeout=1)
        self.table = table

    def run(self, measure_inputs: list, build_results: list) -> list[MeasureResult]:
        now = time.time()
        results = []
        for inp in measure_inputs:
            cost = self.table.get(inp.config.index)
            results.append(MeasureResult((cost,), MeasureErrorNo.NO_ERROR, cost, now)
                           if cost is not None else
                           MeasureResult(("failed when the table was measured",),
                                         MeasureErrorNo.RUNTIME_DEVICE, 0.0, now))
        return results


def replay_option(table: dict[int, float | None], n_parallel: int = 8) -> dict:
    """``measure_option`` replaying ``table``: ``tuner.tune(n, replay_option(table))``."""
    return {"builder": ReplayBuilder(n_parallel), "runner": ReplayRunner(table)}
