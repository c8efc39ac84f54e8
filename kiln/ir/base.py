"""Source locations shared by every IR: :class:`SourceName` and :class:`Span`."""

from __future__ import annotations

from kiln.runtime.object import Object, register_object

__all__ = ["Node", "SourceName", "Span"]

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
