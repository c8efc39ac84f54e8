"""Buffer indexing for the C-family printers: flattened indexes and vector-tile detection.

Entry points: :func:`flat_access` (a multi-dimensional buffer index as C text: scalar base,
whether the lanes are contiguous, the per-lane index vector otherwise) and
:func:`buffer_strides`; :func:`uniform_vector_lanes` (buffers accessed only by whole aligned
vectors, which the C printer keeps as arrays of vectors) and :func:`multiple_of` are
re-exported from :mod:`kiln.tir.transform.vector_access`.

``cg`` arguments are the printer (anything with ``expr(node) -> str``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kiln.runtime.dtype import DataType
from kiln.target.c_abi import is_const_int, node_name
from kiln.tir.transform.vector_access import multiple_of, uniform_vector_lanes

__all__ = ["Access", "flat_access", "buffer_strides", "uniform_vector_lanes", "multiple_of"]


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
