"""Which TIR expressions a code generator may evaluate unconditionally (speculate).

Entry points: :func:`speculable`, :func:`load_in_bounds`.

``tir.if_then_else`` evaluates only its taken arm, so an arm may hold a load that would read
outside its buffer, or an integer division by zero, in the iterations (or vector lanes) where
the condition is false (a padded border: ``if_then_else(i >= 1, A[i - 1], 0)``). A code
generator that wants branch-free code (a blend of both arms) first asks whether each arm
*cannot fault*: every load provably inside its buffer under the loop ranges an
:class:`~kiln.arith.Analyzer` knows, no integer division by a divisor that may be 0 or -1,
no call other than pure lane-wise math.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.arith import Analyzer
from kiln.runtime.dtype import DataType
from kiln.tir import op as _op

__all__ = ["speculable", "load_in_bounds", "OPERAND_FIELDS", "PURE_CALLS"]

# node kind -> the fields holding its operands; such a node faults only through an operand
OPERAND_FIELDS: dict[str, tuple[str, ...]] = {
    **{kind: ("a", "b") for kind in ("Add", "Sub", "Mul", "Min", "Max", "EQ", "NE", "LT",
                                     "LE", "GT", "GE", "And", "Or")},
    "Not": ("a",), "Cast": ("value",), "Broadcast": ("value",), "Ramp": ("base", "stride"),
    "Select": ("condition", "true_value", "false_value"), "Let": ("value", "body"),
}
_LEAVES = frozenset({"Var", "SizeVar", "IntImm", "FloatImm", "StringImm"})
_DIVISIONS = frozenset({"Div", "Mod", "FloorDiv", "FloorMod"})
# intrinsics that compute lane-wise and cannot trap (float math returns NaN/inf instead)
PURE_CALLS = frozenset(
    name for name, doc in _op.INTRINSICS.items() if doc.startswith(("math", "integer"))
) | {"tir.likely", "tir.reinterpret"}


def speculable(expr: Any, analyzer: Analyzer, memo: dict[int, bool] | None = None) -> bool:
    """Whether evaluating ``expr`` can never fault, so it may run where TIR says it must not.

    Loads must be provably in bounds under ``analyzer``'s facts (the enclosing loops'
    ranges), integer divisions need a constant divisor other than 0 and -1, and calls must be
    pure math. A nested ``if_then_else`` counts when its condition does: its arms stay
    conditional wherever it is emitted. ``memo`` (id(node) -> answer) saves re-walking shared
    subtrees when a caller asks about every node of one expression.

    Example
    -------
    >>> from kiln import arith, tir
    >>> from kiln.ir.expr import Range
    >>> A = tir.decl_buffer((16,), "float32", name="A")
    >>> i, ana = tir.Var("i", "int32"), arith.Analyzer()
    >>> with ana.constraint_scope(i, Range.from_min_extent(0, 16)):
    ...     speculable(A[i], ana), speculable(A[i + 1], ana)
    (True, False)
    """
    memo = {} if memo is None else memo
    key = id(expr)
    if key not in memo:
        memo[key] = _speculable(expr, analyzer, memo)
    return memo[key]


def _speculable(expr: Any, analyzer: Analyzer, memo: dict[int, bool]) -> bool:
    kind = type(expr).__name__
    if kind in _LEAVES:
        return True
    if kind == "BufferLoad":
        return (all(speculable(i, analyzer, memo) for i in expr.indices)
                and load_in_bounds(expr.buffer, expr.indices, analyzer))
    if kind in _DIVISIONS:
        safe_divisor = DataType(expr.dtype).is_float or _nonzero_constant(expr.b)
        return safe_divisor and all(speculable(x, analyzer, memo) for x in (expr.a, expr.b))
    if kind == "Call":
        if expr.op == "tir.if_then_else":
            return speculable(expr.args[0], analyzer, memo)
        return expr.op in PURE_CALLS and all(speculable(a, analyzer, memo) for a in expr.args)
    if kind == "Shuffle":
        return all(speculable(v, analyzer, memo) for v in expr.vectors)
    fields = OPERAND_FIELDS.get(kind)
    return fields is not None and all(speculable(getattr(expr, f), analyzer, memo)
                                      for f in fields)


def _nonzero_constant(divisor: Any) -> bool:
    """A constant divisor that cannot trap: not 0, and not -1 (INT_MIN / -1 overflows)."""
    if type(divisor).__name__ == "Broadcast":
        divisor = divisor.value
    return type(divisor).__name__ == "IntImm" and int(divisor.value) not in (0, -1)


def load_in_bounds(buffer: Any, indices: Sequence[Any], analyzer: Analyzer) -> bool:
    """Whether every lane of ``buffer[indices]`` is provably inside ``buffer``'s shape.

    Each index may be a scalar, a ``Ramp`` with a constant stride (the lanes reach
    ``(lanes - 1) * stride`` past the base) or a ``Broadcast``; other vector indices (a
    gather through loaded values) are not proved. Extents may be symbolic (``A[i]`` in a
    loop ``i < n`` over a buffer of shape ``(n,)`` is proved by the analyzer).

    Example
    -------
    >>> from kiln import arith, tir
    >>> n = tir.SizeVar("n", "int32")
    >>> rows = tir.decl_buffer((n, 8), "float32", name="rows")
    >>> i, analyzer = tir.Var("i", "int32"), arith.Analyzer()
    >>> with analyzer.constraint_scope(i, tir.Range(0, n)):
    ...     load_in_bounds(rows, [i, tir.Ramp(0, 1, 8)], analyzer)
    True
    """
    if len(indices) != len(buffer.shape):
        return False
    return all(_index_in_range(index, extent, analyzer)
               for index, extent in zip(indices, buffer.shape))


def _index_in_range(index: Any, extent: Any, analyzer: Analyzer) -> bool:
    kind = type(index).__name__
    low_reach = high_reach = 0
    if kind == "Broadcast":
        index = index.value
    elif kind == "Ramp":
        if type(index.stride).__name__ != "IntImm":
            return False
        reach = (int(index.lanes) - 1) * int(index.stride.value)
        low_reach, high_reach = min(reach, 0), max(reach, 0)
        index = index.base
    elif DataType(index.dtype).lanes > 1:
        return False
    bound = analyzer.const_int_bound(index)
    if bound.min_value + low_reach < 0 and not analyzer.can_prove(index + low_reach >= 0):
        return False
    if type(extent).__name__ == "IntImm" and bound.max_value + high_reach < int(extent.value):
        return True
    return analyzer.can_prove(index + high_reach < extent)
