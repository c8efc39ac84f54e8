"""LowerIntrin: rewrite intrinsics and operators into what a C compiler offers directly.

Entry points: :func:`LowerIntrin` (the pass), :func:`lower_intrinsics`.

- ``floordiv`` / ``floormod`` by a positive constant become C's truncating ``/`` and ``%``
  (``tir.Div`` / ``tir.Mod``) when the dividend is provably non-negative under the loop
  bounds, and a ``Select`` correction otherwise;
- ``sigmoid(x)`` -> ``1 / (1 + exp(-x))``, ``rsqrt(x)`` -> ``1 / sqrt(x)``,
  ``exp10(x)`` -> ``exp(x * ln 10)``;
- ``tvm_access_ptr(t, data, offset, extent, mask)`` -> ``address_of(data[offset])``.
"""

from __future__ import annotations

import math

from kiln.arith.analyzer import Analyzer
from kiln.arith.bound import POS_INF, ConstIntBound
from kiln.ir.expr import IntImm, PrimExpr, Range
from kiln.runtime.dtype import DataType
from kiln.tir import expr as _e
from kiln.tir import op as _op
from kiln.tir.buffer import Buffer
from kiln.tir.function import PrimFunc
from kiln.tir.stmt_functor import StmtExprMutator
from kiln.tir.transform.base import prim_func_pass

__all__ = ["LowerIntrin", "lower_intrinsics"]


def _sigmoid(x: PrimExpr) -> PrimExpr:
    one = _op.const(1.0, x.dtype) if DataType(x.dtype).lanes == 1 else \
        _e.Broadcast(_op.const(1.0, str(DataType(x.dtype).element_of)), DataType(x.dtype).lanes)
    return _op.div(one, _op.add(one, _op.exp(_op.negative(x))))


def _rsqrt(x: PrimExpr) -> PrimExpr:
    one = _op.const(1.0, str(DataType(x.dtype).element_of))
    if DataType(x.dtype).lanes > 1:
        one = _e.Broadcast(one, DataType(x.dtype).lanes)
    return _op.div(one, _op.sqrt(x))


def _exp10(x: PrimExpr) -> PrimExpr:
    return _op.exp(_op.multiply(x, math.log(10.0)))


def _access_ptr(call: _e.Call) -> PrimExpr:
    annotation, data, offset = call.args[0], call.args[1], call.args[2]
    dtype = annotation.dtype if isinstance(annotation, _e.Call) else "float32"
    view = Buffer(data, str(DataType(dtype).element_of), [call.args[3]], [], 0,
                  getattr(data, "name", "ptr"))
    return _op.address_of(_e.BufferLoad(view, [offset]))


_CALL_RULES = {"tir.sigmoid": _sigmoid, "tir.rsqrt": _rsqrt, "tir.exp10": _exp10}


class _IntrinLowering(StmtExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.analyzer = Analyzer()

    def visit_For(self, node):
        with self.analyzer.constraint_scope(node.loop_var,
                                            Range.from_min_extent(node.min, node.extent)):
            return self.generic_visit(node)

    def visit_Call(self, node):
        node = self.generic_visit(node)
        rule = _CALL_RULES.get(node.op)
        if rule is not None:
            return rule(node.args[0])
        if node.op == "tir.tvm_access_ptr":
            return _access_ptr(node)
        return node

    def _floor(self, node):
        node = self.generic_visit(node)
        a, b = node.a, node.b
        if not isinstance(b, IntImm) or b.value <= 0 or DataType(a.dtype).lanes > 1:
            return node
        is_div = isinstance(node, _e.FloorDiv)
        if self.analyzer.const_int_bound(a).min_value >= 0:
            return _e.Div(a, b) if is_div else _e.Mod(a, b)
        if is_div:
            # floor(a / b) for b > 0: truncation rounds toward zero, so shift negatives down
            shifted = _e.Div(_op.subtract(a, b.value - 1), b)
            return _e.Select(_op.greater_equal(a, 0), _e.Div(a, b), shifted)
        rem = _e.Mod(a, b)
        return _e.Select(_op.greater_equal(rem, 0), rem, _op.add(rem, b))

    visit_FloorDiv = visit_FloorMod = _floor


def lower_intrinsics(func: PrimFunc) -> PrimFunc:
    """Apply the rewrites listed in the module docstring to ``func``."""
    lowering = _IntrinLowering()
    for buf in func.buffer_map.values():
        for dim in buf.shape:
            if isinstance(dim, _e.Var):  # a shape read from a DLTensor is never negative
                lowering.analyzer.update(dim, ConstIntBound(0, POS_INF))
    return func.with_body(lowering.visit(func.body))


def LowerIntrin():  # noqa: N802 - TVM's pass name
    """The LowerIntrin pass."""
    return prim_func_pass(lower_intrinsics, "tir.LowerIntrin")
