"""Static memory planning for AOT (TVM's Unified Static Memory Planner, ``tir.usmp``).

Entry points: :class:`BufferInfo`, :func:`plan_pool` -> :class:`PoolAllocation` (one pool, or
several with size limits), :data:`ALGORITHMS`, :func:`live_set_lower_bound`,
:func:`check_no_overlap`.

Every buffer that lives between kernel calls gets a byte offset in one pool. A buffer's
lifetime is the closed interval ``[first, last]`` of the call indices that write and read it;
two buffers *conflict* when their intervals intersect, and conflicting buffers must not
overlap in the pool. The algorithms (``tir.usmp.algorithm``) differ only in the order they
place buffers; each buffer goes at the lowest aligned offset that clears every conflicting
buffer placed before it in the first pool where it stays within the pool's size limit
(TVM's ``GreedyBase::PostSortAllocation``):

* ``greedy_by_size`` (default): largest first, then most conflicts;
* ``greedy_by_conflicts``: most conflicts first, then largest;
* ``hill_climb``: starts from the better of the two greedy orders and keeps random swaps of
  two positions that shrink the pool (seeded, so builds stay deterministic).

No plan can beat the largest sum of sizes alive at one call (:func:`live_set_lower_bound`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kiln.runtime.error import TVMError

__all__ = ["BufferInfo", "PoolAllocation", "plan_pool", "ALGORITHMS", "live_set_lower_bound",
           "check_no_overlap", "align_up"]


@dataclass(frozen=True)
class BufferInfo:
    """A buffer to place: its name, size in bytes and lifetime ``[first, last]`` (calls)."""

    name: str
    size: int
    first: int
    last: int

    def conflicts(self, other: BufferInfo) -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass
class PoolAllocation:
    """Offsets by buffer name, the total size, the live-set lower bound and the algorithm;
    with several pools, also each buffer's pool index and each pool's size."""

    offsets: dict[str, int]
    size: int
    lower_bound: int
    algorithm: str
    pool_of: dict[str, int] = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _place(order: Sequence[BufferInfo], alignment: int,
           limits: Sequence[int | None] = (None,)
           ) -> tuple[dict[str, int], dict[str, int], list[int]] | None:
    """Place buffers in ``order``: each at the lowest aligned offset clear of conflicts, in
    the first pool whose limit it fits. ``(offsets, pool of each buffer, pool sizes)``, or
    None when a buffer fits no pool."""
    placed: list[list[tuple[BufferInfo, int]]] = [[] for _ in limits]
    offsets: dict[str, int] = {}
    pool_of: dict[str, int] = {}
    sizes = [0] * len(limits)
    for buf in order:
        for index, limit in enumerate(limits):
            busy = sorted((off, off + other.size) for other, off in placed[index]
                          if buf.conflicts(other))
            offset = 0
            for start, end in busy:
                if offset + buf.size <= start:
                    break  # fits in the gap before this conflicting buffer
                offset = max(offset, align_up(end, alignment))
            if limit is None or offset + buf.size <= limit:
                break
        else:
            return None
        offsets[buf.name], pool_of[buf.name] = offset, index
        placed[index].append((buf, offset))
        sizes[index] = max(sizes[index], offset + buf.size)
    return offsets, pool_of, sizes


def _total(placement: tuple[dict, dict, list[int]] | None) -> float:
    return float("inf") if placement is None else sum(placement[2])


def _conflict_counts(buffers: Sequence[BufferInfo]) -> dict[str, int]:
    return {b.name: sum(b.conflicts(o) for o in buffers if o is not b) for b in buffers}


def _descending_name(name: str) -> tuple[int, ...]:
    """Sort key putting names in descending order (TVM breaks the last tie that way)."""
    return tuple(-ord(c) for c in name) + (1,)


def _by_size(buffers: Sequence[BufferInfo]) -> list[BufferInfo]:
    """Largest first; ties: more conflicts first, then descending name (TVM's GreedySize)."""
    count = _conflict_counts(buffers)
    return sorted(buffers, key=lambda b: (-b.size, -count[b.name], _descending_name(b.name)))


def _by_conflicts(buffers: Sequence[BufferInfo]) -> list[BufferInfo]:
    """Most conflicts first; ties: larger first, then descending name (TVM's
    GreedyConflicts)."""
    count = _conflict_counts(buffers)
    return sorted(buffers, key=lambda b: (-count[b.name], -b.size, _descending_name(b.name)))


def _hill_climb(buffers: Sequence[BufferInfo], alignment: int,
                limits: Sequence[int | None] = (None,)) -> list[BufferInfo]:
    orders = [_by_size(buffers), _by_conflicts(buffers)]
    best = min(orders, key=lambda order: _total(_place(order, alignment, limits)))
    best_size = _total(_place(best, alignment, limits))
    if len(best) < 2:
        return best
    rng = random.Random(0)
    # one placement costs about n^2 conflict checks: bound the total work, not just the steps
    n = len(best)
    for _ in range(max(20, min(2000, 40 * n, 4_000_000 // (n * n)))):
        i, j = rng.sample(range(len(best)), 2)
        trial = list(best)
        trial[i], trial[j] = trial[j], trial[i]
        size = _total(_place(trial, alignment, limits))
        if size < best_size:
            best, best_size = trial, size
    return best


# name -> (buffers, alignment, pool limits) -> the order to place them in
ALGORITHMS: dict[str, Callable[..., list[BufferInfo]]] = {
    "greedy_by_size": lambda buffers, alignment, limits: _by_size(buffers),
    "greedy_by_conflicts": lambda buffers, alignment, limits: _by_conflicts(buffers),
    "hill_climb": _hill_climb,
}


def live_set_lower_bound(buffers: Sequence[BufferInfo]) -> int:
    """The most bytes alive at any one call: no placement can use a smaller pool."""
    if not buffers:
        return 0
    points = sorted({b.first for b in buffers})
    return max(sum(b.size for b in buffers if b.first <= t <= b.last) for t in points)


def plan_pool(buffers: Sequence[BufferInfo], algorithm: str = "greedy_by_size",
              alignment: int = 16, limits: Sequence[int | None] = (None,)) -> PoolAllocation:
    """Offsets for ``buffers`` by ``algorithm`` (a ``tir.usmp.algorithm`` name), in one pool
    or, with ``limits`` (a size limit or None per pool), in several filled in order.

    Example
    -------
    >>> a, b, c = BufferInfo("a", 64, 0, 1), BufferInfo("b", 64, 1, 2), BufferInfo("c", 64, 2, 3)
    >>> plan = plan_pool([a, b, c])
    >>> plan.offsets["a"] == plan.offsets["c"], plan.size, plan.lower_bound
    (True, 128, 128)
    >>> sorted(plan_pool([a, b, c], limits=[64, None]).pool_of.items())  # b conflicts most
    [('a', 1), ('b', 0), ('c', 1)]
    """
    if algorithm not in ALGORITHMS:
        raise TVMError(f"unknown tir.usmp.algorithm {algorithm!r}; choose one of "
                       f"{sorted(ALGORITHMS)}")
    if alignment <= 0 or alignment & (alignment - 1):
        raise TVMError(f"the workspace byte alignment must be a power of two, got {alignment}")
    names = [b.name for b in buffers]
    if len(set(names)) != len(names):
        raise TVMError("USMP: buffer names must be unique")
    limits = list(limits) or [None]
    order = ALGORITHMS[algorithm](buffers, alignment, limits)
    placement = _place(order, alignment, limits)
    if placement is None:
        biggest = max(buffers, key=lambda b: b.size)
        raise TVMError(f"USMP: the buffers do not fit the workspace pools (size limits "
                       f"{limits} bytes; the largest buffer {biggest.name} needs "
                       f"{biggest.size}); give a pool more room or add a pool without a limit")
    offsets, pool_of, sizes = placement
    return PoolAllocation(offsets, sum(sizes), live_set_lower_bound(buffers), algorithm,
                          pool_of, sizes)


def check_no_overlap(buffers: Sequence[BufferInfo], plan: PoolAllocation) -> None:
    """Raise a TVMError when two conflicting buffers share bytes of one pool."""
    offsets = plan.offsets
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            if a.conflicts(b) and plan.pool_of.get(a.name) == plan.pool_of.get(b.name):
                lo_a, lo_b = offsets[a.name], offsets[b.name]
                if lo_a < lo_b + b.size and lo_b < lo_a + a.size:
                    raise TVMError(f"USMP: live buffers {a.name} [{lo_a}, {lo_a + a.size}) "
                                   f"and {b.name} [{lo_b}, {lo_b + b.size}) overlap")
