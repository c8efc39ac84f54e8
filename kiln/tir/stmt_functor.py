"""Visitors and rewriters over TIR (TVM's ``tvm.tir.stmt_functor``).

Entry points: :class:`StmtExprVisitor`, :class:`StmtExprMutator` (one ``visit_<Class>``
method per node kind, a reflective ``generic_visit`` for the rest), :func:`post_order_visit`,
:func:`pre_order_visit`, :func:`substitute`, :func:`ir_transform`, :func:`stmt_vars`.

Children are found by reflection over ``_fields``: PrimExpr and Stmt fields, lists of them and
Ranges are visited; Buffers, IterVars and other objects are left alone (a pass that rewrites
buffers does so explicitly).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.ir.expr import PrimExpr, Range
from kiln.runtime.object import Object, fields_of
from kiln.tir import expr as _e
from kiln.tir.stmt import Stmt

__all__ = ["StmtExprVisitor", "StmtExprMutator", "ExprVisitor", "ExprMutator",
           "post_order_visit", "pre_order_visit", "substitute", "ir_transform", "stmt_vars"]

_SKIPPED_FIELDS = frozenset({"dtype", "span"})

# Node classes whose dtype follows from their operands: rebuilt through their constructor.
_DERIVED_DTYPE = (_e.BinaryOpExpr, _e.Not, _e.Select, _e.BufferLoad, _e.ProducerLoad, _e.Ramp,
                  _e.Broadcast, _e.Let, _e.Shuffle, _e.Reduce)


def _own_fields(node: Object) -> list[str]:
    return [name for name in fields_of(node) if name not in _SKIPPED_FIELDS]


def rebuild(node: Object, values: dict[str, Any]) -> Object:
    """A copy of ``node`` with some fields replaced (dtype re-derived where it depends)."""
    if isinstance(node, _DERIVED_DTYPE) and not isinstance(node, _e.IterVar):
        args = [values.get(name, getattr(node, name)) for name in _own_fields(node)]
        return type(node)(*args)
    new = type(node).__new__(type(node))
    for name in fields_of(node):
        object.__setattr__(new, name, values.get(name, getattr(node, name, None)))
    for name in getattr(type(node), "_extra_slots", ()):
        if hasattr(node, name):
            object.__setattr__(new, name, getattr(node, name))
    return new


class StmtExprVisitor:
    """Walks statements and expressions; override ``visit_<ClassName>`` to act on a kind."""

    def __init__(self) -> None:
        self._dispatch: dict[type, Callable] = {}

    def visit(self, node: Any) -> None:
        method = self._dispatch.get(type(node))
        if method is None:
            method = getattr(self, "visit_" + type(node).__name__, self.generic_visit)
            self._dispatch[type(node)] = method
        method(node)

    def generic_visit(self, node: Any) -> None:
        for name in _own_fields(node):
            self._visit_value(getattr(node, name, None))

    def _visit_value(self, value: Any) -> None:
        if isinstance(value, PrimExpr | Stmt):
            if not isinstance(value, _e.IterVar):
                self.visit(value)
        elif isinstance(value, list | tuple):
            for item in value:
                self._visit_value(item)
        elif isinstance(value, Range):
            self.visit(value.min)
            self.visit(value.extent)


class StmtExprMutator:
    """Rebuilds statements and expressions bottom-up; unchanged subtrees are shared."""

    def __init__(self) -> None:
        self._dispatch: dict[type, Callable] = {}

    def visit(self, node: Any) -> Any:
        method = self._dispatch.get(type(node))
        if method is None:
            method = getattr(self, "visit_" + type(node).__name__, self.generic_visit)
            self._dispatch[type(node)] = method
        return method(node)

    def generic_visit(self, node: Any) -> Any:
        changed: dict[str, Any] = {}
        for name in _own_fields(node):
            value = getattr(node, name, None)
            new = self._visit_value(value)
            if new is not value:
                changed[name] = new
        return rebuild(node, changed) if changed else node

    def _visit_value(self, value: Any) -> Any:
        if isinstance(value, PrimExpr | Stmt):
            return value if isinstance(value, _e.IterVar) else self.visit(value)
        if isinstance(value, list | tuple):
            new = [self._visit_value(item) for item in value]
            if all(a is b for a, b in zip(new, value)):
                return value
            return new
        if isinstance(value, Range):
            lo, ext = self.visit(value.min), self.visit(value.extent)
            if lo is value.min and ext is value.extent:
                return value
            return Range.from_min_extent(lo, ext)
        return value


ExprVisitor = StmtExprVisitor
ExprMutator = StmtExprMutator


class _OrderVisitor(StmtExprVisitor):
    def __init__(self, fvisit: Callable, post: bool) -> None:
        super().__init__()
        self.fvisit, self.post = fvisit, post

    def visit(self, node: Any) -> None:
        if not self.post:
            if self.fvisit(node) is False:
                return
            super().visit(node)
            return
        super().visit(node)
        self.fvisit(node)


def post_order_visit(node: Any, fvisit: Callable[[Any], None]) -> None:
    """Call ``fvisit`` on every node, children first.

    Example
    -------
    >>> from kiln import tir
    >>> x = tir.Var("x", "int32")
    >>> seen = []
    >>> tir.post_order_visit(x * 2 + 1, lambda n: seen.append(type(n).__name__))
    >>> seen
    ['Var', 'IntImm', 'Mul', 'IntImm', 'Add']
    """
    _OrderVisitor(fvisit, post=True).visit(node)


def pre_order_visit(node: Any, fvisit: Callable[[Any], bool | None]) -> None:
    """Call ``fvisit`` on every node, parents first; returning False skips the children."""
    _OrderVisitor(fvisit, post=False).visit(node)


class _Substituter(StmtExprMutator):
    def __init__(self, vmap: dict) -> None:
        super().__init__()
        from kiln.tir.op import convert_expr

        self.vmap = {id(k): convert_expr(v) for k, v in vmap.items()}

    def visit_Var(self, node: _e.Var) -> PrimExpr:
        return self.vmap.get(id(node), node)

    visit_SizeVar = visit_Var


def substitute(node: Any, vmap: dict) -> Any:
    """Replace variables by expressions (``vmap`` maps Var -> value).

    Example
    -------
    >>> from kiln import tir
    >>> x = tir.Var("x", "int32")
    >>> tir.substitute(x + 1, {x: 41})
    42
    """
    if not vmap:
        return node
    mutator = _Substituter(vmap)
    if isinstance(node, list | tuple):
        return [mutator.visit(n) for n in node]
    result = mutator.visit(node)
    return _refold(result)


def _refold(node: Any) -> Any:
    """Fold immediates that substitution exposed (``41 + 1`` becomes ``42``)."""
    if isinstance(node, _e.Add | _e.Sub | _e.Mul) and isinstance(node.a, _e.IntImm) and \
            isinstance(node.b, _e.IntImm):
        from kiln.tir import op

        fold = {_e.Add: op.add, _e.Sub: op.subtract, _e.Mul: op.multiply}[type(node)]
        return fold(node.a, node.b)
    return node


class _Transformer(StmtExprMutator):
    def __init__(self, preorder, postorder, only_enable) -> None:
        super().__init__()
        self.preorder, self.postorder = preorder, postorder
        self.only = tuple(only_enable) if only_enable else None

    def _enabled(self, node: Any) -> bool:
        if self.only is None:
            return True
        return any(type(node).__name__ == name or type(node).__name__ == name.split(".")[-1]
                   for name in self.only)

    def visit(self, node: Any) -> Any:
        if self.preorder is not None and self._enabled(node):
            replaced = self.preorder(node)
            if replaced is not None:
                return replaced
        node = super().visit(node)
        if self.postorder is not None and self._enabled(node):
            replaced = self.postorder(node)
            if replaced is not None:
                return replaced
        return node


def ir_transform(stmt: Any, preorder: Callable | None, postorder: Callable | None,
                 only_enable=None) -> Any:
    """Rewrite ``stmt``: ``preorder(node)`` may replace a node before its children are visited,
    ``postorder(node)`` after; returning None keeps the node. ``only_enable`` limits both to
    the listed node kinds (``["tir.For"]``)."""
    return _Transformer(preorder, postorder, only_enable).visit(stmt)


def stmt_vars(node: Any) -> list[_e.Var]:
    """Variables used in ``node``, in first-use order, without duplicates."""
    seen: dict[int, _e.Var] = {}

    def visit(n):
        if isinstance(n, _e.Var) and id(n) not in seen:
            seen[id(n)] = n

    post_order_visit(node, visit)
    return list(seen.values())
