"""XGBTuner: model-based tuning with an XGBoost cost model and simulated annealing
(TVM's ``XGBTuner``).

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

__all__ = ["XGBTuner"]


class XGBTuner(ModelBasedTuner):
    """Measure ``plan_size`` configs, refit the model, anneal for the next plan."""

    def __init__(self, task: Any, plan_size: int = 64, feature_type: str = "knob",
                 loss_type: str = "reg", num_threads: int | None = None,
                 optimizer: str | Any = "sa", diversity_filter_ratio: float | None = None,
                 log_interval: int = 50, seed: int | None = None) -> None:
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
