"""How CodeGenLLVM lowers ``tir.if_then_else`` with a per-lane (vector) condition.

Entry point: :class:`LLVMLaneMasks`, a mixin of :class:`~kiln.target.codegen_llvm.CodeGenLLVM`
whose ``_vector_if_then_else`` is called by ``call_if_then_else`` for a ``<N x i1>``
condition (a scalar condition keeps the short-circuit branches: only the taken arm runs).

A vector condition becomes ``select <N x i1> cond, then, else``, and each arm is evaluated
for all N lanes. TIR promises an arm is evaluated only where it is taken, so each arm first
goes through :func:`~kiln.arith.load_bounds.speculable`:

* an arm that cannot fault (its loads provably in bounds under the loop ranges, no integer
  division by a possibly-zero divisor) is evaluated plainly: vector loads and a blend, no
  mask and no branch;
* any other arm is evaluated *under a lane mask* (the condition for the then-arm, its
  negation for the else-arm, and-ed with any enclosing arm's mask). Under a mask, a vector
  load that is not proved in bounds becomes ``llvm.masked.load`` (contiguous lanes;
  one ``vmaskmovps``/``vpmaskmovd`` for 32/64-bit elements on AVX2, expanded lane by lane by
  LLVM for narrower ones; the inactive lanes' memory is never touched, a page past the end
  of a buffer included) or ``llvm.masked.gather`` (any other lane
  pattern); a vector integer division gets divisor 1 in the inactive lanes; and a scalar
  sub-expression that may fault (a broadcast scalar load) or a node whose lanes do not line
  up with the mask (a Shuffle, an extern call) runs only when at least one lane is active.

Masked memory operations were chosen over per-lane scalarisation (a compare and branch per
lane, which is what LLVM itself expands a masked operation to where the CPU has none): the
arm stays one straight-line vector expression, and only the loads that need it pay for the
mask.
"""

from __future__ import annotations

from typing import Any

from kiln.arith.load_bounds import OPERAND_FIELDS, PURE_CALLS, speculable
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.target.llvm_intrinsics import mangle_type

__all__ = ["LLVMLaneMasks"]

_INT_DIVISIONS = frozenset({"Div", "Mod", "FloorDiv", "FloorMod"})
# nodes whose lane k depends only on lane k of their operands: under a mask they are emitted
# as usual and their operands inherit the mask
_LANEWISE = frozenset(OPERAND_FIELDS) | {"Call"}


class LLVMLaneMasks:
    """Per-lane ``if_then_else`` for :class:`~kiln.target.codegen_llvm.CodeGenLLVM` (which
    provides ``builder``, ``function``, ``expr``, ``_dispatch``, the buffer addressing helpers
    and ``_analyzer``, holding the enclosing loops' ranges)."""

    # <N x i1>: the lanes in which the arm being emitted is taken; None outside masked arms
    _active_lanes = None
    _speculation_memo: dict[int, bool] = {}

    def _vector_if_then_else(self, node: Any):
        """``select(cond, then, else)`` over lanes; an arm that may fault is evaluated under
        its lanes' mask (see the module docstring)."""
        b = self.builder
        cond, then, other = node.args
        outer = self._active_lanes
        if outer is None:
            self._speculation_memo = {}  # loop facts are fixed within one expression
        lanes = DataType(node.dtype).lanes
        if DataType(cond.dtype).lanes != lanes:
            raise TVMError(f"LLVM codegen ({self._func_name}): if_then_else condition has "
                           f"{DataType(cond.dtype).lanes} lanes but its arms have {lanes}; "
                           "broadcast the arms or the condition to one lane count")
        mask = self.expr(cond)
        taken = mask if outer is None else b.and_(outer, mask)
        not_taken = b.not_(mask) if outer is None else b.and_(outer, b.not_(mask))
        then_value = self._evaluate_arm(then, taken)
        other_value = self._evaluate_arm(other, not_taken)
        return b.select(mask, then_value, other_value)

    def _evaluate_arm(self, arm: Any, lanes_mask):
        outer = self._active_lanes
        self._active_lanes = None if self._speculable(arm) else lanes_mask
        try:
            return self.expr(arm)
        finally:
            self._active_lanes = outer

    def _speculable(self, node: Any) -> bool:
        return speculable(node, self._analyzer, self._speculation_memo)

    def _masked_expr(self, node: Any):
        """Emit ``node`` inside an arm taken only in ``_active_lanes``."""
        mask = self._active_lanes
        if self._speculable(node):
            return self._unmasked(node)
        kind = type(node).__name__
        if DataType(node.dtype).lanes != mask.type.count or not (
                kind in _LANEWISE or kind in _INT_DIVISIONS or kind == "BufferLoad"):
            return self._when_any_lane_active(node)
        if kind == "BufferLoad":
            return self._masked_load(node)
        if kind in _INT_DIVISIONS:
            return self._masked_division(node)
        if kind == "Call" and node.op not in PURE_CALLS and node.op != "tir.if_then_else":
            return self._when_any_lane_active(node)  # an extern call cannot run per lane
        return self._dispatch(node)

    def _unmasked(self, node: Any):
        mask, self._active_lanes = self._active_lanes, None
        try:
            return self._dispatch(node)
        finally:
            self._active_lanes = mask

    def _when_any_lane_active(self, node: Any):
        """Evaluate ``node`` whole, but only if some lane of the mask is active (it is then
        needed by that lane); otherwise its value is zero and every lane discards it."""
        ir, b = self.ir, self.builder
        mask = self._active_lanes
        packed = b.bitcast(mask, ir.IntType(mask.type.count))
        any_active = b.icmp_unsigned("!=", packed, ir.Constant(packed.type, 0))
        skipped = b.block
        run = self.function.append_basic_block("any_lane")
        done = self.function.append_basic_block("any_lane_done")
        b.cbranch(any_active, run, done)
        b.position_at_end(run)
        value = self._unmasked(node)
        ran = b.block
        b.branch(done)
        b.position_at_end(done)
        merged = b.phi(value.type)
        merged.add_incoming(value, ran)
        merged.add_incoming(ir.Constant(value.type, None), skipped)
        return merged

    def _masked_load(self, node: Any):
        """A vector load touching only the active lanes' elements."""
        ir, b = self.ir, self.builder
        t = DataType(node.dtype)
        storage = self.ltype(t, storage=True)
        element_ptr = self._element_pointer(node.buffer)
        offsets, contiguous = self._lane_offsets(node.buffer, node.indices, t.lanes)
        align = ir.Constant(self.i32, max(DataType(node.buffer.dtype).itemsize, 1))
        passthru = ir.Constant(storage, None)
        # no ``inbounds`` on these GEPs: the inactive lanes' addresses may lie outside
        if contiguous:
            address = b.bitcast(b.gep(element_ptr, [offsets]), storage.as_pointer())
            loaded = self._masked_memory_call("llvm.masked.load", address, align, passthru)
        else:
            pointers = ir.Constant(ir.VectorType(element_ptr.type, t.lanes), None)
            for lane, offset in enumerate(offsets):
                pointers = b.insert_element(pointers, b.gep(element_ptr, [offset]),
                                            self.const("int32", lane))
            loaded = self._masked_memory_call("llvm.masked.gather", pointers, align, passthru)
        return self._from_storage(loaded, t)

    def _masked_memory_call(self, name: str, address, align, passthru):
        # the (pointer, i32 align, mask, passthru) form: LLVM 22 moved the alignment onto the
        # pointer and upgrades this form when it reads it; older LLVMs take it as it is
        args = [address, align, self._active_lanes, passthru]
        fn = self._declare(f"{name}.{mangle_type(passthru.type)}.{mangle_type(address.type)}",
                           passthru.type, [a.type for a in args])
        return self.builder.call(fn, args)

    def _masked_division(self, node: Any):
        """An integer division whose inactive lanes divide by 1 (theirs may be 0)."""
        from kiln import tir

        b = self.builder
        divisor = self.expr(node.b)
        one = self.ir.Constant(divisor.type, [1] * divisor.type.count)
        safe = tir.Var("safe_divisor", node.b.dtype)
        self.vars[id(safe)] = b.select(self._active_lanes, divisor, one)
        try:
            return self._dispatch(type(node)(node.a, safe))
        finally:
            del self.vars[id(safe)]
            self._speculation_memo.pop(id(safe), None)  # the id may be reused
