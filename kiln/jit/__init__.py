"""kiln.jit: Python functions compiled through Myia's pipeline.

A function is parsed into a graph IR (blocks as graphs, loops as tail calls, closures as
nesting), inferred and specialized per argument signature, optimized, closure-converted, cut
into linear segments (compiled with ``relay.build``, run by the graph executor) and control
flow (run by FinalVM). ``grad`` differentiates through ``if``, loops, recursion, tuples and
closures, and ``grad(grad(f))`` works for scalar functions.

Example
-------
>>> import numpy as np
>>> import kiln
>>> from kiln.jit import myia, grad
>>> @kiln.jit
... def f(x):
...     return np.sum(np.tanh(x) * 2.0)
>>> g = kiln.jit(grad(f))

``kiln.jit`` is this module and is callable: ``kiln.jit(fn)`` is ``myia(fn)``.

Entry points: :func:`myia`, :func:`grad`, :func:`value_and_grad`, :data:`standard_pipeline`,
:class:`Pipeline`, :class:`JitError`.
"""

from __future__ import annotations

import sys
import types

from kiln.jit.errors import JitError
from kiln.jit.grad import grad, value_and_grad
from kiln.jit.pipeline import MyiaFunction, Pipeline, PipelineResult, myia, standard_pipeline
from kiln.jit.primitives import (
    PRIMITIVES,
    abs_,
    add,
    asscalar,
    broadcast_to,
    cos,
    exp,
    gadd,
    log,
    matmul,
    maximum,
    mean,
    minimum,
    mul,
    ones_like,
    scalar_add,
    scalar_to_array,
    sin,
    sqrt,
    sub,
    sum_to_like,
    tanh,
    transpose,
    truediv,
    zeros_like,
)
from kiln.jit.primitives import reshape as reshape_
from kiln.jit.structural import array_map, array_reduce, make_tuple, switch, tuple_getitem

scalar_mul = mul
scalar_sub = sub
scalar_div = truediv

__all__ = ["myia", "grad", "value_and_grad", "JitError", "Pipeline", "PipelineResult",
           "MyiaFunction", "standard_pipeline", "array_map", "array_reduce", "scalar_add",
           "scalar_mul", "scalar_sub", "scalar_div", "asscalar", "scalar_to_array",
           "PRIMITIVES", "add", "mul", "sub", "truediv", "exp", "log", "tanh", "sin", "cos",
           "sqrt", "abs_", "maximum", "minimum", "mean", "matmul", "transpose", "reshape_",
           "broadcast_to", "zeros_like", "ones_like", "gadd", "sum_to_like", "make_tuple",
           "tuple_getitem", "switch"]


class _CallableModule(types.ModuleType):
    """Lets ``@kiln.jit`` decorate a function while ``kiln.jit`` stays a package."""

    def __call__(self, fn=None, **kwargs):
        return myia(fn, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
