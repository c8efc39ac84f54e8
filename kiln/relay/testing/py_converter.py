"""Relay programs as Python scripts (TVM's ``relay.testing.to_python`` / ``run_as_python``).

:func:`to_python` turns a Relay expression (and the global functions of its module) into a
Python ``ast.Module``: control flow, closures, ``let``, pattern matching and references become
Python statements, and every operator call becomes a call of that operator compiled for
``target`` (registered as the global function ``_lowered_op_<hash>``). Running the script
leaves the result in the variable ``_py_out``; :func:`run_as_python` does that. Values are what
kiln's executors return: ``NDArray`` tensors, ``ADT`` tuples, ``ConstructorValue`` ADT values,
``RefValue`` cells and Python functions for closures. A third way to run a program, so a test
can compare it with the interpreter and the VM; ``ast.unparse`` shows the source.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
from typing import Any

import numpy as np

from kiln.ir.adt import Constructor
from kiln.ir.expr import GlobalVar
from kiln.ir.module import IRModule
from kiln.ir.op import Op
from kiln.relay import adt
from kiln.relay import expr as rx
from kiln.runtime.error import TVMError

__all__ = ["to_python", "run_as_python", "OUTPUT_VAR_NAME", "constructor_of"]

OUTPUT_VAR_NAME = "_py_out"

_PROLOGUE = """\
import numpy
from kiln import nd
from kiln.runtime.registry import get_global_func
from kiln.runtime.container import tuple_object
from kiln.relay.backend.interpreter import ConstructorValue, RefValue
from kiln.relay.testing.py_converter import constructor_of
"""

# Constructors by tag, so a generated script can rebuild ADT values with their constructor.
_CONSTRUCTORS: dict[int, Constructor] = {}


def constructor_of(tag: int) -> Constructor:
    """The constructor a converted script refers to by ``tag``."""
    return _CONSTRUCTORS[tag]


class _Converter:
    """Emits Python statements for Relay expressions; :meth:`value` returns the name holding
    an expression's value after the statements it appended to ``self.lines`` have run."""

    def __init__(self, mod: IRModule, target: Any) -> None:
        self.mod = mod
        self.target = target
        self.lines: list[str] = []
        self.indent = 0
        self.names: dict[rx.Var, str] = {}
        self.counter = itertools.count()
        self.pending: list[GlobalVar] = []
        self.converted: set[GlobalVar] = set()
        self.global_names: dict[GlobalVar, str] = {}

    # -- output helpers ---------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def fresh(self, hint: str) -> str:
        clean = "".join(c if c.isalnum() else "_" for c in hint) or "v"
        return f"_{clean}_{next(self.counter)}"

    def global_name(self, gvar: GlobalVar) -> str:
        # numbered: @f.x and @f_x clean to the same identifier
        name = self.global_names.get(gvar)
        if name is None:
            name = self.global_names[gvar] = "_global" + self.fresh(gvar.name_hint)
        return name

    # -- functions --------------------------------------------------------------------------
    def define(self, name: str, func: rx.Function) -> None:
        """``def name(params): <body>; return <value>`` at the current indentation."""
        params = [self.bind(p) for p in func.params]
        self.emit(f"def {name}({', '.join(params)}):")
        self.indent += 1
        self.emit(f"return {self.value(func.body)}")
        self.indent -= 1

    def bind(self, var: rx.Var) -> str:
        name = self.fresh(var.name_hint)
        self.names[var] = name
        return name

    def convert_globals(self) -> list[str]:
        """Definitions of the global functions the program reaches (not the whole module)."""
        lines, outer = [], (self.lines, self.indent)
        while self.pending:
            gvar = self.pending.pop()
            self.lines, self.indent = lines, 0
            self.define(self.global_name(gvar), self.mod[gvar])
        self.lines, self.indent = outer
        return lines

    # -- expressions ------------------------------------------------------------------------
    def value(self, expr: Any) -> str:
        """Append the statements computing ``expr``; the Python name (or literal) of it."""
        method = getattr(self, "visit_" + type(expr).__name__.lower(), None)
        if method is None:
            raise TVMError(f"to_python: cannot convert a {type(expr).__name__}")
        return method(expr)

    def assign(self, hint: str, code: str) -> str:
        name = self.fresh(hint)
        self.emit(f"{name} = {code}")
        return name

    def visit_var(self, var: rx.Var) -> str:
        if var not in self.names:
            raise TVMError(f"to_python: free variable %{var.name_hint}")
        return self.names[var]

    def visit_globalvar(self, gvar: GlobalVar) -> str:
        if gvar not in self.converted:
            self.converted.add(gvar)
            self.pending.append(gvar)
        return self.global_name(gvar)

    def visit_constant(self, const: rx.Constant) -> str:
        array = const.data.numpy()
        dtype = str(array.dtype)
        if array.dtype.kind in "fc" and not np.isfinite(array).all():
            # repr writes nan and inf as names the script lacks: the bytes, exactly
            data = f"numpy.frombuffer(bytes.fromhex({array.tobytes().hex()!r}), dtype={dtype!r})"
        else:
            data = f"numpy.array({array.tolist()!r}, dtype={dtype!r})"
        return self.assign("const", f"nd.array({data}.reshape({array.shape!r}))")

    def visit_tuple(self, tup: rx.Tuple) -> str:
        fields = [self.value(f) for f in tup.fields]
        return self.assign("tuple", f"tuple_object([{', '.join(fields)}])")

    def visit_tuplegetitem(self, item: rx.TupleGetItem) -> str:
        return self.assign("item", f"{self.value(item.tuple_value)}[{item.index}]")

    def visit_let(self, let: rx.Let) -> str:
        name = self.bind(let.var)
        if isinstance(let.value, rx.Function):  # may call itself through its own name
            self.define(name, let.value)
        else:
            self.emit(f"{name} = {self.value(let.value)}")
        return self.value(let.body)

    def visit_function(self, func: rx.Function) -> str:
        name = self.fresh("closure")
        self.define(name, func)
        return name

    def visit_if(self, node: rx.If) -> str:
        out = self.fresh("if")
        self.emit(f"if bool({self.value(node.cond)}.numpy()):")
        for branch in (node.true_branch, node.false_branch):
            self.indent += 1
            self.emit(f"{out} = {self.value(branch)}")
            self.indent -= 1
            if branch is node.true_branch:
                self.emit("else:")
        return out

    def visit_refcreate(self, ref: rx.RefCreate) -> str:
        return self.assign("ref", f"RefValue({self.value(ref.value)})")

    def visit_refread(self, read: rx.RefRead) -> str:
        return self.assign("read", f"{self.value(read.ref)}.value")

    def visit_refwrite(self, write: rx.RefWrite) -> str:
        ref, value = self.value(write.ref), self.value(write.value)
        self.emit(f"{ref}.value = {value}")
        return self.assign("unit", "tuple_object([])")

    def visit_constructor(self, ctor: Constructor) -> str:
        """A constructor used as a function value."""
        _CONSTRUCTORS[ctor.tag] = ctor
        args = ", ".join(f"a{i}" for i in range(len(ctor.inputs)))
        return self.assign("ctor", f"lambda {args}: ConstructorValue({ctor.tag}, [{args}], "
                                   f"constructor_of({ctor.tag}))")

    def visit_call(self, call: rx.Call) -> str:
        if isinstance(call.op, Op):
            return self.assign("op", f"{self.compile_op(call)}"
                                     f"({', '.join(self.value(a) for a in call.args)})")
        args = [self.value(a) for a in call.args]
        if isinstance(call.op, Constructor):
            _CONSTRUCTORS[call.op.tag] = call.op
            return self.assign("adt", f"ConstructorValue({call.op.tag}, [{', '.join(args)}], "
                                      f"constructor_of({call.op.tag}))")
        return self.assign("call", f"{self.value(call.op)}({', '.join(args)})")

    def visit_match(self, match: adt.Match) -> str:
        data, out = self.value(match.data), self.fresh("match")
        for i, clause in enumerate(match.clauses):
            self.emit(("if " if i == 0 else "elif ") + self.pattern_test(clause.lhs, data) + ":")
            self.indent += 1
            self.bind_pattern(clause.lhs, data)
            self.emit(f"{out} = {self.value(clause.rhs)}")
            self.indent -= 1
        self.emit("else:")
        self.emit(f"    raise ValueError('match was not exhaustive for ' + repr({data}))")
        return out

    # -- patterns ---------------------------------------------------------------------------
    def pattern_test(self, pattern: Any, data: str) -> str:
        """A Python condition that holds when ``data`` matches ``pattern``."""
        if isinstance(pattern, adt.PatternWildcard | adt.PatternVar):
            return "True"
        if isinstance(pattern, adt.PatternConstructor):
            tests = [f"{data}.tag == {pattern.constructor.tag}"]
            tests += [self.pattern_test(p, f"{data}.fields[{i}]")
                      for i, p in enumerate(pattern.patterns)]
        elif isinstance(pattern, adt.PatternTuple):
            tests = [self.pattern_test(p, f"{data}[{i}]") for i, p in enumerate(pattern.patterns)]
        else:
            raise TVMError(f"to_python: cannot convert a {type(pattern).__name__} pattern")
        tests = [t for t in tests if t != "True"]
        return " and ".join(f"({t})" for t in tests) if tests else "True"

    def bind_pattern(self, pattern: Any, data: str) -> None:
        if isinstance(pattern, adt.PatternVar):
            self.emit(f"{self.bind(pattern.var)} = {data}")
        elif isinstance(pattern, adt.PatternConstructor):
            for i, p in enumerate(pattern.patterns):
                self.bind_pattern(p, f"{data}.fields[{i}]")
        elif isinstance(pattern, adt.PatternTuple):
            for i, p in enumerate(pattern.patterns):
                self.bind_pattern(p, f"{data}[{i}]")

    # -- operators --------------------------------------------------------------------------
    def compile_op(self, call: rx.Call) -> str:
        """``get_global_func("_lowered_op_<hash>")``: the call's operator compiled on its own."""
        from kiln.relay.build_module import create_executor
        from kiln.runtime.registry import get_global_func, register_func

        params = [rx.Var(f"p{i}", arg.checked_type) for i, arg in enumerate(call.args)]
        func = rx.Function(params, rx.Call(call.op, params, call.attrs, call.type_args))
        # keyed by the text (attributes and parameter types) and the target: the structural
        # hash sees no parameter types, and a collision would run another operator
        text = f"{func.astext(show_meta_data=False)}\0{self.target}"
        name = f"_lowered_op_{hashlib.blake2b(text.encode(), digest_size=16).hexdigest()}"
        if get_global_func(name, allow_missing=True) is None:
            compiled = create_executor("vm", mod=IRModule.from_expr(func),
                                       target=self.target).evaluate()
            register_func(name, compiled, override=True)
        return f"get_global_func({name!r})"


def _unwrap(expr: Any) -> Any:
    return expr.astuple() if hasattr(expr, "astuple") else expr


def to_python(expr: Any, mod: IRModule | None = None, target: Any = "llvm") -> ast.Module:
    """``expr`` (with ``mod``'s global functions) as a Python script; see the module doc."""
    from kiln.relay.type_infer import infer_expr, infer_module

    mod = infer_module(mod if mod is not None else IRModule())
    expr = _unwrap(expr)
    if not isinstance(expr, rx.Expr | GlobalVar):
        raise TVMError(f"to_python expects a Relay expression, got {type(expr).__name__}")
    if not isinstance(expr, GlobalVar):
        infer_expr(expr, mod)
    conv = _Converter(mod, target)
    out = conv.value(expr)
    source = "\n".join([_PROLOGUE, *conv.convert_globals(), *conv.lines,
                        f"{OUTPUT_VAR_NAME} = {out}\n"])
    return ast.parse(source)


def run_as_python(expr: Any, mod: IRModule | None = None, target: Any = "llvm") -> Any:
    """Convert ``expr`` with :func:`to_python`, run the script, return ``_py_out``."""
    from kiln.relay.base import deep_recursion

    code = compile(to_python(expr, mod, target), "<relay-as-python>", "exec")
    scope: dict[str, Any] = {OUTPUT_VAR_NAME: None}
    with deep_recursion():
        exec(code, scope, scope)  # noqa: S102 - running the program is the point
    return scope[OUTPUT_VAR_NAME]

