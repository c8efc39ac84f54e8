"""Build TOPI computes with kiln.build and run them on NumPy inputs (shared by the tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import kiln
from kiln import te, topi


def run(make: Callable, inputs: Sequence[np.ndarray], target: str = "c",
        schedule: Callable | None = None) -> list[np.ndarray]:
    """``make(*placeholders)`` built for ``target`` and run on ``inputs``; outputs as arrays."""
    return run_many([(make, inputs)], target, schedule)[0]


def run_many(cases: Sequence[tuple[Callable, Sequence[np.ndarray]]], target: str = "c",
             schedule: Callable | None = None) -> list[list[np.ndarray]]:
    """Independent computes sharing builds (one C compile for many of them).

    A build never holds two outputs of one name: the generated wrapper names its arguments
    after the tensors.
    """
    made = []
    for case, (make, inputs) in enumerate(cases):
        hs = [te.placeholder(a.shape, str(a.dtype), name=f"c{case}_in{k}")
              for k, a in enumerate(inputs)]
        outs = make(*hs)
        made.append((hs, list(outs) if isinstance(outs, list | tuple) else [outs], inputs))
    results: list = [None] * len(cases)
    pending = list(range(len(cases)))
    while pending:
        batch, names, rest = [], set(), []
        for k in pending:
            out_names = {t.op.name for t in made[k][1]}
            if out_names & names:
                rest.append(k)
            else:
                names |= out_names
                batch.append(k)
        holders = [h for k in batch for h in made[k][0]]
        outs = [t for k in batch for t in made[k][1]]
        sch = (schedule or topi.generic.schedule_injective)(outs)
        mod = kiln.build(sch, holders + outs, target=target, name="kernel")
        args = [kiln.nd.array(np.asarray(a)) for k in batch for a in made[k][2]]
        arrays = [kiln.nd.empty([int(d) for d in t.shape], t.dtype) for t in outs]
        mod["kernel"](*args, *arrays)
        start = 0
        for k in batch:
            n = len(made[k][1])
            results[k] = [a.numpy() for a in arrays[start:start + n]]
            start += n
        pending = rest
    return results
