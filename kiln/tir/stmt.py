"""TIR statement nodes (TVM's ``tvm.tir.stmt``).

Entry points: :class:`LetStmt`, :class:`AttrStmt`, :class:`AssertStmt`, :class:`BufferStore`,
:class:`BufferRealize`, :class:`Allocate`, :class:`DeclBuffer`, :class:`For` with
:class:`ForKind`, :class:`While`, :class:`IfThenElse`, :class:`SeqStmt`, :class:`Evaluate`,
:class:`Prefetch`, and :func:`stmt_seq` / :func:`stmt_list` helpers.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from kiln.ir.base import Span
from kiln.ir.expr import PrimExpr, Range
from kiln.runtime.dtype import dtype_str
from kiln.runtime.object import Object, register_object
from kiln.tir.buffer import Buffer
from kiln.tir.expr import Var

__all__ = [
    "Stmt", "LetStmt", "AttrStmt", "AssertStmt", "BufferStore", "BufferRealize", "Allocate",
    "DeclBuffer", "ForKind", "For", "While", "IfThenElse", "SeqStmt", "Evaluate", "Prefetch",
    "stmt_seq", "stmt_list",
]


def _expr(value: Any) -> PrimExpr:
    from kiln.tir.op import convert_expr

    return convert_expr(value)


@register_object("tir.Stmt")
class Stmt(Object):
    """Base of statements."""

    def __str__(self) -> str:
        from kiln.tir.printer import script

        return script(self)

    __repr__ = __str__


@register_object("tir.LetStmt")
class LetStmt(Stmt):
    """Bind ``var = value`` in ``body``."""

    _fields = {"var": Var, "value": PrimExpr, "body": Stmt, "span": Span}
    _sequal_def_fields = ("var",)

    def __init__(self, var: Var, value: Any, body: Stmt, span: Span | None = None) -> None:
        super().__init__(var, _expr(value), body, span)


@register_object("tir.AttrStmt")
class AttrStmt(Stmt):
    """Annotate ``body`` with ``attr_key`` of ``node`` (e.g. ``pragma_import_c``)."""

    _fields = {"node": "any", "attr_key": str, "value": PrimExpr, "body": Stmt, "span": Span}

    def __init__(self, node: Any, attr_key: str, value: Any, body: Stmt,
                 span: Span | None = None) -> None:
        super().__init__(node, attr_key, _expr(value), body, span)


@register_object("tir.AssertStmt")
class AssertStmt(Stmt):
    """Check ``condition``; on failure report ``message`` (a StringImm) and return -1."""

    _fields = {"condition": PrimExpr, "message": PrimExpr, "body": Stmt, "span": Span}

    def __init__(self, condition: Any, message: Any, body: Stmt,
                 span: Span | None = None) -> None:
        super().__init__(_expr(condition), _expr(message), body, span)


@register_object("tir.BufferStore")
class BufferStore(Stmt):
    """``buffer[indices] = value``."""

    _fields = {"buffer": Buffer, "value": PrimExpr, "indices": PrimExpr, "span": Span}

    def __init__(self, buffer: Buffer, value: Any, indices, span: Span | None = None) -> None:
        super().__init__(buffer, _expr(value), [_expr(i) for i in indices], span)


@register_object("tir.BufferRealize")
class BufferRealize(Stmt):
    """Give ``buffer`` storage for the region ``bounds`` within ``body`` (before flattening)."""

    _fields = {"buffer": Buffer, "bounds": Range, "condition": PrimExpr, "body": Stmt,
               "span": Span}

    def __init__(self, buffer: Buffer, bounds, condition: Any, body: Stmt,
                 span: Span | None = None) -> None:
        super().__init__(buffer, list(bounds), _expr(condition), body, span)


@register_object("tir.Allocate")
class Allocate(Stmt):
    """Allocate ``prod(extents)`` elements of ``dtype`` for ``buffer_var`` within ``body``."""

    _fields = {"buffer_var": Var, "dtype": "dtype", "extents": PrimExpr,
               "condition": PrimExpr, "body": Stmt, "annotations": "any", "span": Span}
    _sequal_def_fields = ("buffer_var",)

    def __init__(self, buffer_var: Var, dtype: Any, extents, condition: Any, body: Stmt,
                 annotations=None, span: Span | None = None) -> None:
        super().__init__(buffer_var, dtype_str(dtype), [_expr(e) for e in extents],
                         _expr(condition), body, dict(annotations or {}), span)


@register_object("tir.DeclBuffer")
class DeclBuffer(Stmt):
    """Declare ``buffer`` (a view over an existing data var) within ``body``."""

    _fields = {"buffer": Buffer, "body": Stmt, "span": Span}


class ForKind(IntEnum):
    """How a ``For`` loop runs."""

    SERIAL = 0
    PARALLEL = 1
    VECTORIZED = 2
    UNROLLED = 3
    THREAD_BINDING = 4


@register_object("tir.For")
class For(Stmt):
    """``for loop_var in range(min, min + extent): body`` of a given :class:`ForKind`."""

    _fields = {"loop_var": Var, "min": PrimExpr, "extent": PrimExpr, "kind": int,
               "body": Stmt, "thread_binding": Object, "annotations": "any", "span": Span}
    _sequal_def_fields = ("loop_var",)

    def __init__(self, loop_var: Var, min: Any, extent: Any, kind: int, body: Stmt,
                 thread_binding=None, annotations=None, span: Span | None = None) -> None:
        super().__init__(loop_var, _expr(min), _expr(extent), ForKind(int(kind)), body,
                         thread_binding, dict(annotations or {}), span)


@register_object("tir.While")
class While(Stmt):
    """``while condition: body``."""

    _fields = {"condition": PrimExpr, "body": Stmt, "span": Span}

    def __init__(self, condition: Any, body: Stmt, span: Span | None = None) -> None:
        super().__init__(_expr(condition), body, span)


@register_object("tir.IfThenElse")
class IfThenElse(Stmt):
    """``if condition: then_case else: else_case`` (``else_case`` may be None)."""

    _fields = {"condition": PrimExpr, "then_case": Stmt, "else_case": Stmt, "span": Span}

    def __init__(self, condition: Any, then_case: Stmt, else_case: Stmt | None = None,
                 span: Span | None = None) -> None:
        super().__init__(_expr(condition), then_case, else_case, span)


@register_object("tir.SeqStmt")
class SeqStmt(Stmt):
    """Statements run in order."""

    _fields = {"seq": Stmt, "span": Span}

    def __init__(self, seq, span: Span | None = None) -> None:
        super().__init__(list(seq), span)

    def __getitem__(self, index: int) -> Stmt:
        return self.seq[index]

    def __len__(self) -> int:
        return len(self.seq)


@register_object("tir.Evaluate")
class Evaluate(Stmt):
    """Evaluate an expression for its side effect (a call)."""

    _fields = {"value": PrimExpr, "span": Span}

    def __init__(self, value: Any, span: Span | None = None) -> None:
        super().__init__(_expr(value), span)


@register_object("tir.Prefetch")
class Prefetch(Stmt):
    """Hint to prefetch the region ``bounds`` of ``buffer``."""

    _fields = {"buffer": Buffer, "bounds": Range, "span": Span}

    def __init__(self, buffer: Buffer, bounds, span: Span | None = None) -> None:
        super().__init__(buffer, list(bounds), span)


def stmt_list(stmt: Stmt) -> list[Stmt]:
    """The statements of a SeqStmt (flattened), or ``[stmt]``."""
    if isinstance(stmt, SeqStmt):
        out: list[Stmt] = []
        for s in stmt.seq:
            out.extend(stmt_list(s))
        return out
    return [stmt]


def stmt_seq(*stmts) -> Stmt:
    """Sequence statements, flattening nested SeqStmts and dropping ``None``."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, list | tuple):
            flat.extend(stmt_list(stmt_seq(*s)) if s else [])
        else:
            flat.extend(stmt_list(s))
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(flat)
