"""Evaluating one operator call with NumPy: the reference the interpreter and FoldConstant use.

Entry points: :func:`numpy_eval` and :data:`NUMPY_EVAL` (the attribute name, ``"FNumpyEval"``).

Each op's rule is registered beside the op by its family module
(``relay.op.register_reference``); this module holds no per-op knowledge. A rule is
``f(attrs, args, out_type) -> value`` where ``args`` are NumPy arrays (or tuples of them for
tuple-typed arguments), ``attrs`` the call's attrs node and ``out_type`` the call's checked
type. Tensor results are NumPy arrays; tuple results are Python tuples. The rules are written
for clarity, not speed: they are the oracle every compiled executor is tested against, and
``tests/relay/op/test_reference_oracles.py`` checks them against independent oracles.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.op import Op
from kiln.runtime.error import TVMError

__all__ = ["numpy_eval", "NUMPY_EVAL"]

NUMPY_EVAL = "FNumpyEval"


def numpy_eval(op: Op, attrs: Any, args: list, out_type: Any) -> Any:
    """Evaluate ``op(*args)`` with NumPy; TVMError naming the op when it has no rule."""
    func = op.get_attr(NUMPY_EVAL)
    if func is None:
        raise TVMError(f"the reference interpreter has no NumPy implementation of {op.name}")
    return func(attrs, args, out_type)
