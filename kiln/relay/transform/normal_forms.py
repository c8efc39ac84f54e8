"""Normal forms (TVM's ``ToANormalForm``, ``ToGraphNormalForm``, ``ToBasicBlockNormalForm``).

Entry points: the passes :func:`ToANormalForm`, :func:`ToGraphNormalForm`,
:func:`ToBasicBlockNormalForm`, and the expression rewrites :func:`to_a_normal_form`
(``ToANormalFormExpr``), :func:`to_graph_normal_form`.

A-normal form: every compound sub-expression (call, tuple, field access, reference op, ``if``,
``match``, constant, function literal) is bound by a ``let`` and used through its variable;
variables, global variables, operators and constructors stay atomic. A node shared by several
uses is bound once, in the scope that first needs it; a later use from a scope that cannot see
that binding (another ``if`` branch, say) evaluates it again there, so no computation is
hoisted out of a branch. A primitive (fused) function called directly stays the call's callee.

Graph normal form: the inverse — every ``let`` whose variable is not used recursively in its
own value is inlined, so sharing is by reference (a dataflow graph).

Basic-block normal form: a function without control flow is already one basic block and is
left as is; a function with ``if``/``match`` is put in A-normal form, so every value a branch
uses is bound in a scope that dominates it.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.adt import Constructor
from kiln.ir.expr import GlobalVar
from kiln.ir.op import Op
from kiln.relay.adt import Clause, Match
from kiln.relay.base import deep_recursion
from kiln.relay.expr import (
    Call,
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
from kiln.relay.expr_functor import ExprMutator, post_order_visit
from kiln.relay.transform.pass_util import relay_function_pass

__all__ = ["ToANormalForm", "ToANormalFormExpr", "ToGraphNormalForm",
           "ToBasicBlockNormalForm", "to_a_normal_form", "to_graph_normal_form"]

_ATOMS = (Var, GlobalVar, Op, Constructor)


class _Scope:
    """A block under construction: its let bindings, and the block it is nested in."""

    __slots__ = ("parent", "bindings")

    def __init__(self, parent: _Scope | None) -> None:
        self.parent = parent
        self.bindings: list[tuple[Var, Any]] = []

    def sees(self, other: _Scope) -> bool:
        """Whether bindings of ``other`` are visible here (``other`` encloses this scope)."""
        scope: _Scope | None = self
        while scope is not None:
            if scope is other:
                return True
            scope = scope.parent
        return False


class _ANormalizer:
    def __init__(self) -> None:
        self.bound: dict[Any, tuple[_Scope, Any]] = {}

    def block(self, expr: Any, parent: _Scope | None) -> Any:
        """``expr`` as a let chain of its own scope, ending in an atom."""
        scope = _Scope(parent)
        result = self.atom(expr, scope)
        for var, value in reversed(scope.bindings):
            result = Let(var, value, result)
        return result

    def atom(self, expr: Any, scope: _Scope) -> Any:
        if isinstance(expr, _ATOMS):
            return expr
        found = self.bound.get(expr)
        if found is not None and scope.sees(found[0]):
            return found[1]
        if isinstance(expr, Let):
            scope.bindings.append((expr.var, self.value(expr.value, scope)))
            result = self.atom(expr.body, scope)
        else:
            result = Var("x")
            scope.bindings.append((result, self.value(expr, scope)))
        self.bound[expr] = (scope, result)
        return result

    def value(self, expr: Any, scope: _Scope) -> Any:
        """``expr`` with its sub-expressions made atomic (bound in ``scope``)."""
        if isinstance(expr, _ATOMS):
            return expr
        rebuild = _REBUILDERS.get(type(expr))
        if rebuild is None:  # a constant: atomic inside, bound by the caller
            return expr
        return rebuild(self, expr, scope)

    def call(self, expr: Call, scope: _Scope) -> Any:
        op = expr.op
        if not (isinstance(op, Function) and op.get_attr("Primitive")):
            op = self.atom(op, scope)
        args = [self.atom(a, scope) for a in expr.args]
        return Call(op, args, expr.attrs, expr.type_args, expr.span)

    def function(self, expr: Function, scope: _Scope) -> Any:
        if expr.get_attr("Primitive"):
            return expr
        return Function(expr.params, self.block(expr.body, scope), expr.ret_type,
                        expr.type_params, expr.attrs, expr.span)

    def if_(self, expr: If, scope: _Scope) -> Any:
        return If(self.atom(expr.cond, scope), self.block(expr.true_branch, scope),
                  self.block(expr.false_branch, scope), expr.span)

    def match(self, expr: Match, scope: _Scope) -> Any:
        clauses = [Clause(c.lhs, self.block(c.rhs, scope)) for c in expr.clauses]
        return Match(self.atom(expr.data, scope), clauses, expr.complete, expr.span)

    def tuple_(self, expr: Tuple, scope: _Scope) -> Any:
        return Tuple([self.atom(f, scope) for f in expr.fields], expr.span)

    def getitem(self, expr: TupleGetItem, scope: _Scope) -> Any:
        return TupleGetItem(self.atom(expr.tuple_value, scope), expr.index, expr.span)

    def ref_create(self, expr: RefCreate, scope: _Scope) -> Any:
        return RefCreate(self.atom(expr.value, scope), expr.span)

    def ref_read(self, expr: RefRead, scope: _Scope) -> Any:
        return RefRead(self.atom(expr.ref, scope), expr.span)

    def ref_write(self, expr: RefWrite, scope: _Scope) -> Any:
        return RefWrite(self.atom(expr.ref, scope), self.atom(expr.value, scope), expr.span)


_REBUILDERS = {
    Call: _ANormalizer.call, Function: _ANormalizer.function, If: _ANormalizer.if_,
    Match: _ANormalizer.match, Tuple: _ANormalizer.tuple_, TupleGetItem: _ANormalizer.getitem,
    RefCreate: _ANormalizer.ref_create, RefRead: _ANormalizer.ref_read,
    RefWrite: _ANormalizer.ref_write,
}


def to_a_normal_form(expr: Any) -> Any:
    """``expr`` in A-normal form (a function keeps its parameters; its body is a let chain).

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x")
    >>> anf = to_a_normal_form(relay.Function([x], relay.exp(relay.exp(x))))
    >>> type(anf.body).__name__, anf.body.value.op.name
    ('Let', 'exp')
    """
    with deep_recursion():
        if isinstance(expr, Function):
            return _ANormalizer().function(expr, None)
        return _ANormalizer().block(expr, None)


def ToANormalFormExpr(expr: Any) -> Any:  # noqa: N802 (TVM's name)
    """TVM's name for :func:`to_a_normal_form`."""
    return to_a_normal_form(expr)


def ToANormalForm():  # noqa: N802 (TVM's name)
    """The pass putting every function in A-normal form.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> mod = ToANormalForm()(kiln.IRModule.from_expr(relay.exp(relay.exp(x))))
    >>> type(mod["main"].body).__name__
    'Let'
    """
    return relay_function_pass("ToANormalForm", 1,
                               lambda func, mod, ctx: to_a_normal_form(func),
                               skip_primitive=True)


class _GraphNormalizer(ExprMutator):
    def visit_let(self, node: Let) -> Any:
        recursive = _uses(node.value, node.var)  # the original value: small, not inlined
        value = self.visit(node.value)
        if recursive:  # a recursive binding must stay a let
            return Let(node.var, value, self.visit(node.body), node.span)
        self.memo_map[node.var] = value
        return self.visit(node.body)

    def visit_function(self, node: Function) -> Any:
        return node if node.get_attr("Primitive") else super().visit_function(node)


def _uses(expr: Any, var: Var) -> bool:
    found = []
    post_order_visit(expr, lambda n: n is var and found.append(n))
    return bool(found)


def to_graph_normal_form(expr: Any) -> Any:
    """``expr`` with its non-recursive let bindings inlined (sharing by reference).

    Example
    -------
    >>> from kiln import relay
    >>> x, v = relay.var("x"), relay.var("v")
    >>> g = to_graph_normal_form(relay.Let(v, relay.exp(x), relay.add(v, v)))
    >>> g.args[0] is g.args[1]
    True
    """
    return _GraphNormalizer().visit(expr)


def ToGraphNormalForm():  # noqa: N802 (TVM's name)
    """The pass inlining let bindings into a dataflow graph (see the module docstring)."""
    return relay_function_pass("ToGraphNormalForm", 1,
                               lambda func, mod, ctx: to_graph_normal_form(func),
                               skip_primitive=True)


def _has_control_flow(func: Function) -> bool:
    found = []
    post_order_visit(func.body, lambda n: isinstance(n, If | Match) and found.append(n))
    return bool(found)


def to_basic_block_normal_form(func: Function) -> Function:
    """``func`` unchanged when it has no control flow, else in A-normal form."""
    return to_a_normal_form(func) if _has_control_flow(func) else func


def ToBasicBlockNormalForm():  # noqa: N802 (TVM's name)
    """The pass putting functions with control flow in basic-block normal form.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> mod = kiln.IRModule.from_expr(relay.exp(x))
    >>> ToBasicBlockNormalForm()(mod)["main"].body.op.name
    'exp'
    """
    return relay_function_pass("ToBasicBlockNormalForm", 1,
                               lambda func, mod, ctx: to_basic_block_normal_form(func),
                               skip_primitive=True)
