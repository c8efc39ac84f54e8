"""How vector accesses lie in memory: facts the vector passes and the C-family printers share.

Entry points: :func:`contiguous_index` (whether a vector access reads adjacent elements),
:func:`uniform_vector_lanes` (buffers accessed only by whole aligned vectors, which the C
printer keeps as arrays of vectors) and :func:`multiple_of`.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.expr import IntImm
from kiln.runtime.dtype import DataType
from kiln.tir import expr as _e
from kiln.tir.stmt import BufferStore
from kiln.tir.stmt_functor import post_order_visit

__all__ = ["contiguous_index", "uniform_vector_lanes", "multiple_of"]


def contiguous_index(buffer: Any, indices: list[Any]) -> int | None:
    """Position of the one stride-1 ``Ramp`` in ``indices`` when the lanes are contiguous in
    memory (the ramp indexes the innermost, unit-stride dimension; the other indices are
    scalars or broadcasts); None otherwise."""
    ramps = [k for k, index in enumerate(indices) if DataType(index.dtype).lanes > 1
             and not isinstance(index, _e.Broadcast)]
    if len(ramps) != 1 or not isinstance(indices[ramps[0]], _e.Ramp):
        return None
    k = ramps[0]
    if not _is_one(indices[k].stride):
        return None
    if buffer.strides:
        return k if _is_one(buffer.strides[k]) else None
    return k if k == len(indices) - 1 else None


def _is_one(expr: Any) -> bool:
    return isinstance(expr, IntImm) and int(expr.value) == 1


def uniform_vector_lanes(body: Any) -> dict[int, int]:
    """id(buffer var) -> L for every buffer whose accesses in ``body`` are all
    ``Ramp(base, 1, L)`` with ``base`` a provable multiple of L (so the buffer can be an array
    of L-lane vectors). One walk serves every allocation of a function."""
    lanes_seen: dict[int, set[int]] = {}
    rejected: set[int] = set()

    def visit(node: Any) -> None:
        if isinstance(node, (_e.BufferLoad, BufferStore)):
            key = id(node.buffer.data)
            index = list(node.indices)
            ramp = index[-1] if len(index) == 1 else None
            if (not isinstance(ramp, _e.Ramp) or not _is_one(ramp.stride)
                    or not multiple_of(ramp.base, ramp.lanes)):
                rejected.add(key)
                return
            lanes_seen.setdefault(key, set()).add(ramp.lanes)
        elif isinstance(node, _e.Call):
            # the pointer escapes (tvm_access_ptr, extern call); a bare use (address_of)
            # is caught by the access check
            rejected.update(id(a) for a in node.args if type(a) is _e.Var)

    post_order_visit(body, visit)
    return {key: next(iter(lanes)) for key, lanes in lanes_seen.items()
            if key not in rejected and len(lanes) == 1}


def multiple_of(expr: Any, factor: int) -> bool:
    """Whether the index expression ``expr`` is provably a multiple of ``factor``."""
    if isinstance(expr, IntImm):
        return int(expr.value) % factor == 0
    if isinstance(expr, _e.Mul):
        return multiple_of(expr.a, factor) or multiple_of(expr.b, factor)
    if isinstance(expr, (_e.Add, _e.Sub)):
        return multiple_of(expr.a, factor) and multiple_of(expr.b, factor)
    return False
