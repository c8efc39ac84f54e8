"""Build TOPI computes with kiln.build and run them on NumPy inputs (shared by the tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import kiln
from kiln import te, topi


def run(make: Callable, inputs: Sequence[np.ndarray], target: str = "c",
        schedule: Callable | None = None) -> list[np.ndarray]:
    """``make(*placeholders)`` built for ``target`` and run on ``inputs``; outputs as arrays."""
    holders = [te.placeholder(a.shape, str(a.dtype), name=f"in{k}")
               for k, a in enumerate(inputs)]
    outs = make(*holders)
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = (schedule or topi.generic.schedule_injective)(outs)
    mod = kiln.build(sch, holders + outs, target=target, name="kernel")
    args = [kiln.nd.array(a) for a in inputs]
    results = [kiln.nd.empty([int(d) for d in t.shape], t.dtype) for t in outs]
    mod["kernel"](*args, *results)
    return [r.numpy() for r in results]


def run_many(cases: Sequence[tuple[Callable, Sequence[np.ndarray]]], target: str = "c",
             schedule: Callable | None = None) -> list[list[np.ndarray]]:
    """Several independent computes in one build (one C compile for all of them)."""
    holders, outs, spans = [], [], []
    for case, (make, inputs) in enumerate(cases):
        hs = [te.placeholder(a.shape, str(a.dtype), name=f"c{case}_in{k}")
              for k, a in enumerate(inputs)]
        os_ = make(*hs)
        os_ = list(os_) if isinstance(os_, list | tuple) else [os_]
        spans.append((len(outs), len(os_)))
        holders += hs
        outs += os_
    sch = (schedule or topi.generic.schedule_injective)(outs)
    mod = kiln.build(sch, holders + outs, target=target, name="kernel")
    args = [kiln.nd.array(a) for _, inputs in cases for a in inputs]
    results = [kiln.nd.empty([int(d) for d in t.shape], t.dtype) for t in outs]
    mod["kernel"](*args, *results)
    arrays = [r.numpy() for r in results]
    return [arrays[start:start + n] for start, n in spans]
