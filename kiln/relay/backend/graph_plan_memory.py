"""Static memory planning for the graph executor: TVM's token algorithm.

Entry points: :func:`plan_memory` (storage ids for a list of graph nodes) and
:class:`TokenAllocator`.

The algorithm (TVM's ``graph_plan_memory.cc`` / ``TokenAllocator1D``): every tensor a node
produces gets a *token* with a reference count = its number of uses (+1 for graph outputs).
Inputs and parameters get fresh tokens that are never released. Visiting the nodes in order,
an operator's outputs *request* tokens from the free list — the smallest free block whose size
lies in ``[size, size * 16]``, else the largest in ``[size / 16, size)`` — or allocate new
storage; a reshape-only node aliases its input's token. After the operator, its own unused
outputs and every argument whose count drops to zero return to the free list. Tokens only
match storage on the same device.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable
from dataclasses import dataclass

from kiln.runtime.error import TVMError

__all__ = ["plan_memory", "TokenAllocator", "PlanNode", "MemoryPlan", "MATCH_RANGE"]

MATCH_RANGE = 16


@dataclass
class PlanNode:
    """One graph node for planning: its output sizes in bytes and the entries it reads.

    ``inputs`` are (node index, output index) pairs; ``kind`` is ``"input"`` (graph inputs
    and params: never reused), ``"op"`` or ``"alias"`` (reshape-only: output shares storage
    with input 0). ``device`` is any hashable key of the node's virtual device (a Device such
    as ``cpu(1)``, or a device type); storage is only shared between equal keys.
    """

    kind: str
    output_bytes: list[int]
    inputs: list[tuple[int, int]]
    device: Hashable = 1


@dataclass
class _Token:
    storage_id: int
    max_bytes: int
    device: Hashable
    ref_count: int = 0


@dataclass
class MemoryPlan:
    """Storage id per entry (flattened node outputs), the size of each storage and the lower
    bound on memory (the peak of simultaneously live bytes)."""

    storage_ids: list[int]
    storage_bytes: list[int]
    peak_live_bytes: int

    @property
    def planned_bytes(self) -> int:
        return sum(self.storage_bytes)


class TokenAllocator:
    """Free list of storage tokens keyed by size (TVM's ``TokenAllocator1D``)."""

    def __init__(self) -> None:
        self.free: list[tuple[int, int, _Token]] = []  # (max_bytes, storage_id, token)
        self.tokens: list[_Token] = []

    def alloc(self, size: int, device: Hashable) -> _Token:
        token = _Token(len(self.tokens), size, device)
        self.tokens.append(token)
        return token

    def request(self, size: int, device: Hashable) -> _Token:
        """Reuse a free token of a matching size on the same device, else allocate."""
        sizes = [entry[0] for entry in self.free]
        # first: blocks in [size, size * MATCH_RANGE], smallest first
        start = bisect.bisect_left(sizes, size)
        for i in range(start, len(self.free)):
            if self.free[i][0] > size * MATCH_RANGE:
                break
            if self.free[i][2].device == device:
                return self._take(i, size)
        # then: blocks in [size / MATCH_RANGE, size), largest first
        for i in range(start - 1, -1, -1):
            if self.free[i][0] < size / MATCH_RANGE:
                break
            if self.free[i][2].device == device:
                return self._take(i, size)
        return self.alloc(size, device)

    def _take(self, index: int, size: int) -> _Token:
        _, _, token = self.free.pop(index)
        token.max_bytes = max(token.max_bytes, size)
        return token

    def release(self, token: _Token) -> None:
        bisect.insort(self.free, (token.max_bytes, token.storage_id, token),
                      key=lambda e: (e[0], e[1]))


def plan_memory(nodes: list[PlanNode], outputs: list[tuple[int, int]]) -> MemoryPlan:
    """Assign a storage id to every node output (entry), reusing storage where lifetimes allow.

    Example
    -------
    The seed's chain ``out1 = a + b; out2 = out1 + a; out = out2 + b``:

    >>> n = [PlanNode("input", [40], []), PlanNode("input", [40], []),
    ...      PlanNode("op", [40], [(0, 0), (1, 0)]), PlanNode("op", [40], [(2, 0), (0, 0)]),
    ...      PlanNode("op", [40], [(3, 0), (1, 0)])]
    >>> plan_memory(n, [(4, 0)]).storage_ids
    [0, 1, 2, 3, 2]
    """
    uses: dict[tuple[int, int], int] = {}
    for node in nodes:
        for entry in node.inputs:
            uses[entry] = uses.get(entry, 0) + 1
    for entry in outputs:
        uses[entry] = uses.get(entry, 0) + 1

    allocator = TokenAllocator()
    tokens: dict[tuple[int, int], _Token] = {}

    for nid, node in enumerate(nodes):
        for src in node.inputs:
            if src not in tokens:
                raise TVMError(f"memory plan: node {nid} reads entry {src} before it is defined")
        if node.kind == "input":
            for i, size in enumerate(node.output_bytes):
                token = allocator.alloc(size, node.device)
                token.ref_count = math.inf  # inputs and params are never reused
                tokens[(nid, i)] = token
            continue
        if node.kind == "alias":
            token = tokens[node.inputs[0]]
            token.ref_count += uses.get((nid, 0), 0)
            tokens[(nid, 0)] = token
        else:
            for i, size in enumerate(node.output_bytes):
                token = allocator.request(size, node.device)
                token.ref_count = uses.get((nid, i), 0)
                tokens[(nid, i)] = token
        # release this node's unused outputs, then its arguments whose last use this was
        for i in range(len(node.output_bytes)):
            token = tokens[(nid, i)]
            if token.ref_count == 0:
                allocator.release(token)
        for src in node.inputs:
            token = tokens[src]
            token.ref_count -= 1
            if token.ref_count == 0:
                allocator.release(token)

    storage_ids = [tokens[(nid, i)].storage_id for nid, node in enumerate(nodes)
                   for i in range(len(node.output_bytes))]
    storage_bytes = [t.max_bytes for t in allocator.tokens]
    return MemoryPlan(storage_ids, storage_bytes, _peak_live_bytes(nodes, outputs))


def _peak_live_bytes(nodes: list[PlanNode], outputs: list[tuple[int, int]]) -> int:
    """The lower bound of any plan: the most bytes alive at once (an entry lives from its
    node to its last use; inputs and outputs live throughout; aliases add nothing)."""
    end = len(nodes)
    last_use: dict[tuple[int, int], int] = {}
    for nid, node in enumerate(nodes):
        for src in node.inputs:
            last_use[src] = max(last_use.get(src, nid), nid)
    for entry in outputs:
        last_use[entry] = end
    deltas = [0] * (end + 2)
    for nid, node in enumerate(nodes):
        if node.kind == "alias":
            continue
        for i, size in enumerate(node.output_bytes):
            start = 0 if node.kind == "input" else nid
            stop = end if node.kind == "input" else last_use.get((nid, i), nid)
            deltas[start] += size
            deltas[stop + 1] -= size
    peak = live = 0
    for delta in deltas:
        live += delta
        peak = max(peak, live)
    return peak
