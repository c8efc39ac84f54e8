"""Elementwise computes (TVM's ``topi.math``): one te.compute applying a scalar function.

Entry points: one function per op (``exp``, ``sqrt``, ``sigmoid``, ``sign``, ``isnan`` …,
generated from :data:`UNARY`), and :func:`clip`, :func:`cast`, :func:`reinterpret`,
:func:`identity`, :func:`elemwise_sum`; :func:`fast_exp_nonpositive` is a scalar-expression
form of fast_exp for arguments ``<= 0`` (softmax's ``x - max``).

Example
-------
>>> from kiln import te, topi
>>> A = te.placeholder((4,), name="A")
>>> topi.exp(A).op.tag
'elemwise'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.tir.expr import Select
from kiln.topi import tag


def _sign(x: Any) -> Any:
    zero, one = _op.const(0, x.dtype), _op.const(1, x.dtype)
    if x.dtype.startswith("uint") or x.dtype == "bool":
        return _op.if_then_else(x > zero, one, zero)
    return _op.if_then_else(x > zero, one, _op.if_then_else(x < zero, -one, zero))


def _logical_not(x: Any) -> Any:
    return _op.logical_not(x) if x.dtype == "bool" else _op.equal(x, _op.const(0, x.dtype))


# name -> scalar function; "round" is round-half-to-even as in Relay (and NumPy).
UNARY: dict[str, Callable[[Any], Any]] = {
    "exp": _op.exp, "log": _op.log, "log2": _op.log2, "log10": _op.log10,
    "sqrt": _op.sqrt, "rsqrt": _op.rsqrt, "tanh": _op.tanh, "sigmoid": _op.sigmoid,
    "erf": _op.erf, "floor": _op.floor, "ceil": _op.ceil, "round": _op.nearbyint,
    "trunc": _op.trunc, "abs": _op.abs, "sin": _op.sin, "cos": _op.cos, "tan": _op.tan,
    "asin": _op.asin, "acos": _op.acos, "atan": _op.atan, "sinh": _op.sinh,
    "cosh": _op.cosh, "asinh": _op.asinh, "acosh": _op.acosh, "atanh": _op.atanh,
    "negative": _op.negative, "sign": _sign, "bitwise_not": _op.bitwise_not,
    "logical_not": _logical_not, "isnan": _op.isnan, "isinf": _op.isinf,
    "isfinite": _op.isfinite,
}


# -- fast approximations (TVM's fast_exp / fast_tanh / fast_erf) --------------------------------
# Branch-free float32 arithmetic that vectorizes on every target. float16 goes through float32;
# other dtypes get the exact function. The coefficients were fitted for kiln (least squares
# reweighted toward the largest relative error) and the errors below measured against
# float64 references over a dense sweep (tests/topi/test_fast_math.py checks them).

# e^r = 1 + r + r^2 * P(r) on |r| <= ln2 / 2
_EXP_P = (0.49999993346110005, 0.16666519181279849, 0.04166840668949695,
          0.008368893069118923, 0.0013814117726847126)
# tanh(x) = x P(x^2) / Q(x^2) on |x| <= 9 (tanh(9) rounds to 1 in float32)
_TANH_P = (0.999999997642881, 0.1298153305734299, 0.0029877442791579707,
           9.876550887615715e-06, -1.458496572820378e-08, 2.277664168381932e-11)
_TANH_Q = (1.0, 0.46314858055452285, 0.024037413410967316, 0.00023734994287932278)
# fast_tanh's (P, Q, bound) and fast_exp's P, for kernels written in C (kiln.topi.nn.rnn)
FAST_TANH_RATIONAL = (_TANH_P, _TANH_Q, 9.0)
FAST_EXP_POLYNOMIAL = _EXP_P
# erf(x) = x P(x^2) / Q(x^2) on |x| <= 4 (erf(4) rounds to 1 in float32)
_ERF_P = (1.1283791603142106, 0.19738646747618976, 0.050216326076195146,
          0.003585511675965515, 0.00013845817398048296, -1.9311390036386156e-06,
          1.97298903326093e-08)
_ERF_Q = (1.0, 0.5082616121083303, 0.11392973576387692, 0.014123289075628601,
          0.0009259920169029838)
# exp's argument is clamped to [-110, 89]: wide enough that the polynomial and the 2^n scaling
# themselves round to +inf above ln(float32 max) = 88.7228 and to 0 below ln(half the smallest
# subnormal) = -103.972 (no compare-and-blend per bound), narrow enough that 2^n splits into two
# normal factors.
_EXP_CLAMP = (-110.0, 89.0)
# fast_exp_nonpositive's lower clamp: exp(-108) rounds to 0, and 2^n needs one normal factor
_EXP_NONPOSITIVE_LOW = -108.0


def _select(cond: Any, then: Any, other: Any) -> Any:
    """Both sides evaluated (no loads here), so the choice is a vector blend."""
    return Select(cond, then, other)


def _is_nan(x: Any) -> Any:
    """``x != x``: a plain comparison, which every code generator vectorizes."""
    return _op.not_equal(x, x)


def _f32(value: float) -> Any:
    return _op.const(value, "float32")


def _horner(coeffs: tuple[float, ...], t: Any) -> Any:
    acc = _f32(coeffs[-1])
    for c in coeffs[-2::-1]:
        acc = acc * t + _f32(c)
    return acc


def _pow2(n: Any) -> Any:
    """2^n for an integral float ``n`` in [-126, 127], built from the exponent bits (a multiply,
    not a shift: TIR's vectorizer widens arithmetic, not bit shifts)."""
    return _op.reinterpret("float32", _op.cast(n + _f32(127.0), "int32") * (1 << 23))


def _exp_reduced(xc: Any) -> tuple[Any, Any]:
    """``(n, e^r)`` with ``xc = n ln2 + r``, ``|r| <= ln2/2`` (ln2 split in two so that
    ``n * ln2_hi`` is exact); ``exp(xc) = e^r * 2^n``."""
    n = _op.floor(xc * _f32(1.4426950408889634) + _f32(0.5))
    r = xc - n * _f32(0.693359375) + n * _f32(2.12194440e-4)
    return n, r * r * _horner(_EXP_P, r) + r + _f32(1.0)


def _fast_exp_f32(x: Any) -> Any:
    low, high = _EXP_CLAMP
    n, y = _exp_reduced(_op.min(_op.max(x, _f32(low)), _f32(high)))
    # 2^n in two factors, each a normal float (n spans [-159, 128]): the first product is
    # exact, the second rounds once -- to a subnormal, 0 or +inf where exp(x) does
    half = _op.floor(n * _f32(0.5))
    y = y * _pow2(half) * _pow2(n - half)
    # the clamp drops NaN (min/max return the other operand), so NaN is put back
    return _select(_is_nan(x), x, y)


def _fast_exp_nonpositive_f32(x: Any) -> Any:
    # x in [-108, 0] gives n in [-156, 0]: 2^n = 2^(n + 30) * 2^-30, the first factor a normal
    # float and the second a constant (the product rounds once, as above)
    n, y = _exp_reduced(_op.max(x, _f32(_EXP_NONPOSITIVE_LOW)))
    y = y * _pow2(n + _f32(30.0)) * _f32(2.0 ** -30)
    return _select(_is_nan(x), x, y)


def _odd_rational(p: tuple, q: tuple, bound: float) -> Callable[[Any], Any]:
    def approx(x: Any) -> Any:
        xc = _op.min(_op.max(x, _f32(-bound)), _f32(bound))
        t = xc * xc
        return _select(_is_nan(x), x, xc * _horner(p, t) / _horner(q, t))

    return approx


def _in_float32(approx: Callable[[Any], Any], exact: Callable[[Any], Any]):
    """``approx`` for float32 (float16 computes in float32); ``exact`` for other dtypes."""
    def fn(x: Any) -> Any:
        if x.dtype == "float32":
            return approx(x)
        if x.dtype == "float16":
            return _op.cast(approx(_op.cast(x, "float32")), "float16")
        return exact(x)

    return fn


# name -> (float32 approximation, exact fallback, accuracy note for the docstring)
_FAST = {
    "fast_exp": (_fast_exp_f32, _op.exp,
                 "relative error below 1.5e-7 (2.5 ulp) where exp(x) is a normal float32, "
                 "absolute error below 3e-45 (two subnormal steps) where it is subnormal; "
                 "0 below -103.97, +inf above 88.7228"),
    "fast_tanh": (_odd_rational(_TANH_P, _TANH_Q, 9.0), _op.tanh,
                  "absolute and relative error below 8e-7; +-1 beyond +-9"),
    "fast_erf": (_odd_rational(_ERF_P, _ERF_Q, 4.0), _op.erf,
                 "absolute and relative error below 5e-7; +-1 beyond +-4"),
}
UNARY.update({name: _in_float32(approx, exact) for name, (approx, exact, _) in _FAST.items()})
# op name -> its accuracy, as documented (docstrings, docs/ops_coverage.md)
FAST_MATH_ACCURACY: dict[str, str] = {name: note for name, (_, _, note) in _FAST.items()}
_FAST_EXP_NONPOSITIVE = _in_float32(_fast_exp_nonpositive_f32, _op.exp)


def fast_exp_nonpositive(x: Any) -> Any:
    """``exp(x)`` of a scalar expression known to be ``<= 0`` or NaN, such as softmax's
    ``x - max(x)``: fast_exp's polynomial and accuracy (relative error below 1.5e-7 for normal
    results, subnormal results within two subnormal steps, 0 below -103.97, NaN stays NaN),
    with cheaper scaling -- one variable power of two instead of two, and no upper clamp. A
    positive ``x`` gives a wrong value. float16 computes in float32; other dtypes use the
    exact ``exp``.

    Example
    -------
    >>> from kiln import te
    >>> x = te.placeholder((4,), name="x")
    >>> te.compute((4,), lambda i: fast_exp_nonpositive(x[i] - x[0])).dtype
    'float32'
    """
    return _FAST_EXP_NONPOSITIVE(x)


def elemwise(x: te.Tensor, fn: Callable[[Any], Any], name: str) -> te.Tensor:
    """``fn`` applied to every element of ``x``."""
    return te.compute(x.shape, lambda *i: fn(x(*i)), name=name, tag=tag.ELEMWISE)


def _make_unary(name: str, fn: Callable[[Any], Any]) -> Callable[[te.Tensor], te.Tensor]:
    def unary(x: te.Tensor) -> te.Tensor:
        return elemwise(x, fn, f"T_{name}")

    unary.__name__ = name
    unary.__doc__ = f"Elementwise ``{name}(x)``."
    if name in _FAST:
        unary.__doc__ = (f"Elementwise ``{name[5:]}(x)`` approximated in float32 "
                         f"(float16 through float32, other dtypes exact): {_FAST[name][2]}; "
                         "NaN stays NaN.\n\n    Example\n    -------\n"
                         "    >>> from kiln import te, topi\n"
                         f"    >>> topi.{name}(te.placeholder((4,), name='x')).op.tag\n"
                         "    'elemwise'\n")
    return unary


for _name, _fn in UNARY.items():
    globals()[_name] = _make_unary(_name, _fn)


def identity(x: te.Tensor) -> te.Tensor:
    """A copy of ``x`` (Relay's ``copy``)."""
    return elemwise(x, lambda v: v, "T_identity")


def clip(x: te.Tensor, a_min: Any, a_max: Any) -> te.Tensor:
    """``min(max(x, a_min), a_max)`` elementwise."""
    lo, hi = _op.const(a_min, x.dtype), _op.const(a_max, x.dtype)
    return elemwise(x, lambda v: _op.min(_op.max(v, lo), hi), "T_clip")


def cast(x: Any, dtype: str) -> Any:
    """``x`` converted to ``dtype`` (a tensor or a scalar expression)."""
    if not isinstance(x, te.Tensor):
        return _op.cast(x, dtype)
    return te.compute(x.shape, lambda *i: _op.cast(x(*i), dtype), name="T_cast",
                      tag=tag.ELEMWISE)


def reinterpret(x: te.Tensor, dtype: str) -> te.Tensor:
    """The bits of ``x`` read as ``dtype`` (same width)."""
    return te.compute(x.shape, lambda *i: _op.reinterpret(dtype, x(*i)),
                      name="T_reinterpret", tag=tag.ELEMWISE)


def elemwise_sum(xs: list[te.Tensor]) -> te.Tensor:
    """The elementwise sum of same-shaped tensors."""
    if not xs:
        raise TVMError("elemwise_sum needs at least one tensor")

    def body(*i):
        total = xs[0](*i)
        for x in xs[1:]:
            total = total + x(*i)
        return total

    return te.compute(xs[0].shape, body, name="T_elemwise_sum", tag=tag.ELEMWISE)


def full_like(x: te.Tensor, fill_value: Any) -> te.Tensor:
    """A tensor shaped like ``x`` filled with ``fill_value``."""
    value = _op.const(fill_value, x.dtype) if not isinstance(fill_value, te.Tensor) else None
    if value is None:
        return te.compute(x.shape, lambda *i: _op.cast(fill_value(), x.dtype),
                          name="T_full_like", tag=tag.ELEMWISE)
    return te.compute(x.shape, lambda *i: value, name="T_full_like", tag=tag.ELEMWISE)


def _q_multiply_shift(x: Any, multiplier: Any, left: Any, right: Any,
                      left_required: bool) -> Any:
    """TVM's ``q_multiply_shift`` lowering: ``round((x << left) * multiplier / 2**(31 +
    right))`` rounding half up, the product in int64, the result int32.

    Defined for every int32 operand (run-time per-axis parameters can be anything): a
    negative shift counts as 0 and a left shift above 63 as 63, so no shift amount leaves
    [0, 63] (C leaves those undefined); every multiplier, -2**31 included, and every right
    shift are exact."""
    i32, i64 = (lambda v: _op.const(v, "int32")), (lambda v: _op.const(v, "int64"))
    wide = _op.cast(x, "int64")
    r = _op.max(_op.cast(right, "int32"), i32(0))
    if left_required:
        shift = _op.min(_op.max(_op.cast(left, "int32"), i32(0)), i32(63))
        product = _op.left_shift(wide, _op.cast(shift, "int64")) * _op.cast(multiplier, "int64")
        # floor((p + 2**(30 + r)) / 2**(31 + r)) as floor((p >> 1) + 2**(29 + r)) / 2**(30 + r)):
        # the sum cannot overflow, and from r = 33 on the quotient is 0 (|p| < 2**63)
        rs = _op.cast(_op.min(r, i32(33)), "int64")
        nudge = _op.left_shift(i64(1), rs + i64(29))
        return _op.cast(_op.right_shift(_op.right_shift(product, i64(1)) + nudge,
                                        rs + i64(30)), "int32")
    # Without a left shift |x * multiplier| <= 2**62, and floor((p + 2**(30 + r)) / 2**(31 +
    # r)) is floor(p / 2**(31 + r)) plus bit 30 + r of p: constant 64-bit shifts and 32-bit
    # variable ones (a 32-bit core shifts 64 bits by a variable in ~7 instructions). p >> 31
    # fits int32 except p = 2**62 (x = multiplier = -2**31), so r >= 1 starts from p >> 32.
    # From r = 33 on the rounded quotient is 0 (r = 32 rounds 2**62 up to 1).
    product = wide * _op.cast(multiplier, "int64")
    rs = _op.min(r, i32(32))
    below = _op.max(rs - i32(1), i32(0))
    high = Select(rs == i32(0), _op.cast(_op.right_shift(product, i64(31)), "int32"),
                  _op.right_shift(_op.cast(_op.right_shift(product, i64(32)), "int32"), below))
    one = _op.const(1, "uint32")
    bit30 = _op.cast(_op.right_shift(product, i64(30)), "uint32") & one
    above = _op.right_shift(_op.cast(_op.right_shift(product, i64(31)), "uint32"),
                            _op.cast(below, "uint32")) & one
    round_bit = _op.cast(Select(rs == i32(0), bit30, above), "int32")
    return Select(r < i32(33), high + round_bit, i32(0))


def fixed_point_multiply(x: te.Tensor, multiplier: int, shift: int) -> te.Tensor:
    """``x`` (int32) times ``multiplier * 2**(shift - 31)``, ``multiplier`` a Q31 number,
    rounded half up (TVM's ``topi.fixed_point_multiply``)."""
    left, right = max(int(shift), 0), max(-int(shift), 0)
    multiplier = int(multiplier)
    if multiplier == -2**31 and right > 0:
        # the same real factor as -2**30 * 2**-(30 + right): the 32-bit path below needs a
        # multiplier above -2**31 (x = -2**31 would make its product 2**62, p >> 31 = 2**31)
        multiplier, right = -2**30, right - 1
    m, lo, ro = (_op.const(v, "int32") for v in (multiplier, left, right))
    return te.compute(x.shape, lambda *i: _q_multiply_shift(x(*i), m, lo, ro, left > 0),
                      name="T_fixed_point_multiply", tag=tag.ELEMWISE)


def fixed_point_multiply_per_axis(x: te.Tensor, y: te.Tensor, lshift: te.Tensor,
                                  rshift: te.Tensor, is_lshift_required: int,
                                  is_rshift_required: int, axes: Any) -> te.Tensor:
    """``x`` (int32) times ``y * 2**(lshift - rshift - 31)`` with ``y``, ``lshift``,
    ``rshift`` indexed by ``x``'s ``axes`` (TVM's ``topi.fixed_point_multiply_per_axis``;
    ``rshift`` is applied whatever ``is_rshift_required`` says, as TVM's lowering does; a
    negative shift counts as 0, a left shift above 63 as 63)."""
    axes = [int(a) for a in axes]

    def at(*i):
        params = tuple(i[a] for a in axes)
        return _q_multiply_shift(x(*i), y(*params), lshift(*params), rshift(*params),
                                 bool(is_lshift_required))

    return te.compute(x.shape, at, name="T_fixed_point_multiply_per_axis", tag=tag.BROADCAST)


__all__ = ["elemwise", "identity", "clip", "cast", "reinterpret", "elemwise_sum", "full_like",
           "fixed_point_multiply", "fixed_point_multiply_per_axis", "FAST_MATH_ACCURACY",
           "FAST_TANH_RATIONAL", "FAST_EXP_POLYNOMIAL",
           *UNARY]
