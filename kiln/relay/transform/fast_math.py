"""Fast math (TVM's ``relay.transform.FastMath``): exact transcendental ops become their
approximations.

Entry points: :func:`FastMath` (the pass, opt level 4), :func:`fast_math` (one expression).

``exp``, ``tanh`` and ``erf`` become ``fast_exp``, ``fast_tanh`` and ``fast_erf`` (float32
approximations within about 1e-6, see :mod:`kiln.topi.math`), and ``nn.softmax`` becomes
``nn.fast_softmax``. The pass runs in ``relay.build`` at ``opt_level=4`` or when named in
``PassContext(required_pass=["FastMath"])``.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.op import Op
from kiln.relay.expr import Call, Function
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.transform.pass_util import is_op_call, relay_function_pass

__all__ = ["FastMath", "fast_math"]

# exact op -> its fast twin (same arguments and attributes)
FAST_OPS: dict[str, str] = {
    "exp": "fast_exp",
    "tanh": "fast_tanh",
    "erf": "fast_erf",
    "nn.softmax": "nn.fast_softmax",
}


class _FastMathRewriter(ExprMutator):
    def visit_function(self, node: Function) -> Any:
        if node.get_attr("Primitive"):
            return node
        return super().visit_function(node)

    def visit_call(self, node: Call) -> Any:
        new = super().visit_call(node)
        if not is_op_call(new) or new.op.name not in FAST_OPS:
            return new
        return Call(Op.get(FAST_OPS[new.op.name]), new.args, new.attrs, new.type_args,
                    new.span)


def fast_math(expr: Any) -> Any:
    """``expr`` with every exact op of :data:`FAST_OPS` replaced by its fast twin.

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(4,))
    >>> fast_math(relay.exp(x)).op.name
    'fast_exp'
    """
    return _FastMathRewriter().visit(expr)


def FastMath():  # noqa: N802 (TVM's name)
    """The pass turning ``exp``/``tanh``/``erf``/``nn.softmax`` into their fast forms.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2, 3))
    >>> mod = kiln.IRModule.from_expr(relay.Function([x], relay.tanh(x)))
    >>> with kiln.transform.PassContext(opt_level=4):
    ...     mod = FastMath()(mod)
    >>> mod["main"].body.op.name
    'fast_tanh'
    """

    def rewrite(func: Function, mod: Any, ctx: Any) -> Function:
        return fast_math(func)

    return relay_function_pass("FastMath", 4, rewrite)
