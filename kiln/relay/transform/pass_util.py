"""Small pieces the Relay passes of this package share.

Entry points: :func:`relay_function_pass` (a module pass applying a function rewrite to every
Relay function of a module), :func:`relay_module_pass`, :func:`op_pattern`,
:func:`type_of`, :func:`is_op_call`, :func:`tensor_shape`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kiln.ir.op import Op
from kiln.ir.transform import ModulePass, PassInfo
from kiln.ir.type import TensorType
from kiln.relay.expr import Call, Function
from kiln.relay.op.op import OpPattern

__all__ = ["relay_function_pass", "relay_module_pass", "op_pattern", "type_of", "is_op_call",
           "tensor_shape", "infer"]


def infer(mod: Any) -> Any:
    """Type-check a module (incremental: already typed functions are kept)."""
    from kiln.relay.type_infer import infer_module

    return infer_module(mod)


def relay_module_pass(name: str, opt_level: int, run: Callable,
                      required: Sequence[str] = ()) -> ModulePass:
    """A ModulePass ``run(mod, ctx) -> mod`` named ``name``."""
    return ModulePass(run, PassInfo(opt_level, name, required))


def relay_function_pass(name: str, opt_level: int, rewrite: Callable,
                        required: Sequence[str] = (), needs_types: bool = False,
                        skip_primitive: bool = False) -> ModulePass:
    """A pass applying ``rewrite(func, mod, ctx) -> func`` to each Relay function of a module.

    Functions handed to an external ``Compiler`` or marked ``SkipOptimization`` are left
    alone (as TVM's function passes); ``skip_primitive`` also leaves fused functions alone.
    ``needs_types`` type-checks the module first. The result is type-checked again.
    """

    def run(mod: Any, ctx: Any) -> Any:
        if needs_types:
            mod = infer(mod)
        updated = mod.copy()
        for gvar, func in list(mod.functions.items()):
            if not isinstance(func, Function) or func.get_attr("SkipOptimization") or \
                    func.get_attr("Compiler"):
                continue
            if skip_primitive and func.get_attr("Primitive"):
                continue
            new_func = rewrite(func, mod, ctx)
            if new_func is not func:
                updated.update_func(gvar, new_func)
        return infer(updated)

    return relay_module_pass(name, opt_level, run, required)


def op_pattern(op: Any) -> OpPattern:
    """The fusion pattern kind of an operator (OPAQUE for anything that is not an Op)."""
    if not isinstance(op, Op):
        return OpPattern.OPAQUE
    pattern = op.get_attr("TOpPattern")
    return OpPattern.OPAQUE if pattern is None else OpPattern(int(pattern))


def type_of(expr: Any) -> Any:
    """The checked type of ``expr``, or None when type inference has not run on it."""
    return getattr(expr, "checked_type_", None)


def is_op_call(expr: Any, *names: str) -> bool:
    """Whether ``expr`` calls one of the operators ``names`` (any operator when none given)."""
    if not isinstance(expr, Call) or not isinstance(expr.op, Op):
        return False
    return not names or expr.op.name in names


def tensor_shape(expr: Any) -> tuple[int, ...] | None:
    """The static shape of a tensor-typed expression, or None when unknown or dynamic."""
    ty = type_of(expr)
    if not isinstance(ty, TensorType) or ty.is_dynamic:
        return None
    return ty.concrete_shape


def fresh_copy(expr: Any, binds: dict | None = None) -> Any:
    """A copy of ``expr`` whose bound variables are new, with free variables in ``binds``
    replaced (so a function body can be inlined more than once and stay well formed)."""
    from kiln.relay.expr_functor import ExprMutator

    mapping = dict(binds or {})

    def renamed(var: Any) -> Any:
        new = mapping[var] = type(var)(var.name_hint, var.type_annotation)
        return new

    class _Copier(ExprMutator):
        def visit_var(self, node: Any) -> Any:
            return mapping.get(node, node)

        def visit_let(self, node: Any) -> Any:
            from kiln.relay.expr import Let

            var = renamed(node.var)
            return Let(var, self.visit(node.value), self.visit(node.body), node.span)

        def visit_function(self, node: Any) -> Any:
            if node.attrs is not None and node.get_attr("Primitive"):
                return node
            params = [renamed(p) for p in node.params]
            return Function(params, self.visit(node.body), node.ret_type, node.type_params,
                            node.attrs, node.span)

        def visit_pattern(self, pattern: Any) -> Any:
            from kiln.relay.adt import PatternVar

            if isinstance(pattern, PatternVar):
                return PatternVar(renamed(pattern.var))
            return super().visit_pattern(pattern)

    return _Copier().visit(expr)
