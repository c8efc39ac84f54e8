"""Bind shared sub-expressions to variables before codegen, so no printer expands a DAG.

Entry points: :func:`BindSharedSubexprs` (the pass), :func:`bind_shared_subexprs` (one
statement) and :data:`EXPANDED_NODE_BUDGET`.

TIR expressions are DAGs: ``x1 = x0 + x0; x2 = x1 * x1; ...`` is n nodes but 2**n paths.
The arith walks and the TIR functors visit each distinct node once, but a codegen prints a
tree, so a 16-level shared chain became megabytes of C (37 s to compile) or an LLVM value
per path (> 100 s). This pass runs before every codegen (``kiln.target.build``): a statement
whose expressions would print more than :data:`EXPANDED_NODE_BUDGET` nodes gets each shared
sub-expression (one object used more than once) bound once by a ``LetStmt`` in front of it,
children before parents, and its uses read the variable. A printer may also repeat an operand
(C's scalar ``min`` is ``a < b ? a : b``), so the operands of ``Min``/``Max`` count as used
twice: a deep clamp chain is bound level by level too. Statements under the budget, which
is every kernel kiln's operators produce, are left exactly as they were, so their generated
code (and speed) does not change.

Only what the statement evaluates unconditionally is bound in front of it: nothing from
inside an ``if_then_else`` arm (an arm may read out of bounds in the lanes that do not take
it) or a ``Let`` body (it may use the let's variable), and no call with side effects. An
over-budget arm or let body is its own scope: what it shares is bound by ``Let``
expressions at its root, evaluated only where the arm is.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.expr import PrimExpr
from kiln.runtime.object import fields_of
from kiln.tir import expr as _e
from kiln.tir import stmt as _s
from kiln.tir.function import PrimFunc
from kiln.tir.stmt_functor import StmtExprMutator, rebuild
from kiln.tir.transform.base import PrimFuncPass, prim_func_pass

__all__ = ["BindSharedSubexprs", "bind_shared_subexprs", "EXPANDED_NODE_BUDGET"]

# A statement whose expressions print as more nodes than this is rewritten. Kernels from
# kiln's operators stay far below it (their largest statements print a few hundred nodes).
EXPANDED_NODE_BUDGET = 4096
_MIN_BOUND_SIZE = 4  # smaller shared pieces cost less to repeat than a variable

# Calls without side effects, whose value may be computed once ahead of the statement.
_PURE_CALLS = frozenset({
    "tir.exp", "tir.exp2", "tir.exp10", "tir.log", "tir.log2", "tir.log10", "tir.log1p",
    "tir.sqrt", "tir.rsqrt", "tir.tanh", "tir.sigmoid", "tir.fabs", "tir.pow", "tir.floor",
    "tir.ceil", "tir.round", "tir.nearbyint", "tir.trunc", "tir.erf", "tir.sin", "tir.cos",
    "tir.tan", "tir.atan", "tir.fmod", "tir.isnan", "tir.isinf", "tir.isfinite",
    "tir.copysign", "tir.fma", "tir.shift_left", "tir.shift_right", "tir.bitwise_and",
    "tir.bitwise_or", "tir.bitwise_xor", "tir.bitwise_not", "tir.reinterpret",
})


_PREFIX = "cse_var_"  # the names of the variables this pass binds


def _children(node: Any) -> list[PrimExpr]:
    """The expression operands of ``node`` (PrimExpr fields and lists of them)."""
    out = []
    for name in fields_of(node):
        if name in ("dtype", "span"):
            continue
        value = getattr(node, name, None)
        if isinstance(value, PrimExpr) and not isinstance(value, _e.IterVar):
            out.append(value)
        elif isinstance(value, list | tuple):
            out.extend(v for v in value
                       if isinstance(v, PrimExpr) and not isinstance(v, _e.IterVar))
    return out


def _is_call(node: Any, op: str | None = None) -> bool:
    return isinstance(node, _e.Call) and (op is None or str(node.op) == op)


def _uses(node: Any) -> int:
    """How often a printer may print each operand of ``node``."""
    return 2 if isinstance(node, _e.Min | _e.Max) else 1


def _unconditional_children(node: Any) -> list[PrimExpr]:
    """The operands a statement evaluates whenever it evaluates ``node``."""
    if _is_call(node, "tir.if_then_else"):
        return [node.args[0]]
    if isinstance(node, _e.Let):
        return [node.value]
    return _children(node)


def _bindable(node: Any) -> bool:
    if isinstance(node, _e.Var | _e.IntImm | _e.FloatImm | _e.StringImm | _e.Reduce):
        return False
    if isinstance(node, _e.Call):
        return str(node.op) in _PURE_CALLS
    return True


def _expanded_size(roots: list[PrimExpr], limit: int) -> int:
    """Nodes the roots print as a tree (memoized per distinct node); stops past ``limit``."""
    size: dict[int, int] = {}
    total = 0
    for root in roots:
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            key = id(node)
            if key in size:
                continue
            if not done:
                stack.append((node, True))
                stack.extend((c, False) for c in _children(node) if id(c) not in size)
                continue
            copies = _uses(node)
            size[key] = min(1 + copies * sum(size[id(c)] for c in _children(node)), limit + 1)
        total = min(total + size[id(root)], limit + 1)
    return total


def _shared_nodes(roots: list[PrimExpr]) -> list[PrimExpr]:
    """Bindable nodes evaluated unconditionally and used more than once, children first."""
    uses: dict[int, int] = {}
    order: list[PrimExpr] = []  # post-order of the distinct unconditional nodes
    seen: set[int] = set()
    for root in roots:
        uses[id(root)] = uses.get(id(root), 0) + 1
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            copies = _uses(node)
            for child in _unconditional_children(node):
                uses[id(child)] = uses.get(id(child), 0) + copies
                if id(child) not in seen:
                    stack.append((child, False))
    size = {}
    for node in order:
        size[id(node)] = 1 + sum(size.get(id(c), 1) for c in _children(node))
    return [n for n in order
            if uses.get(id(n), 0) > 1 and _bindable(n) and size[id(n)] >= _MIN_BOUND_SIZE]


class _Binder(StmtExprMutator):
    """Replaces each node of ``bound`` (by identity) with its variable, recording the
    ``(var, value)`` bindings in definition order; over-budget arms and let bodies are bound
    as scopes of their own (:func:`_bind_scope`)."""

    def __init__(self, bound: list[PrimExpr], counter: list[int]) -> None:
        super().__init__()
        self.bound = {id(n): n for n in bound}
        self.vars: dict[int, _e.Var] = {}
        self.lets: list[tuple[_e.Var, PrimExpr]] = []
        self.counter = counter  # one numbering of the variables across scopes

    def visit_Call(self, node: _e.Call) -> Any:
        if not _is_call(node, "tir.if_then_else"):
            return self.generic_visit(node)
        cond, then, other = (self.visit(a) for a in node.args)
        then, other = _bind_scope(then, self.counter), _bind_scope(other, self.counter)
        if cond is node.args[0] and then is node.args[1] and other is node.args[2]:
            return node
        return _e.Call(node.dtype, node.op, [cond, then, other])

    def visit_Let(self, node: _e.Let) -> Any:
        if node.var.name.startswith(_PREFIX):
            # a scope this pass bound already (values and body done): visiting it again
            # would rebind every nested scope once per enclosing one, exponentially
            return node
        value = self.visit(node.value)
        body = _bind_scope(self.visit(node.body), self.counter)
        if value is node.value and body is node.body:
            return node
        return _e.Let(node.var, value, body)

    def visit(self, node: Any) -> Any:
        key = id(node)
        var = self.vars.get(key)
        if var is not None:
            return var
        new = super().visit(node)
        if key in self.bound and isinstance(node, PrimExpr):
            self.counter[0] += 1
            var = _e.Var(f"{_PREFIX}{self.counter[0]}", node.dtype)
            self.vars[key] = var
            self.lets.append((var, new))
            return var
        return new


def _bind_scope(expr: PrimExpr, counter: list[int]) -> PrimExpr:
    """``expr`` (an arm or let body) with what it shares bound by ``Let`` expressions at its
    root, if it is over budget."""
    if _expanded_size([expr], EXPANDED_NODE_BUDGET) <= EXPANDED_NODE_BUDGET:
        return expr
    binder = _Binder(_shared_nodes([expr]), counter)
    out = binder.visit(expr)
    for var, value in reversed(binder.lets):
        out = _e.Let(var, value, out)
    return out


def bind_shared_subexprs(stmt: _s.Stmt) -> _s.Stmt:
    """``stmt`` with the shared sub-expressions of every over-budget statement bound."""
    return _Rewriter().visit(stmt)


class _Rewriter(StmtExprMutator):
    def _rewrite(self, node: Any, fields: tuple[str, ...]) -> Any:
        roots = []
        for name in fields:
            value = getattr(node, name)
            roots.extend(value if isinstance(value, list | tuple) else [value])
        if _expanded_size(roots, EXPANDED_NODE_BUDGET) <= EXPANDED_NODE_BUDGET:
            return None
        binder = _Binder(_shared_nodes(roots), [0])
        changed = {}
        for name in fields:
            value = getattr(node, name)
            if isinstance(value, list | tuple):
                items = [binder.visit(v) for v in value]
                changed[name] = value if all(a is b for a, b in zip(items, value)) else items
            else:
                changed[name] = binder.visit(value)
        if all(changed[name] is getattr(node, name) for name in fields):
            return None
        out = rebuild(node, changed)
        for var, value in reversed(binder.lets):
            out = _s.LetStmt(var, value, out)
        return out

    def visit_BufferStore(self, node: _s.BufferStore) -> Any:
        return self._rewrite(node, ("value", "indices")) or node

    def visit_Evaluate(self, node: _s.Evaluate) -> Any:
        return self._rewrite(node, ("value",)) or node

    def visit_LetStmt(self, node: _s.LetStmt) -> Any:
        body = self.visit(node.body)
        out = node if body is node.body else rebuild(node, {"body": body})
        return self._rewrite(out, ("value",)) or out


def _bind_func(func: PrimFunc) -> PrimFunc:
    body = bind_shared_subexprs(func.body)
    return func if body is func.body else func.with_body(body)


def BindSharedSubexprs() -> PrimFuncPass:  # noqa: N802 - named like TVM's pass factories
    """The pass: bind the shared sub-expressions of over-budget statements (module doc)."""
    return prim_func_pass(_bind_func, "tir.BindSharedSubexprs")
