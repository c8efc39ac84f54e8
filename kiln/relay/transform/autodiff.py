"""Reverse-mode automatic differentiation (TVM's ``relay.transform.gradient``).

Entry points: :func:`gradient` (also exported as ``Gradient``). The module is not named
``gradient.py`` because a submodule of that name would shadow the function
``relay.transform.gradient`` once imported.

``gradient(f)`` returns a function with ``f``'s parameters that returns
``(f(params), (d out / d p1, …, d out / d pn))``, where the adjoint of the output is seeded
with ones (for a tuple output, every field is seeded with ones), as TVM does.

The algorithm is first-order reverse mode over the dataflow graph: ``let`` bindings are
inlined first (graph normal form), the nodes are visited children-first, then in reverse
each operator call hands the adjoint of its result to its op's gradient rule
(``FPrimalGradient``, registered beside the op by its family module) and adds the results to
its arguments' adjoints; tuples and field accesses route adjoints field by field. Sharing is
preserved: the returned value and the backward pass use the original forward nodes. Both
``mode`` values run this algorithm; programs with control flow, closures, references or ADTs
inside the differentiated function raise a :class:`~kiln.runtime.error.TVMError` naming the node.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.expr import GlobalVar
from kiln.ir.op import Op
from kiln.ir.type import TensorType, TupleType
from kiln.relay import op as _op
from kiln.relay.expr import Call, Constant, Function, Tuple, TupleGetItem, Var
from kiln.relay.expr_functor import post_order_visit
from kiln.relay.transform.normal_forms import to_graph_normal_form
from kiln.relay.transform.pass_util import type_of
from kiln.runtime.error import TVMError

__all__ = ["gradient", "Gradient"]

_MODES = ("higher_order", "first_order")


class _Adjoints:
    """The adjoint of each node: an expression, or a list of field adjoints for tuples."""

    def __init__(self) -> None:
        self.tensors: dict[Any, Any] = {}
        self.fields: dict[Any, list] = {}

    def add(self, node: Any, grad: Any) -> None:
        if isinstance(node, Constant | Op | GlobalVar):
            return
        if isinstance(type_of(node), TupleType):
            if not isinstance(grad, Tuple):
                raise TVMError("gradient: a tuple-valued argument got a non-tuple adjoint")
            for index, field in enumerate(grad.fields):
                self.add_field(node, index, field)
            return
        old = self.tensors.get(node)
        self.tensors[node] = grad if old is None else _op.add(old, grad)

    def add_field(self, node: Any, index: int, grad: Any) -> None:
        fields = self.fields.setdefault(node, [None] * len(type_of(node).fields))
        fields[index] = grad if fields[index] is None else _op.add(fields[index], grad)

    def of(self, node: Any) -> Any:
        """The adjoint of ``node`` (a Tuple of field adjoints for a tuple), None if none."""
        if not isinstance(type_of(node), TupleType):
            return self.tensors.get(node)
        fields = self.fields.get(node)
        if fields is None:
            return None
        return Tuple([g if g is not None else _zeros_of_field(node, i)
                      for i, g in enumerate(fields)])


def _zeros_of_field(node: Any, index: int) -> Any:
    return _op.zeros_like(TupleGetItem(node, index))


def _seed(body: Any, adjoints: _Adjoints) -> None:
    ty = type_of(body)
    if isinstance(ty, TensorType):
        adjoints.add(body, _op.ones_like(body))
    elif isinstance(ty, TupleType) and all(isinstance(f, TensorType) for f in ty.fields):
        for index in range(len(ty.fields)):
            adjoints.add_field(body, index, _op.ones_like(TupleGetItem(body, index)))
    else:
        raise TVMError(f"gradient: the function must return a tensor or a tuple of tensors, "
                       f"not {ty!r}")


_DIFFERENTIABLE = (Var, Constant, Op, Call, Tuple, TupleGetItem)


def _dataflow_order(body: Any) -> list:
    order: list = []

    def collect(node: Any) -> None:
        if not isinstance(node, _DIFFERENTIABLE):
            raise TVMError(f"gradient: cannot differentiate through {type(node).__name__} "
                           f"nodes (only dataflow of operator calls and tuples): {node!r}")
        if isinstance(node, Call) and not isinstance(node.op, Op):
            raise TVMError(f"gradient: cannot differentiate a call of {node.op!r}; only "
                           "operator calls are supported")
        order.append(node)

    post_order_visit(body, collect)
    return order


def _backward(order: list, adjoints: _Adjoints) -> None:
    for node in reversed(order):
        if isinstance(node, Call):
            grad = adjoints.of(node)
            if grad is None:
                continue
            rule = node.op.get_attr("FPrimalGradient") if isinstance(node.op, Op) else None
            if rule is None:
                raise TVMError(f"gradient: operator {node.op.name} has no registered gradient "
                               "(FPrimalGradient)")
            for arg, arg_grad in zip(node.args, rule(node, grad)):
                adjoints.add(arg, arg_grad)
        elif isinstance(node, Tuple):
            grad = adjoints.of(node)
            if grad is not None:
                for field, field_grad in zip(node.fields, grad.fields):
                    adjoints.add(field, field_grad)
        elif isinstance(node, TupleGetItem):
            grad = adjoints.of(node)
            if grad is not None:
                adjoints.add_field(node.tuple_value, node.index, grad)


def gradient(expr: Any, mod: Any = None, mode: str = "higher_order") -> Function:
    """The function returning ``(value, (gradients of the parameters…))`` of ``expr``.

    Example
    -------
    >>> import numpy as np
    >>> from kiln import relay
    >>> from kiln.relay.backend.interpreter import evaluate
    >>> x = relay.var("x", shape=(2,))
    >>> grad_func = gradient(relay.Function([x], relay.multiply(x, x)))
    >>> value, (dx,) = evaluate(grad_func)(np.array([1.0, 3.0], "float32"))
    >>> dx.numpy().tolist()
    [2.0, 6.0]
    """
    from kiln.relay.type_infer import infer_expr

    if mode not in _MODES:
        raise TVMError(f"gradient: unknown mode {mode!r}; expected one of {_MODES}")
    if not isinstance(expr, Function):
        raise TVMError(f"gradient: expected a relay.Function, got {type(expr).__name__}")
    func = Function(expr.params, to_graph_normal_form(expr.body), expr.ret_type,
                    expr.type_params, expr.attrs)
    infer_expr(func, mod)
    for param in func.params:
        if not isinstance(type_of(param), TensorType):
            raise TVMError(f"gradient: parameter %{param.name_hint} must be a tensor, "
                           f"got {type_of(param)!r}")
    order = _dataflow_order(func.body)
    adjoints = _Adjoints()
    _seed(func.body, adjoints)
    _backward(order, adjoints)
    grads = []
    for param in func.params:
        grad = adjoints.of(param)
        grads.append(grad if grad is not None else _op.zeros_like(param))
    return Function(func.params, Tuple([func.body, Tuple(grads)]), None, expr.type_params,
                    expr.attrs)


Gradient = gradient
