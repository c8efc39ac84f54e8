"""The Object system: one base class for IR nodes and runtime objects.

Entry points: :class:`Object`, :func:`register_object`, :func:`type_index_of`,
:func:`type_key_to_class`, :func:`fields_of`.

Every kiln object has a ``type_key`` (``"relay.Var"``, ``"runtime.ADT"``) and a type index
allocated in a global type table that records the parent/child relation, as TVM's
``Object::_GetOrAllocRuntimeTypeIndex`` does. Fields are *reflected*: a class declares them
once, as an ordered ``_fields`` mapping of field name to field kind::

    @register_object("relay.Var")
    class Var(RelayExpr):
        _fields = {"vid": Id, "type_annotation": Type, "span": Span}

From that one declaration the metaclass makes ``__slots__``; ``save_json``/``load_json``,
structural equality/hash and ``repr`` read the fields through :func:`fields_of`.

A field kind is one of ``int``, ``float``, ``bool``, ``str``, ``bytes``, ``"dtype"``
(a :class:`~kiln.runtime.DataType` or its string), ``"ndarray"``, ``"any"`` (any value the
serializer understands) or an :class:`Object` subclass (the value is that object, a Python
list/tuple of objects stored as an Array, a dict stored as a Map, or None).

Objects are immutable once built: ``__setattr__`` raises, except for names a class lists in
``_mutable_fields`` (caches such as ``checked_type_``). Builders set fields with
:meth:`Object._set` (or the generic ``__init__``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Object",
    "TypeInfo",
    "register_object",
    "type_index_of",
    "type_key_to_class",
    "type_key_to_index",
    "fields_of",
    "register_node_type_modules",
    "import_node_type_modules",
    "node_type_modules",
    "is_instance_index",
]

_MISSING = object()


@dataclass
class TypeInfo:
    """One row of the global type table."""

    index: int
    key: str
    parent_index: int
    cls: type | None = None
    children: list[int] = field(default_factory=list)


# TVM's static type indices for the root and runtime containers (object.h); dynamic
# indices start after them.
STATIC_TYPE_INDEX = {
    "runtime.Object": 0,
    "runtime.Module": 1,
    "runtime.NDArray": 2,
    "runtime.String": 3,
    "runtime.Array": 4,
    "runtime.Map": 5,
    "runtime.ShapeTuple": 6,
    "runtime.PackedFunc": 7,
    "runtime.DiscoDRef": 8,
    "runtime.RPCObjectRef": 9,
    "runtime.Closure": 10,
    "runtime.ADT": 11,
}
_FIRST_DYNAMIC_INDEX = 64

_TYPE_TABLE: dict[int, TypeInfo] = {}
_KEY_TO_INDEX: dict[str, int] = {}
_next_dynamic_index = _FIRST_DYNAMIC_INDEX


def _allocate_type_index(key: str, parent_index: int, cls: type | None) -> int:
    global _next_dynamic_index
    if key in _KEY_TO_INDEX:
        info = _TYPE_TABLE[_KEY_TO_INDEX[key]]
        if info.cls is not None and cls is not None and info.cls is not cls:
            if info.cls.__qualname__ != cls.__qualname__ or info.cls.__module__ != cls.__module__:
                raise ValueError(
                    f"type_key {key!r} is already registered by "
                    f"{info.cls.__module__}.{info.cls.__qualname__}"
                )
        info.cls = cls  # a reload of the same module replaces the class
        return info.index
    if key in STATIC_TYPE_INDEX:
        index = STATIC_TYPE_INDEX[key]
    else:
        index = _next_dynamic_index
        _next_dynamic_index += 1
    _TYPE_TABLE[index] = TypeInfo(index, key, parent_index, cls)
    _KEY_TO_INDEX[key] = index
    if parent_index != index and parent_index in _TYPE_TABLE:
        _TYPE_TABLE[parent_index].children.append(index)
    return index


def type_key_to_index(key: str) -> int:
    """The type index registered for ``key``; KeyError if none."""
    try:
        return _KEY_TO_INDEX[key]
    except KeyError:
        raise KeyError(f"no object type is registered with type_key {key!r}") from None


# Modules above the runtime that define node types (or register what nodes name, such as
# operators). The kiln package lists them when it is imported; this layer cannot import
# upward, so lookups import them on demand and a fresh process still finds every type.
_NODE_TYPE_MODULES: list[str] = []
_node_type_modules_imported = 0


def register_node_type_modules(*modules: str) -> None:
    """Name modules that define node types; :func:`import_node_type_modules` imports them."""
    _NODE_TYPE_MODULES.extend(m for m in modules if m not in _NODE_TYPE_MODULES)


def node_type_modules() -> tuple[str, ...]:
    """The modules named so far by :func:`register_node_type_modules`."""
    return tuple(_NODE_TYPE_MODULES)


def import_node_type_modules() -> None:
    """Import every module named by :func:`register_node_type_modules` (once each)."""
    global _node_type_modules_imported
    while _node_type_modules_imported < len(_NODE_TYPE_MODULES):
        importlib.import_module(_NODE_TYPE_MODULES[_node_type_modules_imported])
        _node_type_modules_imported += 1


def type_key_to_class(key: str) -> type:
    """The Python class registered for ``key`` (used by load_json).

    A key not registered yet makes the node type modules load first, so a fresh process
    resolves every kiln node type.
    """
    if key not in _KEY_TO_INDEX:
        import_node_type_modules()
    cls = _TYPE_TABLE[type_key_to_index(key)].cls
    if cls is None:
        raise KeyError(f"type_key {key!r} has no Python class")
    return cls


def type_index_of(obj_or_cls: Any) -> int:
    cls = obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)
    return cls._type_index


def is_instance_index(index: int, parent_index: int) -> bool:
    """Whether type ``index`` derives from ``parent_index`` by walking the type table."""
    while True:
        if index == parent_index:
            return True
        info = _TYPE_TABLE.get(index)
        if info is None or info.parent_index == index:
            return False
        index = info.parent_index


def fields_of(obj_or_cls: Any) -> dict[str, Any]:
    """Ordered mapping field name -> kind of an object or class, base fields first."""
    cls = obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)
    return cls._all_fields


class _ObjectMeta(type):
    """Makes ``__slots__`` from ``_fields`` so a field is declared once."""

    def __new__(mcs, name, bases, ns, **kw):
        own = dict(ns.get("_fields", {}))
        inherited: dict[str, Any] = {}
        for base in reversed(bases):
            inherited.update(getattr(base, "_all_fields", {}))
        if "__slots__" not in ns:
            base_slots = set()
            for base in bases:
                for klass in base.__mro__:
                    base_slots.update(getattr(klass, "__slots__", ()))
            extra = tuple(ns.pop("_extra_slots", ()))
            ns["__slots__"] = tuple(
                f for f in (*own, *extra) if f not in inherited and f not in base_slots
            )
        ns["_all_fields"] = {**inherited, **own}
        ns["_field_names"] = tuple(ns["_all_fields"])  # the constructor's positional order
        return super().__new__(mcs, name, bases, ns, **kw)


class Object(metaclass=_ObjectMeta):
    """Base of every kiln object (TVM's ``runtime.Object``)."""

    __slots__ = ("__weakref__",)
    type_key = "runtime.Object"
    _type_index = 0
    _fields: dict[str, Any] = {}
    _mutable_fields: frozenset[str] = frozenset()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # every IR node is built here: kept to one pass over the field names
        names = self._field_names
        if len(args) > len(names):
            raise TypeError(
                f"{type(self).__name__} takes at most {len(names)} fields, got {len(args)}"
            )
        set_field = object.__setattr__
        for name, value in zip(names, args):
            set_field(self, name, value)
        for name, value in kwargs.items():
            if name not in self._all_fields:
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
            set_field(self, name, value)
        for name in names[len(args):]:
            if name not in kwargs:
                set_field(self, name, None)

    def _set(self, name: str, value: Any) -> None:
        """Set a field while building the object (bypasses immutability)."""
        object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._mutable_fields:
            object.__setattr__(self, name, value)
            return
        raise AttributeError(
            f"{type(self).__name__} is immutable: cannot set {name!r}; build a new node instead"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete {name!r}")

    @classmethod
    def _from_fields(cls, values: dict[str, Any]) -> Object:
        """Create an instance from field values without running ``__init__`` (load_json)."""
        obj = cls.__new__(cls)
        for name in cls._all_fields:
            object.__setattr__(obj, name, values.get(name))
        for name in cls._mutable_fields:
            if name not in values and not hasattr(obj, name):
                try:
                    object.__setattr__(obj, name, None)
                except AttributeError:
                    pass
        return obj

    @property
    def type_index(self) -> int:
        return self._type_index

    def same_as(self, other: Any) -> bool:
        """Reference equality (TVM's ``same_as``)."""
        return self is other

    def __getstate__(self):
        return {n: getattr(self, n, None) for n in self._all_fields}

    def __setstate__(self, state):
        for name, value in state.items():
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        parts = []
        for name in self._all_fields:
            if name in ("span",):
                continue
            value = getattr(self, name, None)
            parts.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"


Object._type_index = _allocate_type_index("runtime.Object", 0, Object)


def register_object(type_key: str | None = None):
    """Class decorator: register an Object subclass under ``type_key`` in the type table.

    Example
    -------
    >>> @register_object("test.Point")
    ... class Point(Object):
    ...     _fields = {"x": int, "y": int}
    >>> Point(1, 2).x
    1
    """

    def register(cls: type) -> type:
        if not issubclass(cls, Object):
            raise TypeError(f"{cls.__name__} must derive from kiln.runtime.Object")
        key = type_key or cls.__name__
        parent = next(b for b in cls.__mro__[1:] if issubclass(b, Object))
        cls.type_key = key
        cls._type_index = _allocate_type_index(key, parent._type_index, cls)
        return cls

    if isinstance(type_key, type):  # used bare: @register_object
        cls, type_key = type_key, None
        return register(cls)
    return register
