"""Features of configs for the cost model: ``knob``, ``itervar`` and ``curve``.

Entry points: :func:`get_knob_feature`, :func:`get_itervar_feature`,
:func:`get_curve_feature`.

``knob`` is the flattened config (split sizes, permutations, one-hot annotations, knob
values): free to compute, tied to one template. ``itervar`` describes the lowered loop nest
of the instantiated candidate — per loop (outermost first) ``log2(1 + extent)``, its kind
(parallel, vectorized, unrolled) and depth — padded to :data:`MAX_LOOPS` loops. ``curve``
samples the cumulative ``log2`` extent of that nest at 20 points, a shape that transfers
between templates. The loop features lower TIR, so they cost a few milliseconds a config.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["get_knob_feature", "get_itervar_feature", "get_curve_feature", "MAX_LOOPS"]

MAX_LOOPS = 32
_PER_LOOP = 5
_CURVE_POINTS = 20


def get_knob_feature(space: Any, index: int) -> np.ndarray:
    """The flattened knob values of config ``index``."""
    return np.array(space.get(index).get_flatten_feature(), dtype="float32")


def _loops(task: Any, index: int) -> list[tuple[float, int, int]]:
    """``(extent, kind, depth)`` of each loop of the lowered candidate, in nest order."""
    from kiln.autotvm.env import GLOBAL_SCOPE
    from kiln.te.lowering import lower
    from kiln.tir.stmt import For

    GLOBAL_SCOPE.in_tuning = True
    try:
        sch, args = task.instantiate(task.config_space.get(index))
    finally:
        GLOBAL_SCOPE.in_tuning = False
    func = lower(sch, args, name="feature")
    func = func["feature"] if hasattr(func, "functions") else func
    found: list[tuple[float, int, int]] = []

    def walk(node: Any, depth: int) -> None:
        if isinstance(node, For):
            extent = getattr(node.extent, "value", 1)
            found.append((float(extent), int(node.kind), depth))
            depth += 1
        for name in getattr(type(node), "_fields", {}):
            value = getattr(node, name, None)
            for child in value if isinstance(value, list | tuple) else [value]:
                if type(child).__module__.startswith("kiln.tir.stmt"):
                    walk(child, depth)

    walk(func.body, 0)
    return found


def get_itervar_feature(task: Any, index: int) -> np.ndarray:
    """Loop-nest features of config ``index`` (``MAX_LOOPS`` × 5, zero padded)."""
    out = np.zeros((MAX_LOOPS, _PER_LOOP), dtype="float32")
    for k, (extent, kind, depth) in enumerate(_loops(task, index)[:MAX_LOOPS]):
        out[k] = (math.log2(1 + extent), kind == 1, kind == 2, kind == 3, depth)
    return out.ravel()


def get_curve_feature(task: Any, index: int) -> np.ndarray:
    """The cumulative ``log2`` loop extent along the nest, sampled at 20 points."""
    logs = np.cumsum([math.log2(1 + e) for e, _, _ in _loops(task, index)] or [0.0])
    positions = np.linspace(0, len(logs) - 1, _CURVE_POINTS)
    return np.interp(positions, np.arange(len(logs)), logs).astype("float32")
