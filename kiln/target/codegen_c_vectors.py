"""Wide vectors in native parts, and shared vector loads: the C printer's vector legalization.

Entry points: :class:`CNativeParts` (mixed into :class:`~kiln.target.codegen_c.CodeGenC`),
:func:`native_lanes`, :func:`fits_vector_register`, :data:`NATIVE_VECTOR_BITS`, and the vector
operator tables the printer shares (:data:`COMPARISONS`, :data:`VECTOR_MASK_BINARY`,
:data:`VECTOR_MIN_MAX`).

GCC lowers generic vectors wider than a register (``float32x16`` on AVX2) piecewise through
the stack, and re-reads memory at every use of a vector load: a store whose value works lane
by lane is emitted as native-width parts (:meth:`CNativeParts._store_in_parts`), and a vector
load repeated across a run of stores (an unrolled micro-kernel's B panel) is read once into a
register-pinned local. Both are target-independent rewrites that still live in the printer;
ARCHITECTURE.md wants them as TIR passes (issue 13 item 4).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kiln.runtime.dtype import DataType
from kiln.target.c_abi import c_type, node_name
from kiln.target.c_access import Access, flat_access
from kiln.target.codegen_c_masked import loads_of

__all__ = ["CNativeParts", "NATIVE_VECTOR_BITS", "native_lanes", "fits_vector_register",
           "COMPARISONS", "VECTOR_MASK_BINARY", "VECTOR_MIN_MAX", "SLICED_BINARY"]

# Logical ops on vector masks (all-ones / zero lanes) are bitwise in GCC's vector C.
VECTOR_MASK_BINARY = {"And": "({a} & {b})", "Or": "({a} | {b})"}
# Vector min/max: a comparison mask, then a blend (keeps scalar C's NaN behaviour).
VECTOR_MIN_MAX = {"Min": "<", "Max": ">"}
COMPARISONS = {"EQ", "NE", "LT", "LE", "GT", "GE"}
# Lane-wise binary nodes whose wide vectors are emitted as native-width parts.
SLICED_BINARY = {"Add", "Sub", "Mul", "Div", "Min", "Max"}
# The host's vector register width (AVX2): GCC keeps generic vectors up to this in registers.
NATIVE_VECTOR_BITS = 256


def native_lanes(dtype: DataType, lanes: int) -> int:
    """Lanes of ``dtype`` elements in one native vector register, or ``lanes`` when a vector
    of ``lanes`` fits (or does not split into whole native registers)."""
    per_register = max(NATIVE_VECTOR_BITS // max(dtype.bits, 8), 1)
    return per_register if lanes > per_register and lanes % per_register == 0 else lanes

def fits_vector_register(vtype: str) -> bool:
    """Whether a C vector type (``float32x8``) fits one AVX2 register (32 bytes); wider
    values cannot take the register-pinning asm constraint without AVX-512."""
    m = re.fullmatch(r"[a-z]+?(\d+)x(\d+)", vtype)
    return m is not None and int(m.group(1)) * int(m.group(2)) <= 256


class CNativeParts:
    """Vector legalization for :class:`~kiln.target.codegen_c.CodeGenC`: vector loads repeated
    across a run of stores are read once into register-pinned locals, and stores of vectors
    wider than a register are emitted as native-width parts.

    The printer provides ``expr``, ``expr_BufferLoad``, ``_line``, ``_data``,
    ``_vector_type``, ``_binary_scalar``, ``_min_max``, ``_blend``, the lane-mask mixin's
    ``_choice_sliceable``/``_slice_choice``, and the per-function tables ``_vector_locals``,
    ``_split_locals``, ``_shared_loads``, ``_shared_parts`` and ``_shared_count``.
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
                if not pin:
                    self._share_native_parts(text, vtype, name)
            self.emit_stmt(stmt)
        for pairs in first_use.values():
            for text, _ in pairs:
                self._shared_loads.pop(text, None)
                self._shared_parts.pop(text, None)

    def _share_native_parts(self, text: str, vtype: str, name: str) -> None:
        """Also read a shared load wider than a register as register-pinned native-width
        parts, which the stores emitted in parts (:meth:`_store_in_parts`) use."""
        m = re.fullmatch(r"([a-z]+?)(\d+)x(\d+)", vtype)
        if m is None:
            return
        dtype = DataType(f"{m.group(1)}{m.group(2)}")
        lanes = int(m.group(3))
        width = native_lanes(dtype, lanes)
        if width == lanes:
            return
        part_type = self._vector_type(dtype.with_lanes(width))
        address = text[text.index("_u*)") + 4:-1]
        names = []
        for part in range(lanes // width):
            names.append(f"{name}_{part}")
            self._line(f"{part_type} {names[-1]} = *({part_type}_u*)({address} + "
                       f"{part * width}); KILN_IN_REGISTER({names[-1]});")
        self._shared_parts[text] = names

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

    def _store_in_parts(self, node: Any, access: Access) -> bool:
        """Emit a vector store wider than a native register as one store per native-width
        part when every node of its value works lane by lane (arithmetic, broadcasts,
        contiguous loads). GCC lowers its wider generic vectors piecewise through the stack;
        native-width statements stay in registers. Returns whether the store was emitted."""
        t = DataType(node.value.dtype)
        width = native_lanes(t, t.lanes)
        buffer = node.buffer
        to_local = id(buffer.data) in self._split_locals
        if width >= t.lanes or t.is_bool or not (access.contiguous or to_local) \
                or not self._sliceable(node.value, t.bits):
            return False
        part_type = self._vector_type(t.element_of.with_lanes(width))
        data = self._data(buffer)
        for part in range(t.lanes // width):
            value = self._slice(node.value, part, width)
            if to_local:
                self._line(f"{data}[({access.base}) / {width} + {part}] = {value};")
            else:
                self._line(f"*({part_type}_u*)({data} + {access.base} + {part * width}) = "
                           f"{value};")
        return True

    def _sliceable(self, node: Any, bits: int) -> bool:
        """Whether :meth:`_slice` can take native-width parts of vector ``node``."""
        kind = node_name(node)
        if kind in ("Broadcast", "Ramp"):
            return True
        if DataType(node.dtype).bits != bits or DataType(node.dtype).is_bool:
            return False
        if kind in SLICED_BINARY:
            return self._sliceable(node.a, bits) and self._sliceable(node.b, bits)
        if kind == "Select":
            return (self._sliceable(node.true_value, bits) and self._mask_sliceable(
                node.condition) and self._sliceable(node.false_value, bits))
        if kind == "Call" and node.op == "tir.if_then_else":
            return self._choice_sliceable(node, bits)
        return kind == "BufferLoad" and self._load_sliceable(node)

    def _load_sliceable(self, load: Any) -> bool:
        if id(load.buffer.data) in self._split_locals:
            return True
        access = flat_access(self, load.buffer, load.indices)
        return access.contiguous and id(load.buffer.data) not in self._vector_locals

    def _mask_sliceable(self, cond: Any) -> bool:
        """Whether :meth:`_slice_mask` can take native-width parts of vector bool ``cond``."""
        kind = node_name(cond)
        if kind in COMPARISONS:
            operand = DataType(cond.a.dtype)
            return not operand.is_bool and self._sliceable(cond.a, operand.bits) and \
                self._sliceable(cond.b, operand.bits)
        if kind in VECTOR_MASK_BINARY:
            return self._mask_sliceable(cond.a) and self._mask_sliceable(cond.b)
        if kind == "Not":
            return self._mask_sliceable(cond.a)
        return kind == "Broadcast" or (kind == "BufferLoad" and self._load_sliceable(cond))

    def _slice_mask(self, cond: Any, part: int, width: int, bits: int) -> str:
        """Part ``part`` of :meth:`_lane_mask` (``width`` lanes of ``bits`` bits)."""
        kind = node_name(cond)
        itype = self._vector_type(DataType(f"int{bits}").with_lanes(width))
        if kind in COMPARISONS:
            operand = DataType(cond.a.dtype)
            text = self._binary_scalar(kind, operand, self._slice(cond.a, part, width),
                                       self._slice(cond.b, part, width))
            return text if operand.bits == bits else f"__builtin_convertvector({text}, {itype})"
        if kind in VECTOR_MASK_BINARY:
            return VECTOR_MASK_BINARY[kind].format(
                a=self._slice_mask(cond.a, part, width, bits),
                b=self._slice_mask(cond.b, part, width, bits))
        if kind == "Not":
            return f"(~{self._slice_mask(cond.a, part, width, bits)})"
        mask = f"({self._slice(cond, part, width)} != 0)"
        return mask if bits == 8 else f"__builtin_convertvector({mask}, {itype})"

    def _slice(self, node: Any, part: int, width: int) -> str:
        """C text of lanes ``[part * width, (part + 1) * width)`` of vector ``node``."""
        kind = node_name(node)
        t = DataType(node.dtype).element_of.with_lanes(width)
        vtype = self._vector_type(t)
        if kind in SLICED_BINARY:
            a, b = self._slice(node.a, part, width), self._slice(node.b, part, width)
            if kind in VECTOR_MIN_MAX:
                return self._min_max(kind, t, a, b)
            return self._binary_scalar(kind, t, a, b)
        if kind == "Call":  # a per-lane if_then_else (see _choice_sliceable)
            return self._slice_choice(node, part, width)
        if kind == "Select":
            mask = self._slice_mask(node.condition, part, width, max(t.bits, 8))
            return self._blend(t, mask, self._slice(node.true_value, part, width),
                               self._slice(node.false_value, part, width))
        if kind == "Broadcast":
            lanes = ", ".join(["_b"] * width)
            return (f"({{ {c_type(t.element_of)} _b = {self.expr(node.value)}; "
                    f"({vtype}){{{lanes}}}; }})")
        if kind == "Ramp":
            stride = self.expr(node.stride)
            steps = ", ".join(str(i) for i in range(width))
            return (f"((({vtype}){{{steps}}}) * {stride} + ({self.expr(node.base)} + "
                    f"{part * width} * {stride}))")
        data = self._data(node.buffer)
        access = flat_access(self, node.buffer, node.indices)
        if id(node.buffer.data) in self._split_locals:
            return f"{data}[({access.base}) / {width} + {part}]"
        whole = self._vector_type(DataType(node.dtype))
        shared = self._shared_parts.get(f"(*({whole}_u*)({data} + {access.base}))")
        if shared:
            return shared[part]
        return f"(*({vtype}_u*)({data} + {access.base} + {part * width}))"
