"""Dead code elimination (TVM's ``relay.transform.DeadCodeElimination``).

Entry points: :func:`DeadCodeElimination` (the pass), :func:`eliminate_dead_code` (one
expression) and :func:`is_pure` (the purity test it uses).

A ``let`` binding whose variable is never used is dropped when its value is pure (or when
``ignore_impurity``). With ``inline_once`` a pure binding used exactly once is substituted at
its use. A let chain is processed from its body backwards, so a binding used only by dead
bindings dies too, in one pass.

Purity: a value is impure when, outside the bodies of the functions it defines, it calls a
stateful operator (``TOpIsStateful``), creates, reads or writes a reference, or calls a
function literal whose body is impure.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kiln.ir.op import Op
from kiln.relay.expr import Call, Function, Let, RefCreate, RefRead, RefWrite, Var
from kiln.relay.expr_functor import ExprMutator, children_of
from kiln.relay.transform.pass_util import relay_function_pass

__all__ = ["DeadCodeElimination", "eliminate_dead_code", "is_pure"]


def is_pure(expr: Any) -> bool:
    """Whether evaluating ``expr`` can have no side effect (see the module docstring).

    Example
    -------
    >>> from kiln import relay
    >>> is_pure(relay.exp(relay.var("x"))), is_pure(relay.RefCreate(relay.const(1)))
    (True, False)
    """
    seen: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, RefCreate | RefRead | RefWrite):
            return False
        if isinstance(node, Call):
            if isinstance(node.op, Op) and node.op.get_attr("TOpIsStateful"):
                return False
            if isinstance(node.op, Function):
                stack.append(node.op.body)
            stack.extend(node.args)
            continue
        if isinstance(node, Function):
            continue  # defining a function does nothing; calling it is checked at the call
        stack.extend(children_of(node))
    return True


def _count_uses(expr: Any, counts: Counter) -> None:
    """Add the number of syntactic uses of each variable in ``expr`` (shared nodes once)."""
    seen: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for child in children_of(node):
            if isinstance(child, Var):
                counts[child] += 1
            else:
                stack.append(child)
        if isinstance(node, Let | Function):
            binders = [node.var] if isinstance(node, Let) else list(node.params)
            for var in binders:  # a binding occurrence is not a use
                counts[var] -= 1


class _DeadCodeEliminator(ExprMutator):
    def __init__(self, inline_once: bool, ignore_impurity: bool) -> None:
        super().__init__()
        self.inline_once = inline_once
        self.ignore_impurity = ignore_impurity
        self.inlined: dict[Var, Any] = {}

    def visit_var(self, node: Var) -> Any:
        return self.inlined.get(node, node)

    def visit_let(self, node: Let) -> Any:
        bindings = []
        body = node
        while isinstance(body, Let):
            bindings.append(body)
            body = body.body
        # Decide liveness backwards over the chain, then rebuild forwards (values before the
        # body, so an inlined variable is known before its use is visited).
        new_values = {}
        original_uses: Counter = Counter()
        _count_uses(body, original_uses)
        live = []
        for binding in reversed(bindings):
            pure = self.ignore_impurity or is_pure(binding.value)
            count = original_uses[binding.var]
            if count == 0 and pure:
                continue
            inline = self.inline_once and count == 1 and pure and \
                binding.var not in _free_uses(binding.value)
            live.append((binding, inline))
            _count_uses(binding.value, original_uses)
        for binding, inline in reversed(live):
            value = self.visit(binding.value)
            if inline:
                self.inlined[binding.var] = value
            else:
                new_values[binding] = value
        new_body = self.visit(body)
        for binding, inline in live:
            if not inline:
                new_body = Let(binding.var, new_values[binding], new_body, binding.span)
        return new_body


def _free_uses(expr: Any) -> Counter:
    counts: Counter = Counter()
    _count_uses(expr, counts)
    return +counts


def eliminate_dead_code(expr: Any, inline_once: bool = False,
                        ignore_impurity: bool = False) -> Any:
    """Drop unused pure let bindings of ``expr`` (and inline single-use ones if asked).

    Example
    -------
    >>> from kiln import relay
    >>> x, y = relay.var("x"), relay.var("y")
    >>> eliminate_dead_code(relay.Let(y, relay.exp(x), x)) is x
    True
    """
    return _DeadCodeEliminator(inline_once, ignore_impurity).visit(expr)


def DeadCodeElimination(inline_once: bool = False,  # noqa: N802 (TVM's name)
                        ignore_impurity: bool = False):
    """The pass removing unused let bindings from every function.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x, y = relay.var("x", shape=(2,)), relay.var("y")
    >>> mod = kiln.IRModule.from_expr(relay.Function([x], relay.Let(y, relay.exp(x), x)))
    >>> DeadCodeElimination()(mod)["main"].body is x
    True
    """

    def rewrite(func: Function, mod: Any, ctx: Any) -> Function:
        return eliminate_dead_code(func, inline_once, ignore_impurity)

    return relay_function_pass("DeadCodeElimination", 1, rewrite)
