"""Tensor intrinsics for ``Stage.tensorize`` (TVM's ``te.decl_tensor_intrin``).

Entry points: :class:`TensorIntrin`, :func:`decl_tensor_intrin`.

A tensor intrinsic pairs a small computation (a ``te.compute`` over placeholders) with the TIR
that implements it, usually a ``tir.call_extern`` to a micro-kernel. Lowering replaces the
loops under the tensorized axis by that TIR, with the intrinsic's buffers bound to the
regions of the real buffers the loops touched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.ir.expr import PrimExpr
from kiln.runtime.error import TVMError
from kiln.te.tensor import ComputeOp, Operation, tensors_read
from kiln.tir.buffer import Buffer, decl_buffer
from kiln.tir.stmt import Evaluate, Stmt

__all__ = ["TensorIntrin", "decl_tensor_intrin"]


class TensorIntrin:
    """A declared intrinsic: ``op`` and its implementation ``body`` (or ``reduce_init`` +
    ``reduce_update`` for reductions split across the tensorized region)."""

    def __init__(self, name: str, op: Operation, inputs: list, buffers: list[Buffer],
                 body: Stmt | None, reduce_init: Stmt | None,
                 reduce_update: Stmt | None) -> None:
        self.name, self.op, self.inputs, self.buffers = name, op, inputs, buffers
        self.body, self.reduce_init, self.reduce_update = body, reduce_init, reduce_update

    def __repr__(self) -> str:
        return f"TensorIntrin({self.name})"


def _as_stmt(value: Any) -> Stmt | None:
    if value is None or isinstance(value, Stmt):
        return value
    if isinstance(value, PrimExpr):
        return Evaluate(value)
    raise TVMError(f"decl_tensor_intrin: intrin_func must return TIR statements, got {value!r}")


def decl_tensor_intrin(op: Operation, fcompute: Callable, name: str = "tensor_intrin",
                       binds: dict | None = None, scalar_params=None,
                       default_buffer_params: dict | None = None) -> TensorIntrin:
    """Declare a tensor intrinsic for ``op`` implemented by ``fcompute(ins, outs)``.

    ``fcompute`` gets one Buffer per input tensor and per output and returns a statement, or
    a tuple ``(body, reduce_reset, reduce_update)``.

    Example
    -------
    >>> from kiln import te, tir
    >>> a = te.placeholder((4,), name="a")
    >>> c = te.compute((4,), lambda i: a[i] * 2.0, name="c")
    >>> def impl(ins, outs):
    ...     return tir.call_extern("int32", "twice4", ins[0].access_ptr("r"),
    ...                            outs[0].access_ptr("w"))
    >>> te.decl_tensor_intrin(c.op, impl).name
    'tensor_intrin'
    """
    if not isinstance(op, ComputeOp):
        raise TVMError("decl_tensor_intrin: op must be a compute op")
    binds = dict(binds or {})
    params = dict(default_buffer_params or {})
    inputs = tensors_read(op.body)
    outputs = [op.output(i) for i in range(op.num_outputs)]
    buffers = []
    for t in inputs + outputs:
        buf = binds.get(t)
        if buf is None:
            buf = decl_buffer(t.shape, t.dtype, name=t.op.name, **params)
        buffers.append(buf)
    result = fcompute(buffers[:len(inputs)], buffers[len(inputs):])
    if isinstance(result, tuple | list):
        if len(result) != 3:
            raise TVMError("decl_tensor_intrin: intrin_func returns a statement or a tuple "
                           "(body, reduce_reset, reduce_update)")
        body, init, update = (_as_stmt(r) for r in result)
    else:
        body, init, update = _as_stmt(result), None, None
    return TensorIntrin(name, op, inputs, buffers, body, init, update)
