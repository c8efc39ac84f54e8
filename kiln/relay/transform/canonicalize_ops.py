"""Operator canonicalization (TVM's ``relay.transform.CanonicalizeOps``).

Entry points: :func:`CanonicalizeOps` (the pass) and :func:`canonicalize_ops` (one
expression).

``nn.bias_add(x, b, axis)`` becomes ``add(x, expand_dims(b, 1, ndim - axis - 1))``, so later
passes (FuseOps, FoldScaleAxis) see a plain broadcast add; a 2-D ``nn.matmul`` becomes
``nn.dense`` when its weight is transposed or constant (TVM's ``relay.nn.matmul`` makes the
same choice for ``transpose_b``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.relay import op as _op
from kiln.relay.analysis.variables import free_vars
from kiln.relay.expr import Call, Function
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.transform.pass_util import is_op_call, relay_function_pass, type_of
from kiln.relay.transform.simplify_inference import expand_bias_to_match_axis
from kiln.runtime.error import TVMError

__all__ = ["CanonicalizeOps", "canonicalize_ops"]


def bias_add_to_add(call: Call, data_type: Any) -> Any:
    ndim = len(data_type.shape)
    axis = int(call.attrs.axis)
    axis = axis + ndim if axis < 0 else axis
    return _op.add(call.args[0], expand_bias_to_match_axis(call.args[1], ndim, axis))


def matmul_to_dense(call: Call, data_type: Any) -> Any:
    """A 2-D ``nn.matmul(a, b, transpose_b=True)`` is ``nn.dense(a, b)``; with a constant
    ``b``, ``nn.matmul(a, b)`` is ``nn.dense(a, transpose(b))``, whose transpose and packing
    fold at compile time. A run-time ``b`` stays a matmul: ``matmul_pack.x86`` reads it as
    ``[K, N]``, where a transpose kernel would gather its columns on every run."""
    attrs = call.attrs
    b_type = type_of(call.args[1])
    if attrs.transpose_a or len(data_type.shape) != 2 or b_type is None or len(b_type.shape) != 2:
        return call
    if not attrs.transpose_b and free_vars(call.args[1]):
        return call
    weight = call.args[1] if attrs.transpose_b else _op.transpose(call.args[1], (1, 0))
    return _op.nn.dense(call.args[0], weight, attrs.units, attrs.out_dtype)


# op name -> rewrite(call, type of its first argument)
_CANONICAL_FORMS: dict[str, Callable[[Call, Any], Any]] = {
    "nn.bias_add": bias_add_to_add,
    "nn.matmul": matmul_to_dense,
}


class _Canonicalizer(ExprMutator):
    def visit_function(self, node: Function) -> Any:
        return node if node.get_attr("Primitive") else super().visit_function(node)

    def visit_call(self, node: Call) -> Any:
        new = super().visit_call(node)
        rewrite = _CANONICAL_FORMS.get(new.op.name) if is_op_call(new) else None
        if rewrite is None:
            return new
        data_type = type_of(node.args[0])
        if data_type is None:
            raise TVMError(f"CanonicalizeOps needs the type of {new.op.name}'s data; "
                           "run InferType first")
        return rewrite(new, data_type)


def canonicalize_ops(expr: Any) -> Any:
    """Rewrite ops with a canonical form (``bias_add``) in a type-checked expression.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x, b = relay.var("x", shape=(1, 3, 2)), relay.var("b", shape=(3,))
    >>> mod = kiln.relay.transform.InferType()(
    ...     kiln.IRModule.from_expr(relay.nn.bias_add(x, b)))
    >>> canonicalize_ops(mod["main"]).body.op.name
    'add'
    """
    return _Canonicalizer().visit(expr)


def CanonicalizeOps():  # noqa: N802 (TVM's name)
    """The pass rewriting ``bias_add`` into ``expand_dims`` + ``add``.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x, b = relay.var("x", shape=(1, 3, 2)), relay.var("b", shape=(3,))
    >>> mod = CanonicalizeOps()(kiln.IRModule.from_expr(relay.nn.bias_add(x, b)))
    >>> mod["main"].body.args[1].op.name
    'expand_dims'
    """

    def rewrite(func: Function, mod: Any, ctx: Any) -> Function:
        return canonicalize_ops(func)

    return relay_function_pass("CanonicalizeOps", 3, rewrite, required=("InferType",),
                               needs_types=True)
