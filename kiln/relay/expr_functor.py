"""Visitors over Relay expressions (TVM's ``tvm.relay.expr_functor``).

Entry points: :class:`ExprFunctor` (one ``visit_<kind>`` method per node kind, dispatched by
a class table, results memoized per node), :class:`ExprVisitor` (walks every node once),
:class:`ExprMutator` (rebuilds only what changed: a sub-tree with no change comes back as the
same object), :func:`post_order_visit` (a callback on every node, children first, iterative)
and :func:`children_of` (a node's sub-expressions in evaluation order).

Visitors recurse once per node; :func:`~kiln.relay.base.deep_recursion` lifts the recursion
limit while a walk runs, so 100,000-node chains are fine. An exception that is not a kiln
error, raised while visiting, is re-raised as :class:`VisitorError` naming the node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.ir.adt import Constructor
from kiln.ir.expr import GlobalVar, RelayExpr
from kiln.ir.op import Op
from kiln.relay import base as _base
from kiln.relay.adt import (
    Clause,
    Match,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
)
from kiln.relay.base import deep_recursion
from kiln.relay.expr import (
    Call,
    Constant,
    Function,
    If,
    Let,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from kiln.runtime.error import TVMError

__all__ = ["ExprFunctor", "ExprVisitor", "ExprMutator", "post_order_visit", "children_of",
           "VisitorError"]


class VisitorError(TVMError):
    """An unexpected exception raised while visiting a node (the node is in the message)."""


# node class -> name of the visitor method that handles it
_DISPATCH: dict[type, str] = {
    Function: "visit_function",
    Let: "visit_let",
    Call: "visit_call",
    Var: "visit_var",
    If: "visit_if",
    Tuple: "visit_tuple",
    TupleGetItem: "visit_tuple_getitem",
    GlobalVar: "visit_global_var",
    Op: "visit_op",
    Constant: "visit_constant",
    RefCreate: "visit_ref_create",
    RefRead: "visit_ref_read",
    RefWrite: "visit_ref_write",
    Constructor: "visit_constructor",
    Match: "visit_match",
}


def _method_name(cls: type) -> str:
    name = _DISPATCH.get(cls)
    if name is None:
        for base in cls.__mro__[1:]:
            if base in _DISPATCH:
                name = _DISPATCH[cls] = _DISPATCH[base]
                break
        else:
            raise VisitorError(f"no visitor method for node type {cls.__name__}")
    return name


def _describe(node: Any) -> str:
    try:
        text = repr(node)
    except Exception:  # a broken node must not hide the original error
        text = object.__repr__(node)
    if len(text) > 300:
        text = text[:300] + " ..."
    return f"{type(node).__name__}: {text}"


class ExprFunctor:
    """Dispatch ``visit(expr)`` to ``visit_<kind>(expr)``; results are memoized per node.

    Example
    -------
    >>> from kiln import relay
    >>> class CountVars(ExprVisitor):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.count = 0
    ...     def visit_var(self, var):
    ...         self.count += 1
    >>> x = relay.var("x")
    >>> counter = CountVars()
    >>> counter.visit(relay.Tuple([x, x]))
    >>> counter.count
    1
    """

    def __init__(self) -> None:
        self.memo_map: dict[Any, Any] = {}

    def visit(self, expr: RelayExpr) -> Any:
        """Apply the method for ``expr``'s kind (once per node)."""
        memo = self.memo_map
        if expr in memo:
            return memo[expr]
        if not _base.deep_recursion_active():
            with deep_recursion():
                return self._dispatch(expr)
        return self._dispatch(expr)

    def _dispatch(self, expr: RelayExpr) -> Any:
        method = getattr(self, _method_name(type(expr)))
        try:
            result = method(expr)
        except (TVMError, RecursionError):
            raise
        except Exception as err:
            raise VisitorError(
                f"{type(err).__name__}: {err}\n  while visiting {_describe(expr)}") from err
        self.memo_map[expr] = result
        return result

    def _unhandled(self, expr: Any) -> Any:
        raise VisitorError(f"{type(self).__name__} does not handle {type(expr).__name__}")

    visit_function = visit_let = visit_call = visit_var = visit_if = _unhandled
    visit_tuple = visit_tuple_getitem = visit_global_var = visit_op = _unhandled
    visit_constant = visit_ref_create = visit_ref_read = visit_ref_write = _unhandled
    visit_constructor = visit_match = _unhandled

    def visit_type(self, ty: Any) -> Any:
        return ty

    def visit_pattern(self, pattern: Any) -> Any:
        return pattern

    def visit_clause(self, clause: Clause) -> Any:
        return clause


class ExprVisitor(ExprFunctor):
    """Visit every node of an expression once (override ``visit_<kind>`` to act on some)."""

    def visit_tuple(self, node: Tuple) -> None:
        for field in node.fields:
            self.visit(field)

    def visit_call(self, node: Call) -> None:
        self.visit(node.op)
        for arg in node.args:
            self.visit(arg)

    def visit_var(self, node: Var) -> None:
        pass

    def visit_let(self, node: Let) -> None:
        self.visit(node.var)
        self.visit(node.value)
        self.visit(node.body)

    def visit_function(self, node: Function) -> None:
        for param in node.params:
            self.visit(param)
        self.visit(node.body)

    def visit_if(self, node: If) -> None:
        self.visit(node.cond)
        self.visit(node.true_branch)
        self.visit(node.false_branch)

    def visit_global_var(self, node: GlobalVar) -> None:
        pass

    def visit_constructor(self, node: Constructor) -> None:
        pass

    def visit_constant(self, node: Constant) -> None:
        pass

    def visit_op(self, node: Op) -> None:
        pass

    def visit_tuple_getitem(self, node: TupleGetItem) -> None:
        self.visit(node.tuple_value)

    def visit_ref_create(self, node: RefCreate) -> None:
        self.visit(node.value)

    def visit_ref_read(self, node: RefRead) -> None:
        self.visit(node.ref)

    def visit_ref_write(self, node: RefWrite) -> None:
        self.visit(node.ref)
        self.visit(node.value)

    def visit_match(self, node: Match) -> None:
        self.visit(node.data)
        for clause in node.clauses:
            self.visit_clause(clause)

    def visit_clause(self, clause: Clause) -> None:
        self.visit_pattern(clause.lhs)
        self.visit(clause.rhs)

    def visit_pattern(self, pattern: Any) -> None:
        if isinstance(pattern, PatternVar):
            self.visit(pattern.var)
        elif isinstance(pattern, PatternConstructor | PatternTuple):
            for sub in pattern.patterns:
                self.visit_pattern(sub)


def _same(new: list, old: tuple) -> bool:
    return all(a is b for a, b in zip(new, old))


class ExprMutator(ExprFunctor):
    """Rebuild an expression bottom-up; nodes whose children did not change are kept as is.

    Example
    -------
    >>> from kiln import relay
    >>> x, y = relay.var("x"), relay.var("y")
    >>> class Swap(ExprMutator):
    ...     def visit_var(self, var):
    ...         return y if var is x else var
    >>> Swap().visit(relay.Tuple([x])).fields[0] is y
    True
    """

    def visit_function(self, node: Function) -> RelayExpr:
        params = [self.visit(p) for p in node.params]
        body = self.visit(node.body)
        if body is node.body and _same(params, node.params):
            return node
        return Function(params, body, node.ret_type, node.type_params, node.attrs, node.span)

    def visit_let(self, node: Let) -> RelayExpr:
        var = self.visit(node.var)
        value = self.visit(node.value)
        body = self.visit(node.body)
        if var is node.var and value is node.value and body is node.body:
            return node
        return Let(var, value, body, node.span)

    def visit_call(self, node: Call) -> RelayExpr:
        op = self.visit(node.op)
        args = [self.visit(a) for a in node.args]
        if op is node.op and _same(args, node.args):
            return node
        return Call(op, args, node.attrs, node.type_args, node.span)

    def visit_var(self, node: Var) -> RelayExpr:
        return node

    def visit_global_var(self, node: GlobalVar) -> RelayExpr:
        return node

    def visit_op(self, node: Op) -> RelayExpr:
        return node

    def visit_constant(self, node: Constant) -> RelayExpr:
        return node

    def visit_constructor(self, node: Constructor) -> RelayExpr:
        return node

    def visit_if(self, node: If) -> RelayExpr:
        cond = self.visit(node.cond)
        then = self.visit(node.true_branch)
        other = self.visit(node.false_branch)
        if cond is node.cond and then is node.true_branch and other is node.false_branch:
            return node
        return If(cond, then, other, node.span)

    def visit_tuple(self, node: Tuple) -> RelayExpr:
        fields = [self.visit(f) for f in node.fields]
        if _same(fields, node.fields):
            return node
        return Tuple(fields, node.span)

    def visit_tuple_getitem(self, node: TupleGetItem) -> RelayExpr:
        value = self.visit(node.tuple_value)
        if value is node.tuple_value:
            return node
        return TupleGetItem(value, node.index, node.span)

    def visit_ref_create(self, node: RefCreate) -> RelayExpr:
        value = self.visit(node.value)
        return node if value is node.value else RefCreate(value, node.span)

    def visit_ref_read(self, node: RefRead) -> RelayExpr:
        ref = self.visit(node.ref)
        return node if ref is node.ref else RefRead(ref, node.span)

    def visit_ref_write(self, node: RefWrite) -> RelayExpr:
        ref = self.visit(node.ref)
        value = self.visit(node.value)
        if ref is node.ref and value is node.value:
            return node
        return RefWrite(ref, value, node.span)

    def visit_match(self, node: Match) -> RelayExpr:
        data = self.visit(node.data)
        clauses = [self.visit_clause(c) for c in node.clauses]
        if data is node.data and _same(clauses, node.clauses):
            return node
        return Match(data, clauses, node.complete, node.span)

    def visit_clause(self, clause: Clause) -> Clause:
        lhs = self.visit_pattern(clause.lhs)
        rhs = self.visit(clause.rhs)
        if lhs is clause.lhs and rhs is clause.rhs:
            return clause
        return Clause(lhs, rhs)

    def visit_pattern(self, pattern: Any) -> Any:
        if isinstance(pattern, PatternVar):
            var = self.visit(pattern.var)
            return pattern if var is pattern.var else PatternVar(var)
        if isinstance(pattern, PatternConstructor):
            subs = [self.visit_pattern(p) for p in pattern.patterns]
            if _same(subs, pattern.patterns):
                return pattern
            return PatternConstructor(pattern.constructor, subs)
        if isinstance(pattern, PatternTuple):
            subs = [self.visit_pattern(p) for p in pattern.patterns]
            return pattern if _same(subs, pattern.patterns) else PatternTuple(subs)
        return pattern


def _pattern_vars(pattern: Any, out: list) -> None:
    if isinstance(pattern, PatternVar):
        out.append(pattern.var)
    elif isinstance(pattern, PatternConstructor | PatternTuple):
        for sub in pattern.patterns:
            _pattern_vars(sub, out)
    elif not isinstance(pattern, PatternWildcard):
        raise VisitorError(f"unknown pattern {pattern!r}")


def children_of(node: Any) -> list:
    """The sub-expressions of ``node`` in evaluation order (pattern vars of a Match included)."""
    if isinstance(node, Call):
        return [node.op, *node.args]
    if isinstance(node, Tuple):
        return list(node.fields)
    if isinstance(node, TupleGetItem):
        return [node.tuple_value]
    if isinstance(node, Let):
        return [node.var, node.value, node.body]
    if isinstance(node, Function):
        return [*node.params, node.body]
    if isinstance(node, If):
        return [node.cond, node.true_branch, node.false_branch]
    if isinstance(node, RefCreate):
        return [node.value]
    if isinstance(node, RefRead):
        return [node.ref]
    if isinstance(node, RefWrite):
        return [node.ref, node.value]
    if isinstance(node, Match):
        out = [node.data]
        for clause in node.clauses:
            _pattern_vars(clause.lhs, out)
            out.append(clause.rhs)
        return out
    return []


def post_order_visit(expr: RelayExpr, fvisit: Callable[[Any], None]) -> None:
    """Call ``fvisit`` on every node reachable from ``expr`` once, children before parents.

    Iterative, so any depth works.

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x")
    >>> seen = []
    >>> post_order_visit(relay.Tuple([x, x]), lambda n: seen.append(type(n).__name__))
    >>> seen
    ['Var', 'Tuple']
    """
    visited: set[int] = set()
    stack: list[tuple[Any, bool]] = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            fvisit(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        for child in reversed(children_of(node)):
            if id(child) not in visited:
                stack.append((child, False))
