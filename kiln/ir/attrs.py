"""Operator and function attributes (TVM's ``tvm.ir.attrs``).

Entry points: :class:`Attrs` (base of the op engineer's typed attrs classes such as
``Conv2DAttrs``), :class:`DictAttrs` (a string-keyed map, used for function attributes) and
:func:`make_node` (build any registered object from its type key and fields).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kiln.runtime.object import Object, register_object, type_key_to_class

__all__ = ["Attrs", "DictAttrs", "make_node"]


@register_object("Attrs")
class Attrs(Object):
    """Base of attribute objects: reflected fields readable as ``attrs.name`` or ``attrs["name"]``.

    Example
    -------
    >>> @register_object("test.PadAttrs")
    ... class PadAttrs(Attrs):
    ...     _fields = {"pad_width": int}
    >>> PadAttrs(pad_width=2)["pad_width"]
    2
    """

    def keys(self) -> list[str]:
        return list(self._all_fields)

    def list_field_info(self) -> list[str]:
        return self.keys()

    def __getitem__(self, key: str) -> Any:
        if key not in self._all_fields:
            raise KeyError(f"{type(self).__name__} has no attribute {key!r}")
        return getattr(self, key)

    def __contains__(self, key: str) -> bool:
        return key in self._all_fields

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self._all_fields else default

    def get_int(self, key: str) -> int:
        return int(self[key])

    def get_int_tuple(self, key: str) -> tuple[int, ...]:
        return tuple(int(v) for v in self[key])

    def get_str(self, key: str) -> str:
        return str(self[key])

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._all_fields)
        return f"{type(self).__name__}({inner})"


@register_object("DictAttrs")
class DictAttrs(Attrs):
    """Attributes held in a string-keyed dictionary (function attributes such as ``Primitive``).

    Example
    -------
    >>> attrs = DictAttrs({"Primitive": 1})
    >>> attrs["Primitive"], attrs.Primitive, "Inline" in attrs
    (1, 1, False)
    """

    _fields = {"data": "any"}

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        super().__init__(dict(data or {}))

    def keys(self) -> list[str]:
        return list(self.data)

    def items(self):
        return self.data.items()

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not slots: look the key up in the dictionary.
        if name.startswith("__") or name == "data":
            raise AttributeError(name)
        try:
            return self.data[name]
        except KeyError:
            raise AttributeError(f"DictAttrs has no attribute {name!r}") from None

    def with_attr(self, key: str, value: Any) -> DictAttrs:
        """A copy with ``key`` set to ``value``."""
        return DictAttrs({**self.data, key: value})

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.data.items())
        return f"{{{inner}}}"


def make_node(type_key: str, **fields: Any) -> Object:
    """Build a registered object from its type key and field values.

    Example
    -------
    >>> make_node("DictAttrs", Primitive=1)["Primitive"]
    1
    """
    cls = type_key_to_class(type_key)
    if cls is DictAttrs:
        return DictAttrs(fields)
    obj = cls.__new__(cls)
    for name in fields:
        if name not in cls._all_fields:
            raise TypeError(f"{type_key} has no field {name!r}")
    Object.__init__(obj, **fields)
    return obj
