"""Tags that computes put on their ops so schedules can recognize them (TVM's ``topi.tag``).

Entry points: the tag strings and :func:`is_broadcast`, :func:`is_injective`.
"""

from __future__ import annotations

ELEMWISE = "elemwise"
BROADCAST = "broadcast"
INJECTIVE = "injective"
COMM_REDUCE = "comm_reduce"
COMM_REDUCE_IDX = "comm_reduce_idx"


def is_broadcast(tag: str) -> bool:
    """Elementwise and broadcast ops (a consumer may inline them)."""
    return tag in (ELEMWISE, BROADCAST) or tag.startswith(("elemwise", "broadcast"))


def is_injective(tag: str) -> bool:
    """Ops whose every output element reads a fixed set of input elements."""
    return is_broadcast(tag) or tag.startswith(INJECTIVE)
