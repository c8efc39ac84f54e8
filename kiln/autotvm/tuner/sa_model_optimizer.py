"""Simulated annealing over a cost model (TVM's ``SimulatedAnnealingOptimizer``).

Parallel random walks redraw one knob per step and accept a move with probability
``exp(min((new - old) / t, 1))`` as the temperature cools linearly; the best ``num``
unvisited points seen are returned. With ``persistent`` the walks resume from where the
previous call stopped.
"""

from __future__ import annotations

import heapq
import random
from typing import Any

import numpy as np

from kiln.autotvm.tuner.model_based_tuner import ModelOptimizer

__all__ = ["SimulatedAnnealingOptimizer"]


class SimulatedAnnealingOptimizer(ModelOptimizer):
    """Annealed random walks that keep the model's best points."""

    def __init__(self, task: Any, n_iter: int = 500, temp: tuple = (1, 0),
                 persistent: bool = True, parallel_size: int = 128, early_stop: int = 50,
                 log_interval: int = 50, seed: int | None = None,
                 exhaustive_limit: int | None = None) -> None:
        self.space = task.config_space
        self.n_iter, self.temp = n_iter, temp
        self.persistent = persistent
        self.parallel_size = min(parallel_size, len(self.space))
        self.early_stop = early_stop or int(1e9)
        self.rng = random.Random(seed)
        self.points: list[int] | None = None
        # spaces up to this size are rated point by point (cheap with knob features)
        self.exhaustive_limit = 4 * self.parallel_size if exhaustive_limit is None \
            else exhaustive_limit

    def find_maximums(self, model: Any, num: int, exclusive: set) -> list[int]:
        space = self.space
        if len(space) <= self.exhaustive_limit:
            # a small space: rate every valid point at once instead of walking
            candidates = [i for i in range(space.range_length)
                          if i not in exclusive and space.is_index_valid(i)]
            scores = model.predict(candidates) if candidates else []
            order = np.argsort(scores)[::-1][:num]
            return [candidates[i] for i in order]
        points = self.points if self.persistent and self.points else [
            space.get_rand_index(self.rng) for _ in range(self.parallel_size)]
        scores = model.predict(points)
        heap = [(-np.inf, -1 - i) for i in range(num)]  # (score, point) min-heap of the best
        in_heap = {p for _, p in heap}
        for s, p in zip(scores, points):
            if p not in exclusive and p not in in_heap and s > heap[0][0]:
                _, old = heapq.heapreplace(heap, (s, p))
                in_heap.discard(old)
                in_heap.add(p)
        t0, t1 = self.temp
        last_improve = 0
        for k in range(self.n_iter):
            if k - last_improve > self.early_stop:
                break
            t = t0 - (t0 - t1) * k / max(self.n_iter, 1)
            new_points = [space.random_walk(p, self.rng) for p in points]
            new_scores = model.predict(new_points)
            accept = np.exp(np.minimum((new_scores - scores) / (t + 1e-5), 1))
            take = np.array([self.rng.random() for _ in points]) < accept
            points = [n if a else p for n, p, a in zip(new_points, points, take)]
            scores = np.where(take, new_scores, scores)
            for s, p in zip(new_scores, new_points):
                if p not in exclusive and p not in in_heap and s > heap[0][0]:
                    _, old = heapq.heapreplace(heap, (s, p))
                    in_heap.discard(old)
                    in_heap.add(p)
                    last_improve = k
        self.points = points
        best = sorted(heap, reverse=True)
        return [p for s, p in best if p >= 0]
