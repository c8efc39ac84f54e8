"""A genetic-algorithm tuner (TVM's ``GATuner``): genes are knob-index vectors.

Each generation keeps ``elite_num`` elites, picks parents in proportion to their measured
GFLOPS, crosses them over at one point, and mutates each knob with ``mutation_prob``.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from kiln.autotvm.tuner.tuner import Tuner

__all__ = ["GATuner"]


class GATuner(Tuner):
    """Genetic search over the knob vectors of a task's space."""

    def __init__(self, task: Any, pop_size: int = 100, elite_num: int = 3,
                 mutation_prob: float = 0.1, seed: int | None = None) -> None:
        super().__init__(task)
        self.rng = random.Random(seed)
        self.pop_size = min(pop_size, len(self.space))
        self.elite_num = min(self.pop_size, elite_num)
        self.mutation_prob = mutation_prob
        self.dims = self.space.dims
        self.genes: list[list[int]] = []
        for _ in range(self.pop_size):
            index = self.space.get_rand_index(self.rng, set(self._points()))
            self.genes.append(self.space.point2knob(index))
        self.scores: list[float] = []
        self.elites: list[list[int]] = []
        self.elite_scores: list[float] = []
        self.trial_pt = 0

    def _points(self) -> list[int]:
        return [self.space.knob2point(g) for g in self.genes]

    def next_batch(self, batch_size: int) -> list:
        batch = []
        while len(batch) < batch_size and self.has_next():
            if self.trial_pt >= len(self.genes):
                self._next_generation()
            gene = self.genes[self.trial_pt % len(self.genes)]
            self.trial_pt += 1
            point = self.space.knob2point(gene)
            if point in self.visited:
                continue
            self.visited.add(point)
            batch.append(self.space.get(point))
        return batch

    def update(self, inputs: list, results: list) -> None:
        for inp, res in zip(inputs, results):
            flops = 0.0
            if res.error_no == 0:
                flops = self.task.flop / float(np.mean(res.costs))
            self.scores.append(flops)
            self.elites.append(self.space.point2knob(inp.config.index))
            self.elite_scores.append(flops)

    def _next_generation(self) -> None:
        order = np.argsort(self.elite_scores)[::-1][: self.elite_num]
        elites = [self.elites[i] for i in order]
        scores = np.array(self.elite_scores, dtype="float64") + 1e-8
        probs = scores / scores.sum()
        cumulative = np.cumsum(probs)
        children = list(elites)
        tries = 0
        while self.elites and len(children) < self.pop_size and tries < 20 * self.pop_size:
            tries += 1
            a, b = (self.elites[min(int(np.searchsorted(cumulative, self.rng.random())),
                                    len(self.elites) - 1)] for _ in range(2))
            cut = self.rng.randrange(len(self.dims)) if self.dims else 0
            child = a[:cut] + b[cut:]
            child = [self.rng.randrange(d) if self.rng.random() < self.mutation_prob else k
                     for k, d in zip(child, self.dims)]
            point = self.space.knob2point(child)
            if point not in self.visited and self.space.is_index_valid(point):
                children.append(child)
        fresh = [c for c in children if self.space.knob2point(c) not in self.visited]
        while (len(children) < self.pop_size or not fresh) and self.has_next():
            fresh.append(self.space.point2knob(self.space.get_rand_index(self.rng,
                                                                         self.visited)))
            children.append(fresh[-1])
        self.genes = children
        self.trial_pt = 0
        self.elites, self.elite_scores = list(elites), [self.elite_scores[i] for i in order]

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)
