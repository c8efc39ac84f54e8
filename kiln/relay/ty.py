"""Relay's names for the types of :mod:`kiln.ir.type` (TVM's ``tvm.relay.ty``).

Entry points: everything TVM's ``relay.ty`` offers — :class:`TensorType`, :class:`TupleType`,
:class:`FuncType`, :class:`TypeVar`, :class:`GlobalTypeVar`, :class:`IncompleteType`,
:class:`TypeCall`, :class:`RefType`, :class:`TypeRelation`, :class:`Any`, :func:`ShapeVar`,
:func:`scalar_type`, :func:`is_dynamic`.
"""

from __future__ import annotations

from kiln.ir.type import (
    Any,
    FuncType,
    GlobalTypeVar,
    IncompleteType,
    PrimType,
    RelayRefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeConstraint,
    TypeKind,
    TypeRelation,
    TypeVar,
    is_dynamic,
)

__all__ = ["Type", "TensorType", "TupleType", "FuncType", "TypeVar", "GlobalTypeVar",
           "IncompleteType", "TypeCall", "RefType", "RelayRefType", "TypeRelation",
           "TypeConstraint", "TypeKind", "Any", "PrimType", "ShapeVar", "scalar_type",
           "is_dynamic", "TypeParam"]

RefType = RelayRefType
TypeParam = TypeVar


def ShapeVar(name: str) -> TypeVar:  # noqa: N802 (TVM's name)
    """A type variable that ranges over shapes."""
    return TypeVar(name, kind=TypeKind.ShapeVar)


def scalar_type(dtype: str) -> TensorType:
    """The type of a 0-d tensor of ``dtype``.

    Example
    -------
    >>> scalar_type("int32")
    Tensor[(), int32]
    """
    return TensorType((), dtype)
