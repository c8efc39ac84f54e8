"""The exact graph tuner: dynamic programming over the network's tuned operators
(TVM's ``autotvm.graph_tuner.DPTuner``).

Entry points: :class:`DPTuner`, :func:`min_sum`.

The choices are eliminated one at a time in the graph's order, as TVM's DP walks the graph:
eliminating a choice sums every cost table that mentions it into one table over it and its
still-open neighbours, keeps the minimum over it (and which candidate gives it) for each
combination of theirs, and leaves that minimum as a table over the neighbours. After the
last elimination the recorded argmins, read backwards, give an optimal choice. The tables
stay small for chains and residual networks (two or three open neighbours); a graph whose
open set grows past ``max_table`` entries is refused with a pointer to :class:`~.PBQPTuner`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.autotvm.graph_tuner.base_graph_tuner import BaseGraphTuner
from kiln.runtime.error import TVMError

__all__ = ["DPTuner", "min_sum"]


def min_sum(unary: list[np.ndarray], pairwise: dict[tuple, np.ndarray], order: list[int],
            max_table: int = 1 << 22) -> list[int]:
    """A choice per variable minimizing ``sum_v unary[v][c_v] + sum_(u,v) M[c_u, c_v]``
    (pairwise keys ``(u, v)`` with ``u < v``), eliminating variables in ``order``."""
    factors: list[tuple[tuple[int, ...], np.ndarray]] = [((v,), np.asarray(u, float))
                                                         for v, u in enumerate(unary)]
    factors += [((u, v), np.asarray(m, float)) for (u, v), m in pairwise.items()]
    trace = []
    for v in order:
        touching = [f for f in factors if v in f[0]]
        factors = [f for f in factors if v not in f[0]]
        scope = sorted({x for variables, _ in touching for x in variables})
        shape = [len(unary[x]) for x in scope]
        if int(np.prod(shape)) > max_table:
            raise TVMError(f"DPTuner: eliminating node {v} needs a table of {shape} entries "
                           f"(more than {max_table}); use PBQPTuner for this graph")
        joint = np.zeros(shape)
        for variables, table in touching:  # variables are sorted, as the scope is
            expand = [len(unary[x]) if x in variables else 1 for x in scope]
            joint = joint + table.reshape(expand)
        axis = scope.index(v)
        rest = tuple(x for x in scope if x != v)
        trace.append((v, rest, joint.argmin(axis)))
        factors.append((rest, joint.min(axis)))
    choice: dict[int, int] = {}
    for v, rest, best in reversed(trace):
        choice[v] = int(best[tuple(choice[x] for x in rest)])
    return [choice[v] for v in range(len(unary))]


class DPTuner(BaseGraphTuner):
    """Exact layout selection by dynamic programming (see the module docstring)."""

    def run(self, **kwargs: Any) -> None:
        """Find the choices of least modelled time."""
        _, unary, pairwise = self.problem()
        self._set_choice(min_sum(unary, pairwise, list(range(len(unary)))))
