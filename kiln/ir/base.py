"""Source locations shared by every IR: :class:`SourceName` and :class:`Span`."""

from __future__ import annotations

from kiln.runtime.error import TVMError
from kiln.runtime.object import Object, register_object
from kiln.runtime.registry import get_global_func

__all__ = ["EnvFunc", "Node", "SourceName", "Span"]

Node = Object


@register_object("SourceName")
class SourceName(Object):
    """The name of a source file (or ``"from_string"``)."""

    _fields = {"name": str}


@register_object("Span")
class Span(Object):
    """A source range: ``source_name`` and 1-based line/column of start and end."""

    _fields = {"source_name": SourceName, "line": int, "column": int, "end_line": int,
               "end_column": int}

    def __init__(self, source_name, line, end_line, column, end_column):
        # TVM's argument order: (source_name, line, end_line, column, end_column).
        super().__init__(source_name, line, column, end_line, end_column)

    def __repr__(self) -> str:
        name = self.source_name.name if self.source_name is not None else "?"
        return f"{name}:{self.line}:{self.column}"


@register_object("EnvFunc")
class EnvFunc(Object):
    """A global function referred to by name (TVM's ``tvm.ir.EnvFunc``): it serializes as
    its name and finds the function in the registry again when loaded."""

    _fields = {"name": str}

    @staticmethod
    def get(name: str) -> EnvFunc:
        """The env function of the registered global ``name``."""
        if not isinstance(name, str):
            raise TVMError(f"EnvFunc.get: expected a function name, got {name!r}")
        if get_global_func(name, allow_missing=True) is None:
            raise TVMError(f"EnvFunc.get: no global function {name!r} is registered")
        return EnvFunc(name)

    @property
    def func(self):
        """The registered function (looked up now: a re-registration is seen)."""
        fn = get_global_func(self.name, allow_missing=True)
        if fn is None:
            raise TVMError(f"EnvFunc: global function {self.name!r} is no longer registered")
        return fn

    def __call__(self, *args):
        return self.func(*args)
