"""Elementwise and broadcast math: unary functions, arithmetic, comparison, logic, bits.

Entry points: one constructor per op (``relay.exp(x)``, ``relay.add(a, b)``,
``relay.less(a, b)`` …), generated from the tables below: one line per op giving its name,
type relation and pattern kind.

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

from typing import Any

from kiln import tir
from kiln.relay.op import op_attrs as A
from kiln.relay.op.op import (
    BROADCAST,
    ELEMWISE,
    INJECTIVE,
    OPAQUE,
    as_expr,
    call,
    define_op,
    is_expr,
    register_shape_func,
    shape_arg,
)
from kiln.relay.op.type_relations import (
    broadcast_comp_rel,
    broadcast_rel,
    identity_comp_rel,
    identity_rel,
    tensor_arg,
    tensor_type,
)

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


def copy(data: Any) -> Any:
    """A copy of ``data``."""
    return call("copy", [data])


def clip(a: Any, a_min: float, a_max: float) -> Any:
    """Clamp ``a`` elementwise to ``[a_min, a_max]``."""
    return call("clip", [a], A.ClipAttrs(a_min=float(a_min), a_max=float(a_max)))


__all__ = [*UNARY_OPS, *CLASSIFY_OPS, *BINARY_OPS, *COMPARE_OPS, "zeros", "ones", "zeros_like",
           "ones_like", "shape_of", "ndarray_size", "copy", "clip"]
