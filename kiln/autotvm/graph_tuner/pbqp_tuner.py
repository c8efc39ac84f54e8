"""The graph tuner for any graph: the partitioned boolean quadratic problem's reductions
(TVM's ``autotvm.graph_tuner.PBQPTuner``).

Entry points: :class:`PBQPTuner`, :func:`pbqp`.

Each choice is a node with a cost vector, each pair of neighbours an edge with a cost
matrix. Nodes are removed one by one: with no edge (R0) a node keeps its cheapest
candidate; with one edge (RI) its best response to each neighbour candidate is folded into
the neighbour's vector; with two (RII) into a new edge between the two neighbours. These are
exact; a node with more edges (RN, where PBQP is NP-hard) is fixed to the candidate best
against its neighbours' cheapest responses and its edges folded into them. The choices are
then read back in the reverse order of removal.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.autotvm.graph_tuner.base_graph_tuner import BaseGraphTuner

__all__ = ["PBQPTuner", "pbqp"]


def pbqp(unary: list[np.ndarray], pairwise: dict[tuple, np.ndarray]) -> list[int]:
    """A choice per variable for ``sum_v unary[v][c_v] + sum_(u,v) M[c_u, c_v]``: optimal
    when the RI/RII reductions remove every node, heuristic (RN) otherwise."""
    cost = [np.asarray(u, float).copy() for u in unary]
    edges: dict[int, dict[int, np.ndarray]] = {v: {} for v in range(len(cost))}
    for (u, v), m in pairwise.items():
        m = np.asarray(m, float)
        edges[u][v] = edges[u].get(v, 0) + m
        edges[v][u] = edges[u][v].T
    alive = set(range(len(cost)))
    steps = []
    while alive:
        v = min(alive, key=lambda x: (len(edges[x]), x))
        near = sorted(edges[v])
        if len(near) > 2:  # RN: the busiest node is decided heuristically
            v = max(alive, key=lambda x: (len(edges[x]), -x))
            near = sorted(edges[v])
            local = cost[v] + sum((edges[v][w] + cost[w]).min(axis=1) for w in near)
            pick = int(local.argmin())
            for w in near:
                cost[w] = cost[w] + edges[v][w][pick]
            steps.append(("fixed", v, (), pick))
        elif len(near) == 2:  # RII
            w1, w2 = near
            m1, m2 = edges[v][w1], edges[v][w2]
            total = cost[v][:, None, None] + m1[:, :, None] + m2[:, None, :]
            delta = total.min(axis=0)
            edges[w1][w2] = edges[w1].get(w2, 0) + delta
            edges[w2][w1] = edges[w1][w2].T
            steps.append(("respond", v, (w1, w2), total.argmin(axis=0)))
        elif len(near) == 1:  # RI
            (w,) = near
            total = cost[v][:, None] + edges[v][w]
            cost[w] = cost[w] + total.min(axis=0)
            steps.append(("respond", v, (w,), total.argmin(axis=0)))
        else:  # R0
            steps.append(("fixed", v, (), int(cost[v].argmin())))
        for w in near:
            del edges[w][v]
        edges[v] = {}
        alive.remove(v)
    choice: dict[int, int] = {}
    for kind, v, given, best in reversed(steps):
        choice[v] = best if kind == "fixed" else int(best[tuple(choice[w] for w in given)])
    return [choice[v] for v in range(len(cost))]


class PBQPTuner(BaseGraphTuner):
    """Layout selection by PBQP reductions (see the module docstring)."""

    def run(self, **kwargs: Any) -> None:
        """Find the choices of least modelled time (exact on series-parallel graphs)."""
        _, unary, pairwise = self.problem()
        self._set_choice(pbqp(unary, pairwise))
