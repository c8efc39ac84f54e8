"""XGBTuner: model-based tuning with an XGBoost cost model and simulated annealing
(TVM's ``XGBTuner``).

``plan_size`` defaults to 64 as in TVM, capped for small spaces (:func:`default_plan_size`).
``feature_type`` defaults to ``knob`` here (TVM: ``itervar``): kiln computes loop features
by lowering each candidate in Python, too slow for the thousands of points annealing rates;
``itervar`` and ``curve`` remain available for small spaces and transfer learning.
"""

from __future__ import annotations

from typing import Any

from kiln.autotvm.tuner.model_based_tuner import ModelBasedTuner
from kiln.autotvm.tuner.sa_model_optimizer import SimulatedAnnealingOptimizer
from kiln.autotvm.tuner.xgboost_cost_model import XGBoostCostModel
from kiln.runtime.error import TVMError

__all__ = ["XGBTuner", "default_plan_size"]


def default_plan_size(space_size: int) -> int:
    """TVM's 64, capped at a sixteenth of a small space (whole batches of 8, at least 8).

    The first plan is random: on ResNet-18's 280-config 3x3 conv, 64 random trials are
    23% of the space before the model is first fit. Measured on that conv's replayed grid
    (``benchmarks/tune.py``, 20 seeds), trials to come within 5% of the optimum: plan 64
    mean 41 / worst 106, plan 16 mean 34 / worst 70 (grid search: 280).
    """
    return max(8, min(64, space_size // 16 // 8 * 8))


class XGBTuner(ModelBasedTuner):
    """Measure ``plan_size`` configs, refit the model, anneal for the next plan."""

    def __init__(self, task: Any, plan_size: int | None = None, feature_type: str = "knob",
                 loss_type: str = "reg", num_threads: int | None = None,
                 optimizer: str | Any = "sa", diversity_filter_ratio: float | None = None,
                 log_interval: int = 50, seed: int | None = None) -> None:
        if plan_size is None:
            plan_size = default_plan_size(len(task.config_space))
        model = XGBoostCostModel(task, feature_type, loss_type, num_threads, log_interval)
        if optimizer == "sa":
            # knob features cost microseconds: rate small spaces whole instead of annealing
            limit = 20000 if feature_type == "knob" else None
            optimizer = SimulatedAnnealingOptimizer(task, log_interval=log_interval, seed=seed,
                                                    exhaustive_limit=limit)
        elif isinstance(optimizer, str):
            raise TVMError(f"XGBTuner optimizer must be 'sa' or a ModelOptimizer, got "
                           f"{optimizer!r}")
        super().__init__(task, model, optimizer, plan_size, diversity_filter_ratio, seed)
