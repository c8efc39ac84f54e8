"""Tuners guided by a cost model (TVM's ``ModelBasedTuner``, ``CostModel``,
``ModelOptimizer``).

Entry points: :class:`ModelBasedTuner`, :class:`CostModel`, :class:`ModelOptimizer`.

The tuner measures a *plan* of ``plan_size`` configs at a time. Until the model is first fit
the plan is random; afterwards, each time ``plan_size`` more results arrived, the model is
refit and the optimizer proposes the unvisited configs the model rates best. The last 5% of
each plan stays random, so a wrong model cannot trap the search. With
``diversity_filter_ratio`` the optimizer proposes that many times a plan and
:func:`submodular_pick` keeps the plan that covers the most distinct knob values.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from kiln.autotvm.tuner.tuner import Tuner
from kiln.runtime.error import TVMError

__all__ = ["ModelBasedTuner", "CostModel", "ModelOptimizer", "submodular_pick"]


class CostModel:
    """Predicts a score (higher is faster) per config index."""

    def fit(self, xs: list[int], ys: np.ndarray, plan_size: int) -> None:
        raise NotImplementedError

    def fit_log(self, records: Any, plan_size: int, min_seed_records: int = 500) -> bool:
        raise NotImplementedError

    def predict(self, xs: list[int], output_margin: bool = False) -> np.ndarray:
        raise NotImplementedError

    def load_basemodel(self, base_model: Any) -> None:
        raise NotImplementedError

    def spawn_base_model(self) -> Any:
        raise NotImplementedError


class ModelOptimizer:
    """Finds the configs a cost model rates best."""

    def find_maximums(self, model: CostModel, num: int, exclusive: set) -> list[int]:
        raise NotImplementedError


class ModelBasedTuner(Tuner):
    """Plan-measure-refit loop over a :class:`CostModel` and a :class:`ModelOptimizer`."""

    def __init__(self, task: Any, cost_model: CostModel, model_optimizer: ModelOptimizer,
                 plan_size: int, diversity_filter_ratio: int | None = None,
                 seed: int | None = None) -> None:
        super().__init__(task)
        if diversity_filter_ratio is not None and diversity_filter_ratio < 1:
            raise TVMError(f"diversity_filter_ratio must be at least 1, got "
                           f"{diversity_filter_ratio}")
        self.cost_model = cost_model
        self.model_optimizer = model_optimizer
        self.plan_size = plan_size
        self.diversity_filter_ratio = diversity_filter_ratio
        self.rng = random.Random(seed)
        self.trials: list[int] = []
        self.trial_pt = 0
        self.xs: list[int] = []
        self.ys: list[float] = []
        self.flops_max = 0.0
        self.train_ct = 0

    def next_batch(self, batch_size: int) -> list:
        batch = []
        while len(batch) < batch_size and self.has_next():
            index = None
            # the plan's head comes from the model; its last 5% (and everything before the
            # first fit) is random
            random_tail = self.trial_pt >= len(self.trials) - int(0.05 * self.plan_size)
            while self.trial_pt < len(self.trials) and not random_tail:
                candidate = self.trials[self.trial_pt]
                self.trial_pt += 1
                if candidate not in self.visited:
                    index = candidate
                    break
            if index is None:
                index = self.space.get_rand_index(self.rng, self.visited)
            self.visited.add(index)
            batch.append(self.space.get(index))
        return batch

    def update(self, inputs: list, results: list) -> None:
        for inp, res in zip(inputs, results):
            index = inp.config.index
            flops = self.task.flop / float(np.mean(res.costs)) if res.error_no == 0 else 0.0
            self.flops_max = max(self.flops_max, flops)
            self.xs.append(index)
            self.ys.append(flops)
        if len(self.xs) >= self.plan_size * (self.train_ct + 1) and self.flops_max > 1e-6:
            self.cost_model.fit(self.xs, np.array(self.ys), self.plan_size)
            exclusive = set(self.visited)
            if self.diversity_filter_ratio:
                candidates = self.model_optimizer.find_maximums(
                    self.cost_model, self.plan_size * self.diversity_filter_ratio, exclusive)
                knobs = [self.space.point2knob(c) for c in candidates]
                # TVM scores the candidates 0 here: the pick is by diversity alone, in the
                # model's order among ties
                picked = submodular_pick([0.0] * len(candidates), knobs, self.plan_size)
                self.trials = [candidates[k] for k in picked]
            else:
                self.trials = self.model_optimizer.find_maximums(
                    self.cost_model, self.plan_size, exclusive)
            self.trial_pt = 0
            self.train_ct += 1

    def load_history(self, data_set: Any, min_seed_records: int = 500) -> None:
        """Seed the model from earlier records of this task's template (transfer
        learning); the first plan then comes from the model."""
        base = self.cost_model.spawn_base_model()
        if not base.fit_log(data_set, self.plan_size, min_seed_records):
            return
        self.cost_model.load_basemodel(base)
        self.trials = self.model_optimizer.find_maximums(base, self.plan_size, self.visited)
        self.trial_pt = 0

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)


def submodular_pick(scores: list[float], knobs: list[list[int]], n_pick: int,
                    knob_weight: float = 1.0) -> list[int]:
    """Greedily pick ``n_pick`` points maximising the sum of their ``scores`` plus
    ``knob_weight`` per distinct value of each knob among the picked (TVM's
    ``submodular_pick``; the objective is monotone submodular, so greedy is near-optimal).
    Returns positions into ``scores``; ties go to the earlier point."""
    seen: list[set] = [set() for _ in knobs[0]] if knobs else []
    remain = list(range(len(scores)))
    picked = []
    for _ in range(min(n_pick, len(remain))):
        def gain(x: int) -> float:
            return scores[x] + knob_weight * sum(v not in s for v, s in zip(knobs[x], seen))
        best = max(remain, key=gain)  # max keeps the first of equal gains
        picked.append(best)
        remain.remove(best)
        for value, values in zip(knobs[best], seen):
            values.add(value)
    return picked
