"""Visitors and rewriters over TIR (TVM's ``tvm.tir.stmt_functor``).

Entry points: :class:`StmtExprVisitor`, :class:`StmtExprMutator` (one ``visit_<Class>``
method per node kind, a reflective ``generic_visit`` for the rest), :func:`post_order_visit`,
:func:`pre_order_visit`, :func:`substitute`, :func:`ir_transform`, :func:`stmt_vars`.

Children are found by reflection over ``_fields``: PrimExpr and Stmt fields, lists of them and
Ranges are visited; Buffers, IterVars and other objects are left alone (a pass that rewrites
buffers does so explicitly).

Expressions may share sub-expressions (a DAG: ``x1 = x0 + x0; x2 = x1 * x1; ...`` has 2**n
paths but n nodes). Every walker here is linear in the distinct nodes: the visitor and the
mutator visit each distinct node of one expression once (the mutator returning the same new
node for every use, so sharing survives), and post/pre-order visits, like TVM's, call the
function once per distinct node of the whole walk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.ir.expr import PrimExpr, Range
from kiln.runtime.error import TVMError
from kiln.runtime.object import Object, fields_of
from kiln.tir import expr as _e
from kiln.tir.stmt import Stmt

__all__ = ["StmtExprVisitor", "StmtExprMutator", "ExprVisitor", "ExprMutator",
           "post_order_visit", "pre_order_visit", "substitute", "ir_transform", "stmt_vars",
           "child_nodes"]

_SKIPPED_FIELDS = frozenset({"dtype", "span"})
_NODES = (PrimExpr, Stmt)  # what the walkers descend into (a tuple: isinstance's fast path)

# Node classes whose dtype follows from their operands: rebuilt through their constructor.
_DERIVED_DTYPE = (_e.BinaryOpExpr, _e.Not, _e.Select, _e.BufferLoad, _e.ProducerLoad, _e.Ramp,
                  _e.Broadcast, _e.Let, _e.Shuffle, _e.Reduce)


_OWN_FIELDS: dict[type, tuple[str, ...]] = {}  # node class -> its walked field names


def _own_fields(node: Object) -> tuple[str, ...]:
    names = _OWN_FIELDS.get(type(node))
    if names is None:
        if not isinstance(node, Object):
            raise TVMError(f"cannot walk {node!r} (a {type(node).__name__}): expected a TIR "
                           "expression, statement or other IR object")
        names = tuple(name for name in fields_of(node) if name not in _SKIPPED_FIELDS)
        _OWN_FIELDS[type(node)] = names
    return names


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


def child_nodes(node: Any) -> list[Any]:
    """The expressions and statements the walkers descend into from ``node``, in field
    order (lists and Ranges opened; IterVars, Buffers and other objects left alone).

    Example
    -------
    >>> from kiln import tir
    >>> x = tir.Var("x", "int32")
    >>> [type(c).__name__ for c in child_nodes(x * 2 + 1)]
    ['Mul', 'IntImm']
    """
    out: list[Any] = []
    for name in _own_fields(node):
        _collect(getattr(node, name, None), out)
    return out


def _collect(value: Any, out: list[Any]) -> None:
    if isinstance(value, _NODES):
        if not isinstance(value, _e.IterVar):
            out.append(value)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, out)
    elif isinstance(value, Range):
        out += (value.min, value.extent)


class StmtExprVisitor:
    """Walks statements and expressions; override ``visit_<ClassName>`` to act on a kind.

    Expressions are DAGs (lowering reuses an index or a clamped coordinate in several
    places), so within one expression -- from where a statement, or a caller, enters it --
    each distinct sub-expression object is visited once; walking it as a tree would take
    time exponential in its depth. Statements are visited at every occurrence, and leaving
    an expression forgets what it saw: a statement-level context (the enclosing loop, a
    buffer's realize scope) never carries over to another statement.

    Example
    -------
    >>> from kiln import tir
    >>> class CountAdds(tir.StmtExprVisitor):
    ...     adds = 0
    ...     def visit_Add(self, node):
    ...         self.adds += 1
    ...         self.generic_visit(node)
    >>> x = tir.Var("x", "int32")
    >>> y = x + 1
    >>> counter = CountAdds()
    >>> counter.visit(y * y + 2)  # y is one node used twice
    >>> counter.adds
    2
    """

    def __init__(self) -> None:
        self._dispatch: dict[type, Callable] = {}
        # id -> node of the expressions visited in the current expression (None outside one)
        self._expr_seen: dict[int, PrimExpr] | None = None

    def visit(self, node: Any) -> None:
        if not isinstance(node, PrimExpr):
            self._method(node)(node)
            return
        seen = self._expr_seen
        if seen is None:
            self._expr_seen = {id(node): node}
            try:
                self._method(node)(node)
            finally:
                self._expr_seen = None
        elif id(node) not in seen:
            seen[id(node)] = node
            (self._dispatch.get(type(node)) or self._method(node))(node)

    def _method(self, node: Any) -> Callable:
        method = self._dispatch.get(type(node))
        if method is None:
            method = getattr(self, "visit_" + type(node).__name__, self.generic_visit)
            self._dispatch[type(node)] = method
        return method

    def generic_visit(self, node: Any) -> None:
        for name in _own_fields(node):
            value = getattr(node, name, None)
            if isinstance(value, _NODES):  # most fields: checked here, not in a call
                if not isinstance(value, _e.IterVar):
                    self.visit(value)
            elif value is not None:
                self._visit_value(value)

    def _visit_value(self, value: Any) -> None:
        if isinstance(value, _NODES):
            if not isinstance(value, _e.IterVar):
                self.visit(value)
        elif isinstance(value, list | tuple):
            for item in value:
                self._visit_value(item)
        elif isinstance(value, Range):
            self.visit(value.min)
            self.visit(value.extent)


class StmtExprMutator:
    """Rebuilds statements and expressions bottom-up; unchanged subtrees are shared.

    Within one expression (as for :class:`StmtExprVisitor`) each distinct sub-expression is
    rewritten once and every use of it gets the same new node, so the sharing of a DAG
    survives the rewrite and the work is linear in its distinct nodes.

    Example
    -------
    >>> from kiln import tir
    >>> class Double(tir.StmtExprMutator):
    ...     def visit_Var(self, node):
    ...         return node * 2
    >>> x = tir.Var("x", "int32")
    >>> y = x + 1
    >>> out = Double().visit(y * y)
    >>> out.a is out.b
    True
    """

    def __init__(self) -> None:
        self._dispatch: dict[type, Callable] = {}
        # id(old) -> (old, new) in the current expression (None outside one); holding old
        # keeps its id from being reused by a node built during the rewrite
        self._expr_memo: dict[int, tuple[PrimExpr, Any]] | None = None

    def visit(self, node: Any) -> Any:
        if not isinstance(node, PrimExpr):
            return self._method(node)(node)
        memo = self._expr_memo
        if memo is None:  # entering an expression (a node never contains itself: no entry)
            self._expr_memo = {}
            try:
                return self._method(node)(node)
            finally:
                self._expr_memo = None
        done = memo.get(id(node))
        if done is not None:
            return done[1]
        # one frame per node here: deep expressions recurse through this method (the
        # dispatch table read inline: this line runs once per node of every rewrite)
        new = (self._dispatch.get(type(node)) or self._method(node))(node)
        memo[id(node)] = (node, new)
        return new

    _method = StmtExprVisitor._method

    def generic_visit(self, node: Any) -> Any:
        changed: dict[str, Any] | None = None
        for name in _own_fields(node):
            value = getattr(node, name, None)
            if isinstance(value, _NODES):  # most fields: checked here, not in a call
                new = value if isinstance(value, _e.IterVar) else self.visit(value)
            elif value is None:
                continue
            else:
                new = self._visit_value(value)
            if new is not value:
                if changed is None:
                    changed = {}
                changed[name] = new
        return node if changed is None else rebuild(node, changed)

    def _visit_value(self, value: Any) -> Any:
        if isinstance(value, _NODES):
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
    """Calls a function on each distinct node (expression or statement) once, like TVM's
    PostOrderVisit/PreOrderVisit: a node met again anywhere in the walk is skipped."""

    def __init__(self, fvisit: Callable, post: bool) -> None:
        super().__init__()
        self.fvisit, self.post = fvisit, post
        self.seen: dict[int, Any] = {}  # id -> node: holding the node keeps its id unique

    def visit(self, node: Any) -> None:
        if id(node) in self.seen:
            return
        self.seen[id(node)] = node
        if self.post:
            self.generic_visit(node)
            self.fvisit(node)
        elif self.fvisit(node) is not False:
            self.generic_visit(node)


def post_order_visit(node: Any, fvisit: Callable[[Any], None]) -> None:
    """Call ``fvisit`` once on every distinct node, children first.

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
    """Call ``fvisit`` once on every distinct node, parents first; returning False skips
    the children.

    Example
    -------
    >>> from kiln import tir
    >>> x = tir.Var("x", "int32")
    >>> kinds = []
    >>> tir.pre_order_visit((x + 1) * 3, lambda n: kinds.append(type(n).__name__))
    >>> kinds
    ['Mul', 'Add', 'Var', 'IntImm', 'IntImm']
    """
    _OrderVisitor(fvisit, post=False).visit(node)


class _Substituter(StmtExprMutator):
    def __init__(self, vmap: dict) -> None:
        super().__init__()
        from kiln.tir.op import convert_expr

        for var in vmap:
            if not isinstance(var, _e.Var):
                raise TVMError(f"substitute: the keys of vmap must be tir.Var, got {var!r} "
                               f"(a {type(var).__name__})")
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

    def generic_visit(self, node: Any) -> Any:
        # every kind comes here (no visit_<Class> methods), inside the base class's
        # per-expression memo: a shared expression meets the callbacks once
        if self.preorder is not None and self._enabled(node):
            replaced = self.preorder(node)
            if replaced is not None:
                return replaced
        node = super().generic_visit(node)
        if self.postorder is not None and self._enabled(node):
            replaced = self.postorder(node)
            if replaced is not None:
                return replaced
        return node


def ir_transform(stmt: Any, preorder: Callable | None, postorder: Callable | None,
                 only_enable=None) -> Any:
    """Rewrite ``stmt``: ``preorder(node)`` may replace a node before its children are visited,
    ``postorder(node)`` after; returning None keeps the node. ``only_enable`` limits both to
    the listed node kinds (``["tir.For"]``). Within one expression the callbacks see each
    distinct node once and a shared node's replacement is shared.

    Example
    -------
    >>> from kiln import tir
    >>> x = tir.Var("x", "int32")
    >>> y = x + 1
    >>> out = tir.ir_transform(y * y, None, lambda n: n.a - n.b, ["tir.Add"])
    >>> out.a is out.b, type(out.a).__name__
    (True, 'Sub')
    """
    return _Transformer(preorder, postorder, only_enable).visit(stmt)


def stmt_vars(node: Any) -> list[_e.Var]:
    """Variables used in ``node``, in first-use order, without duplicates."""
    seen: dict[int, _e.Var] = {}

    def visit(n):
        if isinstance(n, _e.Var) and id(n) not in seen:
            seen[id(n)] = n

    post_order_visit(node, visit)
    return list(seen.values())
