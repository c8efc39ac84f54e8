"""Constant folding (TVM's ``relay.transform.FoldConstant``).

Entry points: :func:`FoldConstant` (the pass) and :func:`fold_constant` (one expression).

An operator call whose arguments are all constants (or tuples of constants) is evaluated with
the reference interpreter's NumPy semantics
(:func:`kiln.relay.backend.interpreter.evaluate_constant`) and replaced by its value. Also
folded: ``shape_of`` / ``ndarray_size`` of a statically shaped tensor, a field of a literal
tuple, an ``If`` on a constant condition, and a ``let`` binding a constant (inlined). Stateful
and non-computational operators (annotations, device copies) and the insides of primitive
(fused) functions are left alone; so are ``qnn.*`` ops unless ``fold_qnn``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.ir.op import Op
from kiln.ir.type import TensorType
from kiln.relay.expr import Call, Constant, Function, If, Let, Tuple, TupleGetItem, const
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.transform.pass_util import relay_function_pass, type_of
from kiln.runtime.error import TVMError

__all__ = ["FoldConstant", "fold_constant"]


def _is_constant(expr: Any) -> bool:
    if isinstance(expr, Constant):
        return True
    return isinstance(expr, Tuple) and all(_is_constant(f) for f in expr.fields)


def _static_shape(expr: Any) -> tuple[int, ...] | None:
    ty = type_of(expr)
    if isinstance(ty, TensorType) and not ty.is_dynamic:
        return ty.concrete_shape
    return None


def _shape_of(call: Call) -> Constant | None:
    shape = _static_shape(call.args[0])
    if shape is None:
        return None
    return const(np.array(shape, dtype=str(call.attrs.dtype)))


def _ndarray_size(call: Call) -> Constant | None:
    shape = _static_shape(call.args[0])
    if shape is None:
        return None
    return const(np.array(int(np.prod(shape, dtype=np.int64)), dtype=str(call.attrs.dtype)))


# ops folded from the *type* of their argument, whatever its value
_SHAPE_FOLDERS = {"shape_of": _shape_of, "ndarray_size": _ndarray_size}


def _to_expr(value: Any) -> Any:
    """An interpreter value as a Relay constant expression (None if it is not data)."""
    if hasattr(value, "numpy") and hasattr(value, "dtype"):
        return Constant(value)
    fields = getattr(value, "fields", None)
    if isinstance(fields, list | tuple) and type(value).__name__ == "ADT":
        converted = [_to_expr(f) for f in fields]
        return None if any(c is None for c in converted) else Tuple(converted)
    return None


class _ConstantFolder(ExprMutator):
    def __init__(self, mod: Any, fold_qnn: bool) -> None:
        super().__init__()
        self.mod = mod
        self.fold_qnn = fold_qnn

    def visit_function(self, node: Function) -> Any:
        if node.get_attr("Primitive"):
            return node
        return super().visit_function(node)

    def visit_let(self, node: Let) -> Any:
        value = self.visit(node.value)
        if isinstance(value, Constant):
            self.memo_map[node.var] = value  # later uses of the variable see the constant
            return self.visit(node.body)
        body = self.visit(node.body)
        if value is node.value and body is node.body:
            return node
        return Let(node.var, value, body, node.span)

    def visit_if(self, node: If) -> Any:
        cond = self.visit(node.cond)
        if isinstance(cond, Constant) and cond.data.numpy().size == 1:
            taken = node.true_branch if bool(cond.data.numpy().reshape(())) else \
                node.false_branch
            return self.visit(taken)
        then, other = self.visit(node.true_branch), self.visit(node.false_branch)
        if cond is node.cond and then is node.true_branch and other is node.false_branch:
            return node
        return If(cond, then, other, node.span)

    def visit_tuple_getitem(self, node: TupleGetItem) -> Any:
        value = self.visit(node.tuple_value)
        if isinstance(value, Tuple):
            return value.fields[node.index]
        return node if value is node.tuple_value else TupleGetItem(value, node.index, node.span)

    def visit_call(self, node: Call) -> Any:
        new = super().visit_call(node)
        if not isinstance(new, Call) or not isinstance(new.op, Op):
            return new
        op = new.op
        if op.get_attr("TOpIsStateful") or op.get_attr("TNonComputational"):
            return new
        if op.name.startswith("qnn.") and not self.fold_qnn:
            return new
        shape_folder = _SHAPE_FOLDERS.get(op.name)
        if shape_folder is not None:
            if new is not node:
                new.checked_type_ = type_of(node)
            return shape_folder(new) or new
        if not all(_is_constant(arg) for arg in new.args):
            return new
        return self.evaluate(new)

    def evaluate(self, call: Call) -> Any:
        from kiln.relay.backend.interpreter import evaluate_constant

        try:
            value = evaluate_constant(call, self.mod)
        except TVMError:
            return call  # no NumPy semantics for this op: leave it to the compiled code
        return _to_expr(value) or call


def fold_constant(expr: Any, mod: Any = None, fold_qnn: bool = False) -> Any:
    """Fold the constant sub-expressions of ``expr``.

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> y = fold_constant(relay.add(x, relay.multiply(relay.const(2.0), relay.const(3.0))))
    >>> float(y.args[1].data.numpy())
    6.0
    """
    return _ConstantFolder(mod, fold_qnn).visit(expr)


def FoldConstant(fold_qnn: bool = False):  # noqa: N802 (TVM's name)
    """The pass folding constant sub-expressions of every function.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> body = relay.add(x, relay.exp(relay.const([0.0, 0.0])))
    >>> mod = FoldConstant()(kiln.IRModule.from_expr(relay.Function([x], body)))
    >>> mod["main"].body.args[1].data.numpy().tolist()
    [1.0, 1.0]
    """

    def rewrite(func: Function, mod: Any, ctx: Any) -> Function:
        return fold_constant(func, mod, fold_qnn)

    return relay_function_pass("FoldConstant", 2, rewrite, needs_types=True)
