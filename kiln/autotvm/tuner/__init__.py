"""AutoTVM tuners (TVM's ``autotvm.tuner``): grid, random, genetic and XGBoost-guided."""

from __future__ import annotations

from kiln.autotvm.tuner import callback
from kiln.autotvm.tuner.ga_tuner import GATuner
from kiln.autotvm.tuner.index_based_tuner import GridSearchTuner, RandomTuner
from kiln.autotvm.tuner.model_based_tuner import CostModel, ModelBasedTuner, ModelOptimizer
from kiln.autotvm.tuner.sa_model_optimizer import SimulatedAnnealingOptimizer
from kiln.autotvm.tuner.tuner import Tuner
from kiln.autotvm.tuner.xgboost_cost_model import XGBoostCostModel
from kiln.autotvm.tuner.xgboost_tuner import XGBTuner

__all__ = ["callback", "GATuner", "GridSearchTuner", "RandomTuner", "CostModel",
           "ModelBasedTuner", "ModelOptimizer", "SimulatedAnnealingOptimizer", "Tuner",
           "XGBoostCostModel", "XGBTuner"]
