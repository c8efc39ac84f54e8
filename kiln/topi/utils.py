"""Small helpers shared by the computes and schedules (TVM's ``topi.utils``).

Entry points: :func:`get_const_int`, :func:`get_const_tuple`, :func:`normalize_axes`,
:func:`traverse_inline`, :func:`ravel_index`, :func:`unravel_index`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from kiln.runtime.error import TVMError
from kiln.tir import expr as _e
from kiln.topi import tag


def get_const_int(value: Any) -> int:
    """``value`` (a Python int or an ``IntImm``) as a Python int."""
    if isinstance(value, int):
        return value
    if isinstance(value, _e.IntImm):
        return int(value.value)
    raise TVMError(f"expected a constant integer, got {value!r}")


def get_const_tuple(values: Sequence[Any]) -> tuple:
    """A shape as a tuple of Python ints (symbolic dimensions stay expressions)."""
    return tuple(int(v.value) if isinstance(v, _e.IntImm) else v for v in values)


def is_const(value: Any) -> bool:
    return isinstance(value, int) or isinstance(value, _e.IntImm)


def prod(values: Sequence[Any]) -> Any:
    out: Any = 1
    for v in values:
        out = out * v
    return out


def normalize_axes(axis: Any, ndim: int, what: str = "axis") -> list[int]:
    """``axis`` (None, an int or ints, negatives allowed) as sorted non-negative ints."""
    if axis is None:
        return list(range(ndim))
    axes = [axis] if isinstance(axis, int) else [get_const_int(a) for a in axis]
    out = []
    for a in axes:
        if not -ndim <= a < max(ndim, 1):
            raise TVMError(f"{what} {a} is out of range for a tensor of rank {ndim}")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise TVMError(f"{what} {axes} repeats an axis")
    return sorted(out)


def ravel_index(indices: Sequence[Any], shape: Sequence[Any]) -> Any:
    """Row-major flat index of ``indices`` in ``shape``."""
    flat: Any = 0
    for i, dim in zip(indices, shape):
        flat = flat * dim + i if not (isinstance(flat, int) and flat == 0) else i
    return flat


def unravel_index(flat: Any, shape: Sequence[Any]) -> list[Any]:
    """Row-major indices of ``flat`` in ``shape``. A shape with a zero extent has no elements,
    so no index is ever unravelled in it: its dims count as 1 instead of dividing by zero."""
    from kiln.tir.op import floordiv, floormod

    if any(getattr(d, "value", d) == 0 for d in shape if is_const(d)):
        shape = [1] * len(shape)
    out = []
    for dim in reversed(shape):
        out.append(floormod(flat, dim))
        flat = floordiv(flat, dim)
    return out[::-1]


def traverse_inline(sch: Any, final_op: Any, callback: Callable | None = None) -> None:
    """Inline every injective stage reachable from ``final_op``; call ``callback`` on each op."""
    from kiln.te.tensor import ComputeOp

    visited: set[int] = set()

    def visit(op: Any) -> None:
        if id(op) in visited:
            return
        visited.add(id(op))
        if tag.is_injective(op.tag) and op is not final_op and isinstance(op, ComputeOp) \
                and op in sch and not sch[op].is_output:
            sch[op].compute_inline()
        for t in op.input_tensors:
            if isinstance(t.op, ComputeOp):
                visit(t.op)
        if callback is not None:
            callback(op)

    visit(final_op)


def find_tagged(sch: Any, outs: Sequence[Any], tags: Sequence[str]) -> dict:
    """Inline the injective stages reachable from ``outs`` (:func:`traverse_inline`) and
    return the output tensor of each op tagged one of ``tags``, by tag."""
    found: dict = {}

    def visit(op: Any) -> None:
        if op.tag in tags:
            found[op.tag] = op.output(0)

    for t in outs:
        traverse_inline(sch, t.op, visit)
    return found

def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def divisor_at_most(n: int, cap: int) -> int:
    """The largest divisor of ``n`` not above ``cap`` (at least 1)."""
    for d in range(min(n, cap), 0, -1):
        if n % d == 0:
            return d
    return 1


_ = math
