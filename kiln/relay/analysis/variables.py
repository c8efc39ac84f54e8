"""Which variables and type variables an expression binds, uses, or leaves free.

Entry points: :func:`free_vars`, :func:`bound_vars`, :func:`all_vars`, :func:`free_type_vars`,
:func:`bound_type_vars`, :func:`all_type_vars`, :func:`well_formed`.

Every list is in the order of first occurrence in a left-to-right depth-first walk, so
``relay.Function(free_vars(e), e)`` takes parameters in reading order.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.adt import TypeData
from kiln.ir.type import FuncType, Type, TypeVar
from kiln.relay.adt import Match, PatternConstructor, PatternTuple, PatternVar
from kiln.relay.expr import Call, Function, Let, Var
from kiln.relay.expr_functor import children_of

__all__ = ["free_vars", "bound_vars", "all_vars", "free_type_vars", "bound_type_vars",
           "all_type_vars", "well_formed"]


def _pattern_vars(pattern: Any, out: list) -> None:
    if isinstance(pattern, PatternVar):
        out.append(pattern.var)
    elif isinstance(pattern, PatternConstructor | PatternTuple):
        for sub in pattern.patterns:
            _pattern_vars(sub, out)


def _binders(node: Any) -> list[Var]:
    if isinstance(node, Function):
        return list(node.params)
    if isinstance(node, Let):
        return [node.var]
    if isinstance(node, Match):
        out: list[Var] = []
        for clause in node.clauses:
            _pattern_vars(clause.lhs, out)
        return out
    return []


def _walk_vars(expr: Any) -> tuple[list[Var], list[Var]]:
    """(all vars in first-occurrence order, bound vars in binding order)."""
    seen: dict[Var, None] = {}
    bound: dict[Var, None] = {}
    visited: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, Var):
            seen.setdefault(node)
            continue
        for var in _binders(node):
            bound.setdefault(var)
        stack.extend(reversed(children_of(node)))
    return list(seen), list(bound)


def free_vars(expr: Any) -> list[Var]:
    """Variables used in ``expr`` but bound nowhere in it.

    Example
    -------
    >>> from kiln import relay
    >>> x, y = relay.var("x"), relay.var("y")
    >>> [v.name_hint for v in free_vars(relay.Function([x], relay.Tuple([x, y])))]
    ['y']
    """
    every, bound = _walk_vars(expr)
    bound_set = set(bound)
    return [v for v in every if v not in bound_set]


def bound_vars(expr: Any) -> list[Var]:
    """Variables bound in ``expr`` (function params, let vars, pattern vars)."""
    return _walk_vars(expr)[1]


def all_vars(expr: Any) -> list[Var]:
    """Every variable of ``expr``, bound or free."""
    return _walk_vars(expr)[0]


def _type_children(ty: Any) -> list:
    children = []
    for name in type(ty)._all_fields:
        if name == "span":
            continue
        value = getattr(ty, name, None)
        if isinstance(value, Type):
            children.append(value)
        elif isinstance(value, tuple | list):
            children.extend(v for v in value if isinstance(v, Type))
    return children


def _types_in(node: Any) -> list:
    """The types written in an expression node (annotations, ret types, type args)."""
    if isinstance(node, Var):
        return [node.type_annotation] if node.type_annotation is not None else []
    if isinstance(node, Function):
        return [node.ret_type] if node.ret_type is not None else []
    if isinstance(node, Call):
        return list(node.type_args)
    return []


def _walk_type_vars(root: Any) -> tuple[list[TypeVar], list[TypeVar]]:
    seen: dict[TypeVar, None] = {}
    bound: dict[TypeVar, None] = {}
    visited: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, TypeVar):
            seen.setdefault(node)
            continue
        if isinstance(node, Type):
            if isinstance(node, FuncType):
                for tv in node.type_params:
                    bound.setdefault(tv)
            if isinstance(node, TypeData):
                for tv in node.type_vars:
                    bound.setdefault(tv)
            stack.extend(reversed(_type_children(node)))
            continue
        if isinstance(node, Function):
            for tv in node.type_params:
                bound.setdefault(tv)
                seen.setdefault(tv)
        stack.extend(reversed([*_types_in(node), *children_of(node)]))
    return list(seen), list(bound)


def free_type_vars(expr: Any, mod: Any = None) -> list[TypeVar]:
    """Type variables used in ``expr`` (an expression or a type) but not bound in it.

    Example
    -------
    >>> a = TypeVar("a")
    >>> [t.name_hint for t in free_type_vars(FuncType([a], a))]
    ['a']
    """
    every, bound = _walk_type_vars(expr)
    bound_set = set(bound)
    return [v for v in every if v not in bound_set]


def bound_type_vars(expr: Any, mod: Any = None) -> list[TypeVar]:
    """Type variables bound in ``expr`` (type params of functions and function types)."""
    return _walk_type_vars(expr)[1]


def all_type_vars(expr: Any, mod: Any = None) -> list[TypeVar]:
    """Every type variable of ``expr``."""
    return _walk_type_vars(expr)[0]


def well_formed(expr: Any) -> bool:
    """Whether every variable is bound at most once and used only inside its scope.

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x")
    >>> well_formed(relay.Let(x, relay.const(1), x))
    True
    >>> well_formed(relay.Tuple([relay.Let(x, relay.const(1), x), x]))
    False
    """
    every, bound = _walk_vars(expr)
    bound_set = set(bound)
    binding_count: dict[Var, int] = {}
    visited: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        for var in _binders(node):
            binding_count[var] = binding_count.get(var, 0) + 1
            if binding_count[var] > 1:
                return False
        stack.extend(children_of(node))
    return _uses_in_scope(expr, bound_set)


def _uses_in_scope(expr: Any, bound_set: set) -> bool:
    """Check every use of a bound variable is under its binder (scoped walk, iterative)."""
    in_scope: dict[Var, int] = {}
    checked: set[int] = set()  # shared sub-graphs are checked once
    stack: list[tuple[Any, bool]] = [(expr, False)]
    while stack:
        node, leaving = stack.pop()
        binders = _binders(node)
        if leaving:
            for var in binders:
                in_scope[var] -= 1
            continue
        if isinstance(node, Var):
            if node in bound_set and not in_scope.get(node):
                return False
            continue
        if id(node) in checked:
            continue
        checked.add(id(node))
        if isinstance(node, Let):
            # The value may refer to the let-bound variable (recursive closures).
            in_scope[node.var] = in_scope.get(node.var, 0) + 1
            stack.append((node, True))
            stack.extend((c, False) for c in (node.body, node.value))
            continue
        for var in binders:
            in_scope[var] = in_scope.get(var, 0) + 1
        stack.append((node, True))
        if isinstance(node, Match):
            stack.extend((c.rhs, False) for c in reversed(node.clauses))
            stack.append((node.data, False))
            continue
        stack.extend((c, False) for c in reversed(children_of(node)) if c not in binders)
    return True
