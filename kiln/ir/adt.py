"""Algebraic data types (TVM's ``tvm.ir.adt``): :class:`TypeData` and :class:`Constructor`.

A ``TypeData`` declares a type such as ``List[a] = Cons(a, List[a]) | Nil``; it is added to an
IRModule under its :class:`~kiln.ir.type.GlobalTypeVar`, which assigns each constructor a tag.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.ir.base import Span
from kiln.ir.expr import RelayExpr
from kiln.ir.hooks import get_hook
from kiln.ir.type import GlobalTypeVar, Type, TypeVar
from kiln.runtime.object import Object, register_object

__all__ = ["Constructor", "TypeData"]


@register_object("relay.Constructor")
class Constructor(RelayExpr):
    """A constructor of an ADT; calling it with arguments builds a Relay call.

    ``tag`` is set when the owning TypeData is added to a module (its index among the
    constructors unless set explicitly).
    """

    _fields = {"name_hint": str, "inputs": Type, "belong_to": GlobalTypeVar, "tag": int}
    # A constructor is a reference to a global definition: compared by name and owner (its
    # TypeData compares the signatures).
    _sequal_ignore = ("span", "tag", "inputs")

    def __init__(self, name_hint: str, inputs: Sequence[Type], belong_to: GlobalTypeVar,
                 span: Span | None = None) -> None:
        super().__init__(span, name_hint, tuple(inputs), belong_to, -1)
        self.checked_type_ = None

    def __call__(self, *args):
        return get_hook("make_call")(self, args)  # building a call node is Relay's job

    def __repr__(self) -> str:
        return self.name_hint


@register_object("relay.TypeData")
class TypeData(Type):
    """The definition of an ADT: its header, type parameters and constructors.

    Example
    -------
    >>> from kiln.ir.type import TypeVar, TypeCall
    >>> lst, a = GlobalTypeVar("List"), TypeVar("a")
    >>> cons = Constructor("Cons", [a, TypeCall(lst, [a])], lst)
    >>> nil = Constructor("Nil", [], lst)
    >>> [c.name_hint for c in TypeData(lst, [a], [cons, nil]).constructors]
    ['Cons', 'Nil']
    """

    _fields = {"header": GlobalTypeVar, "type_vars": TypeVar, "constructors": Constructor}
    _sequal_def_fields = ("type_vars",)

    def __init__(self, header: GlobalTypeVar, type_vars: Sequence[TypeVar],
                 constructors: Sequence[Constructor], span: Span | None = None) -> None:
        super().__init__(span, header, tuple(type_vars), tuple(constructors))
        for tag, ctor in enumerate(self.constructors):
            if ctor.tag == -1:
                Object._set(ctor, "tag", tag)

    def __repr__(self) -> str:
        params = f"[{', '.join(repr(v) for v in self.type_vars)}]" if self.type_vars else ""
        ctors = " | ".join(f"{c.name_hint}({', '.join(repr(t) for t in c.inputs)})"
                           for c in self.constructors)
        return f"type {self.header!r}{params} = {ctors}"
