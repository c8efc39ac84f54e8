"""Elementwise and broadcast math: unary functions, arithmetic, comparison, logic, bits.

Entry points: one constructor per op (``relay.exp(x)``, ``relay.add(a, b)``,
``relay.less(a, b)`` …), generated from the tables below: one line per op giving its name,
type relation and pattern kind. The family's other rules follow the definitions: the TOPI
compute (``topi.<name>``) with the injective schedule, the NumPy reference
(:data:`REFERENCE_FUNCTIONS`), shape functions of the ops whose output shape is not their
input's, and gradients. ``docs/adding_an_op.md`` adds an op here.

- unary ops keep the input type (``IdentityRel``) and are ``ELEMWISE``;
- ``isnan``/``isinf``/``isfinite`` give a bool tensor of the input's shape;
- binary arithmetic and logic broadcast two tensors of one dtype (``BROADCAST``);
- comparisons broadcast and give bool;
- as in TVM this module also holds ``zeros``/``ones`` (shape from attrs, or ``dyn.*`` for an
  Expr shape), ``zeros_like``/``ones_like``, ``clip``, ``copy``, ``shape_of`` and
  ``ndarray_size``.

Example
-------
>>> from kiln import relay
>>> x = relay.var("x", shape=(2, 3))
>>> y = relay.add(relay.exp(x), relay.var("b", shape=(3,)))
>>> y.op.name
'add'
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln import tir
from kiln.relay.expr import const
from kiln.relay.op import op_attrs as A
from kiln.relay.op.broadcast import collapse_sum_like
from kiln.relay.op.layout import binary_broadcast_layout, elemwise_arbitrary_layout
from kiln.relay.op.op import (
    BROADCAST,
    ELEMWISE,
    INJECTIVE,
    OPAQUE,
    as_expr,
    call,
    define_op,
    is_expr,
    register_broadcast_schedule,
    register_compute,
    register_gradient,
    register_infer_correct_layout,
    register_injective_schedule,
    register_opaque_schedule,
    register_reference,
    register_scale_axis_role,
    register_shape_func,
    shape_arg,
)
from kiln.relay.op.rule_util import out_dtype, out_shape, reference_dtype
from kiln.relay.op.type_relations import (
    broadcast_comp_rel,
    broadcast_rel,
    identity_comp_rel,
    identity_rel,
    tensor_arg,
    tensor_type,
)

# TOPI is imported inside the computes (and the few rules) that use it: declaring the ops
# and building Relay expressions never loads it; the first lowering does.

# name -> description; all ELEMWISE with the input's type.
UNARY_OPS = {
    "abs": "absolute value",
    "acos": "arc cosine",
    "acosh": "inverse hyperbolic cosine",
    "asin": "arc sine",
    "asinh": "inverse hyperbolic sine",
    "atan": "arc tangent",
    "atanh": "inverse hyperbolic tangent",
    "ceil": "round towards +inf",
    "cos": "cosine",
    "cosh": "hyperbolic cosine",
    "erf": "Gauss error function",
    "exp": "e ** x",
    "fast_erf": "erf by a fast rational approximation",
    "fast_exp": "exp by a fast polynomial approximation",
    "fast_tanh": "tanh by a fast rational approximation",
    "floor": "round towards -inf",
    "log": "natural logarithm",
    "log10": "base-10 logarithm",
    "log2": "base-2 logarithm",
    "negative": "-x",
    "round": "round half to even",
    "rsqrt": "1 / sqrt(x)",
    "sigmoid": "1 / (1 + exp(-x))",
    "sign": "-1, 0 or 1",
    "sin": "sine",
    "sinh": "hyperbolic sine",
    "sqrt": "square root",
    "tan": "tangent",
    "tanh": "hyperbolic tangent",
    "trunc": "round towards zero",
    "bitwise_not": "~x (integers)",
    "logical_not": "not x (bool)",
}

# Bool results of the input's shape.
CLASSIFY_OPS = {
    "isfinite": "x is neither inf nor nan",
    "isinf": "x is +inf or -inf",
    "isnan": "x is nan",
}

# name -> description; all BROADCAST, the output has the operands' dtype.
BINARY_OPS = {
    "add": "a + b",
    "subtract": "a - b",
    "multiply": "a * b",
    "divide": "a / b (integer division truncates)",
    "power": "a ** b",
    "mod": "a % b with the sign of a (C fmod)",
    "floor_divide": "floor(a / b)",
    "floor_mod": "a - floor(a / b) * b",
    "trunc_divide": "trunc(a / b)",
    "trunc_mod": "a - trunc(a / b) * b",
    "maximum": "max(a, b)",
    "minimum": "min(a, b)",
    "bitwise_and": "a & b",
    "bitwise_or": "a | b",
    "bitwise_xor": "a ^ b",
    "left_shift": "a << b",
    "right_shift": "a >> b",
    "logical_and": "a and b",
    "logical_or": "a or b",
    "logical_xor": "a xor b",
}

# name -> description; BROADCAST with a bool result.
COMPARE_OPS = {
    "equal": "a == b",
    "not_equal": "a != b",
    "less": "a < b",
    "less_equal": "a <= b",
    "greater": "a > b",
    "greater_equal": "a >= b",
}

for _name, _doc in UNARY_OPS.items():
    define_op(_name, identity_rel, ELEMWISE, 1, describe=_doc, support_level=1)
for _name, _doc in CLASSIFY_OPS.items():
    define_op(_name, identity_comp_rel, ELEMWISE, 1, describe=_doc, support_level=3)
for _name, _doc in BINARY_OPS.items():
    define_op(_name, broadcast_rel, BROADCAST, 2, describe=_doc, support_level=1)
for _name, _doc in COMPARE_OPS.items():
    define_op(_name, broadcast_comp_rel, BROADCAST, 2, describe=_doc, support_level=4)


def _unary_constructor(name: str, doc: str):
    def constructor(data: Any) -> Any:
        return call(name, [as_expr(data)])

    constructor.__name__ = constructor.__qualname__ = name
    constructor.__doc__ = (
        f"Elementwise {doc}.\n\nParameters\n----------\ndata : relay.Expr\n\n"
        f"Returns\n-------\nrelay.Expr\n    ``Call(Op.get({name!r}), [data])``.\n"
    )
    return constructor


def _binary_constructor(name: str, doc: str):
    def constructor(lhs: Any, rhs: Any) -> Any:
        return call(name, [as_expr(lhs), as_expr(rhs)])

    constructor.__name__ = constructor.__qualname__ = name
    constructor.__doc__ = (
        f"Broadcasting {doc}.\n\nParameters\n----------\nlhs, rhs : relay.Expr\n    Operands "
        f"of one dtype with broadcast-compatible shapes.\n\nReturns\n-------\nrelay.Expr\n"
    )
    return constructor


for _name, _doc in {**UNARY_OPS, **CLASSIFY_OPS}.items():
    globals()[_name] = _unary_constructor(_name, _doc)
for _name, _doc in {**BINARY_OPS, **COMPARE_OPS}.items():
    globals()[_name] = _binary_constructor(_name, _doc)


# ---- fills, copies and shapes (TVM keeps these in tensor.py too) ----------------------------
def _init_rel(types, attrs, op_name):
    return tensor_type(list(attrs.shape), attrs.dtype)


define_op("zeros", _init_rel, ELEMWISE, 0, A.InitOpAttrs, "tensor of zeros", 3)
define_op("ones", _init_rel, ELEMWISE, 0, A.InitOpAttrs, "tensor of ones", 3)


def _make_init(name: str):
    def constructor(shape: Any, dtype: str = "float32") -> Any:
        shape = shape_arg(shape)
        if is_expr(shape):
            return call(f"dyn.{name}", [shape], A.InitOpAttrs(dtype=dtype))
        return call(name, [], A.InitOpAttrs(shape=tuple(shape), dtype=dtype))

    constructor.__name__ = constructor.__qualname__ = name
    constructor.__doc__ = (f"A tensor of {name} with ``shape`` and ``dtype``; an Expr shape "
                           f"gives ``dyn.{name}``.")
    return constructor


zeros = _make_init("zeros")
ones = _make_init("ones")

define_op("zeros_like", identity_rel, ELEMWISE, 1, None, "like-shaped zeros", 3)
define_op("ones_like", identity_rel, ELEMWISE, 1, None, "like-shaped ones", 3)


def zeros_like(data: Any) -> Any:
    """Zeros shaped and typed like ``data``."""
    return call("zeros_like", [data])


def ones_like(data: Any) -> Any:
    """Ones shaped and typed like ``data``."""
    return call("ones_like", [data])


def _shape_of_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    return tensor_type([len(data.shape)], attrs.dtype)


def _ndarray_size_rel(types, attrs, op_name):
    tensor_arg(types, 0, op_name)
    return tensor_type([], attrs.dtype)


define_op("shape_of", _shape_of_rel, OPAQUE, 1, A.ShapeOfAttrs, "the shape as a tensor", 10)
define_op("ndarray_size", _ndarray_size_rel, INJECTIVE, 1, A.NdarraySizeAttrs,
          "number of elements", 10)


@register_shape_func("shape_of", False)
def shape_of_shape_func(attrs, in_dims, out_types):
    """One extent: the input's rank (known at compile time even when its dims are not)."""
    return [[tir.const(len(in_dims[0]), "int64")]]


@register_shape_func("ndarray_size", False)
def ndarray_size_shape_func(attrs, in_dims, out_types):
    """A scalar."""
    return [[]]


def shape_of(data: Any, dtype: str = "int32") -> Any:
    """The shape of ``data`` as a 1-D tensor of ``dtype``."""
    return call("shape_of", [data], A.ShapeOfAttrs(dtype=dtype))


def ndarray_size(data: Any, dtype: str = "int32") -> Any:
    """The number of elements of ``data`` as a scalar of ``dtype``."""
    return call("ndarray_size", [data], A.NdarraySizeAttrs(dtype=dtype))


define_op("copy", identity_rel, ELEMWISE, 1, None, "copy a tensor", 3)
define_op("clip", identity_rel, ELEMWISE, 1, A.ClipAttrs, "clamp to [a_min, a_max]", 3)
# elementwise ops run in any layout; broadcasting ones follow their full-rank operand's
for _name in (*UNARY_OPS, *CLASSIFY_OPS, "clip"):
    register_infer_correct_layout(_name, elemwise_arbitrary_layout)
for _name in (*BINARY_OPS, *COMPARE_OPS):
    register_infer_correct_layout(_name, binary_broadcast_layout)


def copy(data: Any) -> Any:
    """A copy of ``data``."""
    return call("copy", [data])


def clip(a: Any, a_min: float, a_max: float) -> Any:
    """Clamp ``a`` elementwise to ``[a_min, a_max]``."""
    return call("clip", [a], A.ClipAttrs(a_min=float(a_min), a_max=float(a_max)))


# ---- computes (TOPI) and schedule kinds -----------------------------------------------------
def _elementwise_compute(topi_name: str) -> Callable:
    """The TE compute of an elementwise op: ``topi.<topi_name>`` over the op's inputs."""
    def compute(attrs: Any, inputs: list, out_type: Any) -> list:
        from kiln import topi

        return [getattr(topi, topi_name)(*inputs)]

    compute.__name__ = compute.__qualname__ = f"compute_{topi_name}"
    return compute


for _name in (*UNARY_OPS, *CLASSIFY_OPS, *BINARY_OPS, *COMPARE_OPS):
    register_compute(_name, _elementwise_compute(_name))
    register_broadcast_schedule(_name)
register_compute("copy", _elementwise_compute("identity"))


@register_compute("clip")
def compute_clip(attrs, inputs, out_type):
    """``topi.clip`` to the attrs' bounds."""
    from kiln import topi

    return [topi.clip(inputs[0], attrs.a_min, attrs.a_max)]


def _fill_compute(value: int) -> Callable:
    def compute(attrs: Any, inputs: list, out_type: Any) -> list:
        from kiln import topi

        return [topi.full(out_shape(out_type), out_dtype(out_type), value)]

    compute.__name__ = compute.__qualname__ = f"compute_fill_{value}"
    return compute


register_compute("zeros", _fill_compute(0))
register_compute("zeros_like", _fill_compute(0))
register_compute("ones", _fill_compute(1))
register_compute("ones_like", _fill_compute(1))


@register_compute("shape_of")
def compute_shape_of(attrs, inputs, out_type):
    """``topi.shape_of``."""
    from kiln import topi

    return [topi.shape_of(inputs[0], out_dtype(out_type))]


@register_compute("ndarray_size")
def compute_ndarray_size(attrs, inputs, out_type):
    """``topi.ndarray_size``."""
    from kiln import topi

    return [topi.ndarray_size(inputs[0], out_dtype(out_type))]


for _name in ("copy", "clip", "zeros", "zeros_like", "ones", "ones_like", "ndarray_size"):
    register_injective_schedule(_name)
register_opaque_schedule("shape_of")


# ---- reference semantics (NumPy) ------------------------------------------------------------
# Integer division follows TIR: divide/mod/trunc_* truncate toward zero, floor_* round toward
# negative infinity.
def _trunc_div(a, b):
    if np.issubdtype(np.result_type(a, b), np.integer):
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) != (b < 0), -q, q)
    return np.true_divide(a, b)


def _trunc_divide(a, b):
    """``trunc_divide``: rounds toward zero for floats too (``divide`` does not)."""
    q = _trunc_div(a, b)
    return q if np.issubdtype(q.dtype, np.integer) else np.trunc(q)


def _trunc_mod(a, b):
    if np.issubdtype(np.result_type(a, b), np.integer):
        return a - _trunc_div(a, b) * b
    return np.fmod(a, b)


def _floor_div(a, b):
    if np.issubdtype(np.result_type(a, b), np.integer):
        return np.floor_divide(a, b)
    return np.floor(np.true_divide(a, b))


def _floor_mod(a, b):
    if np.issubdtype(np.result_type(a, b), np.integer):
        return a - _floor_div(a, b) * b
    return np.remainder(a, b)  # the divisor's sign, also for zeros and infinite divisors


def _rsqrt(x):
    return 1 / np.sqrt(x)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


_erf = np.vectorize(math.erf, otypes=[np.float64])

# op name -> the NumPy function that defines it (the fast_* approximations: the exact function)
REFERENCE_FUNCTIONS: dict[str, Callable] = {
    "abs": np.abs, "acos": np.arccos, "acosh": np.arccosh, "asin": np.arcsin,
    "asinh": np.arcsinh, "atan": np.arctan, "atanh": np.arctanh, "ceil": np.ceil,
    "cos": np.cos, "cosh": np.cosh, "erf": _erf, "fast_erf": _erf, "exp": np.exp,
    "fast_exp": np.exp, "floor": np.floor, "log": np.log, "log10": np.log10, "log2": np.log2,
    "negative": np.negative, "round": np.round, "sign": np.sign, "sin": np.sin,
    "sinh": np.sinh, "sqrt": np.sqrt, "tan": np.tan, "tanh": np.tanh, "fast_tanh": np.tanh,
    "trunc": np.trunc, "logical_not": np.logical_not, "bitwise_not": np.invert,
    "copy": np.copy, "rsqrt": _rsqrt, "sigmoid": _sigmoid,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _trunc_div,
    "trunc_divide": _trunc_divide, "floor_divide": _floor_div, "mod": _trunc_mod,
    "trunc_mod": _trunc_mod, "floor_mod": _floor_mod,
    "power": np.power, "maximum": np.maximum, "minimum": np.minimum, "equal": np.equal,
    "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal, "logical_and": np.logical_and,
    "logical_or": np.logical_or, "logical_xor": np.logical_xor,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor, "left_shift": np.left_shift, "right_shift": np.right_shift,
}


def _elementwise_reference(fn: Callable) -> Callable:
    """The reference rule of an elementwise op: ``fn`` over the arrays, in the result dtype."""
    def reference(attrs: Any, args: list, out_type: Any) -> np.ndarray:
        return np.asarray(fn(*args)).astype(reference_dtype(out_type), copy=False)

    reference.__name__ = reference.__qualname__ = f"reference_{fn.__name__}"
    return reference


for _name, _fn in REFERENCE_FUNCTIONS.items():
    register_reference(_name, _elementwise_reference(_fn))


@register_reference("clip")
def reference_clip(attrs, args, out_type):
    """``np.clip`` to the attrs' bounds."""
    return np.clip(args[0], attrs.a_min, attrs.a_max).astype(args[0].dtype)


def _fill_shape(attrs: Any, args: list) -> tuple[int, ...]:
    """The shape of a fill: the ``*_like`` argument's, else the attrs'."""
    return args[0].shape if args else tuple(int(d) for d in attrs.shape)


@register_reference("zeros")
@register_reference("zeros_like")
def reference_zeros(attrs, args, out_type):
    """Zeros shaped like the argument (``zeros_like``) or the attrs (``zeros``)."""
    return np.zeros(_fill_shape(attrs, args), dtype=reference_dtype(out_type))


@register_reference("ones")
@register_reference("ones_like")
def reference_ones(attrs, args, out_type):
    """Ones shaped like the argument (``ones_like``) or the attrs (``ones``)."""
    return np.ones(_fill_shape(attrs, args), dtype=reference_dtype(out_type))


@register_reference("shape_of")
def reference_shape_of(attrs, args, out_type):
    """The argument's shape."""
    return np.array(args[0].shape, dtype=reference_dtype(out_type))


@register_reference("ndarray_size")
def reference_ndarray_size(attrs, args, out_type):
    """The argument's element count."""
    return np.array(args[0].size, dtype=reference_dtype(out_type))


# ---- FoldScaleAxis: a channel scale is a multiply; it distributes over an add -----------------
register_scale_axis_role("multiply", "scale")
register_scale_axis_role("add", "distributive")


# ---- gradients ------------------------------------------------------------------------------
def _scalar_like(value: float, expr: Any) -> Any:
    return const(np.array(value, dtype=str(expr.checked_type.dtype)))


def _unbroadcast(grad: Any, arg: Any) -> Any:
    """Sum a broadcast adjoint back to ``arg``'s shape."""
    return collapse_sum_like(grad, arg)


@register_gradient("add")
def gradient_add(orig, grad):
    """Both arguments get the adjoint, summed back over broadcast axes."""
    x, y = orig.args
    return [_unbroadcast(grad, x), _unbroadcast(grad, y)]


@register_gradient("subtract")
def gradient_subtract(orig, grad):
    """``g`` and ``-g``."""
    x, y = orig.args
    return [_unbroadcast(grad, x), _unbroadcast(call("negative", [grad]), y)]


@register_gradient("multiply")
def gradient_multiply(orig, grad):
    """``g * y`` and ``g * x``."""
    x, y = orig.args
    return [_unbroadcast(call("multiply", [grad, y]), x),
            _unbroadcast(call("multiply", [grad, x]), y)]


@register_gradient("divide")
def gradient_divide(orig, grad):
    """``g / y`` and ``-g * (x / y) / y``."""
    x, y = orig.args
    dy = call("negative", [call("divide", [call("multiply", [grad, orig]), y])])
    return [_unbroadcast(call("divide", [grad, y]), x), _unbroadcast(dy, y)]


@register_gradient("negative")
def gradient_negative(orig, grad):
    """``-g``."""
    return [call("negative", [grad])]


@register_gradient("exp")
def gradient_exp(orig, grad):
    """``g * exp(x)``."""
    return [call("multiply", [grad, orig])]


@register_gradient("log")
def gradient_log(orig, grad):
    """``g / x``."""
    return [call("divide", [grad, orig.args[0]])]


@register_gradient("sqrt")
def gradient_sqrt(orig, grad):
    """``g * 0.5 / sqrt(x)``."""
    return [call("divide", [call("multiply", [grad, _scalar_like(0.5, orig)]), orig])]


@register_gradient("tanh")
def gradient_tanh(orig, grad):
    """``g * (1 - tanh(x)^2)``."""
    one = _scalar_like(1.0, orig)
    return [call("multiply", [grad, call("subtract", [one, call("multiply", [orig, orig])])])]


@register_gradient("sigmoid")
def gradient_sigmoid(orig, grad):
    """``g * s * (1 - s)``."""
    one = _scalar_like(1.0, orig)
    return [call("multiply", [grad, call("multiply", [orig, call("subtract", [one, orig])])])]


@register_gradient("zeros_like")
@register_gradient("ones_like")
def gradient_constant_like(orig, grad):
    """The result does not depend on the argument's values."""
    return [call("zeros_like", [orig.args[0]])]


__all__ = [*UNARY_OPS, *CLASSIFY_OPS, *BINARY_OPS, *COMPARE_OPS, "zeros", "ones", "zeros_like",
           "ones_like", "shape_of", "ndarray_size", "copy", "clip"]
