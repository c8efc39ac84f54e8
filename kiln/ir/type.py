"""The type language shared by Relay and TIR (TVM's ``tvm.ir.type`` / ``tensor_type``).

Entry points: :class:`TensorType`, :class:`TupleType`, :class:`FuncType`, :class:`TypeVar`,
:class:`GlobalTypeVar`, :class:`IncompleteType`, :class:`TypeCall`, :class:`RelayRefType`,
:class:`TypeRelation`, :class:`PrimType`, :class:`PointerType`, :class:`TypeKind` and
:class:`Any` (the unknown dimension of a dynamic shape, printed ``?``).

Types compare with ``==`` structurally (as in TVM) and hash consistently with that, so they can
key dictionaries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any as _AnyValue

from kiln.ir.base import Span
from kiln.ir.expr import IntImm, PrimExpr
from kiln.runtime.error import TVMError
from kiln.runtime.object import Object, register_object

__all__ = [
    "TypeKind", "Type", "PrimType", "PointerType", "TensorType", "TupleType", "FuncType",
    "TypeVar", "GlobalTypeVar", "IncompleteType", "TypeCall", "RelayRefType",
    "TypeConstraint", "TypeRelation", "Any", "shape_to_prim_exprs", "is_dynamic",
]


class TypeKind(IntEnum):
    """What a type variable ranges over (TVM's numbering)."""

    Type = 0
    ShapeVar = 1
    BaseType = 2
    Shape = 3
    Constraint = 4
    AdtHandle = 5
    TypeData = 6


@register_object("Type")
class Type(Object):
    """Base of all types. ``==`` is structural equality."""

    _fields = {"span": Span}
    _sequal_ignore = ("span",)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Type):
            return False
        from kiln.ir.structural import structural_equal

        return structural_equal(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        from kiln.ir.structural import structural_hash

        return structural_hash(self)

    def __str__(self) -> str:
        return repr(self)


@register_object("PrimType")
class PrimType(Type):
    """The type of a scalar TIR value of ``dtype``."""

    _fields = {"dtype": "dtype"}

    def __init__(self, dtype: str, span: Span | None = None) -> None:
        super().__init__(span, str(dtype))

    def __repr__(self) -> str:
        return str(self.dtype)


@register_object("PointerType")
class PointerType(Type):
    """A pointer to ``element_type`` in ``storage_scope`` (TIR buffer data pointers)."""

    _fields = {"element_type": Type, "storage_scope": str}

    def __init__(self, element_type: Type, storage_scope: str = "",
                 span: Span | None = None) -> None:
        super().__init__(span, element_type, storage_scope)

    def __repr__(self) -> str:
        scope = f", {self.storage_scope!r}" if self.storage_scope else ""
        return f"Pointer({self.element_type!r}{scope})"


@register_object("tir.Any")
class Any(PrimExpr):
    """An unknown (dynamic) dimension: ``relay.Any()``; its dtype is int32."""

    def __init__(self, span: Span | None = None) -> None:
        super().__init__("int32", span)

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return "?"


def _to_dim(dim: _AnyValue) -> PrimExpr:
    if isinstance(dim, PrimExpr):
        return dim
    if isinstance(dim, bool):
        raise TypeError(f"a shape dimension must be an integer, got {dim!r}")
    try:
        value = int(dim)  # numpy integers, IntImm-like objects
    except (TypeError, ValueError):
        raise TypeError(f"a shape dimension must be an integer or PrimExpr, got {dim!r}") \
            from None
    if value != dim:
        raise TypeError(f"a shape dimension must be an integer, got {dim!r}")
    if value < 0:
        raise ValueError(f"a shape dimension must be non-negative, got {value}")
    return IntImm("int32" if value < 2**31 else "int64", value)


_DTYPE_NAMES: dict[str, str] = {}


def _dtype_name(dtype: _AnyValue) -> str:
    """The canonical name of a dtype; TVMError for an unknown one (checked at the boundary)."""
    text = str(dtype)
    name = _DTYPE_NAMES.get(text)
    if name is None:
        from kiln.runtime.dtype import DataType

        name = _DTYPE_NAMES[text] = str(DataType(text))
    return name


def shape_to_prim_exprs(shape: _AnyValue) -> tuple[PrimExpr, ...]:
    """Normalize a user shape (ints, IntImm, Any, tir Vars) to a tuple of PrimExpr."""
    if shape is None:
        return ()
    if isinstance(shape, int | PrimExpr):
        shape = (shape,)
    return tuple(_to_dim(d) for d in shape)


@register_object("relay.TensorType")
class TensorType(Type):
    """The type of a tensor: ``TensorType((1, 10), "float32")``; shape ``()`` is a scalar.

    Example
    -------
    >>> t = TensorType((1, 10), "float32")
    >>> t.concrete_shape, t.dtype
    ((1, 10), 'float32')
    """

    _fields = {"shape": PrimExpr, "dtype": "dtype"}

    def __init__(self, shape: Sequence[_AnyValue] = (), dtype: str = "float32",
                 span: Span | None = None) -> None:
        super().__init__(span, shape_to_prim_exprs(shape), _dtype_name(dtype))

    @property
    def concrete_shape(self) -> tuple[int, ...]:
        """The shape as Python ints; TVMError if any dimension is symbolic or ``Any``."""
        dims = []
        for dim in self.shape:
            if not isinstance(dim, IntImm):
                raise TVMError(f"{self!r} has a dynamic shape; it has no concrete shape")
            dims.append(dim.value)
        return tuple(dims)

    @property
    def is_dynamic(self) -> bool:
        """Whether some dimension is not a constant."""
        return any(not isinstance(d, IntImm) for d in self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        dims = ", ".join(repr(d) for d in self.shape)
        if len(self.shape) == 1:
            dims += ","
        return f"Tensor[({dims}), {self.dtype}]"


@register_object("TupleType")
class TupleType(Type):
    """The type of a tuple: ``TupleType([t1, t2])``; ``TupleType([])`` is unit."""

    _fields = {"fields": Type}

    def __init__(self, fields: Sequence[Type] = (), span: Span | None = None) -> None:
        super().__init__(span, tuple(fields))

    def __repr__(self) -> str:
        inner = ", ".join(repr(f) for f in self.fields)
        return f"({inner},)" if len(self.fields) == 1 else f"({inner})"


def is_dynamic(ty: Type) -> bool:
    """Whether a tensor shape anywhere inside ``ty`` has a non-constant dimension."""
    if isinstance(ty, TensorType):
        return ty.is_dynamic
    if isinstance(ty, TupleType):
        return any(is_dynamic(f) for f in ty.fields)
    if isinstance(ty, FuncType):
        return any(is_dynamic(t) for t in (*ty.arg_types, ty.ret_type))
    if isinstance(ty, TypeCall):
        return any(is_dynamic(t) for t in ty.args)
    if isinstance(ty, RelayRefType):
        return is_dynamic(ty.value)
    return False


@register_object("TypeVar")
class TypeVar(Type):
    """A type variable bound by a polymorphic :class:`FuncType` or a :class:`TypeData`."""

    _fields = {"name_hint": str, "kind": int}
    _sequal_var = True
    _sequal_ignore = ("span", "name_hint")

    def __init__(self, name_hint: str, kind: int = TypeKind.Type,
                 span: Span | None = None) -> None:
        super().__init__(span, name_hint, int(kind))

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __repr__(self) -> str:
        return self.name_hint


@register_object("GlobalTypeVar")
class GlobalTypeVar(Type):
    """The name of a global algebraic data type in an IRModule (e.g. ``List``)."""

    _fields = {"name_hint": str, "kind": int}

    def __init__(self, name_hint: str, kind: int = TypeKind.AdtHandle,
                 span: Span | None = None) -> None:
        super().__init__(span, name_hint, int(kind))

    def __call__(self, *args: Type) -> TypeCall:
        return TypeCall(self, list(args))

    def __repr__(self) -> str:
        return self.name_hint


@register_object("IncompleteType")
class IncompleteType(Type):
    """A placeholder type that type inference will solve."""

    _fields = {"kind": int}
    _sequal_var = True

    def __init__(self, kind: int = TypeKind.Type, span: Span | None = None) -> None:
        super().__init__(span, int(kind))

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __repr__(self) -> str:
        return f"?t{id(self) % 10007}"


@register_object("TypeConstraint")
class TypeConstraint(Type):
    """Base of constraints attached to a :class:`FuncType`."""


@register_object("TypeRelation")
class TypeRelation(TypeConstraint):
    """A relation over types solved by a Python callable ``func(types, num_inputs, attrs)``.

    Operator type relations registered under ``FTVMTypeRelation`` use the simpler
    ``rel(arg_types, attrs) -> out_type`` form; this node is for relations a FuncType carries.
    """

    _fields = {"func": "any", "args": Type, "num_inputs": int, "attrs": Object}

    def __init__(self, func: Callable, args: Sequence[Type], num_inputs: int, attrs=None,
                 span: Span | None = None) -> None:
        super().__init__(span, func, tuple(args), int(num_inputs), attrs)

    def __repr__(self) -> str:
        name = getattr(self.func, "__name__", "rel")
        return f"{name}({', '.join(repr(a) for a in self.args)})"


@register_object("FuncType")
class FuncType(Type):
    """The type of a function: ``fn<type_params>(arg_types) -> ret_type``."""

    _fields = {"arg_types": Type, "ret_type": Type, "type_params": TypeVar,
               "type_constraints": TypeConstraint}
    _sequal_def_fields = ("type_params",)

    def __init__(self, arg_types: Sequence[Type], ret_type: Type,
                 type_params: Sequence[TypeVar] | None = None,
                 type_constraints: Sequence[TypeConstraint] | None = None,
                 span: Span | None = None) -> None:
        super().__init__(span, tuple(arg_types), ret_type, tuple(type_params or ()),
                         tuple(type_constraints or ()))

    def __repr__(self) -> str:
        params = f"<{', '.join(repr(t) for t in self.type_params)}>" if self.type_params else ""
        args = ", ".join(repr(t) for t in self.arg_types)
        return f"fn {params}({args}) -> {self.ret_type!r}"


@register_object("TypeCall")
class TypeCall(Type):
    """An ADT applied to type arguments: ``List[Tensor[(), int32]]``."""

    _fields = {"func": Type, "args": Type}

    def __init__(self, func: Type, args: Sequence[Type], span: Span | None = None) -> None:
        super().__init__(span, func, tuple(args))

    def __repr__(self) -> str:
        return f"{self.func!r}[{', '.join(repr(a) for a in self.args)}]"


@register_object("relay.RefType")
class RelayRefType(Type):
    """The type of a mutable reference cell holding a ``value`` type."""

    _fields = {"value": Type}

    def __init__(self, value: Type, span: Span | None = None) -> None:
        super().__init__(span, value)

    def __repr__(self) -> str:
        return f"Ref[{self.value!r}]"
