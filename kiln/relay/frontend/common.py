"""Helpers shared by kiln's frontends: typing, shapes and values of Relay expressions.

Entry points: :func:`infer_type`, :func:`infer_shape`, :func:`infer_dtype`, :func:`infer_value`,
:func:`new_var`, :func:`is_static`, :func:`fold_constant`.

Frontends build Relay one node at a time and often need to know a node's shape or, for shape
arithmetic, its value; these helpers type or evaluate an expression on its own.

Example
-------
>>> from kiln import relay
>>> from kiln.relay.frontend.common import infer_shape
>>> infer_shape(relay.var("x", shape=(2, 3)))
(2, 3)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.ir.type import Any as AnyDim
from kiln.relay import expr as rx
from kiln.runtime.error import TVMError

__all__ = ["infer_type", "infer_shape", "infer_dtype", "infer_value", "new_var", "is_static",
           "fold_constant", "AnyDim"]


def infer_type(expr: Any, mod: Any = None) -> Any:
    """The checked type of ``expr`` typed on its own (globals come from ``mod``)."""
    from kiln.relay.type_infer import infer_expr

    return infer_expr(expr, mod)


def infer_shape(expr: Any, mod: Any = None) -> tuple:
    """The shape of a tensor-typed ``expr``: ints, and ``relay.Any()`` for unknown dims.

    Example
    -------
    >>> from kiln import relay
    >>> infer_shape(relay.var("x", shape=(relay.Any(), 4)))[1]
    4
    """
    ty = infer_type(expr, mod)
    if not hasattr(ty, "shape"):
        raise TVMError(f"expected a tensor-typed expression, got type {ty}")
    return tuple(d if isinstance(d, AnyDim) else int(d) for d in ty.shape)


def infer_dtype(expr: Any, mod: Any = None) -> str:
    """The element dtype string of a tensor-typed ``expr``."""
    return str(infer_type(expr, mod).dtype)


def is_static(shape: tuple) -> bool:
    """Whether every dimension of ``shape`` is a known int."""
    return all(isinstance(d, (int, np.integer)) for d in shape)


def infer_value(expr: Any, mod: Any = None) -> np.ndarray | None:
    """The NumPy value of ``expr`` if it uses no free variables, else None.

    Example
    -------
    >>> from kiln import relay
    >>> int(infer_value(relay.add(relay.const(1), relay.const(2))))
    3
    """
    from kiln.relay.analysis import free_vars

    if isinstance(expr, rx.Constant):
        return expr.data.numpy()
    if free_vars(expr):
        return None
    return fold_constant(expr, mod).data.numpy()


def fold_constant(expr: Any, mod: Any = None) -> rx.Constant:
    """Evaluate a closed tensor expression with the reference interpreter into a Constant."""
    from kiln.relay.backend.interpreter import Interpreter

    value = Interpreter(mod).evaluate(expr)
    if hasattr(value, "numpy"):
        value = value.numpy()
    if not isinstance(value, (np.ndarray, np.generic)):
        raise TVMError(f"expected a tensor value when folding, got {type(value).__name__}")
    return rx.const(np.asarray(value), np.asarray(value).dtype.name)


def new_var(name: str, shape: Any = None, dtype: str = "float32") -> rx.Var:
    """A fresh Relay variable with a tensor type annotation."""
    return rx.var(name, shape=shape, dtype=dtype)
