"""The Relay prelude: List, Option, Tree, nat and the functions over them.

Entry points: :class:`Prelude` (TVM's ``relay.prelude.Prelude``) and :func:`load_prelude`.
The definitions live in ``std/prelude.rly`` in the Relay text format and are parsed once per
module they are added to. A Prelude also holds TVM's tensor arrays for nine dtypes
(:mod:`kiln.relay.tensor_array`: ``p.get_global_var("tensor_array", "float32")``).

Example
-------
>>> from kiln.relay.prelude import Prelude
>>> p = Prelude()
>>> List, Cons, Nil = p.mod.get_type("List")
>>> p.mod.get_global_var("map").name_hint
'map'
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from kiln.ir.module import IRModule
from kiln.relay.tensor_array import (
    StaticTensorArrayOps,
    TensorArrayOps,
    get_tensor_array_shape,
    static_tensor_array_name,
)

__all__ = ["Prelude", "load_prelude", "import_into", "PRELUDE_PATH", "TensorArrayOps",
           "StaticTensorArrayOps", "get_tensor_array_shape"]

PRELUDE_PATH = Path(__file__).parent / "std" / "prelude.rly"
STD_FILES = ("prelude.rly", "nat.rly")

# Functions of the prelude, exposed as attributes of Prelude (p.map, p.nth, ...).
_FUNCTIONS = (
    "id", "compose", "flip", "hd", "tl", "nth", "update", "map", "foldl", "foldr", "foldr1",
    "concat", "filter", "zip", "rev", "length", "sum", "unfoldr", "tmap", "size", "iterate",
    "count", "nat_add", "map_accuml", "map_accumr", "unfoldl",
)
_TYPES = ("List", "Option", "Tree", "nat")
# TVM's Prelude registers tensor arrays of these dtypes when it loads.
TENSOR_ARRAY_DTYPES = ("float32", "float16", "float64", "int32", "uint8", "int8", "int16",
                       "uint16", "int64")


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
    """``IRModule.import_from_std``: add a standard library file's definitions to ``mod``.

    kiln ships ``prelude.rly`` and ``nat.rly`` (which needs, and so first loads, the prelude).
    """
    name = Path(file_to_import).name
    if name not in STD_FILES:
        from kiln.runtime.error import TVMError

        raise TVMError(f"no standard library file {file_to_import!r}; kiln ships "
                       f"{sorted(STD_FILES)}")
    load_prelude(mod)
    if name != PRELUDE_PATH.name:
        from kiln.relay.parser import parse

        path = PRELUDE_PATH.parent / name
        std = parse(path.read_text(), str(path), init_module=_without(mod, path))
        names = {gv.name_hint for gv in mod.get_global_vars()}
        for gvar, func in std.functions.items():
            if gvar.name_hint not in names:
                mod[gvar] = func
    return mod


def _without(mod: IRModule, path: Path) -> IRModule:
    """``mod`` less the functions ``path`` defines (a second import must not clash)."""
    defined = set(re.findall(r"^def @(\w+)", path.read_text(), re.M))
    rest = IRModule()
    rest.update(mod)
    for gvar in list(rest.get_global_vars()):
        if gvar.name_hint in defined:
            rest.remove(gvar)
    return rest


class Prelude:
    """The prelude loaded into a module: ``p.mod``, ``p.get_type("List")``, ``p.map`` …"""

    def __init__(self, mod: IRModule | None = None) -> None:
        self.mod = mod if mod is not None else IRModule()
        load_prelude(self.mod)
        for name in _FUNCTIONS:
            setattr(self, name, self.mod.get_global_var(name))
        self.List, self.Cons, self.Nil = self.mod.get_type("List")
        self.Option, self.Some, self.none = self.mod.get_type("Option")
        self.Tree, self.Rose = self.mod.get_type("Tree")
        self.nat, self.z, self.s = self.mod.get_type("nat")
        # TVM's lower-case aliases
        self.cons, self.nil, self.l = self.Cons, self.Nil, self.List
        self.optional, self.some = self.Option, self.Some
        self.tree, self.rose = self.Tree, self.Rose
        for dtype in TENSOR_ARRAY_DTYPES:
            TensorArrayOps(self, dtype).register()

    # -- TVM's dtype-qualified names (tensor arrays) ---------------------------------------
    def get_name(self, canonical: str, dtype: str) -> str:
        """``tensor_t`` -> ``tensor_{dtype}_t``; any other name -> ``{canonical}_{dtype}``."""
        return f"tensor_{dtype}_t" if canonical == "tensor_t" else f"{canonical}_{dtype}"

    def get_type(self, canonical: str, dtype: str | None = None):
        """With ``dtype``: the GlobalTypeVar of ``get_name(canonical, dtype)`` (TVM).

        Without: ``(type_var, *constructors)`` of one of the prelude's own ADTs.
        """
        if dtype is not None:
            return self.mod.get_global_type_var(self.get_name(canonical, dtype))
        if canonical not in _TYPES:
            raise KeyError(f"the prelude has no type {canonical!r}; it has {list(_TYPES)}")
        return tuple(self.mod.get_type(canonical))

    def get_global_var(self, canonical: str, dtype: str | None = None):
        """The GlobalVar ``canonical`` (qualified by ``dtype`` when given, as in TVM)."""
        return self.mod.get_global_var(canonical if dtype is None
                                       else self.get_name(canonical, dtype))

    def get_ctor(self, ty_name: str, canonical: str, dtype: str | None = None):
        """Constructor ``canonical`` (``_dtype``-qualified when given) of ADT ``ty_name``."""
        name = canonical if dtype is None else self.get_name(canonical, dtype)
        for ctor in self.mod.get_type(ty_name)[1:]:
            if ctor.name_hint == name:
                return ctor
        raise KeyError(f"type {ty_name} has no constructor {name!r}")

    def get_tensor_ctor(self, canonical: str, dtype: str):
        """Constructor ``canonical`` (``tensor0`` … ``tensor6``, ``tensor_nil``) of dtype."""
        return self.get_ctor(self.get_name("tensor_t", dtype), canonical, dtype)

    # -- static (fixed-shape) tensor arrays -------------------------------------------------
    def get_name_static(self, canonical: str, dtype: str, shape, batch_dim=None) -> str:
        return static_tensor_array_name(canonical, dtype, shape, batch_dim)

    def get_global_var_static(self, canonical: str, dtype: str, shape, batch_dim=None):
        return self.mod.get_global_var(self.get_name_static(canonical, dtype, shape, batch_dim))

    def get_type_static(self, canonical: str, dtype: str, shape):
        return self.mod.get_global_type_var(self.get_name_static(canonical, dtype, shape))

    def get_ctor_static(self, ty_name: str, name: str, dtype: str, shape):
        return self.get_ctor(self.get_name_static(ty_name, dtype, shape),
                             self.get_name_static(name, dtype, shape))

    def get_tensor_ctor_static(self, name: str, dtype: str, shape):
        return self.get_ctor_static("tensor_t", name, dtype, shape)
