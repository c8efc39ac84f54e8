"""The Relay prelude: List, Option, Tree, nat and the functions over them.

Entry points: :class:`Prelude` (TVM's ``relay.prelude.Prelude``) and :func:`load_prelude`.
The definitions live in ``std/prelude.rly`` in the Relay text format and are parsed once per
module they are added to.

Example
-------
>>> from kiln.relay.prelude import Prelude
>>> p = Prelude()
>>> List, Cons, Nil = p.mod.get_type("List")
>>> p.mod.get_global_var("map").name_hint
'map'
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from kiln.ir.module import IRModule

__all__ = ["Prelude", "load_prelude", "import_into", "PRELUDE_PATH"]

PRELUDE_PATH = Path(__file__).parent / "std" / "prelude.rly"

# Functions of the prelude, exposed as attributes of Prelude (p.map, p.nth, ...).
_FUNCTIONS = (
    "id", "compose", "flip", "hd", "tl", "nth", "update", "map", "foldl", "foldr", "foldr1",
    "concat", "filter", "zip", "rev", "length", "sum", "unfoldr", "tmap", "size", "iterate",
    "count", "nat_add",
)
_TYPES = ("List", "Option", "Tree", "nat")


@lru_cache(maxsize=1)
def _prelude_text() -> str:
    return PRELUDE_PATH.read_text()


def load_prelude(mod: IRModule) -> IRModule:
    """Add the prelude's types and functions to ``mod`` (skipping names it already has)."""
    from kiln.relay.parser import parse

    std = parse(_prelude_text(), str(PRELUDE_PATH))
    names = {gv.name_hint for gv in mod.get_global_vars()}
    type_names = {gtv.name_hint for gtv in mod.type_definitions}
    for header, data in std.type_definitions.items():
        if header.name_hint not in type_names:
            mod[header] = data
    for gvar, func in std.functions.items():
        if gvar.name_hint not in names:
            mod[gvar] = func
    return mod


def import_into(mod: IRModule, file_to_import: str) -> IRModule:
    """``IRModule.import_from_std``: add a standard library file's definitions to ``mod``."""
    if Path(file_to_import).name != PRELUDE_PATH.name:
        from kiln.runtime.error import TVMError

        raise TVMError(f"no standard library file {file_to_import!r}; kiln ships "
                       f"{PRELUDE_PATH.name!r}")
    return load_prelude(mod)


class Prelude:
    """The prelude loaded into a module: ``p.mod``, ``p.get_type("List")``, ``p.map`` …"""

    def __init__(self, mod: IRModule | None = None) -> None:
        self.mod = mod if mod is not None else IRModule()
        load_prelude(self.mod)
        for name in _FUNCTIONS:
            setattr(self, name, self.mod.get_global_var(name))
        self.List, self.Cons, self.Nil = self.get_type("List")
        self.Option, self.Some, self.none = self.get_type("Option")
        self.Tree, self.Rose = self.get_type("Tree")
        self.nat, self.z, self.s = self.get_type("nat")
        # TVM's lower-case aliases
        self.cons, self.nil, self.l = self.Cons, self.Nil, self.List
        self.optional, self.some = self.Option, self.Some
        self.tree, self.rose = self.Tree, self.Rose

    def get_type(self, canonical: str, dtype: str | None = None) -> tuple:
        """``(type_var, *constructors)`` of an ADT of the prelude by name."""
        if canonical not in _TYPES:
            raise KeyError(f"the prelude has no type {canonical!r}; it has {list(_TYPES)}")
        gtv = self.mod.get_global_type_var(canonical)
        data = self.mod.type_definitions[gtv]
        return (gtv, *data.constructors)

    def get_global_var(self, canonical: str, dtype: str | None = None):
        return self.mod.get_global_var(canonical)

    def get_ctor(self, ty_name: str, canonical: str, dtype: str | None = None):
        for ctor in self.get_type(ty_name)[1:]:
            if ctor.name_hint == canonical:
                return ctor
        raise KeyError(f"type {ty_name} has no constructor {canonical!r}")
