"""Source spans for generated IR (TVM's ``relay.transform.AnnotateSpans``).

Entry point: :func:`AnnotateSpans`.

The module is printed in the Relay text format (source name ``GeneratedSource``) and every
call gets a :class:`~kiln.ir.base.Span` pointing at the line where the printer wrote it
(operator calls are matched in post-order against the printed lines of their function, which
is the order the printer binds them in); every other rebuilt node gets the span of its
function's ``def`` line. Error messages that quote spans then point into that text.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.base import SourceName, Span
from kiln.ir.op import Op
from kiln.relay.base import deep_recursion
from kiln.relay.expr import Call, Constant, Function
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.transform.pass_util import relay_module_pass

__all__ = ["AnnotateSpans", "SOURCE_NAME"]

SOURCE_NAME = "GeneratedSource"


def _with_span(node: Any, span: Span) -> Any:
    """A shallow copy of ``node`` carrying ``span`` (nodes are immutable)."""
    copy = type(node).__new__(type(node))
    for name in node._all_fields:
        object.__setattr__(copy, name, getattr(node, name, None))
    object.__setattr__(copy, "span", span)
    object.__setattr__(copy, "checked_type_", getattr(node, "checked_type_", None))
    return copy


class _SpanAnnotator(ExprMutator):
    def __init__(self, source: SourceName, lines: list[str], def_line: int) -> None:
        super().__init__()
        self.source = source
        self.lines = lines
        self.cursor = def_line
        self.def_span = self.line_span(def_line, 0)

    def line_span(self, index: int, column: int) -> Span:
        return Span(self.source, index + 1, index + 1, column + 1, len(self.lines[index]) + 1)

    def span_of_call(self, node: Call) -> Span:
        if not isinstance(node.op, Op):
            return self.def_span
        needle = f"{node.op.name}("
        for index in range(self.cursor, len(self.lines)):
            column = self.lines[index].find(needle)
            if column >= 0:
                self.cursor = index
                return self.line_span(index, column)
        return self.def_span

    def visit(self, expr: Any) -> Any:
        if expr in self.memo_map:
            return self.memo_map[expr]
        result = super().visit(expr)
        if isinstance(result, Call | Constant) or (result is not expr and
                                                   hasattr(result, "span")):
            span = self.span_of_call(expr) if isinstance(expr, Call) else self.def_span
            result = _with_span(result, span)
            self.memo_map[expr] = result
        return result


def annotate_spans(mod: Any) -> Any:
    """A copy of ``mod`` whose calls carry spans into the module's printed text."""
    from kiln.relay.transform.pass_util import infer

    with deep_recursion():  # the printer recurses once per node
        text = mod.astext()
    lines = text.splitlines()
    source = SourceName(SOURCE_NAME)
    result = mod.copy()
    for gvar, func in list(mod.functions.items()):
        if not isinstance(func, Function):
            continue
        header = f"def @{gvar.name_hint}("
        def_line = next((i for i, line in enumerate(lines) if line.startswith(header)), 0)
        annotator = _SpanAnnotator(source, lines, def_line)
        body = annotator.visit(func.body)
        result[gvar] = _with_span(Function(func.params, body, func.ret_type, func.type_params,
                                           func.attrs), annotator.def_span)
    return infer(result)


def AnnotateSpans():  # noqa: N802 (TVM's name)
    """The pass giving every call a span into the module's printed text.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> mod = AnnotateSpans()(kiln.IRModule.from_expr(relay.exp(x)))
    >>> span = mod["main"].body.span
    >>> span.source_name.name, mod.astext().splitlines()[span.line - 1].strip()
    ('GeneratedSource', 'exp(%x)')
    """
    return relay_module_pass("AnnotateSpans", 0, lambda mod, ctx: annotate_spans(mod))
