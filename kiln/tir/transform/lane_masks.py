"""A per-lane ``if_then_else`` whose arms may fault becomes a ``Select`` of masked arms.

Entry points: :func:`MaskFaultingLanes` (the pass) and :func:`mask_faulting_lanes` (one
statement).

``tir.if_then_else`` with a vector condition evaluates, lane by lane, only the arm each lane
takes, so an arm may read past a padded border or divide by zero in the lanes that do not
take it. :func:`~kiln.tir.transform.SelectSafeIfThenElse` has already turned the choices
whose arms cannot fault into ``Select``; this pass rewrites the rest so that every arm is safe
to evaluate in every lane, and then they are ``Select`` too. Each arm is rewritten under the
mask of the lanes that take it (the condition, or its negation, and-ed with the masks of the
enclosing arms):

* a vector load that may fault becomes ``tir.masked_load(load, mask)``: the load's lanes where
  the mask holds, zero elsewhere, reading no memory of the other lanes (a printer emits AVX2
  ``maskload``/``llvm.masked.load`` for contiguous lanes, a gather or a guarded lane loop for
  others);
* an integer division divides by 1 in the masked-off lanes (theirs may be 0);
* a ``Shuffle`` reads each source lane under the mask of the output lanes that pick it;
* a part whose lanes do not line up with the mask -- a scalar (a broadcast scalar load), an
  extern call -- runs only when some lane of the mask is set: ``if_then_else(any lane,
  part, 0)`` on a scalar condition, which every printer branches on;
* a nested per-lane choice is rewritten the same way under its own and the enclosing masks.

Sub-expressions that cannot fault (:func:`~kiln.arith.load_bounds.speculable` under the
enclosing loops' ranges) are left as they are, so only the loads that need it pay for a mask.
The rewrite keeps TIR's meaning exactly; it runs before every codegen (C, LLVM, OpenCL,
bare-metal C), which then print ``Select`` and ``tir.masked_load`` without deciding anything.
"""

from __future__ import annotations

from typing import Any

from kiln.arith.load_bounds import OPERAND_FIELDS, PURE_CALLS
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.tir import expr as _e
from kiln.tir import stmt as _s
from kiln.tir.function import PrimFunc
from kiln.tir.op import const
from kiln.tir.transform.base import PrimFuncPass, prim_func_pass
from kiln.tir.transform.safe_choices import SafeChoices, has_choice, is_if_then_else

__all__ = ["MaskFaultingLanes", "mask_faulting_lanes", "MASKED_LOAD"]

MASKED_LOAD = "tir.masked_load"
_INT_DIVISIONS = (_e.Div, _e.Mod, _e.FloorDiv, _e.FloorMod)


def _per_lane(node: Any) -> bool:
    return is_if_then_else(node) and DataType(node.args[0].dtype).lanes > 1


def _zero(dtype: str) -> Any:
    t = DataType(dtype)
    scalar = const(0, str(t.element_of))
    return scalar if t.lanes == 1 else _e.Broadcast(scalar, t.lanes)


def _any_lane(mask: Any) -> Any:
    """A scalar bool: some lane of ``mask`` holds (the mask is bound once, then its lanes
    are or-ed)."""
    lanes = DataType(mask.dtype).lanes
    bound = _e.Var("mask", mask.dtype)
    picked: Any = _e.Shuffle([bound], [const(0, "int32")])
    for lane in range(1, lanes):
        picked = _e.Or(picked, _e.Shuffle([bound], [const(lane, "int32")]))
    return _e.Let(bound, mask, picked)


def _source_masks(node: _e.Shuffle, mask: Any) -> list[Any]:
    """For each source vector of a Shuffle, the mask of its lanes that some output lane in
    ``mask`` reads (lane ``m`` of a source is needed where an output lane picking it is)."""
    picks = [int(i.value) for i in node.indices]
    no_lane = len(picks)  # the index of a constant false appended to the mask's lanes
    masks, start = [], 0
    for vector in node.vectors:
        count = DataType(vector.dtype).lanes
        readers = [[k for k, pick in enumerate(picks) if pick == start + m]
                   for m in range(count)]
        source_mask: Any = _zero(str(DataType("bool").with_lanes(count)))  # lanes no one reads
        for depth in range(max(len(r) for r in readers)):
            lanes = [r[depth] if depth < len(r) else no_lane for r in readers]
            part = _e.Shuffle([mask, const(False, "bool")], [const(k, "int32") for k in lanes])
            source_mask = part if depth == 0 else _e.Or(source_mask, part)
        masks.append(source_mask)
        start += count
    return masks


class _LaneMasks(SafeChoices):
    """Rewrites per-lane choices top-down, each arm under the mask of its lanes."""

    def visit_Call(self, node: _e.Call) -> Any:
        if _per_lane(node):
            return self._choice(node, None)
        return self.generic_visit(node)

    def _choice(self, node: _e.Call, outer: Any) -> Any:
        """The choice as a ``Select`` of its arms, each masked to the lanes taking it
        (``outer``: the lanes the enclosing arms take; None outside every arm)."""
        cond, then, other = node.args
        lanes = DataType(node.dtype).lanes
        if DataType(cond.dtype).lanes != lanes:
            raise TVMError(f"if_then_else condition has {DataType(cond.dtype).lanes} lanes but "
                           f"its arms have {lanes}; broadcast the arms or the condition to "
                           "one lane count")
        cond = self.visit(cond) if outer is None else self._masked(cond, outer)
        taken = cond if outer is None else _e.And(outer, cond)
        not_taken = _e.Not(cond) if outer is None else _e.And(outer, _e.Not(cond))
        return _e.Select(cond, self._masked(then, taken), self._masked(other, not_taken))

    def _masked(self, node: Any, mask: Any) -> Any:
        """``node`` rewritten to be safe in every lane, exact in the lanes of ``mask``."""
        if self._safe(node):
            return node
        lanes = DataType(node.dtype).lanes
        if DataType(mask.dtype).lanes == 1:  # one lane (a Shuffle's scalar source): branch
            return _e.Call(node.dtype, "tir.if_then_else", [mask, self.visit(node),
                                                            _zero(node.dtype)])
        if _per_lane(node):
            return self._choice(node, mask)
        if lanes != DataType(mask.dtype).lanes:
            return self._when_any_lane(node, mask)
        if isinstance(node, _e.BufferLoad):
            indices = [self._masked(i, mask) for i in node.indices]
            return _e.Call(node.dtype, MASKED_LOAD, [_e.BufferLoad(node.buffer, indices), mask])
        if isinstance(node, _INT_DIVISIONS):
            divisor = self._masked(node.b, mask)
            safe = _e.Select(mask, divisor, _e.Broadcast(const(1, str(
                DataType(divisor.dtype).element_of)), lanes))
            return type(node)(self._masked(node.a, mask), safe)
        if is_if_then_else(node):  # a scalar condition choosing between vectors
            cond = _e.Broadcast(node.args[0], lanes)
            return self._choice(_e.Call(node.dtype, node.op, [cond, *node.args[1:]]), mask)
        if isinstance(node, _e.Call) and str(node.op) in PURE_CALLS:
            return _e.Call(node.dtype, node.op, [self._masked(a, mask) for a in node.args])
        if isinstance(node, _e.Let):
            return _e.Let(node.var, self._masked(node.value, mask), self._masked(node.body, mask))
        if isinstance(node, _e.Shuffle):
            return _e.Shuffle([self._masked(vector, source_mask) for vector, source_mask in
                               zip(node.vectors, _source_masks(node, mask))], node.indices)
        fields = OPERAND_FIELDS.get(type(node).__name__)
        if fields is None:  # an extern call: evaluated whole, only if some lane needs it
            return self._when_any_lane(node, mask)
        if isinstance(node, (_e.Broadcast, _e.Ramp)):
            # their scalar operands have one lane: each runs if any lane needs it
            parts = {f: self._masked(getattr(node, f), mask) for f in fields}
            if isinstance(node, _e.Broadcast):
                return _e.Broadcast(parts["value"], lanes)
            return _e.Ramp(parts["base"], parts["stride"], lanes)
        if isinstance(node, _e.Cast):
            return _e.Cast(node.dtype, self._masked(node.value, mask))
        return type(node)(*(self._masked(getattr(node, f), mask) for f in fields))

    def _when_any_lane(self, node: Any, mask: Any) -> Any:
        return _e.Call(node.dtype, "tir.if_then_else",
                       [_any_lane(mask), self.visit(node), _zero(node.dtype)])


def mask_faulting_lanes(stmt: _s.Stmt) -> _s.Stmt:
    """``stmt`` with every per-lane ``if_then_else`` a ``Select`` of arms masked to their
    lanes."""
    return _LaneMasks().visit(stmt)


def _mask_func(func: PrimFunc) -> PrimFunc:
    if not has_choice(func.body):
        return func
    body = mask_faulting_lanes(func.body)
    return func if body is func.body else func.with_body(body)


def MaskFaultingLanes() -> PrimFuncPass:  # noqa: N802 - named like TVM's pass factories
    """The pass: per-lane ``if_then_else`` whose arms may fault -> ``Select`` of arms that
    read only their lanes' memory (``tir.masked_load``) and divide safely."""
    return prim_func_pass(_mask_func, "tir.MaskFaultingLanes")
