"""The Relay text parser: reads what :mod:`kiln.relay.printer` writes (TVM's text format).

Entry points: :func:`parse` (a whole module, ``tvm.parser.parse``), :func:`fromtext` (alias,
``relay.fromtext``), :func:`parse_expr` (one expression), :func:`parse_type`.

The grammar, informally::

    module   := [version] (typedef | def)* [#[metadata] json]
    typedef  := "type" NAME ["[" NAME, ... "]"] "{" (NAME ["(" type, ... ")"] ",")* "}"
    def      := "def" @NAME ["[" NAME, ... "]"] "(" params ")" ["->" type] "{" body "}"
    params   := (%x [":" type] | NAME "=" attr_value), ...
    body     := (%n = expr ";" | "let" %x [":" type] "=" expr ";" | "free_var" %x ":" type ";")*
                expr
    expr     := atom ( "(" args ")" | "." INT )*
    atom     := %x | @f | NAME | literal | "(" expr, ... ")" | fn | if | match | ref forms
                | meta[relay.Constant][i]

Errors raise :class:`~kiln.runtime.error.DiagnosticError` with the line, column and the
offending source line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from kiln.ir.adt import Constructor, TypeData
from kiln.ir.expr import GlobalVar
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
    TypeCall,
    TypeKind,
    TypeVar,
)
from kiln.relay import adt
from kiln.relay import expr as rx
from kiln.relay.base import deep_recursion
from kiln.relay.printer import SCALAR_SUFFIX
from kiln.runtime.container import Array, Map
from kiln.runtime.error import DiagnosticError, TVMError
from kiln.runtime.ndarray import NDArray

__all__ = ["parse", "fromtext", "parse_expr", "parse_type", "SpanCheck", "MAX_NESTING"]

_SUFFIX_DTYPE = {suffix: dtype for dtype, suffix in SCALAR_SUFFIX.items() if suffix}
_DTYPES = {
    "bool", "float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
}

_TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*|/\*.*?\*/)
  | (?P<number>-?(?:\d+\.\d*|\d+)(?:[eE][-+]?\d+)?
      (?:f16|f32|f64|f|i8|i16|i32|i64|u8|u16|u32|u64)?(?![\w.]))
  | (?P<local>%[A-Za-z0-9_]+(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<global>@[A-Za-z0-9_]+(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<punct>=>|->|\#\[|[()\[\]{},;:=.?_*^+-])
  | (?P<bad>.)
""", re.VERBOSE | re.DOTALL | re.ASCII)  # ASCII: \d must not accept other scripts' digits


class Token(NamedTuple):
    kind: str
    text: str
    pos: int


# Nesting deeper than this (parentheses, calls, fn/if/match bodies, types, attribute lists,
# patterns) is refused with a DiagnosticError instead of exhausting the stack.
MAX_NESTING = 1000
# Python refuses int() of longer digit strings; no dtype kiln parses needs more digits.
_MAX_NUMBER_CHARS = 400
_INT_RANGES = {f"{sign}int{bits}": ((-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if sign == ""
                                    else (0, (1 << bits) - 1))
               for sign in ("", "u") for bits in (8, 16, 32, 64)}


class _Scopes:
    """Nested name scopes with O(1) lookup: each name keeps the stack of its bindings."""

    def __init__(self) -> None:
        self.bindings: dict[str, list[Any]] = {}
        self.frames: list[list[str]] = [[]]

    def push(self, names: dict[str, Any] | None = None) -> None:
        self.frames.append([])
        for name, value in (names or {}).items():
            self.bind(name, value)

    def pop(self) -> None:
        for name in self.frames.pop():
            stack = self.bindings[name]
            stack.pop()
            if not stack:
                del self.bindings[name]

    def bind(self, name: str, value: Any) -> None:
        self.bindings.setdefault(name, []).append(value)
        self.frames[-1].append(name)

    def get(self, name: str) -> Any:
        stack = self.bindings.get(name)
        return stack[-1] if stack else None


class SpanCheck:
    """Turns a character offset into ``line:column`` and the source line (for messages)."""

    def __init__(self, source: str) -> None:
        self.source = source

    def describe(self, pos: int) -> str:
        line = self.source.count("\n", 0, pos) + 1
        start = self.source.rfind("\n", 0, pos) + 1
        end = self.source.find("\n", pos)
        text = self.source[start: end if end >= 0 else len(self.source)]
        return f"line {line}, column {pos - start + 1}:\n  {text}\n  {' ' * (pos - start)}^"


def _tokenize(source: str) -> list[Token]:
    tokens = []
    for m in _TOKEN.finditer(source):
        kind = m.lastgroup
        if kind == "ws":
            continue
        if kind == "bad":  # stop here: rescanning past it could take quadratic time
            raise DiagnosticError(
                f"Relay parser: unexpected character {m.group()!r} at "
                f"{SpanCheck(source).describe(m.start())}")
        tokens.append(Token(kind, m.group(), m.start()))
    tokens.append(Token("eof", "", len(source)))
    return tokens


class _Parser:
    def __init__(self, source: str, meta: dict[str, list] | None = None) -> None:
        self.source = source
        self.tokens = _tokenize(source)
        self.i = 0
        self.meta = meta or {}
        self.scopes = _Scopes()  # local names -> Var / bound expression
        self.type_scopes = _Scopes()  # type parameter names -> TypeVar
        self.depth = 0
        self.global_vars: dict[str, GlobalVar] = {}
        self.type_headers: dict[str, GlobalTypeVar] = {}
        self.constructors: dict[str, Constructor] = {}

    # -- token helpers ----------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def error(self, message: str, tok: Token | None = None) -> DiagnosticError:
        tok = tok or self.tok
        where = SpanCheck(self.source).describe(tok.pos)
        return DiagnosticError(f"Relay parser: {message} at {where}")

    def at(self, text: str) -> bool:
        return self.tok.text == text and self.tok.kind in ("punct", "name")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.i += 1
            return True
        return False

    def expect(self, text: str) -> Token:
        if not self.at(text):
            found = self.tok.text or "end of input"
            raise self.error(f"expected {text!r}, found {found!r}")
        tok = self.tok
        self.i += 1
        return tok

    def expect_kind(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind:
            raise self.error(f"expected {what}, found {self.tok.text or 'end of input'!r}")
        tok = self.tok
        self.i += 1
        return tok

    def comma_list(self, close: str, item) -> list:
        items = []
        while not self.at(close):
            items.append(item())
            if not self.accept(","):
                break
        self.expect(close)
        return items

    # -- scopes -----------------------------------------------------------------------------
    def lookup_local(self, tok: Token) -> Any:
        name = tok.text[1:]
        value = self.scopes.get(name)
        if value is None:
            raise self.error(f"unbound local variable %{name}", tok)
        return value

    def lookup_type_var(self, name: str) -> TypeVar | None:
        return self.type_scopes.get(name)

    def nested(self, parse: Callable[[], Any], what: str) -> Any:
        """Run ``parse`` one nesting level deeper, refusing input nested past MAX_NESTING."""
        if self.depth >= MAX_NESTING:
            raise self.error(f"{what} nested more than {MAX_NESTING} levels deep")
        self.depth += 1
        result = parse()
        self.depth -= 1
        return result

    def int_token(self, tok: Token, what: str, low: int = 0, high: int = (1 << 63) - 1) -> int:
        """A token that must be a plain decimal integer in [low, high]."""
        digits = tok.text.removeprefix("-")
        if tok.kind != "number" or not (digits.isascii() and digits.isdigit()) \
                or len(digits) > _MAX_NUMBER_CHARS:
            raise self.error(f"expected {what} (an integer), found {tok.text!r}", tok)
        value = int(tok.text)
        if not low <= value <= high:
            raise self.error(f"{what} {value} is out of range [{low}, {high}]", tok)
        return value

    def number(self, tok: Token) -> tuple[Any, str | None]:
        """A literal's value and dtype, checked to fit the dtype."""
        if len(tok.text) > _MAX_NUMBER_CHARS:
            raise self.error(f"numeric literal of {len(tok.text)} characters is too long", tok)
        value, dtype = _number(tok.text)
        bounds = _INT_RANGES.get(dtype or "int32")
        if isinstance(value, int) and bounds and not bounds[0] <= value <= bounds[1]:
            raise self.error(f"integer literal {value} does not fit {dtype or 'int32'} "
                             f"(range [{bounds[0]}, {bounds[1]}])", tok)
        return value, dtype

    # -- module -----------------------------------------------------------------------------
    def module(self) -> IRModule:
        self.predeclare()
        functions, type_defs = {}, {}
        while self.tok.kind != "eof":
            if self.at("type"):
                td = self.type_def()
                type_defs[td.header] = td
            elif self.at("def"):
                gvar, fn = self.definition()
                if gvar in functions:
                    raise self.error(f"@{gvar.name_hint} is defined twice")
                functions[gvar] = fn
            else:
                raise self.error(f"expected 'def' or 'type', found {self.tok.text!r}")
        return IRModule(functions, type_defs)

    def seed(self, mod: IRModule) -> None:
        """Make ``mod``'s globals, ADTs and constructors visible to the text."""
        for gv in mod.get_global_vars():
            self.global_vars[gv.name_hint] = gv
        for tv in mod.get_global_type_vars():
            self.type_headers[tv.name_hint] = tv
            for ctor in mod.type_definitions[tv].constructors:
                self.constructors[ctor.name_hint] = ctor

    def predeclare(self) -> None:
        """Create global vars and ADT headers first, so definitions may refer forward."""
        for k, tok in enumerate(self.tokens[:-1]):
            nxt = self.tokens[k + 1]
            if tok.text == "def" and nxt.kind == "global":
                self.global_vars.setdefault(nxt.text[1:], GlobalVar(nxt.text[1:]))
            if tok.text == "type" and nxt.kind == "name":
                self.type_headers.setdefault(
                    nxt.text, GlobalTypeVar(nxt.text, TypeKind.AdtHandle))

    def type_params(self) -> list[TypeVar]:
        if not self.accept("["):
            return []
        names = self.comma_list("]", lambda: self.expect_kind("name", "a type parameter").text)
        params = [TypeVar(n) for n in names]
        self.type_scopes.push({p.name_hint: p for p in params})
        return params

    def type_def(self) -> TypeData:
        self.expect("type")
        header = self.type_headers[self.expect_kind("name", "a type name").text]
        tparams = self.type_params()
        self.expect("{")
        ctors = []
        while not self.at("}"):
            name = self.expect_kind("name", "a constructor name").text
            inputs = self.comma_list(")", self.type) if self.accept("(") else []
            ctor = Constructor(name, inputs, header)
            self.constructors[name] = ctor
            ctors.append(ctor)
            if not self.accept(","):
                break
        self.expect("}")
        if tparams:
            self.type_scopes.pop()
        return TypeData(header, tparams, ctors)

    def definition(self) -> tuple[GlobalVar, rx.Function]:
        self.expect("def")
        gvar = self.global_vars[self.expect_kind("global", "a global name").text[1:]]
        return gvar, self.function_rest()

    def function_rest(self) -> rx.Function:
        tparams = self.type_params()
        self.expect("(")
        self.scopes.push()
        params, attrs = [], {}
        while not self.at(")"):
            if self.tok.kind == "local":
                params.append(self.declare_var())
            else:
                key = self.expect_kind("name", "a parameter or attribute").text
                self.expect("=")
                attrs[key] = self.attr_value()
            if not self.accept(","):
                break
        self.expect(")")
        ret = self.type() if self.accept("->") else None
        self.expect("{")
        body = self.body("}")
        self.scopes.pop()
        if tparams:
            self.type_scopes.pop()
        return rx.Function(params, body, ret, tparams, attrs or None)

    def declare_var(self) -> rx.Var:
        tok = self.expect_kind("local", "a local variable")
        ty = self.type() if self.accept(":") else None
        var = rx.Var(tok.text[1:], ty)
        self.scopes.bind(tok.text[1:], var)
        return var

    # -- bodies and expressions ---------------------------------------------------------------
    def body(self, close: str) -> Any:
        """Bindings then a value, up to and including ``close``; lets nest to the right."""
        lets: list[tuple[rx.Var, Any]] = []
        self.scopes.push()
        while True:
            if self.at("let"):
                self.i += 1
                var_tok = self.tok
                var = self.declare_var_unbound()
                self.expect("=")
                value = self.expr()
                self.expect(";")
                self.scopes.bind(var_tok.text[1:], var)
                lets.append((var, value))
            elif self.at("free_var"):
                self.i += 1
                self.declare_var()
                self.expect(";")
            elif self.tok.kind == "local" and self.peek().text == "=" \
                    and self.peek().kind == "punct":
                name = self.tok.text[1:]
                self.i += 2
                value = self.expr()
                self.expect(";")
                self.scopes.bind(name, value)
            else:
                break
        result = self.expr()
        self.scopes.pop()
        if close:
            self.expect(close)
        elif self.tok.kind != "eof":
            raise self.error(f"unexpected {self.tok.text!r} after the expression")
        for var, value in reversed(lets):
            result = rx.Let(var, value, result)
        return result

    def declare_var_unbound(self) -> rx.Var:
        tok = self.expect_kind("local", "a local variable")
        ty = self.type() if self.accept(":") else None
        return rx.Var(tok.text[1:], ty)

    def expr(self) -> Any:
        return self.nested(self.postfix_expr, "expressions")

    def postfix_expr(self) -> Any:
        node = self.atom()
        while True:
            if self.at("("):
                self.i += 1
                node = self.call(node)
            elif self.at(".") and self.peek().kind == "number":
                self.i += 1
                index_tok = self.expect_kind("number", "a tuple index")
                if not re.fullmatch(r"[0-9]{1,9}(\.[0-9]{1,9})?", index_tok.text):
                    raise self.error("expected a tuple index", index_tok)
                for index in index_tok.text.split("."):  # %t.0.1 lexes 0.1 as one number
                    node = rx.TupleGetItem(node, int(index))
            else:
                return node

    def call(self, callee: Any) -> Any:
        args, attrs = [], {}
        while not self.at(")"):
            if self.tok.kind == "name" and self.peek().text == "=" and self.peek().kind == "punct":
                key = self.tok.text
                self.i += 2
                attrs[key] = self.attr_value()
            else:
                args.append(self.expr())
            if not self.accept(","):
                break
        self.expect(")")
        if isinstance(callee, Op):
            # attributes that repeat arguments (the op's TAttrsFromArgs) are printed only as
            # arguments
            for name, arg in zip(callee.get_attr("TAttrsFromArgs") or (), args):
                attrs.setdefault(name, arg)
        return rx.Call(callee, args, self.make_attrs(callee, attrs))

    def make_attrs(self, callee: Any, attrs: dict[str, Any]) -> Any:
        if not isinstance(callee, Op):
            if attrs:
                from kiln.ir.attrs import DictAttrs

                return DictAttrs(attrs)
            return None
        key = getattr(callee, "attrs_type_key", None)
        if not key:
            if attrs:
                raise self.error(f"operator {callee.name} takes no attributes, got "
                                 f"{sorted(attrs)}")
            return None
        from kiln.runtime.object import type_key_to_class

        cls = type_key_to_class(key)
        try:
            return cls(**attrs)
        except TypeError as err:
            raise self.error(f"bad attributes for {callee.name}: {err}") from None

    def attr_value(self) -> Any:
        return self.nested(self.attr_value_here, "attribute lists")

    def attr_value_here(self) -> Any:
        tok = self.tok
        if self.accept("["):
            return tuple(self.comma_list("]", self.attr_value))
        if tok.kind == "string":
            self.i += 1
            return _unquote(tok.text)
        if tok.kind == "number":
            self.i += 1
            value, dtype = self.number(tok)
            return value if dtype is None or not dtype.startswith("float") else float(value)
        if tok.text in ("True", "False"):
            self.i += 1
            return tok.text == "True"
        if tok.text == "None":
            self.i += 1
            return None
        if tok.kind == "name":
            self.i += 1
            return tok.text
        raise self.error(f"expected an attribute value, found {tok.text!r}")

    def atom(self) -> Any:
        tok = self.tok
        kind = tok.kind
        if kind == "local":
            self.i += 1
            return self.lookup_local(tok)
        if kind == "global":
            self.i += 1
            name = tok.text[1:]
            if name not in self.global_vars:
                raise self.error(f"unknown global function @{name}", tok)
            return self.global_vars[name]
        if kind == "number":
            self.i += 1
            value, dtype = self.number(tok)
            return rx.const(np.array(value, dtype=dtype or "int32"))
        if kind == "punct" and tok.text == "(":
            self.i += 1
            fields = []
            trailing = False
            while not self.at(")"):
                fields.append(self.expr())
                trailing = False
                if not self.accept(","):
                    break
                trailing = True
            self.expect(")")
            if len(fields) == 1 and not trailing:
                return fields[0]
            return rx.Tuple(fields)
        if kind != "name":
            raise self.error(f"expected an expression, found {tok.text or 'end of input'!r}")
        keyword = getattr(self, "kw_" + tok.text, None)
        if keyword is not None:
            self.i += 1
            return keyword()
        self.i += 1
        if tok.text in self.constructors:
            ctor = self.constructors[tok.text]
            if not ctor.inputs and not self.at("("):
                return rx.Call(ctor, [])  # a bare nullary constructor is its value
            return ctor
        try:
            return Op.get(tok.text)
        except Exception:
            raise self.error(f"unknown operator or constructor {tok.text!r}", tok) from None

    def kw_True(self) -> rx.Constant:
        return rx.const(np.array(True))

    def kw_False(self) -> rx.Constant:
        return rx.const(np.array(False))

    def kw_fn(self) -> rx.Function:
        return self.function_rest()

    def kw_if(self) -> rx.If:
        self.expect("(")
        cond = self.expr()
        self.expect(")")
        self.expect("{")
        then = self.body("}")
        self.expect("else")
        self.expect("{")
        other = self.body("}")
        return rx.If(cond, then, other)

    def kw_ref(self) -> rx.RefCreate:
        self.expect("(")
        value = self.expr()
        self.expect(")")
        return rx.RefCreate(value)

    def kw_ref_read(self) -> rx.RefRead:
        self.expect("(")
        ref = self.expr()
        self.expect(")")
        return rx.RefRead(ref)

    def kw_ref_write(self) -> rx.RefWrite:
        self.expect("(")
        ref = self.expr()
        self.expect(",")
        value = self.expr()
        self.expect(")")
        return rx.RefWrite(ref, value)

    def kw_meta(self) -> Any:
        self.expect("[")
        kind = self.expect_kind("name", "a metadata kind").text
        self.expect("]")
        self.expect("[")
        index_tok = self.expect_kind("number", "a metadata index")
        index = self.int_token(index_tok, "a metadata index")
        self.expect("]")
        items = self.meta.get(kind)
        if items is None or not 0 <= index < len(items):
            raise self.error(f"meta[{kind}][{index}] is not in the metadata section", index_tok)
        item = items[index]
        if isinstance(item, rx.Constant) and not isinstance(item.data, NDArray):
            raise self.error(f"meta[{kind}][{index}] is a constant without data", index_tok)
        if kind == "relay.Constant" and not isinstance(item, rx.Constant):
            raise self.error(f"meta[{kind}][{index}] is a {type(item).__name__}, "
                             "not a relay.Constant", index_tok)
        return item

    def kw_match(self) -> adt.Match:
        complete = not self.accept("?")
        self.expect("(")
        data = self.expr()
        self.expect(")")
        self.expect("{")
        clauses = []
        while not self.at("}"):
            self.accept("|")
            self.scopes.push()
            lhs = self.pattern()
            self.expect("=>")
            if self.accept("{"):
                rhs = self.body("}")
            else:
                rhs = self.expr()
            self.scopes.pop()
            clauses.append(adt.Clause(lhs, rhs))
            if not self.accept(","):
                break
        self.expect("}")
        return adt.Match(data, clauses, complete)

    def pattern(self) -> Any:
        return self.nested(self.pattern_here, "patterns")

    def pattern_here(self) -> Any:
        tok = self.tok
        if self.accept("_"):
            return adt.PatternWildcard()
        if tok.kind == "local":
            return adt.PatternVar(self.declare_var())
        if self.accept("("):
            return adt.PatternTuple(self.comma_list(")", self.pattern))
        if tok.kind == "name" and tok.text in self.constructors:
            self.i += 1
            subs = self.comma_list(")", self.pattern) if self.accept("(") else []
            return adt.PatternConstructor(self.constructors[tok.text], subs)
        raise self.error(f"expected a pattern, found {tok.text!r}")

    # -- types ------------------------------------------------------------------------------
    def type(self) -> Any:
        return self.nested(self.type_here, "types")

    def type_here(self) -> Any:
        tok = self.tok
        if self.accept("("):
            fields = []
            trailing = False
            while not self.at(")"):
                fields.append(self.type())
                trailing = False
                if not self.accept(","):
                    break
                trailing = True
            self.expect(")")
            if len(fields) == 1 and not trailing:
                return fields[0]
            return TupleType(fields)
        if self.accept("_"):
            return IncompleteType()
        if self.accept("fn"):
            tparams = self.type_params()
            self.expect("(")
            args = self.comma_list(")", self.type)
            self.expect("->")
            ret = self.type()
            if tparams:
                self.type_scopes.pop()
            return FuncType(args, ret, tparams)
        if self.accept("ref"):
            self.expect("(")
            value = self.type()
            self.expect(")")
            return RelayRefType(value)
        name = self.expect_kind("name", "a type").text
        if name == "Tensor":
            self.expect("[")
            self.expect("(")
            shape = self.comma_list(")", self.dim)
            self.expect(",")
            dtype = self.expect_kind("name", "a dtype").text
            self.expect("]")
            return TensorType(shape, dtype)
        if name in _DTYPES:
            return TensorType((), name)
        tvar = self.lookup_type_var(name)
        if tvar is not None:
            return tvar
        header = self.type_headers.get(name)
        if header is None:
            raise self.error(f"unknown type {name!r}", tok)
        if self.accept("["):
            return TypeCall(header, self.comma_list("]", self.type))
        return header

    def dim(self) -> Any:
        if self.accept("?"):
            return AnyDim()
        return self.int_token(self.expect_kind("number", "a dimension"), "a dimension")


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1])


def _number(text: str) -> tuple[Any, str | None]:
    """A literal's value and dtype (None: an unsuffixed integer, int32 by default)."""
    m = re.fullmatch(r"(-?[0-9.]+(?:[eE][-+]?[0-9]+)?)([a-z0-9]*)", text)
    body, suffix = m.group(1), m.group(2)
    dtype = "float32" if suffix in ("f", "f32") else _SUFFIX_DTYPE.get(suffix) if suffix else None
    if (dtype or "").startswith("float") or any(c in body for c in ".eE"):
        return float(body), dtype or "float32"
    return int(body), dtype


def _split_metadata(source: str) -> tuple[str, dict[str, list]]:
    head, sep, tail = source.partition("#[metadata]")
    head = re.sub(r'^\s*#\[version\s*=\s*"[^"]*"\]', "", head)
    if not sep:
        return head, {}
    from kiln.runtime.serialization import load_json

    try:
        meta = load_json(tail.strip())
    except TVMError as err:
        raise DiagnosticError(f"Relay parser: malformed metadata section: {err}") from None
    if not isinstance(meta, Map | dict) or not all(
            isinstance(items, Array | list | tuple) for items in meta.values()):
        raise DiagnosticError("Relay parser: the metadata section must map kinds to lists, "
                              f"got a {type(meta).__name__}")
    return head, {str(k): list(v) for k, v in meta.items()}


def _run(source: Any, parse_with: Callable[[_Parser], Any], metadata: bool = True,
         init_module: IRModule | None = None, init_meta: dict | None = None) -> Any:
    """Parse ``source`` with one of the parser's entry rules; every failure a DiagnosticError.

    The grammar is recursive; nesting is capped at MAX_NESTING levels, each a handful of
    Python frames, which deep_recursion allows (Python 3.11 frames use no C stack).
    """
    if not isinstance(source, str):
        raise DiagnosticError(f"Relay parser: expected text, got {type(source).__name__}")
    head, meta = _split_metadata(source) if metadata else (source, {})
    if init_meta:
        meta = {**{str(k): list(v) for k, v in init_meta.items()}, **meta}
    parser = _Parser(head, meta)
    if init_module is not None:
        parser.seed(init_module)
    with deep_recursion():
        try:
            return parse_with(parser)
        except TVMError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError,
                OverflowError) as err:
            # A node constructor refusing what the text asked for: name the place.
            raise parser.error(f"{type(err).__name__}: {err}") from None


def parse(source: str, source_name: str = "from_string", init_module: IRModule | None = None,
          init_meta_table: dict | None = None) -> IRModule:
    """Parse a module in the Relay text format (``tvm.parser.parse``).

    ``init_module``'s functions and types are visible to the text and part of the result
    (a name defined in both is an error); ``init_meta_table`` (``{"relay.Constant": [...]}``)
    serves ``meta[...]`` references that the text's own metadata section does not.
    Malformed text raises :class:`DiagnosticError` with the line and column, as does text
    nested more than :data:`MAX_NESTING` levels deep.

    Example
    -------
    >>> mod = parse('def @main(%x: Tensor[(2,), float32]) { negative(%x) }')
    >>> mod["main"].params[0].name_hint
    'x'
    """
    if init_module is not None and not isinstance(init_module, IRModule):
        raise DiagnosticError(f"Relay parser: init_module must be an IRModule, got "
                              f"{type(init_module).__name__}")
    if init_meta_table is not None and not (isinstance(init_meta_table, dict | Map) and all(
            isinstance(v, list | tuple | Array) for v in init_meta_table.values())):
        raise DiagnosticError("Relay parser: init_meta_table must map kinds to lists")
    parsed = _run(source, _Parser.module, init_module=init_module, init_meta=init_meta_table)
    if init_module is None:
        return parsed
    merged = init_module.copy()
    for gv in parsed.get_global_vars():
        if gv.name_hint in merged:
            raise DiagnosticError(f"Relay parser: @{gv.name_hint} is defined both in the text "
                                  "and in init_module")
    merged.update(parsed)
    return merged


fromtext = parse


def _whole_expr(parser: _Parser) -> Any:
    parser.predeclare()
    return parser.body("")  # "" matches end of input


def parse_expr(source: str) -> Any:
    """Parse one expression (``free_var`` declarations may come first)."""
    return _run(source, _whole_expr)


def _whole_type(parser: _Parser) -> Any:
    ty = parser.type()
    if parser.tok.kind != "eof":
        raise parser.error("unexpected text after the type")
    return ty


def parse_type(source: str) -> Any:
    """Parse a type such as ``Tensor[(1, ?), float32]``."""
    return _run(source, _whole_type, metadata=False)
