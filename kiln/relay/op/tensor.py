"""Elementwise and broadcast math: unary functions, arithmetic, comparison, logic, bits.

Entry points: one constructor per op (``relay.exp(x)``, ``relay.add(a, b)``,
``relay.less(a, b)`` …), generated from the tables below: one line per op giving its name,
type relation and pattern kind.

- unary ops keep the input type (``IdentityRel``) and are ``ELEMWISE``;
- ``isnan``/``isinf``/``isfinite`` give a bool tensor of the input's shape;
- binary arithmetic and logic broadcast two tensors of one dtype (``BROADCAST``);
- comparisons broadcast and give bool.

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

from kiln.relay.op.op import BROADCAST, ELEMWISE, as_expr, call, define_op
from kiln.relay.op.type_relations import (
    broadcast_comp_rel,
    broadcast_rel,
    identity_comp_rel,
    identity_rel,
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

__all__ = [*UNARY_OPS, *CLASSIFY_OPS, *BINARY_OPS, *COMPARE_OPS]
