"""Kind checking of types (TVM's ``relay.analysis.check_kind``).

Entry point: :func:`check_kind`.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.adt import TypeData
from kiln.ir.type import (
    FuncType,
    GlobalTypeVar,
    IncompleteType,
    RelayRefType,
    TensorType,
    TupleType,
    TypeCall,
    TypeKind,
    TypeRelation,
    TypeVar,
)
from kiln.runtime.error import TVMError

__all__ = ["check_kind"]


def _expect(ty: Any, kind: TypeKind, mod: Any, where: str) -> None:
    got = check_kind(ty, mod)
    if got != kind:
        raise TVMError(f"kind error in {where}: {ty!r} has kind {got.name}, expected {kind.name}")


def _func_kind(ty: FuncType, mod: Any) -> TypeKind:
    for arg in ty.arg_types:
        _expect(arg, TypeKind.Type, mod, f"argument of {ty!r}")
    _expect(ty.ret_type, TypeKind.Type, mod, f"return type of {ty!r}")
    for constraint in ty.type_constraints:
        check_kind(constraint, mod)
    return TypeKind.Type


def _type_call_kind(ty: TypeCall, mod: Any) -> TypeKind:
    _expect(ty.func, TypeKind.AdtHandle, mod, f"the head of {ty!r}")
    for arg in ty.args:
        _expect(arg, TypeKind.Type, mod, f"an argument of {ty!r}")
    if mod is not None and ty.func in mod.type_definitions:
        arity = len(mod.type_definitions[ty.func].type_vars)
        if arity != len(ty.args):
            raise TVMError(
                f"kind error: {ty.func!r} takes {arity} type arguments, got {len(ty.args)}")
    return TypeKind.Type


def _tuple_kind(ty: TupleType, mod: Any) -> TypeKind:
    for field in ty.fields:
        _expect(field, TypeKind.Type, mod, f"a field of {ty!r}")
    return TypeKind.Type


def _ref_kind(ty: RelayRefType, mod: Any) -> TypeKind:
    _expect(ty.value, TypeKind.Type, mod, repr(ty))
    return TypeKind.Type


def _relation_kind(ty: TypeRelation, mod: Any) -> TypeKind:
    for arg in ty.args:
        _expect(arg, TypeKind.Type, mod, f"an argument of relation {ty!r}")
    return TypeKind.Constraint


_KIND_RULES = {
    TensorType: lambda ty, mod: TypeKind.Type,
    TupleType: _tuple_kind,
    FuncType: _func_kind,
    TypeVar: lambda ty, mod: TypeKind(ty.kind),
    IncompleteType: lambda ty, mod: TypeKind(ty.kind),
    GlobalTypeVar: lambda ty, mod: TypeKind(ty.kind),
    TypeCall: _type_call_kind,
    RelayRefType: _ref_kind,
    TypeRelation: _relation_kind,
    TypeData: lambda ty, mod: TypeKind.TypeData,
}


def check_kind(t: Any, mod: Any = None) -> TypeKind:
    """The kind of type ``t``; TVMError if ``t`` is ill-kinded.

    Example
    -------
    >>> check_kind(TupleType([TensorType((1,))]))
    <TypeKind.Type: 0>
    """
    rule = _KIND_RULES.get(type(t))
    if rule is None:
        raise TVMError(f"check_kind: {t!r} is not a type")
    return rule(t, mod)
