"""Inlining of global functions marked ``Inline=1`` (TVM's ``relay.transform.Inline``).

Entry point: :func:`Inline`.

A call ``@g(args)`` of a global function ``g`` with attribute ``Inline=1`` is replaced by
``g``'s body with its parameters bound to the arguments (bound variables of the body are
renamed, so a function inlined twice stays well formed). Functions that call themselves,
directly or through other functions, are never inlined. A function marked ``Inline`` that is
no longer referenced afterwards is removed from the module.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.expr import GlobalVar
from kiln.relay.expr import Call, Function
from kiln.relay.expr_functor import ExprMutator, post_order_visit
from kiln.relay.transform.pass_util import fresh_copy, infer, relay_module_pass

__all__ = ["Inline"]


def _callees(func: Function) -> set[str]:
    found: set[str] = set()
    post_order_visit(func, lambda n: isinstance(n, GlobalVar) and found.add(n.name_hint))
    return found


def _recursive_names(mod: Any) -> set[str]:
    """Names of global functions that can reach themselves through calls."""
    graph = {gv.name_hint: _callees(f) for gv, f in mod.functions.items()
             if isinstance(f, Function)}
    recursive = set()
    for start in graph:
        stack, seen = list(graph[start]), set()
        while stack:
            name = stack.pop()
            if name == start:
                recursive.add(start)
                break
            if name in seen or name not in graph:
                continue
            seen.add(name)
            stack.extend(graph[name])
    return recursive


class _Inliner(ExprMutator):
    def __init__(self, mod: Any, inlinable: set[str]) -> None:
        super().__init__()
        self.mod = mod
        self.inlinable = inlinable

    def visit_call(self, node: Call) -> Any:
        new = super().visit_call(node)
        op = new.op
        if not isinstance(op, GlobalVar) or op.name_hint not in self.inlinable:
            return new
        callee = self.mod[op.name_hint]
        if len(callee.params) != len(new.args):
            return new
        body = _Inliner(self.mod, self.inlinable).visit(callee.body)  # callee's own calls
        return fresh_copy(body, dict(zip(callee.params, new.args)))


def inline(mod: Any) -> Any:
    """A copy of ``mod`` with calls of ``Inline=1`` functions replaced by their bodies."""
    recursive = _recursive_names(mod)
    inlinable = {gv.name_hint for gv, f in mod.functions.items()
                 if isinstance(f, Function) and f.get_attr("Inline") and
                 not f.get_attr("Primitive") and gv.name_hint not in recursive}
    result = mod.copy()
    inliner = _Inliner(mod, inlinable)
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, Function) and gvar.name_hint not in inlinable:
            result[gvar] = inliner.visit(func)
    still_used: set[str] = set()
    for gvar, func in result.functions.items():
        if isinstance(func, Function) and gvar.name_hint not in inlinable:
            still_used |= _callees(func)
    for name in inlinable - still_used:
        result.remove(name)
    return infer(result)


def Inline():  # noqa: N802 (TVM's name)
    """The pass inlining global functions marked ``Inline=1`` into their callers.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> mod = kiln.IRModule()
    >>> mod["double"] = relay.Function([x], x + x).with_attr("Inline", 1)
    >>> y = relay.var("y", shape=(2,))
    >>> mod["main"] = relay.Function([y], mod.get_global_var("double")(y))
    >>> mod = Inline()(mod)
    >>> len(mod.functions), mod["main"].body.op.name
    (1, 'add')
    """
    return relay_module_pass("Inline", 1, lambda mod, ctx: inline(mod))
