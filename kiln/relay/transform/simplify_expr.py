"""Algebraic simplification (TVM's ``relay.transform.SimplifyExpr``).

Entry points: :func:`SimplifyExpr` (the pass) and :func:`simplify_expr` (one expression).

Rewrites, each applied bottom-up until it no longer matches (``_RULES``):

* chains of reshape-like ops (``reshape``, ``contrib_reverse_reshape``, ``squeeze``,
  ``expand_dims``) become one ``reshape`` to the final static shape, or nothing when the final
  shape is the input's (so a squeeze/expand_dims pair vanishes);
* consecutive ``transpose`` ops compose into one; an identity permutation vanishes;
* ``cast`` to the input's own dtype vanishes; ``cast(cast(x, wide), t)`` skips the lossless
  middle cast;
* ``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x``, ``x / 1`` become ``x`` when the result
  has ``x``'s shape and dtype (a broadcasting identity constant is kept);
* on integers, two constant adds/subtracts/bias_adds in a row (``(x + c1) - c2``, TVM's
  SimplifyConsecutiveAdd extended to subtract and bias_add) become one, the constants combined for
  FoldConstant (exact: integer addition wraps the same in any order), when ``x`` already has the
  result's shape and dtype (a quantized layer's bias and zero-point term: one add per output).

Every rewrite needs static types (run InferType first); a node with unknown types is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.ir.type import TensorType
from kiln.relay import op as _op
from kiln.relay.expr import Call, Constant, Function
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.transform.pass_util import is_op_call, relay_function_pass, type_of

__all__ = ["SimplifyExpr", "simplify_expr"]

_RESHAPE_LIKE = ("reshape", "contrib_reverse_reshape", "squeeze", "expand_dims")


def _static(ty: Any) -> tuple[tuple[int, ...], str] | None:
    if isinstance(ty, TensorType) and not ty.is_dynamic:
        return ty.concrete_shape, str(ty.dtype)
    return None


def simplify_reshape_chain(call: Call, out_type: Any) -> Any:
    if not is_op_call(call, *_RESHAPE_LIKE):
        return None
    out = _static(out_type)
    if out is None:
        return None
    source = call.args[0]
    chained = is_op_call(source, *_RESHAPE_LIKE)
    while is_op_call(source, *_RESHAPE_LIKE):
        source = source.args[0]
    if _static(type_of(source)) == out:
        return source
    if not chained:
        return None
    return _op.reshape(source, list(out[0]))


def _transpose_axes(call: Call) -> list[int] | None:
    ty = _static(type_of(call.args[0]))
    if ty is None:
        return None
    ndim = len(ty[0])
    if call.attrs.axes is None:
        return list(range(ndim - 1, -1, -1))
    return [int(a) + ndim if int(a) < 0 else int(a) for a in call.attrs.axes]


def simplify_transpose(call: Call, out_type: Any) -> Any:
    if not is_op_call(call, "transpose"):
        return None
    axes = _transpose_axes(call)
    if axes is None:
        return None
    source = call.args[0]
    if is_op_call(source, "transpose"):
        inner = _transpose_axes(source)
        if inner is None:
            return None
        axes = [inner[a] for a in axes]
        source = source.args[0]
        if axes != list(range(len(axes))):
            return _op.transpose(source, axes)
    return source if axes == list(range(len(axes))) else None


def simplify_cast(call: Call, out_type: Any) -> Any:
    if not is_op_call(call, "cast"):
        return None
    source = call.args[0]
    source_type = type_of(source)
    target = str(call.attrs.dtype)
    if isinstance(source_type, TensorType) and str(source_type.dtype) == target:
        return source
    if is_op_call(source, "cast"):
        inner_type = type_of(source.args[0])
        if isinstance(inner_type, TensorType) and np.can_cast(
                str(inner_type.dtype), str(source.attrs.dtype), "safe"):
            return _op.cast(source.args[0], target)
    return None


def _is_filled_with(expr: Any, value: float) -> bool:
    return isinstance(expr, Constant) and bool(np.all(expr.data.numpy() == value))


# op name -> (identity value, which argument positions may hold it)
_IDENTITY_ELEMENTS = {
    "add": (0, (0, 1)),
    "subtract": (0, (1,)),
    "multiply": (1, (0, 1)),
    "divide": (1, (1,)),
}


def simplify_identity_arithmetic(call: Call, out_type: Any) -> Any:
    if not is_op_call(call, *_IDENTITY_ELEMENTS):
        return None
    value, positions = _IDENTITY_ELEMENTS[call.op.name]
    out = _static(out_type)
    for position in positions:
        other = call.args[1 - position]
        if _is_filled_with(call.args[position], value) and out is not None and \
                _static(type_of(other)) == out:
            return other
    return None


def _constant_term(call: Any, ndim: int) -> tuple[bool, Any] | None:
    """``(adds, constant)`` of ``x + c``, ``x - c`` or ``nn.bias_add(x, c)`` (the bias reshaped
    to broadcast along its axis), None for anything else."""
    if not is_op_call(call, "add", "subtract", "nn.bias_add") or \
            not isinstance(call.args[1], Constant):
        return None
    if call.op.name != "nn.bias_add":
        return call.op.name == "add", call.args[1]
    shape = [1] * ndim
    shape[int(call.attrs.axis) % ndim] = -1
    return True, _op.reshape(call.args[1], shape)


def simplify_consecutive_add(call: Call, out_type: Any) -> Any:
    out = _static(out_type)
    if out is None or "int" not in out[1]:
        return None
    outer = _constant_term(call, len(out[0]))
    inner = _constant_term(call.args[0], len(out[0])) if outer is not None else None
    if inner is None or _static(type_of(call.args[0].args[0])) != out:
        return None
    # x + c1 + c2 = x + (c1 + c2), x + c1 - c2 = x + (c1 - c2), x - c1 + c2 = x - (c1 - c2),
    # x - c1 - c2 = x - (c1 + c2): the inner sign stays, the constants fold later
    (inner_adds, first), (outer_adds, second) = inner, outer
    combine = _op.add if inner_adds == outer_adds else _op.subtract
    keep = _op.add if inner_adds else _op.subtract
    return keep(call.args[0].args[0], combine(first, second))


_RULES: tuple[Callable[[Call, Any], Any], ...] = (
    simplify_reshape_chain, simplify_transpose, simplify_cast, simplify_identity_arithmetic,
    simplify_consecutive_add,
)


class _ExprSimplifier(ExprMutator):
    def visit_function(self, node: Function) -> Any:
        return node if node.get_attr("Primitive") else super().visit_function(node)

    def visit_call(self, node: Call) -> Any:
        new = super().visit_call(node)
        out_type = type_of(node)
        changed = True
        while changed and isinstance(new, Call):
            changed = False
            for rule in _RULES:
                result = rule(new, out_type)
                if result is not None:
                    if type_of(result) is None:
                        result.checked_type_ = out_type  # every rewrite keeps the type
                    new, changed = result, True
                    break
        if type_of(new) is None:
            new.checked_type_ = out_type
        return new


def simplify_expr(expr: Any) -> Any:
    """Simplify a type-checked expression with the rules listed in the module docstring.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2, 3))
    >>> y = relay.transpose(relay.transpose(x, (1, 0)), (1, 0))
    >>> mod = kiln.relay.transform.InferType()(kiln.IRModule.from_expr(y))
    >>> simplify_expr(mod["main"]).body.name_hint
    'x'
    """
    return _ExprSimplifier().visit(expr)


def SimplifyExpr():  # noqa: N802 (TVM's name)
    """The pass simplifying reshape/transpose chains, redundant casts and identity arithmetic.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2, 3))
    >>> mod = kiln.IRModule.from_expr(relay.multiply(x, relay.const(1.0)))
    >>> SimplifyExpr()(mod)["main"].body.name_hint
    'x'
    """

    def rewrite(func: Function, mod: Any, ctx: Any) -> Function:
        return simplify_expr(func)

    return relay_function_pass("SimplifyExpr", 0, rewrite, required=("InferType",),
                               needs_types=True)
