"""Softmax computes (TVM's ``topi.nn.softmax``, ``log_softmax``, ``fast_softmax``).

Entry points: :func:`softmax`, :func:`log_softmax`, :func:`fast_softmax`.
"""

from __future__ import annotations

from kiln import te
from kiln.tir import op as _op
from kiln.topi.reduction import ACCUMULATOR_DTYPE
from kiln.topi.utils import normalize_axes


def _parts(x: te.Tensor, axis: int, exp=_op.exp):
    axis = normalize_axes(axis, x.ndim)[0]
    kept = [d for k, d in enumerate(x.shape) if k != axis]
    k1 = te.reduce_axis((0, x.shape[axis]), name="k")
    k2 = te.reduce_axis((0, x.shape[axis]), name="k")

    def full(i, r):
        return list(i[:axis]) + [r] + list(i[axis:])

    xmax = te.compute(kept, lambda *i: te.max(x(*full(i, k1.var)), axis=k1),
                      name="T_softmax_maxelem", tag="softmax_max")

    def drop(i):
        return i[:axis] + i[axis + 1:]

    # the exponentials round to x's dtype, their sum accumulates wider (as NumPy's does)
    wide = ACCUMULATOR_DTYPE.get(str(x.dtype), x.dtype)
    expsum = te.compute(kept, lambda *i: te.sum(
        _op.cast(exp(x(*full(i, k2.var)) - xmax(*i)), wide), axis=k2),
        name="T_softmax_expsum", tag="softmax_sum")
    return axis, xmax, expsum, drop


def softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``.

    Example
    -------
    >>> from kiln import te, topi
    >>> topi.nn.softmax(te.placeholder((2, 5)), axis=-1).op.tag
    'softmax_output'
    """
    return _softmax(x, axis, _op.exp)


def _softmax(x: te.Tensor, axis: int, exp) -> te.Tensor:
    _, xmax, expsum, drop = _parts(x, axis, exp)
    return te.compute(x.shape, lambda *i: exp(x(*i) - xmax(*drop(i))) /
                      _op.cast(expsum(*drop(i)), x.dtype),
                      name="T_softmax_norm", tag="softmax_output")


def log_softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """``x - max - log(sum(exp(x - max)))`` along ``axis``."""
    _, xmax, expsum, drop = _parts(x, axis)
    return te.compute(x.shape, lambda *i: x(*i) - xmax(*drop(i)) -
                      _op.cast(_op.log(expsum(*drop(i))), x.dtype),
                      name="T_log_softmax", tag="log_softmax_output")


def fast_softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """:func:`softmax` with ``exp`` by ``kiln.topi.math``'s fast_exp (float32/float16; accuracy
    in ``kiln.topi.math.FAST_MATH_ACCURACY["fast_exp"]``, exact exp for other dtypes).

    Example
    -------
    >>> from kiln import te, topi
    >>> topi.nn.fast_softmax(te.placeholder((2, 5)), axis=-1).op.tag
    'softmax_output'
    """
    from kiln.topi.math import UNARY

    return _softmax(x, axis, UNARY["fast_exp"])
