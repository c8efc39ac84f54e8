"""Stores of vectors wider than a native register become one store per native-width part.

Entry points: :func:`SplitWideVectors` (the pass), :func:`split_wide_vectors` (one
statement), :func:`native_lanes` and :data:`NATIVE_VECTOR_BITS`.

GCC lowers a generic vector wider than a register (``float32x16`` on AVX2) piecewise through
the stack; native-width statements stay in registers. So a contiguous store of such a vector
whose value works lane by lane -- arithmetic, min/max, comparisons and their and/or/not,
selects and per-lane ``if_then_else``, broadcasts, ramps and contiguous loads -- is rewritten
as ``lanes / native`` stores of ``native`` lanes each, every node sliced to the same lanes:
``B[ramp(i, 1, 16)] = A[ramp(i, 1, 16)] * 2`` becomes ``B[ramp(i, 1, 8)] =
A[ramp(i, 1, 8)] * 2; B[ramp(i + 8, 1, 8)] = A[ramp(i + 8, 1, 8)] * 2``. The rewrite is exact
(lane k of a part is lane ``part * native + k`` of the whole), so any printer may run it; the
C-family pipeline does, since LLVM legalizes wide vectors itself. A local buffer accessed only
by the sliced stores and loads is then accessed by whole native vectors, which the C printer
keeps in registers (an accumulator tile).
"""

from __future__ import annotations

from typing import Any

from kiln.ir.expr import IntImm
from kiln.runtime.dtype import DataType
from kiln.tir import expr as _e
from kiln.tir import stmt as _s
from kiln.tir.function import PrimFunc
from kiln.tir.stmt_functor import StmtExprMutator
from kiln.tir.transform.base import PrimFuncPass, prim_func_pass
from kiln.tir.transform.vector_access import contiguous_index

__all__ = ["SplitWideVectors", "split_wide_vectors", "native_lanes", "NATIVE_VECTOR_BITS"]

# The host's vector register width (AVX2): GCC keeps generic vectors up to this in registers.
NATIVE_VECTOR_BITS = 256

# lane-wise arithmetic sliced part by part (operands as wide as the result)
_ARITHMETIC = (_e.Add, _e.Sub, _e.Mul, _e.Div, _e.Mod, _e.FloorDiv, _e.FloorMod, _e.Min, _e.Max)
_COMPARISONS = (_e.EQ, _e.NE, _e.LT, _e.LE, _e.GT, _e.GE)
_MASK_LOGIC = (_e.And, _e.Or)


def native_lanes(dtype: DataType, lanes: int, native_bits: int = NATIVE_VECTOR_BITS) -> int:
    """Lanes of ``dtype`` elements in one native vector register, or ``lanes`` when a vector
    of ``lanes`` fits (or does not split into whole native registers)."""
    per_register = max(native_bits // max(dtype.bits, 8), 1)
    return per_register if lanes > per_register and lanes % per_register == 0 else lanes


def _offset(base: Any, lanes: int, stride: Any) -> Any:
    """``base + lanes * stride``, with constant strides folded."""
    if lanes == 0:
        return base
    if isinstance(stride, IntImm):
        return _e.Add(base, IntImm(base.dtype, lanes * int(stride.value)))
    return _e.Add(base, _e.Mul(IntImm(stride.dtype, lanes), stride))


class _Slicer:
    """Native-width parts of one wide store's value (``width`` lanes per part).

    ``sliceable`` and ``mask_sliceable`` decide, ``part`` builds; both memoize by node so a
    shared sub-expression stays shared in every part."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.memo: dict[tuple[int, int], Any] = {}
        self.keep: list[Any] = []  # holds the keys' nodes alive while their ids are used

    def sliceable(self, node: Any, bits: int) -> bool:
        """Whether every node of vector ``node`` works lane by lane on ``bits``-bit lanes."""
        if isinstance(node, (_e.Broadcast, _e.Ramp)):
            return True
        t = DataType(node.dtype)
        if t.bits != bits or t.is_bool:
            return False
        if isinstance(node, _ARITHMETIC):
            return self.sliceable(node.a, bits) and self.sliceable(node.b, bits)
        if isinstance(node, _e.Select):
            return (self.mask_sliceable(node.condition) and self.sliceable(node.true_value, bits)
                    and self.sliceable(node.false_value, bits))
        if isinstance(node, _e.Call) and str(node.op) == "tir.if_then_else":
            cond, then, other = node.args
            return (DataType(cond.dtype).lanes == t.lanes and self.mask_sliceable(cond)
                    and self.sliceable(then, bits) and self.sliceable(other, bits))
        return isinstance(node, _e.BufferLoad) and \
            contiguous_index(node.buffer, list(node.indices)) is not None

    def mask_sliceable(self, cond: Any) -> bool:
        """Whether the vector bool ``cond`` slices (comparisons, and/or/not, bool loads)."""
        if isinstance(cond, _COMPARISONS):
            operand = DataType(cond.a.dtype)
            return not operand.is_bool and self.sliceable(cond.a, operand.bits) and \
                self.sliceable(cond.b, operand.bits)
        if isinstance(cond, _MASK_LOGIC):
            return self.mask_sliceable(cond.a) and self.mask_sliceable(cond.b)
        if isinstance(cond, _e.Not):
            return self.mask_sliceable(cond.a)
        return isinstance(cond, _e.Broadcast) or (
            isinstance(cond, _e.BufferLoad)
            and contiguous_index(cond.buffer, list(cond.indices)) is not None)

    def part(self, node: Any, k: int) -> Any:
        """Lanes ``[k * width, (k + 1) * width)`` of vector ``node`` (which slices)."""
        key = (id(node), k)
        done = self.memo.get(key)
        if done is None:
            done = self.memo[key] = self._part(node, k)
            self.keep.append(node)
        return done

    def _part(self, node: Any, k: int) -> Any:
        width = self.width
        if isinstance(node, _e.Broadcast):
            return _e.Broadcast(node.value, width)
        if isinstance(node, _e.Ramp):
            return _e.Ramp(_offset(node.base, k * width, node.stride), node.stride, width)
        if isinstance(node, (*_ARITHMETIC, *_COMPARISONS, *_MASK_LOGIC)):
            return type(node)(self.part(node.a, k), self.part(node.b, k))
        if isinstance(node, _e.Not):
            return _e.Not(self.part(node.a, k))
        if isinstance(node, _e.Select):
            return _e.Select(*(self.part(x, k) for x in
                               (node.condition, node.true_value, node.false_value)))
        if isinstance(node, _e.Call):  # a per-lane if_then_else
            dtype = DataType(node.dtype).element_of.with_lanes(width)
            return _e.Call(str(dtype), node.op, [self.part(a, k) for a in node.args])
        return _e.BufferLoad(node.buffer, self.indices(node.buffer, list(node.indices), k))

    def indices(self, buffer: Any, indices: list[Any], k: int) -> list[Any]:
        """``indices`` of a contiguous access narrowed to part ``k``."""
        ramp_at = contiguous_index(buffer, indices)
        out = []
        for position, index in enumerate(indices):
            if position == ramp_at:
                out.append(_e.Ramp(_offset(index.base, k * self.width, index.stride),
                                   index.stride, self.width))
            elif isinstance(index, _e.Broadcast):
                out.append(_e.Broadcast(index.value, self.width))
            else:
                out.append(index)
        return out


class _WideStores(StmtExprMutator):
    def __init__(self, native_bits: int) -> None:
        super().__init__()
        self.native_bits = native_bits

    def visit_BufferStore(self, node: _s.BufferStore) -> Any:
        t = DataType(node.value.dtype)
        width = native_lanes(t.element_of, t.lanes, self.native_bits)
        indices = list(node.indices)
        if width >= t.lanes or t.is_bool or contiguous_index(node.buffer, indices) is None:
            return node
        slicer = _Slicer(width)
        if not slicer.sliceable(node.value, t.bits):
            return node
        return _s.SeqStmt([_s.BufferStore(node.buffer, slicer.part(node.value, k),
                                          slicer.indices(node.buffer, indices, k))
                           for k in range(t.lanes // width)])


def split_wide_vectors(stmt: _s.Stmt, native_bits: int = NATIVE_VECTOR_BITS) -> _s.Stmt:
    """``stmt`` with each contiguous, lane-wise store of a vector wider than ``native_bits``
    written as native-width parts."""
    return _WideStores(native_bits).visit(stmt)


def SplitWideVectors(native_bits: int = NATIVE_VECTOR_BITS) -> PrimFuncPass:  # noqa: N802
    """The pass: wide lane-wise vector stores -> one store per ``native_bits`` part."""

    def run(func: PrimFunc) -> PrimFunc:
        body = split_wide_vectors(func.body, native_bits)
        return func if body is func.body else func.with_body(body)

    return prim_func_pass(run, "tir.SplitWideVectors")
