"""Buffer indexing for the C-family printers: flattened indexes and vector-tile detection.

Entry points: :func:`flat_access` (a multi-dimensional buffer index as C text: scalar base,
whether the lanes are contiguous, the per-lane index vector otherwise), :func:`buffer_strides`,
:func:`uniform_vector_lanes` (buffers accessed only by whole aligned vectors, which the C
printer keeps as arrays of vectors) and :func:`multiple_of`.

``cg`` arguments are the printer (anything with ``expr(node) -> str``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kiln.runtime.dtype import DataType
from kiln.target.c_abi import is_const_int, node_name

__all__ = ["Access", "flat_access", "buffer_strides", "uniform_vector_lanes", "multiple_of"]


def uniform_vector_lanes(body: Any) -> dict[int, int]:
    """id(buffer var) -> L for every buffer whose accesses in ``body`` are all
    ``Ramp(base, 1, L)`` with ``base`` a provable multiple of L (so the buffer can be an array
    of L-lane vectors). One walk serves every allocation of a function."""
    from kiln.tir.stmt_functor import post_order_visit

    lanes_seen: dict[int, set[int]] = {}
    rejected: set[int] = set()

    def visit(node: Any) -> None:
        kind = node_name(node)
        if kind in ("BufferLoad", "BufferStore"):
            key = id(node.buffer.data)
            index = list(node.indices)
            ramp = index[-1] if len(index) == 1 else None
            if (ramp is None or node_name(ramp) != "Ramp" or not is_const_int(ramp.stride, 1)
                    or not multiple_of(ramp.base, ramp.lanes)):
                rejected.add(key)
                return
            lanes_seen.setdefault(key, set()).add(ramp.lanes)
        elif kind == "Call":
            # the pointer escapes (tvm_access_ptr, extern call); a bare use (address_of)
            # is caught by the access check
            rejected.update(id(a) for a in node.args if node_name(a) == "Var")

    post_order_visit(body, visit)
    return {key: next(iter(lanes)) for key, lanes in lanes_seen.items()
            if key not in rejected and len(lanes) == 1}


def multiple_of(expr: Any, factor: int) -> bool:
    """Whether the index expression ``expr`` is provably a multiple of ``factor``."""
    kind = node_name(expr)
    if kind == "IntImm":
        return int(expr.value) % factor == 0
    if kind == "Mul":
        return multiple_of(expr.a, factor) or multiple_of(expr.b, factor)
    if kind in ("Add", "Sub"):
        return multiple_of(expr.a, factor) and multiple_of(expr.b, factor)
    return False


class Access:
    """A flattened buffer index: scalar ``base`` text, plus how the lanes spread."""

    __slots__ = ("base", "contiguous", "vector_index")

    def __init__(self, base: str, contiguous: bool, vector_index: str | None) -> None:
        self.base, self.contiguous, self.vector_index = base, contiguous, vector_index


def buffer_strides(cg: Any, buffer: Any) -> list[str]:
    """Element strides of each dimension as C text (row-major when the buffer has none)."""
    if buffer.strides:
        return [cg.expr(s) for s in buffer.strides]
    out: list[str] = []
    const = 1
    symbolic: list[str] = []
    for dim in reversed(list(buffer.shape)):
        text = str(const) if not symbolic else " * ".join([*symbolic, str(const)])
        out.append(text)
        if is_const_int(dim):
            const *= int(dim.value)
        else:
            symbolic.append(cg.expr(dim))
    return out[::-1]


def flat_access(cg: Any, buffer: Any, indices: Iterable[Any]) -> Access:
    """The flattened C index of ``buffer[indices]``; ``cg`` prints the index expressions."""
    indices = list(indices)
    strides = buffer_strides(cg, buffer) if len(indices) > 1 or buffer.strides else ["1"]
    terms: list[str] = []
    ramp_stride: list[str] = []
    vector_terms: list[str] = []
    for index, stride in zip(indices, strides):
        scale = "" if stride == "1" else f" * {stride}"
        kind = node_name(index)
        lanes = DataType(index.dtype).lanes
        if kind == "Ramp":
            terms.append(f"{cg.expr(index.base)}{scale}")
            ramp_stride.append(cg.expr(index.stride) + scale)
            vector_terms.append(f"{cg.expr(index)}{scale}")
        elif kind == "Broadcast":
            terms.append(f"{cg.expr(index.value)}{scale}")
        elif lanes > 1:
            vector_terms.append(f"{cg.expr(index)}{scale}")
            ramp_stride.append("?")
        else:
            terms.append(f"{cg.expr(index)}{scale}")
    offset = buffer.elem_offset
    if offset is not None and not is_const_int(offset, 0):
        terms.append(cg.expr(offset))
    base = " + ".join(terms) or "0"
    contiguous = ramp_stride == ["1"] or ramp_stride == ["(1)"]
    vector_index = None
    if vector_terms:
        scalar_terms = [t for t, i in zip(terms, indices) if node_name(i) != "Ramp"]
        vector_index = " + ".join(vector_terms + scalar_terms)
    return Access(base, contiguous, vector_index)
