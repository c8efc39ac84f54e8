"""Backpropagators of the primitives, as plain Python parsed by kiln.jit's own parser.

``bprop_<name>(*args, out, dout)`` returns one sensitivity per argument of the primitive.
They use only primitives that have bprops themselves, so grad of grad works through them.
Non-differentiable arguments (axes, shapes, conditions, integers) get ``zeros_like``.
"""

# ruff: noqa: ARG001  (each bprop takes all primal arguments, used or not)

from __future__ import annotations

from kiln.jit.primitives import (
    abs_,
    add,
    amax,
    broadcast_to,
    broadcast_to_like,
    cos,
    exp,
    gadd,
    log,
    matmul,
    mean,
    mul,
    neg,
    reshape,
    sign,
    sin,
    sqrt,
    sub,
    sum_,
    sum_to_like,
    tanh,
    transpose,
    truediv,
    where,
    zeros_like,
)
from kiln.jit.primitives import pow_ as power
from kiln.jit.structural import (
    array_getitem,
    array_getitem_grad,
    array_take_grad,
    axes_inverse,
    env_getitem,
    env_setitem,
    getitem,
    getitem_grad,
    reduce_grad,
    shape,
    size,
    switch,
    tuple_getitem,
    tuple_setitem,
)

_ = (add, sub, amax, exp, sin, cos, sqrt, abs_, tanh, log, transpose, mean, sum_)


def bprop_add(x, y, out, dout):
    return (sum_to_like(dout, x), sum_to_like(dout, y))


def bprop_scalar_add(x, y, out, dout):
    return (sum_to_like(dout, x), sum_to_like(dout, y))


def bprop_sub(x, y, out, dout):
    return (sum_to_like(dout, x), sum_to_like(neg(dout), y))


def bprop_mul(x, y, out, dout):
    return (sum_to_like(mul(dout, y), x), sum_to_like(mul(dout, x), y))


def bprop_truediv(x, y, out, dout):
    return (sum_to_like(truediv(dout, y), x),
            sum_to_like(neg(mul(dout, truediv(out, y))), y))


def bprop_pow(x, y, out, dout):
    dx = mul(dout, mul(y, power(x, sub(y, 1))))
    safe = where(x > 0, x, 1)
    dy = mul(dout, mul(out, log(safe)))
    return (sum_to_like(dx, x), sum_to_like(dy, y))


def bprop_neg(x, out, dout):
    return (neg(dout),)


def bprop_exp(x, out, dout):
    return (mul(dout, out),)


def bprop_log(x, out, dout):
    return (truediv(dout, x),)


def bprop_tanh(x, out, dout):
    return (mul(dout, sub(1, mul(out, out))),)


def bprop_sin(x, out, dout):
    return (mul(dout, cos(x)),)


def bprop_cos(x, out, dout):
    return (neg(mul(dout, sin(x))),)


def bprop_sqrt(x, out, dout):
    return (truediv(dout, mul(2, out)),)


def bprop_abs(x, out, dout):
    return (mul(dout, sign(x)),)


def bprop_sign(x, out, dout):
    return (zeros_like(x),)


def bprop_maximum(x, y, out, dout):
    return (sum_to_like(where(x >= y, dout, zeros_like(dout)), x),
            sum_to_like(where(x >= y, zeros_like(dout), dout), y))


def bprop_minimum(x, y, out, dout):
    return (sum_to_like(where(x <= y, dout, zeros_like(dout)), x),
            sum_to_like(where(x <= y, zeros_like(dout), dout), y))


def bprop_matmul(x, y, out, dout):
    return (matmul(dout, transpose(y, None)), matmul(transpose(x, None), dout))


def bprop_transpose(x, axes, out, dout):
    return (transpose_back(dout, axes), zeros_like(axes))


def transpose_back(dout, axes):
    return transpose(dout, inverse_perm(axes))


def bprop_sum(x, axis, keepdims, out, dout):
    return (reduce_grad(dout, x, axis, keepdims), zeros_like(axis), zeros_like(keepdims))


def bprop_mean(x, axis, keepdims, out, dout):
    scale = size(out) / size(x)
    return (mul(reduce_grad(dout, x, axis, keepdims), scale), zeros_like(axis),
            zeros_like(keepdims))


def bprop_max(x, axis, keepdims, out, dout):
    hit = reduce_grad(out, x, axis, keepdims) == x
    spread = reduce_grad(dout, x, axis, keepdims)
    return (where(hit, spread, zeros_like(spread)), zeros_like(axis), zeros_like(keepdims))


def bprop_reduce_grad(dout_, x, axis, keepdims, out, dout):
    return (sum_(dout, axis, keepdims), zeros_like(x), zeros_like(axis), zeros_like(keepdims))


def bprop_reshape(x, shp, out, dout):
    return (reshape(dout, shape(x)), zeros_like(shp))


def bprop_broadcast_to(x, shp, out, dout):
    return (sum_to_like(dout, x), zeros_like(shp))


def bprop_sum_to_like(x, like, out, dout):
    return (broadcast_to_like(dout, x), zeros_like(like))


def bprop_broadcast_to_like(x, like, out, dout):
    return (sum_to_like(dout, x), zeros_like(like))


def bprop_where(c, x, y, out, dout):
    z = zeros_like(dout)
    return (zeros_like(c), sum_to_like(where(c, dout, z), x), sum_to_like(where(c, z, dout), y))


def bprop_asscalar(x, out, dout):
    return (reshape(dout, shape(x)),)


def bprop_scalar_to_array(x, out, dout):
    return (reshape(dout, shape(x)),)


def bprop_astype(x, dtype, out, dout):
    return (astype_like(dout, x), zeros_like(dtype))


def astype_like(d, x):
    return sum_to_like(d, x)


def bprop_float(x, out, dout):
    return (dout,)


def bprop_array_getitem(x, idx, out, dout):
    return (array_getitem_grad(dout, x, idx), zeros_like(idx))


def bprop_array_getitem_grad(dout_, x, idx, out, dout):
    return (array_getitem(dout, idx), zeros_like(x), zeros_like(idx))


def bprop_array_take(x, i, out, dout):
    return (array_take_grad(dout, x, i), zeros_like(i))


def bprop_getitem(x, i, out, dout):
    return (getitem_grad(x, i, dout), zeros_like(i))


def bprop_getitem_grad(x, i, dout_, out, dout):
    return (zeros_like(x), zeros_like(i), getitem(dout, i))


def bprop_tuple_getitem(t, i, out, dout):
    return (tuple_setitem(zeros_like(t), i, dout), zeros_like(i))


def bprop_tuple_setitem(t, i, v, out, dout):
    return (tuple_setitem(dout, i, zeros_like(v)), zeros_like(i), tuple_getitem(dout, i))


def bprop_env_getitem(env, key, default, out, dout):
    return (env_setitem(zeros_like(env), key, dout), zeros_like(key), zeros_like(default))


def bprop_env_setitem(env, key, value, out, dout):
    return (dout, zeros_like(key), env_getitem(dout, key, zeros_like(value)))


def bprop_gadd(x, y, out, dout):
    return (sum_to_like(dout, x), sum_to_like(dout, y))


def bprop_zeros_like(x, out, dout):
    return (zeros_like(x),)


def bprop_switch(c, x, y, out, dout):
    return (zeros_like(c), switch(c, dout, zeros_like(x)), switch(c, zeros_like(y), dout))


def bprop_array_reduce(f, x, shp, out, dout):
    return (zeros_like(f), broadcast_to(dout, shape(x)), zeros_like(shp))


def bprop_nondiff1(x, out, dout):
    return (zeros_like(x),)


def bprop_nondiff2(x, y, out, dout):
    return (zeros_like(x), zeros_like(y))


def bprop_nondiff3(x, y, z, out, dout):
    return (zeros_like(x), zeros_like(y), zeros_like(z))


_ = gadd

# primitives whose arguments get no gradient, by arity
NONDIFF = {
    "bprop_nondiff1": ("truth", "not", "shape", "ndim", "len", "int", "ones_like", "raise",
                       "size"),
    "bprop_nondiff2": ("lt", "gt", "le", "ge", "eq", "ne", "floordiv", "mod", "grad_seed"),
    "bprop_nondiff3": ("range_continue",),
}


def inverse_perm(axes):
    return axes_inverse(axes)
