"""An XGBoost cost model (TVM's ``XGBoostCostModel``).

Entry points: :class:`XGBoostCostModel`.

Features per config come from :mod:`.feature` (cached per index). Targets are measured FLOPS
normalised by the best so far; failed configs count as 0. ``loss_type`` ``reg`` fits
squared error, ``rank`` a pairwise ranking (``rank:pairwise``), ``rank-binary`` the ranking
of labels binarised at the top. A base model fit on earlier records (transfer learning)
adds its margin, discounted as the task's own samples grow.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.autotvm.tuner import feature
from kiln.autotvm.tuner.model_based_tuner import CostModel
from kiln.runtime.error import TVMError

__all__ = ["XGBoostCostModel"]


def _xgboost() -> Any:
    try:
        import xgboost
    except ImportError:
        raise TVMError("XGBTuner needs xgboost: pip install 'kiln[tune]'") from None
    return xgboost


class XGBoostCostModel(CostModel):
    """Gradient-boosted trees predicting a config's relative speed."""

    def __init__(self, task: Any, feature_type: str = "knob", loss_type: str = "reg",
                 num_threads: int | None = None, log_interval: int = 25,
                 upper_model: XGBoostCostModel | None = None) -> None:
        if feature_type not in ("itervar", "knob", "curve"):
            raise TVMError(f"feature_type must be itervar, knob or curve, got {feature_type!r}")
        if loss_type not in ("reg", "rank", "rank-binary"):
            raise TVMError(f"loss_type must be reg, rank or rank-binary, got {loss_type!r}")
        self.xgb = _xgboost()
        self.task, self.space = task, task.config_space
        self.feature_type, self.loss_type = feature_type, loss_type
        self.num_threads = num_threads
        self.params = {"max_depth": 3, "gamma": 0.0001, "min_child_weight": 1, "subsample": 1.0,
                       "eta": 0.3, "lambda": 1.00, "alpha": 0, "verbosity": 0,
                       "objective": "reg:squarederror" if loss_type == "reg"
                       else "rank:pairwise"}
        # one thread unless asked: these matrices are small, and on a shared machine the
        # thread pool's synchronisation costs more than it saves (measured 50x on 2 cores)
        self.params["nthread"] = num_threads or 1
        self.bst = None
        self.base_model: XGBoostCostModel | None = None
        self._sample_size = 0
        self._cache: dict[int, np.ndarray] = upper_model._cache if upper_model else {}

    def _feature(self, index: int) -> np.ndarray:
        found = self._cache.get(index)
        if found is None:
            if self.feature_type == "knob":
                found = feature.get_knob_feature(self.space, index)
            elif self.feature_type == "itervar":
                found = feature.get_itervar_feature(self.task, index)
            else:
                found = feature.get_curve_feature(self.task, index)
            self._cache[index] = found
        return found

    def _matrix(self, xs: list[int]) -> np.ndarray:
        return np.stack([self._feature(i) for i in xs])

    def _labels(self, ys: np.ndarray) -> np.ndarray:
        top = max(float(np.max(ys)), 1e-8)
        labels = ys / top
        if self.loss_type == "rank-binary":
            labels = (labels >= np.quantile(labels, 0.9)).astype("float32")
        return labels

    def _train(self, x: np.ndarray, y: np.ndarray, rounds: int, base: np.ndarray | None):
        dtrain = self.xgb.DMatrix(x, y, nthread=self.params["nthread"])
        if self.loss_type != "reg":
            dtrain.set_group([len(y)])
        if base is not None:
            dtrain.set_base_margin(base)
        return self.xgb.train(self.params, dtrain, num_boost_round=rounds)

    def fit(self, xs: list[int], ys: np.ndarray, plan_size: int) -> None:
        self._sample_size = len(xs)
        base = None
        if self.base_model is not None:
            discount = 1 / 2 ** (len(xs) / 64.0)
            if discount < 0.05:
                self.base_model = None  # enough own samples: the old model only adds noise
            else:
                base = discount * self.base_model.predict(xs, output_margin=True)
        rounds = max(20, min(200, 4 * len(xs)))
        self.bst = self._train(self._matrix(xs), self._labels(np.asarray(ys, "float64")),
                               rounds, base)
        self._base_discount = None if base is None else discount

    def fit_log(self, records: Any, plan_size: int, min_seed_records: int = 500) -> bool:
        """Fit on ``(MeasureInput, MeasureResult)`` records of this task's template."""
        xs, ys = [], []
        for inp, res in records:
            if inp.task.name != self.task.name:
                continue
            index = inp.config.index
            if not 0 <= index < self.space.range_length:
                continue
            xs.append(index)
            ys.append(self.task.flop / float(np.mean(res.costs)) if res.error_no == 0 else 0.0)
        if len(xs) < min_seed_records or max(ys, default=0) <= 0:
            return False
        self.bst = self._train(self._matrix(xs), self._labels(np.array(ys)), 400, None)
        return True

    def predict(self, xs: list[int], output_margin: bool = False) -> np.ndarray:
        if self.bst is None:
            return np.zeros(len(xs))
        x = self._matrix(xs)
        if self.base_model is not None and self._base_discount is not None:
            margin = self._base_discount * self.base_model.predict(xs, output_margin=True)
            return self.bst.inplace_predict(x, predict_type="margin" if output_margin
                                            else "value", base_margin=margin)
        return self.bst.inplace_predict(x, predict_type="margin" if output_margin
                                        else "value")

    def load_basemodel(self, base_model: XGBoostCostModel) -> None:
        self.base_model = base_model
        self._base_discount = 1.0

    def spawn_base_model(self) -> XGBoostCostModel:
        return XGBoostCostModel(self.task, self.feature_type, self.loss_type,
                                self.num_threads, upper_model=self)
