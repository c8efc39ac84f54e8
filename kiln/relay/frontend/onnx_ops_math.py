"""ONNX converters: elementwise math, activations, MatMul/Gemm/Einsum, softmax, reductions.

Entry points: the converters registered in :data:`~.onnx_registry.CONVERTERS` on import
(``Add``, ``Relu``, ``Gemm``, ``Softmax``, ``ReduceSum``, ``ArgMax``, ``Einsum`` …).

Example
-------
>>> from kiln.relay.frontend import onnx_ops_math
>>> from kiln.relay.frontend.onnx_registry import CONVERTERS
>>> "Gemm" in CONVERTERS
True
"""

from __future__ import annotations

from functools import reduce

import numpy as np

from kiln import relay
from kiln.relay.frontend.onnx_registry import (
    OnnxOpConverter,
    register,
    register_function,
    unsupported,
)
from kiln.runtime.error import OpAttributeInvalid

__all__: list[str] = []


def _const(value, dtype: str):
    return relay.const(np.asarray(value, dtype=dtype), dtype)


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


# ---- elementwise tables -------------------------------------------------------------------
UNARY = {
    "Abs": relay.abs, "Acos": relay.acos, "Acosh": relay.acosh, "Asin": relay.asin,
    "Asinh": relay.asinh, "Atan": relay.atan, "Atanh": relay.atanh, "Ceil": relay.ceil,
    "Cos": relay.cos, "Cosh": relay.cosh, "Erf": relay.erf, "Exp": relay.exp,
    "Floor": relay.floor, "Log": relay.log, "Neg": relay.negative, "Not": relay.logical_not,
    "Relu": relay.nn.relu, "Round": relay.round, "Sigmoid": relay.sigmoid, "Sign": relay.sign,
    "Sin": relay.sin, "Sinh": relay.sinh, "Sqrt": relay.sqrt, "Tan": relay.tan,
    "Tanh": relay.tanh, "IsNaN": relay.isnan, "BitwiseNot": relay.bitwise_not,
}

BINARY = {
    "Add": relay.add, "Sub": relay.subtract, "Mul": relay.multiply, "And": relay.logical_and,
    "Or": relay.logical_or, "Xor": relay.logical_xor, "Equal": relay.equal,
    "Greater": relay.greater, "Less": relay.less, "GreaterOrEqual": relay.greater_equal,
    "LessOrEqual": relay.less_equal, "BitwiseAnd": relay.bitwise_and,
    "BitwiseOr": relay.bitwise_or, "BitwiseXor": relay.bitwise_xor,
}

for _name, _fn in UNARY.items():
    register_function(_name, lambda inputs, attrs, ctx, fn=_fn: fn(inputs[0]))
for _name, _fn in BINARY.items():
    register_function(_name, lambda inputs, attrs, ctx, fn=_fn: fn(inputs[0], inputs[1]))

register_function("Identity", lambda inputs, attrs, ctx: inputs[0])


def _div(inputs, attrs, ctx):
    a, b = inputs
    if _is_int(ctx.dtype(a)):
        return relay.trunc_divide(a, b)
    return relay.divide(a, b)


def _reciprocal(inputs, attrs, ctx):
    return relay.divide(_const(1, ctx.dtype(inputs[0])), inputs[0])


def _pow(inputs, attrs, ctx):
    base, exponent = inputs
    dtype = ctx.dtype(base)
    if ctx.dtype(exponent) != dtype:
        exponent = relay.cast(exponent, dtype)
    return relay.power(base, exponent)


def _mod(inputs, attrs, ctx):
    # fmod=1 is C's fmod (sign of the dividend); fmod=0 Python's % (sign of the divisor)
    a, b = inputs
    return relay.trunc_mod(a, b) if attrs.get("fmod", 0) else relay.floor_mod(a, b)


def _bit_shift(inputs, attrs, ctx):
    shift = relay.right_shift if attrs.get("direction") == "RIGHT" else relay.left_shift
    return shift(inputs[0], inputs[1])


def _is_inf(inputs, attrs, ctx):
    x = inputs[0]
    zero = _const(0, ctx.dtype(x))
    inf = relay.isinf(x)
    if not attrs.get("detect_negative", 1):
        inf = relay.logical_and(inf, relay.greater(x, zero))
    if not attrs.get("detect_positive", 1):
        inf = relay.logical_and(inf, relay.less(x, zero))
    return inf


for _name, _fn in {"Div": _div, "Reciprocal": _reciprocal, "Pow": _pow, "Mod": _mod,
                   "BitShift": _bit_shift, "IsInf": _is_inf}.items():
    register_function(_name, _fn)


def _variadic(fn):
    return lambda inputs, attrs, ctx: reduce(fn, [i for i in inputs if i is not None])


register_function("Sum", _variadic(relay.add))
register_function("Max", _variadic(relay.maximum))
register_function("Min", _variadic(relay.minimum))
register_function("Mean", lambda inputs, attrs, ctx: relay.divide(
    _variadic(relay.add)(inputs, attrs, ctx), _const(len(inputs), ctx.dtype(inputs[0]))))


# ---- activations --------------------------------------------------------------------------
def _scalar(ctx, x, value):
    return _const(value, ctx.dtype(x))


def _leaky_relu(inputs, attrs, ctx):
    return relay.nn.leaky_relu(inputs[0], float(attrs.get("alpha", 0.01)))


_NARROW_FLOATS = ("float16", "bfloat16")


def _rounded_once(fn):
    """A converter computing 16-bit floats in float32 and rounding the op's result once:
    ONNX defines the op as one function, so its intermediates (``exp(x) - 1`` above all,
    which ONNX's reference takes from ``np.expm1``) must not each round to 16 bits."""

    def convert(inputs, attrs, ctx):
        x = inputs[0]
        dtype = ctx.dtype(x)
        if dtype not in _NARROW_FLOATS:
            return fn(inputs, attrs, ctx)
        return relay.cast(fn([relay.cast(x, "float32"), *inputs[1:]], attrs, ctx), dtype)

    return convert


@_rounded_once
def _elu(inputs, attrs, ctx):
    x = inputs[0]
    alpha = _scalar(ctx, x, attrs.get("alpha", 1.0))
    negative = relay.multiply(alpha, relay.subtract(relay.exp(x), _scalar(ctx, x, 1)))
    return relay.where(relay.less(x, _scalar(ctx, x, 0)), negative, x)


@_rounded_once
def _celu(inputs, attrs, ctx):
    x = inputs[0]
    alpha = _scalar(ctx, x, attrs.get("alpha", 1.0))
    negative = relay.multiply(alpha, relay.subtract(relay.exp(relay.divide(x, alpha)),
                                                    _scalar(ctx, x, 1)))
    return relay.add(relay.nn.relu(x), relay.minimum(_scalar(ctx, x, 0), negative))


@_rounded_once
def _selu(inputs, attrs, ctx):
    x = inputs[0]
    alpha = attrs.get("alpha", 1.67326319217681884765625)
    gamma = _scalar(ctx, x, attrs.get("gamma", 1.05070102214813232421875))
    negative = relay.multiply(_scalar(ctx, x, alpha),
                              relay.subtract(relay.exp(x), _scalar(ctx, x, 1)))
    return relay.multiply(gamma, relay.where(relay.greater(x, _scalar(ctx, x, 0)), x, negative))


def _thresholded_relu(inputs, attrs, ctx):
    x = inputs[0]
    alpha = _scalar(ctx, x, attrs.get("alpha", 1.0))
    return relay.where(relay.greater(x, alpha), x, _scalar(ctx, x, 0))


def _hard_sigmoid(inputs, attrs, ctx):
    x = inputs[0]
    line = relay.add(relay.multiply(_scalar(ctx, x, attrs.get("alpha", 0.2)), x),
                     _scalar(ctx, x, attrs.get("beta", 0.5)))
    return relay.clip(line, 0.0, 1.0)


def _hard_swish(inputs, attrs, ctx):
    x = inputs[0]
    gate = relay.clip(relay.add(relay.multiply(_scalar(ctx, x, 1 / 6), x),
                                _scalar(ctx, x, 0.5)), 0.0, 1.0)
    return relay.multiply(x, gate)


def _softplus(inputs, attrs, ctx):
    x = inputs[0]
    # log(1 + exp(x)) computed as max(x, 0) + log(1 + exp(-|x|)) to avoid overflow
    tail = relay.log(relay.add(_scalar(ctx, x, 1), relay.exp(relay.negative(relay.abs(x)))))
    return relay.add(relay.nn.relu(x), tail)


def _softsign(inputs, attrs, ctx):
    x = inputs[0]
    return relay.divide(x, relay.add(_scalar(ctx, x, 1), relay.abs(x)))


def _mish(inputs, attrs, ctx):
    return relay.multiply(inputs[0], relay.tanh(_softplus(inputs, attrs, ctx)))


def _gelu(inputs, attrs, ctx):
    x = inputs[0]
    half = _scalar(ctx, x, 0.5)
    if attrs.get("approximate", "none") == "tanh":
        inner = relay.multiply(_scalar(ctx, x, np.sqrt(2 / np.pi)), relay.add(
            x, relay.multiply(_scalar(ctx, x, 0.044715), relay.power(x, _scalar(ctx, x, 3)))))
        return relay.multiply(relay.multiply(half, x),
                              relay.add(_scalar(ctx, x, 1), relay.tanh(inner)))
    erf = relay.erf(relay.multiply(x, _scalar(ctx, x, 1 / np.sqrt(2))))
    return relay.multiply(relay.multiply(half, x), relay.add(_scalar(ctx, x, 1), erf))


def _shrink(inputs, attrs, ctx):
    x = inputs[0]
    lambd = _scalar(ctx, x, attrs.get("lambd", 0.5))
    bias = _scalar(ctx, x, attrs.get("bias", 0.0))
    zero = _scalar(ctx, x, 0)
    return relay.where(relay.less(x, relay.negative(lambd)), relay.add(x, bias),
                       relay.where(relay.greater(x, lambd), relay.subtract(x, bias), zero))


def _swish(inputs, attrs, ctx):
    x = inputs[0]
    return relay.multiply(x, relay.sigmoid(relay.multiply(_scalar(ctx, x, attrs.get("alpha", 1.0)),
                                                          x)))


def _prelu(inputs, attrs, ctx):
    x, slope = inputs
    return relay.where(relay.less(x, _scalar(ctx, x, 0)), relay.multiply(x, slope), x)


for _name, _fn in {"LeakyRelu": _leaky_relu, "Elu": _elu, "Celu": _celu, "Selu": _selu,
                   "ThresholdedRelu": _thresholded_relu, "HardSigmoid": _hard_sigmoid,
                   "HardSwish": _hard_swish, "Softplus": _softplus, "Softsign": _softsign,
                   "Mish": _mish, "Gelu": _gelu, "Shrink": _shrink, "PRelu": _prelu,
                   "Swish": _swish}.items():
    register_function(_name, _fn)


@register("Clip")
class Clip(OnnxOpConverter):
    """Clip: bounds as attributes up to opset 10, as optional inputs from 11."""

    @classmethod
    def _impl_v1(cls, inputs, attrs, ctx):
        return relay.clip(inputs[0], attrs.get("min", -3.4028234663852886e38),
                          attrs.get("max", 3.4028234663852886e38))

    @classmethod
    def _impl_v11(cls, inputs, attrs, ctx):
        x = inputs[0]
        if len(inputs) > 1 and inputs[1] is not None:
            x = relay.maximum(x, inputs[1])
        if len(inputs) > 2 and inputs[2] is not None:
            x = relay.minimum(x, inputs[2])
        return x


# ---- softmax family -----------------------------------------------------------------------
def _flattened_softmax(fn, x, axis, ctx):
    """Opset < 13 semantics: softmax over all dims from ``axis`` on, as one flattened dim."""
    shape = ctx.shape(x)
    if not -len(shape) <= axis < len(shape):
        # Checked here, before the reshape: an axis of 2**40 would build a 2**40-long shape.
        raise OpAttributeInvalid(
            f"ONNX Softmax (opset < 13): axis {axis} is out of range for an input of rank "
            f"{len(shape)} (expected [{-len(shape)}, {len(shape) - 1}])")
    axis = axis + len(shape) if axis < 0 else axis
    if axis == len(shape) - 1:
        return fn(x, -1)
    flat = relay.reshape(x, [0] * axis + [-1])
    return relay.reshape_like(fn(flat, -1), x)


def _make_softmax(fn):
    class Softmax(OnnxOpConverter):
        @classmethod
        def _impl_v1(cls, inputs, attrs, ctx):
            return _flattened_softmax(fn, inputs[0], attrs.get("axis", 1), ctx)

        @classmethod
        def _impl_v13(cls, inputs, attrs, ctx):
            return fn(inputs[0], attrs.get("axis", -1))

    return Softmax


def _hardmax_axis(x, axis, ctx):
    shape = ctx.shape(x)
    index = relay.argmax(x, axis=[axis], keepdims=False)
    return relay.one_hot(index, _const(1, ctx.dtype(x)), _const(0, ctx.dtype(x)),
                         int(shape[axis]), axis, ctx.dtype(x))


register("Softmax")(_make_softmax(lambda x, axis: relay.nn.softmax(x, axis)))
register("LogSoftmax")(_make_softmax(lambda x, axis: relay.nn.log_softmax(x, axis)))


@register("Hardmax")
class Hardmax(OnnxOpConverter):
    """Hardmax: one-hot of the (first) arg-max along an axis (flattened axes before 13)."""

    @classmethod
    def _impl_v1(cls, inputs, attrs, ctx):
        x = inputs[0]
        axis = attrs.get("axis", 1)
        axis = axis + ctx.rank(x) if axis < 0 else axis
        flat = relay.reshape(x, [0] * axis + [-1])
        return relay.reshape_like(_hardmax_axis(flat, axis, ctx), x)

    @classmethod
    def _impl_v13(cls, inputs, attrs, ctx):
        axis = attrs.get("axis", -1)
        return _hardmax_axis(inputs[0], axis + ctx.rank(inputs[0]) if axis < 0 else axis, ctx)


# ---- matrix products ----------------------------------------------------------------------
def matmul(a, b, ctx):
    """NumPy-style matmul (broadcast batch dims, 1-D operands promoted) in Relay.

    float16 products accumulate in float32 and round once at the end, as NumPy's (the ONNX
    reference's) and ONNX Runtime's half-precision matmuls do: a float16 accumulator loses
    about one bit per doubling of the reduction length.
    """
    if ctx.dtype(a) == "float16":
        return relay.cast(_matmul(a, b, ctx, "float32"), "float16")
    return _matmul(a, b, ctx, "")


def _matmul(a, b, ctx, out_dtype):
    a_shape, b_shape = ctx.shape(a), ctx.shape(b)
    if len(a_shape) == 1 or len(b_shape) == 1:
        a2 = relay.expand_dims(a, 0) if len(a_shape) == 1 else a
        b2 = relay.expand_dims(b, 1) if len(b_shape) == 1 else b
        out = _matmul(a2, b2, ctx, out_dtype)
        drop = ([-1] if len(b_shape) == 1 else []) + ([-2] if len(a_shape) == 1 else [])
        rank = ctx.rank(out)
        return relay.squeeze(out, sorted({d + rank for d in drop}))
    if len(a_shape) == 2 and len(b_shape) == 2:
        return relay.nn.matmul(a, b, out_dtype=out_dtype)
    if len(b_shape) == 2 and all(isinstance(d, int) for d in a_shape):
        # (..., M, K) x (K, N): one dense over the flattened rows, as TVM's frontend does
        rows = relay.reshape(a, (-1, a_shape[-1]))
        out = relay.nn.dense(rows, relay.transpose(b, (1, 0)), out_dtype=out_dtype)
        return relay.reshape(out, (*a_shape[:-1], b_shape[-1]))
    batch = np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
    a_full = relay.broadcast_to(a, (*batch, *a_shape[-2:]))
    b_full = relay.broadcast_to(b, (*batch, *b_shape[-2:]))
    a3 = relay.reshape(a_full, (-1, *a_shape[-2:]))
    b3 = relay.reshape(b_full, (-1, *b_shape[-2:]))
    out = relay.nn.batch_matmul(a3, b3, out_dtype=out_dtype, transpose_a=False,
                                transpose_b=False)
    return relay.reshape(out, (*batch, a_shape[-2], b_shape[-1]))


register_function("MatMul", lambda inputs, attrs, ctx: matmul(inputs[0], inputs[1], ctx))


def _gemm(inputs, attrs, ctx):
    a, b = inputs[0], inputs[1]
    if attrs.get("transA", 0):
        a = relay.transpose(a, (1, 0))
    if attrs.get("transB", 0):
        b = relay.transpose(b, (1, 0))
    dtype = ctx.dtype(a)
    out = matmul(a, b, ctx)
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if alpha != 1.0:
        out = relay.multiply(out, _const(alpha, dtype))
    if len(inputs) > 2 and inputs[2] is not None:
        c = inputs[2]
        if beta != 1.0:
            c = relay.multiply(c, _const(beta, dtype))
        out = relay.add(out, c)
    return out


register_function("Gemm", _gemm)


def _einsum(inputs, attrs, ctx):
    """Einsum by broadcasting every operand to one index space, multiplying, summing out."""
    equation = attrs["equation"].replace(" ", "")
    lhs, _, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(inputs):
        raise unsupported("Einsum", f"equation {equation!r} with {len(inputs)} inputs")
    shapes = [ctx.shape(x) for x in inputs]
    ellipsis_rank = max((len(s) - len(t.replace("...", "")) for s, t in zip(shapes, terms)
                         if "..." in t), default=0)
    ellipsis_letters = "".join(chr(ord("A") + i) for i in range(ellipsis_rank))
    terms = [t.replace("...", ellipsis_letters[len(ellipsis_letters) - (len(s) - len(
        t.replace("...", ""))):]) for t, s in zip(terms, shapes)]
    if not _:
        counts = {c: "".join(terms).count(c) for c in "".join(terms)}
        rhs = ellipsis_letters + "".join(sorted(c for c, n in counts.items()
                                                if n == 1 and c not in ellipsis_letters))
    else:
        rhs = rhs.replace("...", ellipsis_letters)
    letters = list(rhs) + sorted({c for t in terms for c in t} - set(rhs))
    product = None
    for term, x in zip(terms, inputs):
        x = _einsum_diagonal(term, x, ctx)
        term = "".join(dict.fromkeys(term))
        order = sorted(range(len(term)), key=lambda i: letters.index(term[i]))
        x = relay.transpose(x, order) if order != list(range(len(term))) else x
        placed = "".join(term[i] for i in order)
        shape = [1] * len(letters)
        for c, d in zip(placed, ctx.shape(x)):
            shape[letters.index(c)] = d
        x = relay.reshape(x, shape)
        product = x if product is None else relay.multiply(product, x)
    summed = list(range(len(rhs), len(letters)))
    return relay.sum(product, axis=summed) if summed else relay.reshape(
        product, ctx.shape(product)[:len(rhs)])


def _einsum_diagonal(term, x, ctx):
    """Take the diagonal for a letter repeated within one operand (``ii->i``)."""
    while len(set(term)) < len(term):
        letter = next(c for c in term if term.count(c) > 1)
        first, second = term.index(letter), term.index(letter, term.index(letter) + 1)
        n = ctx.shape(x)[first]
        eye = _const(np.eye(n), ctx.dtype(x))
        eye_shape = [1] * len(term)
        eye_shape[first], eye_shape[second] = n, n
        x = relay.sum(relay.multiply(x, relay.reshape(eye, eye_shape)), axis=[second])
        term = term[:second] + term[second + 1:]
    return x


register_function("Einsum", _einsum)


# ---- reductions ---------------------------------------------------------------------------
def _reduce_axes(inputs, attrs, ctx, axes_from_input):
    if axes_from_input:
        if len(inputs) > 1 and inputs[1] is not None:
            value = ctx.value(inputs[1])
            if value is None and ctx.shape(inputs[1]) != (0,):
                return inputs[1]  # known only at run time
            axes = [] if value is None else [int(a) for a in value.reshape(-1)]
        else:
            axes = []
    else:
        axes = list(attrs.get("axes", []))
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return None
        return list(range(ctx.rank(inputs[0])))
    return axes


REDUCERS = {
    "ReduceSum": lambda x, axes, keep, ctx: relay.sum(x, axes, keep),
    "ReduceMean": lambda x, axes, keep, ctx: relay.mean(x, axes, keep),
    "ReduceMax": lambda x, axes, keep, ctx: relay.max(x, axes, keep),
    "ReduceMin": lambda x, axes, keep, ctx: relay.min(x, axes, keep),
    "ReduceProd": lambda x, axes, keep, ctx: relay.prod(x, axes, keep),
    "ReduceL1": lambda x, axes, keep, ctx: relay.sum(relay.abs(x), axes, keep),
    "ReduceL2": lambda x, axes, keep, ctx: relay.sqrt(
        relay.sum(relay.multiply(x, x), axes, keep)),
    "ReduceSumSquare": lambda x, axes, keep, ctx: relay.sum(relay.multiply(x, x), axes, keep),
    "ReduceLogSum": lambda x, axes, keep, ctx: relay.log(relay.sum(x, axes, keep)),
    "ReduceLogSumExp": lambda x, axes, keep, ctx: _log_sum_exp(x, axes, keep),
}

# The value of a reduction over an empty set (max/min have no NumPy identity).
EMPTY_REDUCTION = {"ReduceMax": -np.inf, "ReduceMin": np.inf, "ReduceLogSumExp": -np.inf,
                   "ReduceLogSum": -np.inf}

# The opset from which each reduction takes its axes as an input instead of an attribute.
AXES_INPUT_SINCE = {name: 18 for name in REDUCERS}
AXES_INPUT_SINCE["ReduceSum"] = 13


def _log_sum_exp(x, axes, keep):
    peak = relay.max(x, axes, True)
    peak = relay.where(relay.isinf(peak), relay.cast_like(relay.const(0.0), peak), peak)
    total = relay.log(relay.sum(relay.exp(relay.subtract(x, peak)), axes, True))
    out = relay.add(total, peak)
    return out if keep else relay.squeeze(out, axes)


def _make_reducer(name, fn):
    def convert(inputs, attrs, ctx, from_input):
        x = inputs[0]
        axes = _reduce_axes(inputs, attrs, ctx, from_input)
        if axes is None:
            return x
        if isinstance(axes, relay.Expr):
            return _runtime_axes_reduce(x, axes, bool(attrs.get("keepdims", 1)), name, ctx)
        dtype = ctx.dtype(x)
        shape = ctx.shape(x)
        if name in EMPTY_REDUCTION and any(shape[a] == 0 for a in axes):
            keep = bool(attrs.get("keepdims", 1))
            rank = len(shape)
            normal = {a + rank if a < 0 else a for a in axes}
            out_shape = [1 if i in normal else d for i, d in enumerate(shape)
                         if keep or i not in normal]
            return relay.full(_const(EMPTY_REDUCTION[name], dtype), out_shape, dtype)
        if dtype == "bool":
            x = relay.cast(x, "int32")
        out = fn(x, axes, bool(attrs.get("keepdims", 1)), ctx)
        return relay.cast(out, dtype) if dtype == "bool" else out

    members = {
        "_impl_v1": classmethod(lambda cls, inputs, attrs, ctx: convert(inputs, attrs, ctx,
                                                                        False)),
        f"_impl_v{AXES_INPUT_SINCE[name]}": classmethod(
            lambda cls, inputs, attrs, ctx: convert(inputs, attrs, ctx, True)),
    }
    register(name)(type(name, (OnnxOpConverter,), members))


for _name, _fn in REDUCERS.items():
    _make_reducer(_name, _fn)


# Reductions split as (elementwise before, per-axis combine, elementwise after), so that
# reducing one axis at a time gives the same result as reducing them together.
REDUCER_PARTS = {
    "ReduceSum": (None, relay.sum, None), "ReduceMean": (None, relay.mean, None),
    "ReduceMax": (None, relay.max, None), "ReduceMin": (None, relay.min, None),
    "ReduceProd": (None, relay.prod, None), "ReduceL1": (relay.abs, relay.sum, None),
    "ReduceL2": (lambda x: relay.multiply(x, x), relay.sum, relay.sqrt),
    "ReduceSumSquare": (lambda x: relay.multiply(x, x), relay.sum, None),
    "ReduceLogSum": (None, relay.sum, relay.log),
    "ReduceLogSumExp": (None, _log_sum_exp, None),
}


def _runtime_axes_reduce(x, axes, keepdims, name, ctx):
    """Reduce over axes known only at run time: per axis, a Relay If chooses between
    reducing it (kept as size 1) and leaving it; dropping the reduced axes (keepdims=0)
    reshapes to the shape of the axes not listed. Shapes become dynamic."""
    before, combine, after = REDUCER_PARTS[name]
    rank = ctx.rank(x)
    count = ctx.shape(axes)[0]
    axes = relay.cast(axes, "int64")
    axes = relay.where(relay.less(axes, _const(0, "int64")),
                       relay.add(axes, _const(rank, "int64")), axes)
    hits = relay.equal(relay.reshape(axes, [-1, 1]), _const(np.arange(rank)[None, :], "int64"))
    listed = relay.greater(relay.max(relay.cast(hits, "int32"), [0]), _const(0, "int32"))

    def dynamic(e):
        return relay.reshape(e, relay.shape_of(e, "int64"))

    out = before(x) if before else x
    shape = ctx.shape(x)
    dtype = ctx.dtype(x)
    # empty axes first, while the shape is still static: their reduction is the identity
    for axis in sorted(range(rank), key=lambda a: shape[a] != 0):
        flag = relay.take(listed, _const(axis, "int64"))
        if shape[axis] == 0 and name in EMPTY_REDUCTION:
            filled = [1 if a == axis else d for a, d in enumerate(ctx.shape(out))]
            value = EMPTY_REDUCTION[name] if dtype != "bool" else name == "ReduceMin"
            value = 0 if name == "ReduceLogSum" else value  # the log comes after
            reduced = relay.full(_const(value, dtype), filled, dtype)
        else:
            reduced = combine(out, [axis], True)
        out = relay.If(flag, dynamic(reduced), dynamic(out))
    out = after(out) if after else out
    if not keepdims:
        # unlisted axes first, in order: sort by listed * rank + axis
        key = relay.add(relay.multiply(relay.cast(listed, "int64"), _const(rank, "int64")),
                        _const(np.arange(rank), "int64"))
        kept = relay.strided_slice(relay.argsort(key, dtype="int64"), [0], [rank - count])
        out = relay.reshape(out, relay.take(relay.shape_of(out, "int64"), kept))
    return out


def _arg_reduce(fn):
    def convert(inputs, attrs, ctx):
        x = inputs[0]
        axis = attrs.get("axis", 0)
        keep = bool(attrs.get("keepdims", 1))
        if attrs.get("select_last_index", 0):
            n = ctx.shape(x)[axis]
            flipped = relay.reverse(x, axis)
            index = fn(flipped, axis=[axis], keepdims=keep)
            index = relay.subtract(_const(n - 1, ctx.dtype(index)), index)
        else:
            index = fn(x, axis=[axis], keepdims=keep)
        return relay.cast(index, "int64")

    return convert


register_function("ArgMax", _arg_reduce(relay.argmax))
register_function("ArgMin", _arg_reduce(relay.argmin))


def _cumsum(inputs, attrs, ctx):
    return _scan_op(inputs, {**attrs, "_fn": relay.cumsum}, ctx)


def _cumprod(inputs, attrs, ctx):
    return _scan_op(inputs, {**attrs, "_fn": relay.cumprod}, ctx)


def _scan_op(inputs, attrs, ctx):
    """CumSum / CumProd (``attrs["_fn"]``); an axis known only at run time picks one branch
    per possible axis."""
    x, axis = inputs
    attrs = {**attrs, "_dtype": ctx.dtype(x)}
    axis_value = ctx.value(axis)
    if axis_value is None:
        # one branch per possible axis, chosen at run time
        rank = ctx.rank(x)
        index = relay.cast(relay.reshape(axis, []), "int64")
        index = relay.where(relay.less(index, _const(0, "int64")),
                            relay.add(index, _const(rank, "int64")), index)
        out = _cumsum_static(x, rank - 1, attrs)
        for candidate in reversed(range(rank - 1)):
            out = relay.If(relay.equal(index, _const(candidate, "int64")),
                           _cumsum_static(x, candidate, attrs), out)
        return out
    return _cumsum_static(x, int(axis_value.reshape(-1)[0]), attrs)


def _cumsum_static(x, axis, attrs):
    if attrs.get("reverse", 0):
        x = relay.reverse(x, axis)
    out = attrs["_fn"](x, axis=axis, dtype=attrs["_dtype"],
                       exclusive=bool(attrs.get("exclusive", 0)))
    # the explicit cast pins the dtype for evaluators whose cumsum widens small ints
    out = relay.cast(out, attrs["_dtype"])
    return relay.reverse(out, axis) if attrs.get("reverse", 0) else out


register_function("CumSum", _cumsum)
register_function("CumProd", _cumprod, since=26)
