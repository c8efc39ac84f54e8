"""Runtime containers: String, Array, Map, ShapeTuple, ADT and Closure.

Entry points: :class:`String`, :class:`Array`, :class:`Map`, :class:`ShapeTuple`,
:class:`ADT`, :func:`tuple_object`, :class:`Closure`.

They are Objects (registered under TVM's static type keys) and behave like the Python values
they stand for: a String *is* a ``str``, a ShapeTuple *is* a ``tuple`` of ints, an Array
compares equal to a list or tuple with equal elements and a Map to a dict with equal items.
All of them are immutable.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from kiln.runtime.object import Object, register_object

__all__ = ["String", "Array", "Map", "ShapeTuple", "ADT", "tuple_object", "Closure"]


@register_object("runtime.String")
class String(str, Object):
    """A ``str`` that is also an Object (TVM's ``runtime.String``).

    Example
    -------
    >>> s = String("relu")
    >>> s == "relu", {"relu": 1}[s], s.upper(), s.type_key
    (True, 1, 'RELU', 'runtime.String')
    """

    # str instances are variable-sized, so String has no slots of its own (the metaclass
    # gives it an empty __slots__): the value lives in the str part.
    def __init__(self, value: Any = "") -> None:
        pass

    __repr__ = str.__repr__
    __eq__ = str.__eq__
    __hash__ = str.__hash__

    def __reduce__(self):
        return (String, (str(self),))


@register_object("runtime.Array")
class Array(Object):
    """An immutable sequence of values (TVM's ``runtime.Array``).

    Example
    -------
    >>> a = Array([1, 2, 3])
    >>> a == [1, 2, 3], a[1:], len(a), a[-1]
    (True, [2, 3], 3, 3)
    """

    _extra_slots = ("_items",)

    def __init__(self, items: Iterable[Any] = ()) -> None:
        object.__setattr__(self, "_items", tuple(items))

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return Array(self._items[index])
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def __contains__(self, value: Any) -> bool:
        return value in self._items

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Array):
            return self._items == other._items
        if isinstance(other, list | tuple):
            return len(self._items) == len(other) and all(
                a == b for a, b in zip(self._items, other)
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._items)

    def __add__(self, other: Iterable[Any]) -> Array:
        return Array((*self._items, *other))

    def index(self, value: Any) -> int:
        return self._items.index(value)

    def count(self, value: Any) -> int:
        return self._items.count(value)

    def __repr__(self) -> str:
        return repr(list(self._items))

    def __getstate__(self):
        return self._items

    def __setstate__(self, state):
        object.__setattr__(self, "_items", tuple(state))


Sequence.register(Array)


@register_object("runtime.Map")
class Map(Object):
    """An immutable mapping (TVM's ``runtime.Map``); keys are strings or objects.

    Example
    -------
    >>> m = Map({"axis": 1, "keepdims": False})
    >>> m["axis"], list(m.keys()), m == {"keepdims": False, "axis": 1}
    (1, ['axis', 'keepdims'], True)
    """

    _extra_slots = ("_items",)

    def __init__(self, items: Mapping[Any, Any] | Iterable[tuple[Any, Any]] = ()) -> None:
        object.__setattr__(self, "_items", dict(items))

    def __getitem__(self, key: Any) -> Any:
        return self._items[key]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def __contains__(self, key: Any) -> bool:
        return key in self._items

    def get(self, key: Any, default: Any = None) -> Any:
        return self._items.get(key, default)

    def keys(self):
        return self._items.keys()

    def values(self):
        return self._items.values()

    def items(self):
        return self._items.items()

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Map):
            return self._items == other._items
        if isinstance(other, dict):
            return self._items == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return repr(self._items)

    def __getstate__(self):
        return self._items

    def __setstate__(self, state):
        object.__setattr__(self, "_items", dict(state))


Mapping.register(Map)


@register_object("runtime.ShapeTuple")
class ShapeTuple(tuple, Object):
    """A tuple of ints (TVM's ``runtime.ShapeTuple``), usable wherever a tuple is.

    Example
    -------
    >>> s = ShapeTuple([2, 3])
    >>> s, s == [2, 3], s == (2, 3), s[1]
    ((2, 3), True, True, 3)
    """

    def __new__(cls, dims: Iterable[Any] = ()) -> ShapeTuple:
        return super().__new__(cls, (operator.index(d) for d in dims))

    def __init__(self, dims: Iterable[Any] = ()) -> None:
        pass

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, list):
            return tuple(self) == tuple(other)
        return tuple.__eq__(self, other)

    def __ne__(self, other: Any) -> bool:
        return not self == other

    __hash__ = tuple.__hash__
    __repr__ = tuple.__repr__

    def __reduce__(self):
        return (ShapeTuple, (tuple(self),))


@register_object("runtime.ADT")
class ADT(Object):
    """An algebraic data type value: a constructor ``tag`` and its ``fields`` (TVM's ADT).

    Tuples are ADTs with tag 0 (:func:`tuple_object`).

    Example
    -------
    >>> v = ADT(1, [10, 20])
    >>> v.tag, v[0], len(v), list(v)
    (1, 10, 2, [10, 20])
    """

    _fields = {"tag": int, "fields": Object}

    def __init__(self, tag: int, fields: Iterable[Any] = ()) -> None:
        object.__setattr__(self, "tag", operator.index(tag))
        object.__setattr__(self, "fields", tuple(fields))

    @classmethod
    def _from_fields(cls, values: dict[str, Any]) -> ADT:
        return cls(values.get("tag") or 0, values.get("fields") or ())

    def __getitem__(self, index: int) -> Any:
        return self.fields[index]

    def __len__(self) -> int:
        return len(self.fields)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fields)

    def __repr__(self) -> str:
        return f"ADT(tag={self.tag}, fields={list(self.fields)!r})"


def tuple_object(fields: Iterable[Any] = ()) -> ADT:
    """A tuple value: an :class:`ADT` with tag 0.

    Example
    -------
    >>> t = tuple_object([1, 2])
    >>> t.tag, list(t)
    (0, [1, 2])
    """
    return ADT(0, fields)


@register_object("runtime.Closure")
class Closure(Object):
    """Base of closures (the VM's ``VMClosure`` adds ``func_index`` and ``free_vars``)."""
