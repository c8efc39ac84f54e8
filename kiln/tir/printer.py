"""A TVMScript-like printer for TIR: :func:`script` (used by ``PrimFunc.script()`` and ``str``).

The output is for reading, not for parsing back: loops print as
``for i in T.parallel(0, 16):``, buffer accesses as ``A[i * 16 + j]``, calls as
``T.exp(x)``, and binary operators with the usual Python precedence.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.expr import FloatImm, IntImm, Range
from kiln.tir import expr as _e
from kiln.tir import stmt as _s

__all__ = ["script"]

_BINARY = {
    _e.Add: ("+", 4), _e.Sub: ("-", 4), _e.Mul: ("*", 5), _e.Div: ("/", 5),
    _e.Mod: ("%", 5), _e.FloorDiv: ("//", 5), _e.FloorMod: ("%", 5), _e.EQ: ("==", 2),
    _e.NE: ("!=", 2), _e.LT: ("<", 2), _e.LE: ("<=", 2), _e.GT: (">", 2), _e.GE: (">=", 2),
    _e.And: ("and", 1), _e.Or: ("or", 0),
}
_FOR_KIND = {0: "serial", 1: "parallel", 2: "vectorized", 3: "unroll", 4: "thread_binding"}


class _Printer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.used: set[str] = set()

    def name(self, var: Any) -> str:
        key = id(var)
        if key not in self.names:
            base = getattr(var, "name", None) or "v"
            name, n = base, 0
            while name in self.used:
                n += 1
                name = f"{base}_{n}"
            self.used.add(name)
            self.names[key] = name
        return self.names[key]

    # expressions ---------------------------------------------------------------------------
    def expr(self, e: Any, prec: int = 0) -> str:
        if isinstance(e, _e.IterVar):
            return self.name(e.var)
        if isinstance(e, _e.Var):
            return self.name(e)
        if isinstance(e, IntImm):
            if e.dtype == "bool":
                return "True" if e.value else "False"
            return str(e.value) if e.dtype == "int32" else f"T.{e.dtype}({e.value})"
        if isinstance(e, FloatImm):
            return repr(e.value) if e.dtype == "float32" else f"T.{e.dtype}({e.value!r})"
        if isinstance(e, _e.StringImm):
            return repr(e.value)
        op = _BINARY.get(type(e))
        if op is not None:
            sym, p = op
            text = f"{self.expr(e.a, p)} {sym} {self.expr(e.b, p + 1)}"
            return f"({text})" if p < prec else text
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            return repr(e)
        return method(e)

    def expr_Min(self, e):
        return f"T.min({self.expr(e.a)}, {self.expr(e.b)})"

    def expr_Max(self, e):
        return f"T.max({self.expr(e.a)}, {self.expr(e.b)})"

    def expr_Not(self, e):
        return f"not {self.expr(e.a, 6)}"

    def expr_Cast(self, e):
        return f"T.Cast({e.dtype!r}, {self.expr(e.value)})"

    def expr_Select(self, e):
        return (f"T.Select({self.expr(e.condition)}, {self.expr(e.true_value)}, "
                f"{self.expr(e.false_value)})")

    def expr_BufferLoad(self, e):
        return f"{self.name(e.buffer.data)}[{', '.join(self.expr(i) for i in e.indices)}]"

    def expr_ProducerLoad(self, e):
        return f"{e.producer.op.name}[{', '.join(self.expr(i) for i in e.indices)}]"

    def expr_Ramp(self, e):
        return f"T.Ramp({self.expr(e.base)}, {self.expr(e.stride)}, {e.lanes})"

    def expr_Broadcast(self, e):
        return f"T.Broadcast({self.expr(e.value)}, {e.lanes})"

    def expr_Let(self, e):
        return f"T.Let({self.expr(e.body)}, where={{{self.name(e.var)}: {self.expr(e.value)}}})"

    def expr_Shuffle(self, e):
        vecs = ", ".join(self.expr(v) for v in e.vectors)
        return f"T.Shuffle([{vecs}], [{', '.join(self.expr(i) for i in e.indices)}])"

    def expr_Call(self, e):
        args = ", ".join(self.expr(a) if not hasattr(a, "data") or isinstance(a, _e.Var)
                         else self.name(a.data) for a in e.args)
        name = e.op[4:] if e.op.startswith("tir.") else e.op
        return f"T.{name}({args})"

    def expr_Reduce(self, e):
        axes = ", ".join(self.name(iv.var) for iv in e.axis)
        return f"T.reduce({self.expr(e.source[e.value_index])}, axis=[{axes}])"

    def shape(self, dims) -> str:
        """A shape as a Python tuple: ``(4,)``, ``(4, 8)``."""
        items = [self.expr(x) for x in dims]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"

    # statements ----------------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def stmt(self, s: Any, depth: int) -> None:
        if s is None:
            return
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            self.emit(depth, repr(s))
        else:
            method(s, depth)

    def stmt_SeqStmt(self, s, d):
        for item in s.seq:
            self.stmt(item, d)

    def stmt_For(self, s, d):
        kind = _FOR_KIND.get(int(s.kind), "serial")
        lo = "" if isinstance(s.min, IntImm) and s.min.value == 0 else f"{self.expr(s.min)}, "
        if kind == "serial" and not lo:
            self.emit(d, f"for {self.name(s.loop_var)} in range({self.expr(s.extent)}):")
        else:
            self.emit(d, f"for {self.name(s.loop_var)} in T.{kind}({lo}{self.expr(s.extent)}):")
        self.stmt(s.body, d + 1)

    def stmt_BufferStore(self, s, d):
        idx = ", ".join(self.expr(i) for i in s.indices)
        self.emit(d, f"{self.name(s.buffer.data)}[{idx}] = {self.expr(s.value)}")

    def stmt_LetStmt(self, s, d):
        self.emit(d, f"{self.name(s.var)}: {s.var.dtype} = {self.expr(s.value)}")
        self.stmt(s.body, d)

    def stmt_AttrStmt(self, s, d):
        node = s.node
        text = self.name(node) if isinstance(node, _e.Var) else (
            self.name(node.var) if isinstance(node, _e.IterVar) else
            (self.name(node.data) if hasattr(node, "data") else repr(node)))
        self.emit(d, f"T.attr({text}, {s.attr_key!r}, {self.expr(s.value)})")
        self.stmt(s.body, d)

    def stmt_AssertStmt(self, s, d):
        self.emit(d, f"assert {self.expr(s.condition)}, {self.expr(s.message)}")
        self.stmt(s.body, d)

    def stmt_Allocate(self, s, d):
        extents = ", ".join(self.expr(e) for e in s.extents)
        scope = getattr(s.buffer_var.type_annotation, "storage_scope", "global")
        self.emit(d, f"{self.name(s.buffer_var)} = T.allocate([{extents}], {s.dtype!r}, "
                     f"{scope!r})")
        self.stmt(s.body, d)

    def stmt_DeclBuffer(self, s, d):
        b = s.buffer
        self.emit(d, f"{self.name(b.data)} = T.decl_buffer({self.shape(b.shape)}, {b.dtype!r})")
        self.stmt(s.body, d)

    def stmt_BufferRealize(self, s, d):
        bounds = ", ".join(f"{self.expr(r.min)}:{self.expr(r.min + r.extent)}"
                           for r in s.bounds)
        self.emit(d, f"T.realize({self.name(s.buffer.data)}[{bounds}])")
        self.stmt(s.body, d)

    def stmt_IfThenElse(self, s, d):
        self.emit(d, f"if {self.expr(s.condition)}:")
        self.stmt(s.then_case, d + 1)
        if s.else_case is not None:
            self.emit(d, "else:")
            self.stmt(s.else_case, d + 1)

    def stmt_While(self, s, d):
        self.emit(d, f"while {self.expr(s.condition)}:")
        self.stmt(s.body, d + 1)

    def stmt_Evaluate(self, s, d):
        self.emit(d, f"T.evaluate({self.expr(s.value)})")

    def stmt_Prefetch(self, s, d):
        self.emit(d, f"T.prefetch({self.name(s.buffer.data)})")

    def func(self, f, name: str | None) -> None:
        name = name or f.attrs.get("global_symbol", "main")
        params = []
        for p in f.params:
            buf = f.buffer_map.get(p)
            if buf is not None:
                self.name(buf.data)
                params.append(f"{self.name(p)}: T.Buffer({self.shape(buf.shape)}, {buf.dtype!r})")
            else:
                params.append(f"{self.name(p)}: T.{p.dtype}")
        self.emit(0, "@T.prim_func")
        self.emit(0, f"def {name}({', '.join(params)}):")
        if f.attrs:
            attrs = ", ".join(f"{k!r}: {_attr_text(v)}" for k, v in f.attrs.items())
            self.emit(1, f"T.func_attr({{{attrs}}})")
        self.stmt(f.body, 1)


def _attr_text(value: Any) -> str:
    if isinstance(value, IntImm | FloatImm):
        return repr(value.value)
    return repr(value) if isinstance(value, str | int | float | bool) else str(value)


def script(node: Any, name: str | None = None) -> str:
    """The readable text of a PrimFunc, statement or expression.

    Example
    -------
    >>> from kiln import tir
    >>> x = tir.Var("x", "int32")
    >>> tir.script(x * 4 + 1)
    'x * 4 + 1'
    """
    from kiln.tir.function import PrimFunc

    printer = _Printer()
    if isinstance(node, PrimFunc):
        printer.func(node, name)
    elif isinstance(node, _s.Stmt):
        printer.stmt(node, 0)
    elif isinstance(node, Range):
        return f"range({printer.expr(node.min)}, {printer.expr(node.extent)})"
    else:
        return printer.expr(node)
    return "\n".join(printer.lines)
