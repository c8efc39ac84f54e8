"""Inference-time simplification (TVM's ``relay.transform.SimplifyInference``).

Entry points: :func:`SimplifyInference` (the pass), :func:`simplify_inference` (one
expression) and :func:`expand_bias_to_match_axis`.

Training-only or composite operators become plain arithmetic, as TVM writes them:

* ``batch_norm(x, gamma, beta, mean, var)[0]`` → ``x * s + (-mean * s + beta)`` with
  ``s = 1 / sqrt(var + eps) * gamma`` broadcast along ``axis`` (``scale``/``center`` drop gamma
  and beta);
* ``dropout(x)[0]`` → ``x``;
* ``layer_norm`` / ``instance_norm`` / ``group_norm`` → ``(x - mean) / sqrt(variance + eps)``
  over their axes, times gamma, plus beta;
* ``l2_normalize`` → ``x / sqrt(max(sum(x * x, axis), eps))``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import numpy as np

from kiln.relay import op as _op
from kiln.relay.expr import Call, Function, TupleGetItem, const
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.transform.pass_util import is_op_call, relay_function_pass, type_of
from kiln.runtime.error import TVMError

__all__ = ["SimplifyInference", "simplify_inference", "expand_bias_to_match_axis"]


def expand_bias_to_match_axis(bias: Any, ndim: int, axis: int) -> Any:
    """Give a per-channel vector trailing unit axes so it broadcasts along ``axis``."""
    trailing = ndim - axis - 1
    return _op.expand_dims(bias, 1, trailing) if trailing > 0 else bias


def _data_type(call: Call) -> Any:
    ty = type_of(call.args[0])
    if ty is None or not hasattr(ty, "shape"):
        raise TVMError(f"SimplifyInference needs the types of {call.op.name}'s arguments; "
                       "run InferType first")
    return ty


def _scalar(value: float, dtype: str) -> Any:
    return const(np.array(value, dtype=str(dtype)))


def _axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def batch_norm_to_arithmetic(call: Call) -> Any:
    data, gamma, beta, mean, var = call.args
    attrs, ty = call.attrs, _data_type(call)
    scale = _op.divide(_scalar(1.0, ty.dtype),
                       _op.sqrt(_op.add(var, _scalar(attrs.epsilon, ty.dtype))))
    if attrs.scale:
        scale = _op.multiply(scale, gamma)
    shift = _op.multiply(_op.negative(mean), scale)
    if attrs.center:
        shift = _op.add(shift, beta)
    ndim = len(ty.shape)
    axis = _axis(int(attrs.axis), ndim)
    out = _op.multiply(data, expand_bias_to_match_axis(scale, ndim, axis))
    return _op.add(out, expand_bias_to_match_axis(shift, ndim, axis))


def _normalize(data: Any, axes: list[int], epsilon: float, dtype: str) -> Any:
    mean = _op.mean(data, axes, keepdims=True)
    var = _op.variance(data, axes, keepdims=True, with_mean=mean)
    denom = _op.sqrt(_op.add(var, _scalar(epsilon, dtype)))
    return _op.divide(_op.subtract(data, mean), denom)


def _affine(out: Any, call: Call, ndim: int, axis: int) -> Any:
    _, gamma, beta = call.args
    if call.attrs.scale:
        out = _op.multiply(out, expand_bias_to_match_axis(gamma, ndim, axis))
    if call.attrs.center:
        out = _op.add(out, expand_bias_to_match_axis(beta, ndim, axis))
    return out


def layer_norm_to_arithmetic(call: Call) -> Any:
    ty = _data_type(call)
    ndim = len(ty.shape)
    axis = _axis(int(call.attrs.axis), ndim)
    out = _normalize(call.args[0], [axis], call.attrs.epsilon, ty.dtype)
    return _affine(out, call, ndim, axis)


def instance_norm_to_arithmetic(call: Call) -> Any:
    ty = _data_type(call)
    ndim = len(ty.shape)
    axis = _axis(int(call.attrs.axis), ndim)
    axes = [i for i in range(1, ndim) if i != axis]
    out = _normalize(call.args[0], axes, call.attrs.epsilon, ty.dtype)
    return _affine(out, call, ndim, axis)


def group_norm_to_arithmetic(call: Call) -> Any:
    ty = _data_type(call)
    shape = list(ty.concrete_shape)
    ndim = len(shape)
    axis = _axis(int(call.attrs.axis), ndim)
    groups = int(call.attrs.num_groups)
    grouped = shape[:axis] + [groups, shape[axis] // groups] + shape[axis + 1:]
    data = _op.reshape(call.args[0], grouped)
    out = _normalize(data, list(range(axis + 1, len(grouped))), call.attrs.epsilon, ty.dtype)
    return _affine(_op.reshape(out, shape), call, ndim, axis)


def l2_normalize_to_arithmetic(call: Call) -> Any:
    ty = _data_type(call)
    data = call.args[0]
    axis = None if call.attrs.axis is None else [int(a) for a in call.attrs.axis]
    sum_sq = _op.sum(_op.multiply(data, data), axis, keepdims=True)
    return _op.divide(data, _op.sqrt(_op.maximum(sum_sq, _scalar(call.attrs.eps, ty.dtype))))


# op name -> rewrite of a call to it
_CALL_REWRITES: dict[str, Callable[[Call], Any]] = {
    "nn.layer_norm": layer_norm_to_arithmetic,
    "nn.instance_norm": instance_norm_to_arithmetic,
    "nn.group_norm": group_norm_to_arithmetic,
    "nn.l2_normalize": l2_normalize_to_arithmetic,
}

# op name -> rewrite of field 0 of a call to it (ops returning a tuple)
_FIELD0_REWRITES: dict[str, Callable[[Call], Any]] = {
    "nn.batch_norm": batch_norm_to_arithmetic,
    "nn.dropout": lambda call: call.args[0],
}


class _InferenceSimplifier(ExprMutator):
    def visit_function(self, node: Function) -> Any:
        if node.get_attr("Primitive"):
            return node
        return super().visit_function(node)

    def visit_call(self, node: Call) -> Any:
        new = super().visit_call(node)
        rewrite = _CALL_REWRITES.get(new.op.name) if is_op_call(new) else None
        if rewrite is None:
            return new
        with _borrowed_types(node, new):
            return rewrite(new)

    def visit_tuple_getitem(self, node: TupleGetItem) -> Any:
        new = super().visit_tuple_getitem(node)
        value = new.tuple_value
        rewrite = _FIELD0_REWRITES.get(value.op.name) if is_op_call(value) else None
        if rewrite is None or new.index != 0:
            return new
        with _borrowed_types(node.tuple_value, value):
            return rewrite(value)


@contextmanager
def _borrowed_types(old: Call, new: Call):
    """Rebuilt arguments lend the old arguments' types to a rewrite, and lose them after:
    a rebuilt node may hold untyped nodes below it, and a type left on it would let the
    incremental InferType reuse it without typing them (VGG's dropout -> dense chain)."""
    lent = []
    for old_arg, new_arg in zip(old.args, new.args):
        if type_of(new_arg) is None:
            new_arg.checked_type_ = type_of(old_arg)
            lent.append(new_arg)
    try:
        yield
    finally:
        for arg in lent:
            arg.checked_type_ = None


def simplify_inference(expr: Any) -> Any:
    """Rewrite the normalization and dropout ops of a type-checked expression.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2, 3))
    >>> mod = kiln.relay.transform.InferType()(kiln.IRModule.from_expr(relay.nn.dropout(x)))
    >>> simplify_inference(mod["main"]).body.name_hint
    'x'
    """
    return _InferenceSimplifier().visit(expr)


def SimplifyInference():  # noqa: N802 (TVM's name)
    """The pass rewriting batch_norm, dropout and the other norms into arithmetic.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2, 3))
    >>> mod = SimplifyInference()(kiln.IRModule.from_expr(relay.nn.dropout(x)))
    >>> mod["main"].body.name_hint
    'x'
    """

    def rewrite(func: Function, mod: Any, ctx: Any) -> Function:
        return simplify_inference(func)

    return relay_function_pass("SimplifyInference", 0, rewrite, required=("InferType",),
                               needs_types=True)
