"""Peano naturals of the prelude as Relay values (TVM's ``relay.testing.nat``).

Entry points: :func:`make_nat_expr`, :func:`make_nat_value`, :func:`count`, :func:`get_type`.
"""

from __future__ import annotations

from typing import Any

from kiln.relay.backend.interpreter import ConstructorValue
from kiln.runtime.error import TVMError

__all__ = ["get_type", "count", "make_nat_value", "make_nat_expr"]


def get_type(prelude: Any, name: str) -> tuple:
    """``(type var, *constructors)`` of the prelude's ADT ``name``."""
    ty_var = prelude.mod.get_global_type_var(name)
    return (ty_var, *prelude.mod.type_definitions[ty_var].constructors)


def _nat(prelude: Any) -> tuple:
    _, z, s = prelude.mod.get_type("nat")
    return z, s


def count(prelude: Any, n: Any) -> int:
    """The Python int a nat value (``s(s(z()))`` -> 2) stands for."""
    z, s = _nat(prelude)
    total = 0
    while True:  # iterative: a large nat must not exhaust Python's recursion limit
        if not isinstance(n, ConstructorValue):
            raise TVMError(f"count expects a nat ConstructorValue, got {type(n).__name__}")
        if n.tag == z.tag:
            return total
        if n.tag != s.tag:
            raise TVMError(f"count: value with tag {n.tag} is not a nat")
        total, n = total + 1, n.fields[0]


def _check(n: int) -> None:
    if not isinstance(n, int) or n < 0:
        raise TVMError(f"a nat is a non-negative int, got {n!r}")


def make_nat_value(prelude: Any, n: int) -> ConstructorValue:
    """The nat value of ``n`` as the interpreter represents it."""
    _check(n)
    z, s = _nat(prelude)
    value = ConstructorValue(z.tag, [], z)
    for _ in range(n):
        value = ConstructorValue(s.tag, [value], s)
    return value


def make_nat_expr(prelude: Any, n: int) -> Any:
    """The Relay expression ``s(...s(z())...)`` of ``n``."""
    _check(n)
    z, s = _nat(prelude)
    expr = z()
    for _ in range(n):
        expr = s(expr)
    return expr
