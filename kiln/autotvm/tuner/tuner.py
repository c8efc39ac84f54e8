"""The tuning loop shared by every tuner (TVM's ``autotvm.tuner.Tuner``).

Entry points: :class:`Tuner` (``tune(n_trial, measure_option, early_stopping, callbacks)``).

A tuner proposes batches of configs (``next_batch``), measures them, and learns from the
results (``update``). The loop stops when ``n_trial`` configs were measured, the space is
exhausted, or ``early_stopping`` trials passed without a better config. A failed candidate
is a result with an error number like any other: it counts as a trial and tuning goes on.
"""

from __future__ import annotations

import logging
import tempfile
from typing import Any

import numpy as np

from kiln.autotvm.measure import MeasureInput, create_measure_batch
from kiln.autotvm.task.task import default_config_index
from kiln.runtime.error import TVMError

__all__ = ["Tuner"]

logger = logging.getLogger("autotvm")


class Tuner:
    """Base class of the tuners: ``next_batch``, ``has_next`` and ``update`` are theirs."""

    def __init__(self, task: Any, **kwargs: Any) -> None:
        if task.config_space is None:
            raise TVMError(f"task {task.name} has no config space: create it with "
                           "autotvm.task.create")
        self.param = kwargs
        self.recorder = None
        self.task = task
        self.space = task.config_space
        self.best_config = None
        self.best_flops = 0.0
        self.best_measure_pair = None
        self.best_iter = 0
        self.error_ct_threshold = 150
        self.ttl = None
        self.n_trial = None
        self.early_stopping = None
        self.visited: set[int] = set()

    def has_next(self) -> bool:
        raise NotImplementedError

    def next_batch(self, batch_size: int) -> list:
        raise NotImplementedError

    def update(self, inputs: list, results: list) -> None:
        """Learn from measured configs (model-based tuners refit their model)."""

    def tune(self, n_trial: int, measure_option: dict, early_stopping: int | None = None,
             callbacks: tuple = (), si_prefix: str = "G") -> None:
        """Measure up to ``n_trial`` configs, calling each callback with
        ``(tuner, inputs, results)`` after every batch."""
        measure_batch = create_measure_batch(self.task, measure_option)
        n_parallel = getattr(measure_batch, "n_parallel", 1)
        early_stopping = early_stopping or int(1e9)
        self.n_trial, self.early_stopping = n_trial, early_stopping
        old_level = logger.level
        i = error_ct = 0
        errors: list[str] = []
        first = default_config_index(self.task)
        while i < n_trial and self.has_next():
            if first is not None and first not in self.visited:
                # kiln: the untuned schedule's config first, so tuning starts from it
                self.visited.add(first)
                configs = [self.space.get(first)]
                configs += self.next_batch(min(n_parallel, n_trial - i) - 1)
            else:
                configs = self.next_batch(min(n_parallel, n_trial - i))
            if not configs:
                break
            inputs = [MeasureInput(self.task.target, self.task, c) for c in configs]
            results = measure_batch(inputs)
            for k, (inp, res) in enumerate(zip(inputs, results)):
                config = inp.config
                if res.error_no == 0:
                    flops = self.task.flop / float(np.mean(res.costs))
                    error_ct = 0
                else:
                    flops = 0.0
                    error_ct += 1
                    errors.append(f"{config}: error {int(res.error_no)}: {res.costs[0]}")
                if flops > self.best_flops:
                    self.best_flops, self.best_config = flops, config
                    self.best_measure_pair = (inp, res)
                    self.best_iter = i + k
                logger.debug("No: %d\t%sFLOPS: %.2f/%.2f\tresult: %s\t%s", i + k + 1,
                             si_prefix, flops / 1e9, self.best_flops / 1e9, res, config)
            i += len(results)
            self.ttl = min(early_stopping + self.best_iter, n_trial) - i
            self.update(inputs, results)
            for callback in callbacks:
                callback(self, inputs, results)
            if i >= self.best_iter + early_stopping:
                logger.debug("Early stopped. Best iter: %d.", self.best_iter)
                break
            if error_ct > self.error_ct_threshold:
                logger.setLevel(logging.DEBUG)
        logger.setLevel(old_level)
        if errors and self.best_config is None:
            self._dump_errors(errors)
        for part in (measure_option["builder"], measure_option["runner"]):
            part.close()

    def _dump_errors(self, errors: list[str]) -> None:
        with tempfile.NamedTemporaryFile("w", prefix="tvm_tuning_errors_", suffix=".log",
                                         delete=False) as f:
            f.write("\n".join(errors))
        logger.warning("Could not find any valid schedule for task %s. A file containing "
                       "the errors has been written to %s.", self.task, f.name)

    def reset(self) -> None:
        self.best_config, self.best_flops, self.best_measure_pair = None, 0.0, None
        self.visited = set()

    def load_history(self, data_set: Any, min_seed_records: int = 500) -> None:
        """Learn from earlier records (model-based tuners only; a no-op here)."""

    def set_error_threshold(self, threshold: int) -> None:
        self.error_ct_threshold = threshold
