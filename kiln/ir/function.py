"""The base of functions stored in an IRModule (TVM's ``tvm.ir.function``).

Entry points: :class:`BaseFunc` (Relay ``Function`` and TIR ``PrimFunc`` derive from it) and
:class:`CallingConv`.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from kiln.ir.attrs import DictAttrs
from kiln.ir.expr import RelayExpr
from kiln.runtime.object import register_object

__all__ = ["BaseFunc", "CallingConv"]


class CallingConv(IntEnum):
    """How a function is called (the ``calling_conv`` function attribute)."""

    DEFAULT = 0
    C_PACKED_FUNC = 1
    DEVICE_KERNEL_LAUNCH = 2


@register_object("BaseFunc")
class BaseFunc(RelayExpr):
    """A function with a :class:`DictAttrs` ``attrs`` field; subclasses add params and body."""

    _fields = {"attrs": DictAttrs}

    def with_attr(self, key: str, value: Any) -> BaseFunc:
        """A shallow copy of the function with attribute ``key`` set to ``value``."""
        return self.with_attrs({key: value})

    def with_attrs(self, attrs: dict[str, Any]) -> BaseFunc:
        """A shallow copy of the function with every ``attrs`` item set."""
        old = dict(self.attrs.data) if self.attrs is not None else {}
        old.update(attrs)
        copy = type(self).__new__(type(self))
        for name in self._all_fields:
            object.__setattr__(copy, name, getattr(self, name, None))
        object.__setattr__(copy, "attrs", DictAttrs(old))
        object.__setattr__(copy, "checked_type_", getattr(self, "checked_type_", None))
        return copy

    def without_attr(self, key: str) -> BaseFunc:
        """A shallow copy of the function without attribute ``key``."""
        old = dict(self.attrs.data) if self.attrs is not None else {}
        old.pop(key, None)
        copy = self.with_attrs({})
        object.__setattr__(copy, "attrs", DictAttrs(old))
        return copy

    def get_attr(self, key: str, default: Any = None) -> Any:
        """The attribute ``key``, or ``default`` when the function lacks it."""
        if self.attrs is None:
            return default
        return self.attrs.get(key, default)
