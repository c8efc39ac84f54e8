"""Measuring candidates (TVM's ``autotvm.measure``): builders, runners, results."""

from __future__ import annotations

from kiln.autotvm.measure.measure import (
    Builder,
    BuildResult,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    Runner,
    create_measure_batch,
    measure_option,
)
from kiln.autotvm.measure.measure_methods import LocalBuilder, LocalRunner, RPCRunner

__all__ = ["Builder", "BuildResult", "MeasureErrorNo", "MeasureInput", "MeasureResult",
           "Runner", "create_measure_batch", "measure_option", "LocalBuilder", "LocalRunner",
           "RPCRunner", "RayBuilder", "RayRunner"]


def __getattr__(name: str):
    # Ray is an optional extra: its builder/runner load on first use
    if name in ("RayBuilder", "RayRunner"):
        from kiln.autotvm.measure import ray_methods

        return getattr(ray_methods, name)
    raise AttributeError(f"module 'kiln.autotvm.measure' has no attribute {name!r}")
