"""The reference interpreter's semantics of the QNN ops: each call is canonicalized (as
``relay.build`` does) and the plain-Relay result evaluated with the interpreter's NumPy ops.

Entry point: importing this module registers ``FNumpyEval`` for every op in
:data:`~kiln.relay.qnn.canonicalize.QNN_LOWERINGS`.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.op import Op
from kiln.relay.backend.numpy_ops import NUMPY_EVAL
from kiln.relay.qnn.canonicalize import QNN_LOWERINGS

__all__ = ["eval_canonicalized"]


def eval_canonicalized(op_name: str, attrs: Any, args: list, out_type: Any) -> Any:
    """``op_name(*args)`` evaluated through its canonical (plain Relay) form."""
    import kiln
    from kiln.relay.backend.interpreter import Interpreter
    from kiln.relay.expr import Call, Tuple, const
    from kiln.relay.qnn.transform import CanonicalizeOps

    def as_const(value: Any) -> Any:  # tuple arguments (qnn.concatenate) arrive as lists
        if isinstance(value, (list, tuple)):
            return Tuple([as_const(v) for v in value])
        return const(value)

    call = Call(Op.get(op_name), [as_const(a) for a in args], attrs)
    mod = CanonicalizeOps()(kiln.IRModule.from_expr(call))
    return Interpreter(mod).evaluate()().numpy()


for _name in QNN_LOWERINGS:
    if Op.get(_name).get_attr(NUMPY_EVAL) is not None:  # imported twice (e.g. as __main__)
        continue
    Op.get(_name).set_attr(
        NUMPY_EVAL, lambda attrs, args, out_type, _name=_name: eval_canonicalized(
            _name, attrs, args, out_type))
