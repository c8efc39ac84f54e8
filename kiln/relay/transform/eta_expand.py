"""Eta expansion (TVM's ``relay.transform.EtaExpand``).

Entry point: :func:`EtaExpand`.

A global variable or an ADT constructor used as a *value* (not as the callee of a call)
becomes a function literal that calls it: ``@f`` → ``fn (%x0, %x1) { @f(%x0, %x1) }``,
``Cons`` → ``fn [A] (%x0: A, %x1: List[A]) { Cons(%x0, %x1) }``. ``expand_global_var`` and
``expand_constructor`` choose which are expanded; callees and nullary constructors are left
alone.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.adt import Constructor
from kiln.ir.expr import GlobalVar
from kiln.ir.type import TypeCall
from kiln.relay.expr import Call, Function, Var
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.transform.pass_util import relay_function_pass

__all__ = ["EtaExpand"]


class _EtaExpander(ExprMutator):
    def __init__(self, mod: Any, expand_constructor: bool, expand_global_var: bool) -> None:
        super().__init__()
        self.mod = mod
        self.expand_constructor = expand_constructor
        self.expand_global_var = expand_global_var

    def visit_call(self, node: Call) -> Any:
        op = node.op if isinstance(node.op, GlobalVar | Constructor) else self.visit(node.op)
        args = [self.visit(a) for a in node.args]
        if op is node.op and all(a is b for a, b in zip(args, node.args)):
            return node
        return Call(op, args, node.attrs, node.type_args, node.span)

    def visit_global_var(self, node: GlobalVar) -> Any:
        func = self.mod.get(node.name_hint) if self.expand_global_var else None
        if not isinstance(func, Function):
            return node
        params = [Var(f"x{i}", p.type_annotation) for i, p in enumerate(func.params)]
        return Function(params, Call(node, params), func.ret_type, func.type_params)

    def visit_constructor(self, node: Constructor) -> Any:
        if not self.expand_constructor or not node.inputs:
            return node
        data = self.mod[node.belong_to]
        params = [Var(f"x{i}", ty) for i, ty in enumerate(node.inputs)]
        ret = TypeCall(node.belong_to, list(data.type_vars))
        return Function(params, Call(node, params), ret, list(data.type_vars))


def EtaExpand(expand_constructor: bool = False,  # noqa: N802 (TVM's name)
              expand_global_var: bool = False):
    """The pass wrapping global variables / constructors used as values in functions.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> mod = kiln.IRModule()
    >>> mod["neg"] = relay.Function([x], relay.negative(x))
    >>> mod["main"] = relay.Function([], mod.get_global_var("neg"))
    >>> mod = EtaExpand(expand_global_var=True)(mod)
    >>> type(mod["main"].body).__name__
    'Function'
    """

    def rewrite(func: Function, mod: Any, ctx: Any) -> Function:
        return _EtaExpander(mod, expand_constructor, expand_global_var).visit(func)

    return relay_function_pass("EtaExpand", 1, rewrite, skip_primitive=True)
