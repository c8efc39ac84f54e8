"""The Relay text printer: TVM's text format, which :mod:`kiln.relay.parser` reads back.

Entry point: :func:`astext` (behind ``IRModule.astext()``, ``str(mod)`` and ``str(expr)``).

Format (TVM's ``#[version = "0.0.5"]`` text)::

    #[version = "0.0.5"]
    type List[A] {
      Cons(A, List[A]),
      Nil,
    }

    def @main(%a: Tensor[(1, 10), float32], %b: Tensor[(1, 10), float32]) -> ... {
      %0 = add(%a, %b);
      nn.relu(%0)
    }

Every compound node gets a numbered binding (``%0 = ...;``) the first time it is used, so
shared subexpressions print once; the value of a scope is printed last, inline. ``let`` is
printed as ``let %x = ...;``. Call attributes print as keyword arguments, only those that
differ from the attrs class defaults. Scalar constants print inline (``1f``, ``2i64``,
``True``); other constants go to the metadata section as ``meta[relay.Constant][i]``, which is
``save_json`` of the constants after ``#[metadata]``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from kiln.ir.adt import Constructor, TypeData
from kiln.ir.attrs import DictAttrs
from kiln.ir.expr import GlobalVar, IntImm, RelayExpr
from kiln.ir.module import IRModule
from kiln.ir.op import Op
from kiln.ir.type import (
    Any as AnyDim,
)
from kiln.ir.type import (
    FuncType,
    GlobalTypeVar,
    IncompleteType,
    RelayRefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeVar,
)
from kiln.relay import adt
from kiln.relay import expr as rx
from kiln.relay.base import deep_recursion

__all__ = ["astext", "type_text", "scalar_text"]

VERSION_HEADER = '#[version = "0.0.5"]'

# dtype -> literal suffix of a scalar constant (the parser's table is the inverse).
SCALAR_SUFFIX = {
    "float32": "f", "float64": "f64", "float16": "f16",
    "int32": "", "int64": "i64", "int16": "i16", "int8": "i8",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
}


def astext(node: Any, show_meta_data: bool = True) -> str:
    """``node`` (IRModule, expression or type) in the Relay text format.

    Example
    -------
    >>> from kiln import relay
    >>> a = relay.var("a", shape=(1, 10))
    >>> print(astext(relay.Function([a], relay.nn.relu(a))))
    #[version = "0.0.5"]
    fn (%a: Tensor[(1, 10), float32]) {
      nn.relu(%a)
    }
    """
    if isinstance(node, Type):
        return type_text(node)
    printer = _Printer()
    with deep_recursion():  # the printer recurses once per nested node
        body = printer.module(node) if isinstance(node, IRModule) else printer.toplevel_expr(node)
    text = f"{VERSION_HEADER}\n{body}"
    if printer.meta:
        if show_meta_data:
            from kiln.runtime.serialization import save_json

            text += "\n#[metadata]\n" + save_json({"relay.Constant": list(printer.meta)})
        else:
            text += ("\n/* For debugging purposes the metadata section has been omitted.\n"
                     " * If you would like to see the full metadata section you can set the\n"
                     " * option to `True` when invoking `astext`.\n */")
    return text


_LOCAL_NAME = re.compile(r"[A-Za-z0-9_]+(?:\.[A-Za-z_][A-Za-z0-9_]*)*", re.ASCII)


def _local_name(hint: str | None) -> str:
    """A variable's name as the parser reads it back after ``%``.

    Characters the text format has no place for become ``_``; an all-digit name gets a
    leading ``_``, since ``%0``, ``%1`` ... name the printer's temporaries.
    """
    name = hint or "x"
    if not _LOCAL_NAME.fullmatch(name):
        name = re.sub(r"[^A-Za-z0-9_]", "_", name, flags=re.ASCII)
    return "_" + name if name.isdigit() else name


def type_text(ty: Any) -> str:
    """A type in the text format (``Tensor[(1, ?), float32]``, ``(A, B)``, ``fn (A) -> B``)."""
    if ty is None:
        return "_"
    if isinstance(ty, TensorType):
        if len(ty.shape) == 0:
            return str(ty.dtype)
        dims = ", ".join(_dim_text(d) for d in ty.shape)
        return f"Tensor[({dims}{',' if len(ty.shape) == 1 else ''}), {ty.dtype}]"
    if isinstance(ty, TupleType):
        inner = ", ".join(type_text(f) for f in ty.fields)
        return f"({inner},)" if len(ty.fields) == 1 else f"({inner})"
    if isinstance(ty, FuncType):
        params = f"[{', '.join(type_text(t) for t in ty.type_params)}]" if ty.type_params else ""
        args = ", ".join(type_text(a) for a in ty.arg_types)
        return f"fn {params}({args}) -> {type_text(ty.ret_type)}"
    if isinstance(ty, TypeVar | GlobalTypeVar):
        return ty.name_hint
    if isinstance(ty, TypeCall):
        return f"{type_text(ty.func)}[{', '.join(type_text(a) for a in ty.args)}]"
    if isinstance(ty, RelayRefType):
        return f"ref({type_text(ty.value)})"
    if isinstance(ty, IncompleteType):
        return "_"
    return repr(ty)


def _dim_text(dim: Any) -> str:
    if isinstance(dim, AnyDim):
        return "?"
    if isinstance(dim, IntImm):
        return str(dim.value)
    return repr(dim)


def scalar_text(array: np.ndarray) -> str | None:
    """The inline literal of a 0-d constant, or None when it must go to metadata."""
    dtype = str(array.dtype)
    if dtype == "bool":
        return "True" if bool(array) else "False"
    if dtype not in SCALAR_SUFFIX:
        return None
    value = array.item()
    if dtype.startswith("float"):
        if not np.isfinite(value):
            return None
        text = repr(float(value))
        if text.endswith(".0"):
            text = text[:-2]
        return text + SCALAR_SUFFIX[dtype]
    return f"{value}{SCALAR_SUFFIX[dtype]}"


def _attr_value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, IntImm):
        return str(value.value)
    if isinstance(value, float | np.floating):
        text = repr(float(value))
        return text[:-2] if text.endswith(".0") else text
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value is None:
        return "None"
    if isinstance(value, list | tuple) or type(value).__name__ == "Array":
        return "[" + ", ".join(_attr_value_text(v) for v in value) + "]"
    if isinstance(value, Type):
        return type_text(value)
    return _attr_value_text(str(value))


def _call_attrs(attrs: Any) -> list[str]:
    """Keyword arguments of a call: the fields that differ from the attrs class defaults."""
    if attrs is None:
        return []
    if isinstance(attrs, DictAttrs):
        return [f"{k}={_attr_value_text(v)}" for k, v in attrs.items()]
    defaults = getattr(type(attrs), "_defaults", {})
    out = []
    for name in attrs.keys():
        value = getattr(attrs, name)
        if name in defaults and _same_attr(value, defaults[name]):
            continue
        if name not in defaults and value is None:
            continue
        if isinstance(value, RelayExpr):
            continue  # an attribute mirroring a call argument (arange's start/stop/step)
        out.append(f"{name}={_attr_value_text(value)}")
    return out


def _same_attr(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same_attr(x, y) for x, y in zip(a, b))
    if type(a) is not type(b) and not (
            isinstance(a, int | float) and isinstance(b, int | float)):
        return False
    return a == b


class _Printer:
    """Prints expressions as scopes of numbered bindings; one instance per ``astext`` call."""

    def __init__(self) -> None:
        self.meta: list[rx.Constant] = []
        self.meta_index: dict[int, int] = {}
        self.var_names: dict[int, str] = {}
        self.used_names: set[str] = set()
        self.counter = 0
        self.scopes: list[dict[int, str]] = []

    # -- names ------------------------------------------------------------------------------
    def var_name(self, var: rx.Var) -> str:
        key = id(var.vid)
        name = self.var_names.get(key)
        if name is None:
            base = _local_name(var.name_hint)
            name, k = base, 1
            while name in self.used_names:
                name, k = f"{base}{k}", k + 1
            self.used_names.add(name)
            self.var_names[key] = name
        return f"%{name}"

    def var_decl(self, var: rx.Var) -> str:
        text = self.var_name(var)
        if var.type_annotation is not None:
            text += f": {type_text(var.type_annotation)}"
        return text

    def lookup(self, node: Any) -> str | None:
        for scope in reversed(self.scopes):
            name = scope.get(id(node))
            if name is not None:
                return name
        return None

    # -- top level --------------------------------------------------------------------------
    def module(self, mod: IRModule) -> str:
        parts = [self.type_def(td) for _, td in sorted(
            mod.type_definitions.items(), key=lambda kv: kv[0].name_hint)]
        for gvar, func in mod.functions.items():
            # names and temporaries restart in every definition, as TVM prints them
            self.var_names, self.used_names, self.counter = {}, set(), 0
            if isinstance(func, rx.Function):
                parts.append(self.function(func, "", f"def @{gvar.name_hint}"))
            else:  # a PrimFunc or other function kind: its own printer
                parts.append(f"// @{gvar.name_hint}: {type(func).__name__}\n"
                             + "\n".join(f"// {line}" for line in str(func).splitlines()))
        return "\n\n".join(parts)

    def type_def(self, td: TypeData) -> str:
        params = f"[{', '.join(v.name_hint for v in td.type_vars)}]" if td.type_vars else ""
        lines = [f"type {td.header.name_hint}{params} {{"]
        for ctor in td.constructors:
            args = f"({', '.join(type_text(t) for t in ctor.inputs)})" if ctor.inputs else ""
            lines.append(f"  {ctor.name_hint}{args},")
        lines.append("}")
        return "\n".join(lines)

    def toplevel_expr(self, node: Any) -> str:
        if isinstance(node, rx.Function):
            return self.function(node, "", "fn")
        from kiln.relay.analysis import free_vars

        lines: list[str] = []
        for var in free_vars(node):
            lines.append(f"free_var {self.var_decl(var)};")
        lines.extend(self.scope(node, ""))
        return "\n".join(lines)

    def function(self, fn: rx.Function, indent: str, head: str) -> str:
        params = [self.var_decl(p) for p in fn.params]
        if fn.attrs is not None:
            params += [f"{k}={_attr_value_text(v)}" for k, v in fn.attrs.items()]
        tparams = (f"[{', '.join(t.name_hint for t in fn.type_params)}]"
                   if fn.type_params else "")
        sep = " " if head == "fn" else ""
        ret = f" -> {type_text(fn.ret_type)}" if fn.ret_type is not None else ""
        body = "\n".join(self.scope(fn.body, indent + "  "))
        return f"{head}{sep}{tparams}({', '.join(params)}){ret} {{\n{body}\n{indent}}}"

    def scope(self, node: Any, indent: str) -> list[str]:
        """Lines of a block whose value is ``node``: bindings, then the value itself."""
        self.scopes.append({})
        lines: list[str] = []
        value = self.value(node, lines, indent, root=True)
        lines.append(indent + value)
        self.scopes.pop()
        return lines

    # -- expressions ------------------------------------------------------------------------
    def bind(self, node: Any, text: str, lines: list[str], indent: str, root: bool) -> str:
        if root:
            return text
        name = f"%{self.counter}"
        self.counter += 1
        lines.append(f"{indent}{name} = {text};")
        self.scopes[-1][id(node)] = name
        return name

    def value(self, node: Any, lines: list[str], indent: str, root: bool = False) -> str:
        known = self.lookup(node)
        if known is not None:
            return known
        if isinstance(node, rx.Var):
            return self.var_name(node)
        if isinstance(node, GlobalVar):
            return f"@{node.name_hint}"
        if isinstance(node, Op):
            return node.name
        if isinstance(node, Constructor):
            return node.name_hint
        if isinstance(node, rx.Constant):
            return self.constant(node)
        handler = getattr(self, "print_" + type(node).__name__, None)
        if handler is None:
            raise TypeError(f"the Relay printer has no rule for {type(node).__name__}")
        return handler(node, lines, indent, root)

    def constant(self, node: rx.Constant) -> str:
        array = node.data.numpy()
        if array.ndim == 0:
            text = scalar_text(array)
            if text is not None:
                return text
        index = self.meta_index.get(id(node))
        if index is None:
            index = self.meta_index[id(node)] = len(self.meta)
            self.meta.append(node)
        return f"meta[relay.Constant][{index}]"

    def print_Call(self, node, lines, indent, root):
        if isinstance(node.op, Constructor) and not node.args and not node.op.inputs:
            return node.op.name_hint  # a nullary constructor's value prints bare: Nil
        op = self.value(node.op, lines, indent)
        args = [self.value(a, lines, indent) for a in node.args]
        args += _call_attrs(node.attrs)
        return self.bind(node, f"{op}({', '.join(args)})", lines, indent, root)

    def print_Tuple(self, node, lines, indent, root):
        fields = [self.value(f, lines, indent) for f in node.fields]
        text = f"({', '.join(fields)}{',' if len(fields) == 1 else ''})"
        return self.bind(node, text, lines, indent, root)

    def print_TupleGetItem(self, node, lines, indent, root):
        inner = self.value(node.tuple_value, lines, indent)
        return self.bind(node, f"{inner}.{node.index}", lines, indent, root)

    def print_Let(self, node, lines, indent, root):
        # A chain of lets prints flat in the current scope.
        while isinstance(node, rx.Let):
            value = self.value(node.value, lines, indent, root=True)
            lines.append(f"{indent}let {self.var_decl(node.var)} = {value};")
            node = node.body
        return self.value(node, lines, indent, root)

    def print_If(self, node, lines, indent, root):
        cond = self.value(node.cond, lines, indent)
        inner = indent + "  "
        then = "\n".join(self.scope(node.true_branch, inner))
        other = "\n".join(self.scope(node.false_branch, inner))
        text = f"if ({cond}) {{\n{then}\n{indent}}} else {{\n{other}\n{indent}}}"
        return self.bind(node, text, lines, indent, root)

    def print_Function(self, node, lines, indent, root):
        return self.bind(node, self.function(node, indent, "fn"), lines, indent, root)

    def print_RefCreate(self, node, lines, indent, root):
        return self.bind(node, f"ref({self.value(node.value, lines, indent)})", lines, indent,
                         root)

    def print_RefRead(self, node, lines, indent, root):
        return self.bind(node, f"ref_read({self.value(node.ref, lines, indent)})", lines,
                         indent, root)

    def print_RefWrite(self, node, lines, indent, root):
        ref = self.value(node.ref, lines, indent)
        value = self.value(node.value, lines, indent)
        return self.bind(node, f"ref_write({ref}, {value})", lines, indent, root)

    def print_Match(self, node, lines, indent, root):
        data = self.value(node.data, lines, indent)
        inner = indent + "  "
        clauses = []
        for clause in node.clauses:
            rhs = "\n".join(self.scope(clause.rhs, inner + "  "))
            clauses.append(f"{inner}{self.pattern(clause.lhs)} => {{\n{rhs}\n{inner}}},")
        keyword = "match" if node.complete else "match?"
        text = f"{keyword} ({data}) {{\n" + "\n".join(clauses) + f"\n{indent}}}"
        return self.bind(node, text, lines, indent, root)

    def pattern(self, pat: Any) -> str:
        if isinstance(pat, adt.PatternWildcard):
            return "_"
        if isinstance(pat, adt.PatternVar):
            return self.var_decl(pat.var)
        if isinstance(pat, adt.PatternConstructor):
            if not pat.patterns:
                return pat.constructor.name_hint
            inner = ", ".join(self.pattern(p) for p in pat.patterns)
            return f"{pat.constructor.name_hint}({inner})"
        if isinstance(pat, adt.PatternTuple):
            inner = ", ".join(self.pattern(p) for p in pat.patterns)
            return f"({inner}{',' if len(pat.patterns) == 1 else ''})"
        raise TypeError(f"the Relay printer has no rule for pattern {type(pat).__name__}")
