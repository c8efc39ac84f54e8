"""Lambda lifting (TVM's ``relay.transform.LambdaLift``).

Entry point: :func:`LambdaLift`.

Every function literal nested in a global function (primitive functions excepted) becomes a
global function named ``lifted_name<structural hash>``. A literal without free variables is
replaced by its global variable; one that captures variables ``v1 … vn`` becomes the global
``fn (v1, …, vn) { fn (params) { body } }`` (the inner function marked ``Closure=1``) and is
replaced by the call ``@lifted(v1, …, vn)`` that builds the closure. A let-bound recursive
function refers to itself inside its lifted body through the same global.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.expr import GlobalVar
from kiln.ir.structural import structural_equal, structural_hash
from kiln.relay.analysis.variables import free_vars
from kiln.relay.expr import Call, Function, Let
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.transform.pass_util import infer, relay_module_pass

__all__ = ["LambdaLift"]


class _LambdaLifter(ExprMutator):
    def __init__(self, mod: Any) -> None:
        super().__init__()
        self.mod = mod
        self.recursive: dict[Any, Any] = {}  # let-bound function var -> its closure expr

    def lift_global(self, func: Function) -> Function:
        """Lift the literals inside a global function (the function itself stays)."""
        body = self.visit(func.body)
        if body is func.body:
            return func
        return Function(func.params, body, func.ret_type, func.type_params, func.attrs,
                        func.span)

    def visit_var(self, node: Any) -> Any:
        return self.recursive.get(node, node)

    def visit_let(self, node: Let) -> Any:
        if isinstance(node.value, Function) and not node.value.get_attr("Primitive"):
            value = self.lift(node.value, node.var)
        else:
            value = self.visit(node.value)
        body = self.visit(node.body)
        if value is node.value and body is node.body:
            return node
        return Let(node.var, value, body, node.span)

    def visit_function(self, node: Function) -> Any:
        if node.get_attr("Primitive"):
            return node
        return self.lift(node, None)

    def lift(self, func: Function, self_var: Any) -> Any:
        captured = [v for v in free_vars(func) if v is not self_var]
        gvar = self.global_var_for(func)
        closure = Call(gvar, captured) if captured else gvar
        if self_var is not None:
            self.recursive[self_var] = closure
        try:
            body = self.visit(func.body)
        finally:
            self.recursive.pop(self_var, None)
            self.memo_map.pop(self_var, None)
        inner = Function(func.params, body, func.ret_type, func.type_params, func.attrs,
                         func.span)
        lifted = Function(captured, inner.with_attr("Closure", 1)) if captured else inner
        self.mod[gvar] = lifted
        return closure

    def global_var_for(self, func: Function) -> GlobalVar:
        base = f"lifted_name{structural_hash(func) & 0xFFFFFFFFFFFFFFFF}"
        name, suffix = base, 0
        while name in self.mod:
            if structural_equal(self.mod[name], func, map_free_vars=True):
                break
            suffix += 1
            name = f"{base}_{suffix}"
        return self.mod.get_global_var(name) if name in self.mod else GlobalVar(name)


def lambda_lift(mod: Any) -> Any:
    """A copy of ``mod`` with every nested function literal lifted to a global function."""
    result = mod.copy()
    lifter = _LambdaLifter(result)
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, Function) and not func.get_attr("Primitive") and \
                not func.get_attr("Compiler"):
            result[gvar] = lifter.lift_global(func)
    return infer(result)


def LambdaLift():  # noqa: N802 (TVM's name)
    """The pass lifting nested functions to global functions.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x, y = relay.var("x", shape=(2,)), relay.var("y", shape=(2,))
    >>> mod = kiln.IRModule.from_expr(relay.Function([x], relay.Function([y], x + y)(x)))
    >>> mod = LambdaLift()(mod)
    >>> len(mod.functions), mod["main"].body.op.op.name_hint.startswith("lifted_name")
    (2, True)
    """
    return relay_module_pass("LambdaLift", 0, lambda mod, ctx: lambda_lift(mod))
