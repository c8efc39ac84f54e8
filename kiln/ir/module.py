"""IRModule: the unit of compilation, a set of named functions and type definitions.

Entry point: :class:`IRModule` (``kiln.IRModule``). Functions are keyed by
:class:`~kiln.ir.expr.GlobalVar` and reachable by name (``mod["main"]``); algebraic data types are
keyed by :class:`~kiln.ir.type.GlobalTypeVar`. As in TVM, a module is the one mutable IR object:
``mod["f"] = func`` adds or replaces a function in place (without running type inference).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

from kiln.ir.adt import Constructor, TypeData
from kiln.ir.attrs import DictAttrs
from kiln.ir.expr import GlobalVar, RelayExpr
from kiln.ir.function import BaseFunc
from kiln.ir.hooks import get_hook
from kiln.ir.type import GlobalTypeVar
from kiln.runtime.error import TVMError
from kiln.runtime.object import Object, register_object

__all__ = ["IRModule", "GlobalNotFoundError"]


class GlobalNotFoundError(TVMError, KeyError):
    """A global function or type name is not defined in the module."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@register_object("IRModule")
class IRModule(Object):
    """A module of global functions and ADT definitions.

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> mod = IRModule.from_expr(relay.Function([x], x))
    >>> [gv.name_hint for gv in mod.get_global_vars()]
    ['main']
    """

    _fields = {"functions": BaseFunc, "type_definitions": TypeData, "attrs": DictAttrs}
    _extra_slots = ("_global_vars", "_global_type_vars", "_constructors")
    _sequal_ignore = ("span",)

    def __init__(self, functions: dict | None = None, type_definitions: dict | None = None,
                 attrs: DictAttrs | dict | None = None) -> None:
        if isinstance(attrs, dict):
            attrs = DictAttrs(attrs)
        super().__init__({}, {}, attrs)
        self._set("_global_vars", {})
        self._set("_global_type_vars", {})
        self._set("_constructors", {})
        for var, data in (type_definitions or {}).items():
            self._add_type(self._type_var_of(var, data), data, update=False)
        for var, func in (functions or {}).items():
            self.add(var, func)

    @classmethod
    def _from_fields(cls, values: dict[str, Any]) -> IRModule:
        # load_json: rebuild the name tables (not reflected) from the loaded maps.
        functions = dict(values.get("functions", None) or {})
        types = dict(values.get("type_definitions", None) or {})
        return cls(functions, types, values.get("attrs"))

    # -- construction -------------------------------------------------------------------
    @staticmethod
    def from_expr(expr: RelayExpr, functions: dict | None = None,
                  type_defs: dict | None = None) -> IRModule:
        """A module whose ``main`` is ``expr`` (wrapped in a Function of its free variables).

        Example
        -------
        >>> from kiln import relay
        >>> x = relay.var("x", shape=(2,))
        >>> [p.name_hint for p in IRModule.from_expr(x).get("main").params]
        ['x']
        """
        mod = IRModule(functions, type_defs)
        if not isinstance(expr, BaseFunc):  # the Relay layer supplies the free variables
            expr = get_hook("function_from_expr")(expr)
        main = mod._global_vars.get("main") or GlobalVar("main")
        mod.add(main, expr, update=True)
        return mod

    def _global_var_of(self, var: GlobalVar | str, create: bool) -> GlobalVar:
        if isinstance(var, GlobalVar):
            existing = self._global_vars.get(var.name_hint)
            if existing is not None and existing is not var:
                raise TVMError(
                    f"Duplicate global function name {var.name_hint!r}: the module already "
                    "holds a different GlobalVar with that name"
                )
            return var
        if not isinstance(var, str):
            raise TypeError(f"a global function is named by a str or GlobalVar, got {var!r}")
        existing = self._global_vars.get(var)
        if existing is not None:
            return existing
        if not create:
            raise GlobalNotFoundError(f"Cannot find global var {var!r} in the Module")
        return GlobalVar(var)

    def _type_var_of(self, var: GlobalTypeVar | str, data: TypeData) -> GlobalTypeVar:
        if isinstance(var, str):
            return self._global_type_vars.get(var) or data.header
        return var

    def add(self, var: GlobalVar | str, func: BaseFunc, update: bool = False) -> IRModule:
        """Add ``func`` under ``var``; TVMError if it exists and ``update`` is False."""
        if isinstance(func, TypeData):
            return self._add_type(self._type_var_of(var, func), func, update)
        if not isinstance(func, BaseFunc):
            raise TypeError(
                f"IRModule holds functions (relay.Function, tir.PrimFunc), got "
                f"{type(func).__name__}; wrap an expression with IRModule.from_expr"
            )
        gvar = self._global_var_of(var, create=True)
        if gvar in self.functions and not update:
            raise TVMError(f"Duplicate definition of global function {gvar.name_hint!r}")
        self._global_vars[gvar.name_hint] = gvar
        self.functions[gvar] = func
        return self

    def _add_type(self, var: GlobalTypeVar, data: TypeData, update: bool) -> IRModule:
        if var in self.type_definitions and not update:
            raise TVMError(f"Duplicate definition of type {var.name_hint!r}")
        self._global_type_vars[var.name_hint] = var
        self.type_definitions[var] = data
        # The top byte of a tag comes from the type's name so tags of different types differ;
        # the low bytes are the constructor's index (as TVM's RegisterConstructors).
        prefix = (zlib.crc32(var.name_hint.encode()) & 0x7F) << 24
        for index, ctor in enumerate(data.constructors):
            ctor._set("tag", prefix | index)
            self._constructors[ctor.tag] = ctor
        return self

    def __setitem__(self, var: GlobalVar | GlobalTypeVar | str, value: Any) -> None:
        if isinstance(value, TypeData):
            self._add_type(self._type_var_of(var, value), value, update=True)
        else:
            self.add(var, value, update=True)

    def update(self, other: IRModule) -> None:
        """Add (replacing) every function and type definition of ``other``."""
        for var, data in other.type_definitions.items():
            self._add_type(self._global_type_vars.get(var.name_hint, var), data, update=True)
        for var, func in other.functions.items():
            self.add(self._global_vars.get(var.name_hint, var), func, update=True)

    def update_func(self, var: GlobalVar, func: BaseFunc) -> None:
        """Replace the function bound to ``var``."""
        self.add(var, func, update=True)

    def remove(self, var: GlobalVar | str) -> None:
        """Remove a global function."""
        gvar = self._global_var_of(var, create=False)
        self.functions.pop(gvar, None)
        self._global_vars.pop(gvar.name_hint, None)

    # -- lookup ---------------------------------------------------------------------------
    def __getitem__(self, var: GlobalVar | GlobalTypeVar | str) -> Any:
        if isinstance(var, GlobalTypeVar):
            try:
                return self.type_definitions[var]
            except KeyError:
                raise GlobalNotFoundError(
                    f"Cannot find type {var.name_hint!r} in the Module") from None
        gvar = self._global_var_of(var, create=False) if isinstance(var, str) else var
        func = self.functions.get(gvar)
        if func is None:
            if isinstance(var, str) and var in self._global_type_vars:
                return self.type_definitions[self._global_type_vars[var]]
            raise GlobalNotFoundError(f"Cannot find global var {gvar.name_hint!r} in the Module")
        return func

    def get(self, var: GlobalVar | str, default: Any = None) -> Any:
        try:
            return self[var]
        except GlobalNotFoundError:
            return default

    def __contains__(self, var: GlobalVar | GlobalTypeVar | str) -> bool:
        if isinstance(var, str):
            return var in self._global_vars or var in self._global_type_vars
        if isinstance(var, GlobalTypeVar):
            return var in self.type_definitions
        return var in self.functions

    def __iter__(self) -> Iterator[GlobalVar]:
        return iter(list(self.functions))

    def __len__(self) -> int:
        return len(self.functions)

    def get_global_var(self, name: str) -> GlobalVar:
        """The GlobalVar named ``name``; TVMError (and KeyError) if there is none."""
        return self._global_var_of(name, create=False)

    def get_global_vars(self) -> list[GlobalVar]:
        """Every global function's GlobalVar, in insertion order."""
        return list(self.functions)

    def get_global_type_var(self, name: str) -> GlobalTypeVar:
        """The GlobalTypeVar of the ADT named ``name``."""
        try:
            return self._global_type_vars[name]
        except KeyError:
            raise GlobalNotFoundError(f"Cannot find global type var {name!r} in the Module") \
                from None

    def get_global_type_vars(self) -> list[GlobalTypeVar]:
        return list(self.type_definitions)

    def get_constructor(self, tag: int) -> Constructor:
        """The constructor with ``tag`` (tags are assigned when a TypeData is added)."""
        try:
            return self._constructors[tag]
        except KeyError:
            raise GlobalNotFoundError(f"There is no constructor with tag {tag}") from None

    def get_type(self, name: str) -> list:
        """``[global type var, *constructors]`` of the ADT named ``name`` (TVM's order)."""
        var = self.get_global_type_var(name)
        return [var, *self.type_definitions[var].constructors]

    # -- copies and attributes ---------------------------------------------------------
    def copy(self) -> IRModule:
        """A shallow copy: same function objects, independent tables."""
        mod = IRModule(attrs=self.attrs)
        mod.update(self)
        return mod

    def with_attr(self, key: str, value: Any) -> IRModule:
        """A copy of the module with module attribute ``key`` set to ``value``."""
        mod = self.copy()
        old = dict(self.attrs.data) if self.attrs is not None else {}
        old[key] = value
        mod._set("attrs", DictAttrs(old))
        return mod

    def get_attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default) if self.attrs is not None else default

    def import_from_std(self, file_to_import: str) -> None:
        """Add the definitions of a standard library file (``prelude.rly``) to the module."""
        get_hook("import_std")(self, file_to_import)

    # -- printing -------------------------------------------------------------------------
    def astext(self, show_meta_data: bool = True) -> str:
        """The module in the Relay text format."""
        return get_hook("astext")(self, show_meta_data)

    def __str__(self) -> str:
        return self.astext()

    def __repr__(self) -> str:
        return self.astext()
