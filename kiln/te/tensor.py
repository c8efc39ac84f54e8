"""Tensors and the operations that produce them (TVM's ``tvm.te.tensor``).

Entry points: :class:`Tensor`, :class:`Operation` and its kinds :class:`PlaceholderOp`,
:class:`ComputeOp`, :class:`ExternOp`, :class:`ScanOp`.

A Tensor is output ``value_index`` of an operation; ``A[i, j]`` reads it as a
``tir.ProducerLoad``. Each operation creates its output tensors once, so tensors compare and
hash by identity.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.expr import PrimExpr
from kiln.runtime.error import TVMError
from kiln.runtime.object import Object, register_object
from kiln.tir import expr as _e
from kiln.tir.stmt_functor import post_order_visit

__all__ = ["Tensor", "TensorSlice", "Operation", "PlaceholderOp", "ComputeOp", "ExternOp",
           "ScanOp"]


@register_object("te.Tensor")
class Tensor(Object):
    """Output ``value_index`` of ``op``, with a ``shape`` and ``dtype``.

    Example
    -------
    >>> from kiln import te
    >>> A = te.placeholder((4, 8), name="A")
    >>> A.shape[1], A.dtype, A.op.name
    (8, 'float32', 'A')
    """

    _fields = {"shape": PrimExpr, "dtype": "dtype", "op": Object, "value_index": int}

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def name(self) -> str:
        op = self.op
        return op.name if op.num_outputs == 1 else f"{op.name}.v{self.value_index}"

    def __call__(self, *indices: Any) -> PrimExpr:
        return self[indices]

    def __getitem__(self, indices: Any) -> Any:
        if not isinstance(indices, tuple | list):
            indices = (indices,)
        indices = tuple(indices)
        if len(indices) < self.ndim:
            return TensorSlice(self, indices)
        if len(indices) > self.ndim:
            raise TVMError(f"tensor {self.name} has {self.ndim} dimensions, "
                           f"indexed with {len(indices)}")
        return _e.ProducerLoad(self, list(indices))

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: Any) -> bool:
        return self is other

    def __repr__(self) -> str:
        shape = ", ".join(repr(s) for s in self.shape)
        return f"Tensor(shape=[{shape}], op.name={self.op.name})"


class TensorSlice:
    """A partly indexed tensor (``A[i]`` of a 2-D ``A``), completed by more indexing."""

    def __init__(self, tensor: Tensor, indices: tuple) -> None:
        self.tensor, self.indices = tensor, indices

    def __getitem__(self, more: Any) -> Any:
        more = more if isinstance(more, tuple) else (more,)
        return self.tensor[self.indices + more]

    def asobject(self) -> PrimExpr:
        return self.tensor[self.indices]

    @property
    def dtype(self) -> str:
        return self.tensor.dtype


class Operation(Object):
    """Base of tensor-producing operations."""

    _extra_slots = ("_outputs",)

    def _make_outputs(self, shapes, dtypes) -> None:
        object.__setattr__(self, "_outputs", [
            Tensor(list(shape), dtype, self, i) for i, (shape, dtype) in
            enumerate(zip(shapes, dtypes))])

    def output(self, index: int) -> Tensor:
        return self._outputs[index]

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    @property
    def input_tensors(self) -> list[Tensor]:
        return []

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name})"


def tensors_read(exprs) -> list[Tensor]:
    """Tensors read by ProducerLoads in ``exprs``, in first-use order."""
    seen: dict[int, Tensor] = {}

    def visit(node):
        if isinstance(node, _e.ProducerLoad) and id(node.producer) not in seen:
            seen[id(node.producer)] = node.producer

    for e in exprs:
        post_order_visit(e, visit)
    return list(seen.values())


@register_object("te.PlaceholderOp")
class PlaceholderOp(Operation):
    """An input tensor."""

    _fields = {"name": str, "tag": str, "attrs": "any", "shape": PrimExpr, "dtype": "dtype"}

    def __init__(self, name, shape, dtype) -> None:
        super().__init__(name, "", {}, list(shape), dtype)
        self._make_outputs([shape], [dtype])


@register_object("te.ComputeOp")
class ComputeOp(Operation):
    """``out[axis] = body`` over the data-parallel ``axis`` (and ``reduce_axis``)."""

    _fields = {"name": str, "tag": str, "attrs": "any", "axis": _e.IterVar,
               "reduce_axis": _e.IterVar, "body": PrimExpr}
    _extra_slots = ("_input_tensors",)

    def __init__(self, name, tag, attrs, axis, body) -> None:
        body = list(body)
        reduce_axis = list(body[0].axis) if isinstance(body[0], _e.Reduce) else []
        super().__init__(name, tag, dict(attrs or {}), list(axis), reduce_axis, body)
        shape = [iv.dom.extent for iv in axis]
        self._make_outputs([shape] * len(body), [b.dtype for b in body])

    @property
    def input_tensors(self) -> list[Tensor]:
        try:
            found = self._input_tensors
        except AttributeError:  # found once: the body never changes, and schedules ask often
            found = tensors_read(self.body)  # (a walk of it: 60% of scheduling a dense)
            object.__setattr__(self, "_input_tensors", found)
        return list(found)


@register_object("te.ExternOp")
class ExternOp(Operation):
    """Outputs computed by a TIR statement (usually a packed or extern call) over buffers."""

    _fields = {"name": str, "tag": str, "attrs": "any", "inputs": Tensor,
               "input_placeholders": Object, "output_placeholders": Object, "body": Object}

    def __init__(self, name, tag, attrs, inputs, input_placeholders, output_placeholders,
                 body) -> None:
        super().__init__(name, tag, dict(attrs or {}), list(inputs), list(input_placeholders),
                         list(output_placeholders), body)
        self._make_outputs([b.shape for b in output_placeholders],
                           [b.dtype for b in output_placeholders])

    @property
    def input_tensors(self) -> list[Tensor]:
        return list(self.inputs)


@register_object("te.ScanOp")
class ScanOp(Operation):
    """A recurrence over ``scan_axis``: ``state[t] = update(state[t-1], ...)``."""

    _fields = {"name": str, "tag": str, "attrs": "any", "scan_axis": _e.IterVar,
               "init": Tensor, "update": Tensor, "state_placeholder": Tensor, "inputs": Tensor}

    def __init__(self, name, tag, attrs, scan_axis, init, update, state_placeholder,
                 inputs) -> None:
        super().__init__(name, tag, dict(attrs or {}), scan_axis, list(init), list(update),
                         list(state_placeholder), list(inputs))
        self._make_outputs([s.shape for s in state_placeholder],
                           [s.dtype for s in state_placeholder])

    @property
    def input_tensors(self) -> list[Tensor]:
        out = list(self.init) + list(self.update)
        return out + [t for t in self.inputs if t not in out]
