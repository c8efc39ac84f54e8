"""Parameter initializers of TVM's ``relay.testing.init``, and ``create_workload``.

An initializer fills a NumPy array by the parameter's name: ``*weight`` by the subclass's rule,
``*bias``/``*beta``/``*mean`` with 0, ``*gamma``/``*var`` with 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.testing import create_workload

__all__ = ["Initializer", "Xavier", "Constant", "create_workload"]


class Initializer:
    """Base initializer: ``init(name, arr)`` fills ``arr`` in place according to ``name``."""

    def __init__(self, **kwargs: Any):
        self._kwargs = kwargs

    def __call__(self, desc: str, arr: np.ndarray) -> None:
        for suffix, fill in (("weight", None), ("bias", 0.0), ("gamma", 1.0), ("beta", 0.0),
                             ("mean", 0.0), ("var", 1.0)):
            if desc.endswith(suffix):
                if fill is None:
                    self._init_weight(desc, arr)
                else:
                    arr[...] = fill
                return
        raise ValueError(f"Unknown initialization pattern for {desc}. Default initialization "
                         'is limited to "weight", "bias", "gamma" (1.0), "beta" (0.0), '
                         '"mean" (0.0) and "var" (1.0).')

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define how to fill {name}")


class Xavier(Initializer):
    """Uniform Xavier/Glorot: ``U(-s, s)`` with ``s = sqrt(magnitude / factor)``, the factor
    being the average (``"avg"``), fan-in (``"in"``) or fan-out (``"out"``) of the weight
    (spatial dimensions counted in; a depthwise weight uses the spatial size alone)."""

    def __init__(self, rnd_type: str = "uniform", factor_type: str = "avg",
                 magnitude: float = 3):
        super().__init__(rnd_type=rnd_type, factor_type=factor_type, magnitude=magnitude)
        if rnd_type != "uniform":
            raise ValueError(f"Unknown random type {rnd_type!r}: only 'uniform' is supported")
        if factor_type not in ("avg", "in", "out"):
            raise ValueError(f"Incorrect factor type {factor_type!r}: 'avg', 'in' or 'out'")
        self.rnd_type, self.factor_type, self.magnitude = rnd_type, factor_type, float(magnitude)

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        if arr.ndim < 2:
            raise ValueError(f"Xavier initializer cannot be applied to vector {name}. "
                             "It requires at least 2D.")
        spatial = float(np.prod(arr.shape[2:])) if arr.ndim > 2 else 1.0
        fan_in, fan_out = arr.shape[1] * spatial, arr.shape[0] * spatial
        factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}[
            self.factor_type]
        if "depthwise" in name:
            factor = spatial
        scale = np.sqrt(self.magnitude / factor)
        arr[...] = np.random.uniform(-scale, scale, size=arr.shape)


class Constant(Initializer):
    """Every weight element is ``1 / size`` (deterministic workloads)."""

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        arr[...] = 1.0 / arr.size
