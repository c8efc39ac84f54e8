"""Shared vector loads, and the vector operator tables of the C printer.

Entry points: :class:`CNativeParts` (mixed into :class:`~kiln.target.codegen_c.CodeGenC`),
:func:`fits_vector_register`, and the vector operator tables the printer shares
(:data:`COMPARISONS`, :data:`VECTOR_MASK_BINARY`, :data:`VECTOR_MIN_MAX`).

GCC re-reads memory at every use of a vector load: a vector load repeated across a run of
stores (an unrolled micro-kernel's B panel) is read once into a register-pinned local. Vectors
wider than a register reach the printer already in native-width parts
(:func:`kiln.tir.transform.SplitWideVectors`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kiln.runtime.dtype import DataType
from kiln.target.c_abi import node_name
from kiln.target.codegen_c_masked import loads_of

__all__ = ["CNativeParts", "fits_vector_register", "COMPARISONS", "VECTOR_MASK_BINARY",
           "VECTOR_MIN_MAX"]

# Logical ops on vector masks (all-ones / zero lanes) are bitwise in GCC's vector C.
VECTOR_MASK_BINARY = {"And": "({a} & {b})", "Or": "({a} | {b})"}
# Vector min/max: a comparison mask, then a blend (keeps scalar C's NaN behaviour).
VECTOR_MIN_MAX = {"Min": "<", "Max": ">"}
COMPARISONS = {"EQ", "NE", "LT", "LE", "GT", "GE"}


def fits_vector_register(vtype: str) -> bool:
    """Whether a C vector type (``float32x8``) fits one AVX2 register (32 bytes); wider
    values cannot take the register-pinning asm constraint without AVX-512."""
    m = re.fullmatch(r"[a-z]+?(\d+)x(\d+)", vtype)
    return m is not None and int(m.group(1)) * int(m.group(2)) <= 256


class CNativeParts:
    """Shared vector loads for :class:`~kiln.target.codegen_c.CodeGenC`: vector loads
    repeated across a run of stores are read once into register-pinned locals.

    The printer provides ``emit_stmt``, ``expr_BufferLoad``, ``_line``, and the per-function
    tables ``_vector_locals``, ``_shared_loads`` and ``_shared_count``.
    """

    def stmt_SeqStmt(self, node: Any) -> None:
        """Append the C lines of a TIR ``SeqStmt`` statement."""
        first_use = self._share_vector_loads(node.seq)
        for index, stmt in enumerate(node.seq):
            for text, name in first_use.get(index, ()):
                vtype = text[text.index("(*(") + 3:text.index("_u*)")]
                pin = f" KILN_IN_REGISTER({name});" if fits_vector_register(vtype) else ""
                self._line(f"{vtype} {name} = {text};{pin}")
                self._shared_loads[text] = name
            self.emit_stmt(stmt)
        for pairs in first_use.values():
            for text, _ in pairs:
                self._shared_loads.pop(text, None)

    def _share_vector_loads(self, seq: Sequence[Any]) -> dict[int, list[tuple[str, str]]]:
        """Vector loads repeated across a run of stores (an unrolled micro-kernel's B panel)
        are read once into a register-pinned local; gcc would otherwise re-read memory at
        every use, which makes a GEMM inner loop load-bound. Only buffers that the run does
        not store to qualify. Returns statement index -> (load text, local name)."""
        if len(seq) < 2 or not all(node_name(s) == "BufferStore" for s in seq):
            return {}
        stored = {id(s.buffer.data) for s in seq}
        first: dict[str, int] = {}
        uses: dict[str, int] = {}
        for index, stmt in enumerate(seq):
            loads, guarded = loads_of(stmt.value)
            if guarded:
                continue  # a guarded or let-bound load must stay where it is
            for load in loads:
                if (DataType(load.dtype).lanes == 1 or id(load.buffer.data) in stored
                        or id(load.buffer.data) in self._vector_locals):
                    continue
                text = self.expr_BufferLoad(load)
                if not text.startswith("(*("):
                    continue
                first.setdefault(text, index)
                uses[text] = uses.get(text, 0) + 1
        out: dict[int, list[tuple[str, str]]] = {}
        for text, count in uses.items():
            if count > 1 and text not in self._shared_loads:
                self._shared_count += 1
                out.setdefault(first[text], []).append((text, f"_shared{self._shared_count}"))
        return out
