"""Tuners that walk config indices: :class:`GridSearchTuner` (in order) and
:class:`RandomTuner` (random unvisited valid indices). ``range_idx=(start, end)`` limits
either to a slice of the space (inclusive), to split one space over several machines."""

from __future__ import annotations

import random
from typing import Any

from kiln.autotvm.tuner.tuner import Tuner
from kiln.runtime.error import TVMError

__all__ = ["GridSearchTuner", "RandomTuner"]


class _IndexBasedTuner(Tuner):
    def __init__(self, task: Any, range_idx: tuple[int, int] | None = None) -> None:
        super().__init__(task)
        last = self.space.range_length - 1
        start, end = range_idx if range_idx is not None else (0, last)
        if not 0 <= start <= end <= last:
            raise TVMError(f"range_idx {range_idx} is outside the space [0, {last}]")
        self.range = (start, end)
        self.indices = [i for i in range(start, end + 1) if self.space.is_index_valid(i)]

    def has_next(self) -> bool:
        return len(self.visited) < len(self.indices)


class GridSearchTuner(_IndexBasedTuner):
    """Every valid config in index order."""

    def __init__(self, task: Any, range_idx: tuple[int, int] | None = None) -> None:
        super().__init__(task, range_idx)
        self.counter = 0

    def next_batch(self, batch_size: int) -> list:
        batch = []
        while len(batch) < batch_size and self.counter < len(self.indices):
            index = self.indices[self.counter]
            self.counter += 1
            if index in self.visited:  # measured already (the default config)
                continue
            self.visited.add(index)
            batch.append(self.space.get(index))
        return batch


class RandomTuner(_IndexBasedTuner):
    """Valid configs in a random order, none twice (``seed`` for a repeatable order)."""

    def __init__(self, task: Any, range_idx: tuple[int, int] | None = None,
                 seed: int | None = None) -> None:
        super().__init__(task, range_idx)
        self.order = list(self.indices)
        random.Random(seed).shuffle(self.order)

    def next_batch(self, batch_size: int) -> list:
        batch = []
        while len(batch) < batch_size and self.order:
            index = self.order.pop()
            if index in self.visited:
                continue
            self.visited.add(index)
            batch.append(self.space.get(index))
        return batch
