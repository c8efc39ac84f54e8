"""Static memory planning for AOT (TVM's Unified Static Memory Planner, ``tir.usmp``).

Entry points: :class:`BufferInfo`, :func:`plan_pool` -> :class:`PoolAllocation`,
:data:`ALGORITHMS`, :func:`live_set_lower_bound`, :func:`check_no_overlap`.

Every buffer that lives between kernel calls gets a byte offset in one pool. A buffer's
lifetime is the closed interval ``[first, last]`` of the call indices that write and read it;
two buffers *conflict* when their intervals intersect, and conflicting buffers must not
overlap in the pool. The algorithms (``tir.usmp.algorithm``) differ only in the order they
place buffers; each buffer goes at the lowest aligned offset that clears every conflicting
buffer placed before it (TVM's ``GreedyBase::PostSortAllocation``):

* ``greedy_by_size`` (default): largest first;
* ``greedy_by_conflicts``: most conflicts first, then largest;
* ``hill_climb``: starts from the better of the two greedy orders and keeps random swaps of
  two positions that shrink the pool (seeded, so builds stay deterministic).

No plan can beat the largest sum of sizes alive at one call (:func:`live_set_lower_bound`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
    """Offsets by buffer name, the pool size, the live-set lower bound and the algorithm."""

    offsets: dict[str, int]
    size: int
    lower_bound: int
    algorithm: str


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _place(order: Sequence[BufferInfo], alignment: int) -> tuple[dict[str, int], int]:
    """Place buffers in ``order``, each at the lowest aligned offset clear of conflicts."""
    placed: list[tuple[BufferInfo, int]] = []
    offsets: dict[str, int] = {}
    size = 0
    for buf in order:
        busy = sorted((off, off + other.size) for other, off in placed if buf.conflicts(other))
        offset = 0
        for start, end in busy:
            if offset + buf.size <= start:
                break  # fits in the gap before this conflicting buffer
            offset = max(offset, align_up(end, alignment))
        offsets[buf.name] = offset
        placed.append((buf, offset))
        size = max(size, offset + buf.size)
    return offsets, size


def _by_size(buffers: Sequence[BufferInfo]) -> list[BufferInfo]:
    return sorted(buffers, key=lambda b: (-b.size, b.first, b.name))


def _by_conflicts(buffers: Sequence[BufferInfo]) -> list[BufferInfo]:
    count = {b.name: sum(b.conflicts(o) for o in buffers if o is not b) for b in buffers}
    return sorted(buffers, key=lambda b: (-count[b.name], -b.size, b.first, b.name))


def _hill_climb(buffers: Sequence[BufferInfo], alignment: int) -> list[BufferInfo]:
    orders = [_by_size(buffers), _by_conflicts(buffers)]
    best = min(orders, key=lambda order: _place(order, alignment)[1])
    best_size = _place(best, alignment)[1]
    if len(best) < 2:
        return best
    rng = random.Random(0)
    for _ in range(min(2000, 40 * len(best))):
        i, j = rng.sample(range(len(best)), 2)
        trial = list(best)
        trial[i], trial[j] = trial[j], trial[i]
        size = _place(trial, alignment)[1]
        if size < best_size:
            best, best_size = trial, size
    return best


ALGORITHMS: dict[str, Callable[[Sequence[BufferInfo], int], list[BufferInfo]]] = {
    "greedy_by_size": lambda buffers, alignment: _by_size(buffers),
    "greedy_by_conflicts": lambda buffers, alignment: _by_conflicts(buffers),
    "hill_climb": _hill_climb,
}


def live_set_lower_bound(buffers: Sequence[BufferInfo]) -> int:
    """The most bytes alive at any one call: no placement can use a smaller pool."""
    if not buffers:
        return 0
    points = sorted({b.first for b in buffers})
    return max(sum(b.size for b in buffers if b.first <= t <= b.last) for t in points)


def plan_pool(buffers: Sequence[BufferInfo], algorithm: str = "greedy_by_size",
              alignment: int = 16) -> PoolAllocation:
    """Offsets for ``buffers`` in one pool, by ``algorithm`` (a ``tir.usmp.algorithm`` name).

    Example
    -------
    >>> a, b, c = BufferInfo("a", 64, 0, 1), BufferInfo("b", 64, 1, 2), BufferInfo("c", 64, 2, 3)
    >>> plan = plan_pool([a, b, c])
    >>> plan.offsets["a"] == plan.offsets["c"], plan.size, plan.lower_bound
    (True, 128, 128)
    """
    if algorithm not in ALGORITHMS:
        raise TVMError(f"unknown tir.usmp.algorithm {algorithm!r}; choose one of "
                       f"{sorted(ALGORITHMS)}")
    if alignment <= 0 or alignment & (alignment - 1):
        raise TVMError(f"the workspace byte alignment must be a power of two, got {alignment}")
    names = [b.name for b in buffers]
    if len(set(names)) != len(names):
        raise TVMError("USMP: buffer names must be unique")
    order = ALGORITHMS[algorithm](buffers, alignment)
    offsets, size = _place(order, alignment)
    return PoolAllocation(offsets, size, live_set_lower_bound(buffers), algorithm)


def check_no_overlap(buffers: Sequence[BufferInfo], offsets: dict[str, int]) -> None:
    """Raise a TVMError when two conflicting buffers share bytes of the pool."""
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            if a.conflicts(b):
                lo_a, lo_b = offsets[a.name], offsets[b.name]
                if lo_a < lo_b + b.size and lo_b < lo_a + a.size:
                    raise TVMError(f"USMP: live buffers {a.name} [{lo_a}, {lo_a + a.size}) "
                                   f"and {b.name} [{lo_b}, {lo_b + b.size}) overlap")
