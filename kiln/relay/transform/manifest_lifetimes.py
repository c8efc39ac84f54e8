"""ManifestLifetimes: end each let-bound value's life right after its last use (``memory.kill``).

Entry points: :func:`ManifestLifetimes` (the pass) and :func:`manifest_lifetimes` (on one
function).

The input is in A-normal form. For every let chain ``let v1 = e1; …; let vn = en; body`` the
pass finds, for each ``vi`` bound in the chain, the last binding ``ej`` (j ≥ i) that mentions it
— anywhere inside ``ej``, including the branches of an ``if``/``match`` or a closure that
captures it — and inserts ``let _ = memory.kill(vi)`` right after that binding. A value the
chain's ``body`` mentions lives to the end and is not killed. Nested chains (if branches, match
clauses, closure bodies) are treated the same way, each on its own.

The VM compiler turns ``memory.kill(v)`` into ``KillRegister``: the register stops holding the
tensor, so its storage goes back to the allocator as soon as nothing else refers to it, and a
slot of the function's static arena becomes reusable (see :mod:`kiln.relay.vm.memory_alloc`).

Example
-------
>>> import kiln
>>> from kiln import relay
>>> x = relay.var("x", shape=(2,))
>>> a = relay.var("a"); b = relay.var("b")
>>> body = relay.Let(a, relay.add(x, x), relay.Let(b, relay.add(a, a), b))
>>> "memory.kill(%a)" in manifest_lifetimes(relay.Function([x], body)).astext()
True
"""

from __future__ import annotations

from typing import Any

from kiln.ir.op import Op
from kiln.ir.type import TupleType
from kiln.relay import expr as rx
from kiln.relay.adt import Match
from kiln.relay.expr_functor import children_of

__all__ = ["ManifestLifetimes", "manifest_lifetimes"]


def _is_kill(value: Any) -> bool:
    return isinstance(value, rx.Call) and isinstance(value.op, Op) \
        and value.op.name == "memory.kill"


def _mentioned_vars(expr: Any) -> set[int]:
    """ids of every Var occurring in ``expr`` (primitive function bodies excluded)."""
    found: set[int] = set()
    stack = [expr]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, rx.Var):
            found.add(id(node))
        elif isinstance(node, rx.Function) and node.get_attr("Primitive"):
            continue
        else:
            stack.extend(children_of(node))
    return found


def _kill(var: rx.Var) -> tuple[rx.Var, rx.Call]:
    from kiln.relay.op.annotation.annotation import kill

    return rx.var("_kill", TupleType([])), kill(var)


def _rewrite(expr: Any) -> Any:
    """``expr`` with kills inserted into every let chain inside it."""
    if isinstance(expr, rx.Let):
        return _rewrite_chain(expr)
    if isinstance(expr, rx.If):
        return rx.If(_rewrite(expr.cond), _rewrite(expr.true_branch),
                     _rewrite(expr.false_branch))
    if isinstance(expr, Match):
        from kiln.relay.adt import Clause

        return Match(expr.data, [Clause(c.lhs, _rewrite(c.rhs)) for c in expr.clauses],
                     expr.complete)
    if isinstance(expr, rx.Function) and not expr.get_attr("Primitive"):
        return rx.Function(expr.params, _rewrite(expr.body), expr.ret_type, expr.type_params,
                           expr.attrs)
    return expr


def _rewrite_chain(let: rx.Let) -> Any:
    bindings: list[tuple[rx.Var, Any]] = []
    node = let
    while isinstance(node, rx.Let):
        bindings.append((node.var, _rewrite(node.value)))
        node = node.body
    body = _rewrite(node)
    bound = {id(var): var for var, value in bindings if not _is_kill(value)}
    last_use: dict[int, int] = {}
    for index, (var, value) in enumerate(bindings):
        for used in _mentioned_vars(value) & bound.keys():
            last_use[used] = index
        if id(var) in bound:
            last_use.setdefault(id(var), index)  # never used: dies where it is born
    for used in _mentioned_vars(body):
        last_use.pop(used, None)
    kills_after: dict[int, list[rx.Var]] = {}
    for var_id, index in last_use.items():
        kills_after.setdefault(index, []).append(bound[var_id])
    result = body
    for index in range(len(bindings) - 1, -1, -1):
        for var in reversed(kills_after.get(index, ())):
            kill_var, kill_call = _kill(var)
            result = rx.Let(kill_var, kill_call, result)
        var, value = bindings[index]
        result = rx.Let(var, value, result)
    return result


def manifest_lifetimes(func: rx.Function) -> rx.Function:
    """``func`` (in A-normal form) with ``memory.kill`` after each value's last use."""
    if func.get_attr("Primitive"):
        return func
    return rx.Function(func.params, _rewrite(func.body), func.ret_type, func.type_params,
                       func.attrs)


def ManifestLifetimes():  # noqa: N802 (TVM's name)
    """The pass inserting ``memory.kill`` after each let-bound value's last use.

    Disable it with ``PassContext(disabled_pass=["ManifestLifetimes"])`` to keep every value
    alive until its function returns.
    """
    from kiln.ir.transform import ModulePass, PassInfo

    def transform(mod: Any, ctx: Any) -> Any:
        updated = mod.copy()
        for gvar, func in list(mod.functions.items()):
            if isinstance(func, rx.Function):
                updated.update_func(updated.get_global_var(gvar.name_hint),
                                    manifest_lifetimes(func))
        return updated

    return ModulePass(transform, PassInfo(0, "ManifestLifetimes"))
