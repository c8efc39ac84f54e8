"""Small pieces every Relay module uses.

Entry points: :class:`Id` (a variable's identity and name), :func:`astext` /
:func:`pretty_print` (the Relay printer when present), :func:`expr_to_text` (the compact
fallback text every node's ``repr`` uses) and :func:`deep_recursion` (lets recursive visitors
walk 100,000-node chains).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from kiln.ir.base import Node, SourceName, Span
from kiln.runtime.object import Object, register_object

__all__ = ["Id", "Node", "Span", "SourceName", "astext", "pretty_print", "expr_to_text",
           "deep_recursion", "deep_recursion_active"]

_DEEP_LIMIT = 200_000
_deep_active = False


@contextlib.contextmanager
def deep_recursion() -> Iterator[None]:
    """Raise Python's recursion limit while a recursive IR walk runs, then restore it.

    Python 3.11 runs Python-to-Python calls without consuming C stack, so a visitor that
    recurses once per node is safe far beyond the default limit of 1000.
    """
    global _deep_active
    if _deep_active:
        yield
        return
    old = sys.getrecursionlimit()
    _deep_active = True
    sys.setrecursionlimit(max(old, _DEEP_LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)
        _deep_active = False


def deep_recursion_active() -> bool:
    """Whether a :func:`deep_recursion` block is running (so visitors need not enter one)."""
    return _deep_active


@register_object("relay.Id")
class Id(Object):
    """The identity of a Relay variable: two Vars are the same variable iff same Id object."""

    _fields = {"name_hint": str}

    def __repr__(self) -> str:
        return f"Id({self.name_hint})"


def astext(node: Any, show_meta_data: bool = True) -> str:
    """``node`` in the Relay text format (the compact fallback until the printer exists)."""
    try:
        from kiln.relay.printer import astext as print_text
    except ImportError:
        return expr_to_text(node)
    return print_text(node)


pretty_print = astext


def _constant_text(data: Any) -> str:
    array = data.numpy()
    if array.ndim == 0:
        value = array.item()
        suffix = {"float32": "f", "int32": "", "bool": ""}.get(str(array.dtype), f"{array.dtype}")
        return f"{value}{suffix}"
    return f"meta[Constant{list(array.shape)}, {array.dtype}]"


class _TextBuilder:
    """Writes an expression as numbered bindings, one line per call, shared nodes once."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.counter = 0

    def bind(self, node: Any, text: str, lines: list[str], indent: str) -> str:
        name = f"%{self.counter}"
        self.counter += 1
        lines.append(f"{indent}{name} = {text};")
        self.names[id(node)] = name
        return name

    def var(self, node: Any, with_type: bool = False) -> str:
        text = f"%{node.name_hint}"
        if with_type and node.type_annotation is not None:
            text += f": {node.type_annotation!r}"
        return text

    def block(self, expr: Any, indent: str) -> list[str]:
        lines: list[str] = []
        lines.append(indent + self.value(expr, lines, indent))
        return lines

    def function(self, fn: Any, indent: str) -> str:
        params = ", ".join(self.var(p, True) for p in fn.params)
        ret = f" -> {fn.ret_type!r}" if fn.ret_type is not None else ""
        attrs = f" /* {fn.attrs!r} */" if fn.attrs is not None and len(fn.attrs) else ""
        body = "\n".join(self.block(fn.body, indent + "  "))
        return f"fn ({params}){ret}{attrs} {{\n{body}\n{indent}}}"

    def value(self, node: Any, lines: list[str], indent: str) -> str:
        from kiln.relay import adt, expr

        known = self.names.get(id(node))
        if known is not None:
            return known
        kind = type(node).__name__
        if isinstance(node, expr.Var):
            return self.var(node)
        if kind == "GlobalVar":
            return f"@{node.name_hint}"
        if kind == "Op":
            return node.name
        if kind == "Constructor":
            return node.name_hint
        if isinstance(node, expr.Constant):
            return _constant_text(node.data)
        if isinstance(node, expr.Call):
            op = self.value(node.op, lines, indent)
            args = [self.value(a, lines, indent) for a in node.args]
            if node.attrs is not None and hasattr(node.attrs, "keys"):
                args += [f"{k}={node.attrs[k]!r}" for k in node.attrs.keys()]
            return self.bind(node, f"{op}({', '.join(args)})", lines, indent)
        if isinstance(node, expr.Tuple):
            fields = [self.value(f, lines, indent) for f in node.fields]
            text = f"({', '.join(fields)}{',' if len(fields) == 1 else ''})"
            return self.bind(node, text, lines, indent)
        if isinstance(node, expr.TupleGetItem):
            inner = self.value(node.tuple_value, lines, indent)
            return self.bind(node, f"{inner}.{node.index}", lines, indent)
        if isinstance(node, expr.Let):
            value = self.value(node.value, lines, indent)
            lines.append(f"{indent}let {self.var(node.var, True)} = {value};")
            return self.value(node.body, lines, indent)
        if isinstance(node, expr.If):
            cond = self.value(node.cond, lines, indent)
            inner = indent + "  "
            then = "\n".join(self.block(node.true_branch, inner))
            other = "\n".join(self.block(node.false_branch, inner))
            text = f"if ({cond}) {{\n{then}\n{indent}}} else {{\n{other}\n{indent}}}"
            return self.bind(node, text, lines, indent)
        if isinstance(node, expr.Function):
            return self.bind(node, self.function(node, indent), lines, indent)
        if isinstance(node, expr.RefCreate):
            return self.bind(node, f"ref({self.value(node.value, lines, indent)})", lines,
                             indent)
        if isinstance(node, expr.RefRead):
            return self.bind(node, f"ref_read({self.value(node.ref, lines, indent)})", lines,
                             indent)
        if isinstance(node, expr.RefWrite):
            ref = self.value(node.ref, lines, indent)
            value = self.value(node.value, lines, indent)
            return self.bind(node, f"ref_write({ref}, {value})", lines, indent)
        if isinstance(node, adt.Match):
            data = self.value(node.data, lines, indent)
            inner = indent + "  "
            clauses = []
            for clause in node.clauses:
                rhs = "\n".join(self.block(clause.rhs, inner + "  "))
                clauses.append(f"{inner}| {clause.lhs!r} => {{\n{rhs}\n{inner}}}")
            text = f"match ({data}) {{\n" + "\n".join(clauses) + f"\n{indent}}}"
            return self.bind(node, text, lines, indent)
        return object.__repr__(node)


def expr_to_text(node: Any) -> str:
    """A compact, readable text of a Relay expression (what ``repr`` shows).

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> print(expr_to_text(relay.Function([x], x)))
    fn (%x: Tensor[(2,), float32]) {
      %x
    }
    """
    from kiln.relay.expr import Function

    with deep_recursion():
        builder = _TextBuilder()
        if isinstance(node, Function):
            return builder.function(node, "")
        return "\n".join(builder.block(node, ""))
