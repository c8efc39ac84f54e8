"""The Python backend: a scalar-only program (no arrays) becomes one generated Python source.

FinalVM pays a dispatch per instruction; for loops over Python scalars that costs far more
than the arithmetic (Myia's last backend generated Python for the same reason). Here each
group of graphs joined by tail calls becomes one function holding a ``while True`` state
machine: a tail call of a known graph assigns its parameters and ``continue``s; a graph used
by exactly one jump (a loop body, an if branch) is emitted inline at that jump;
``switch(c, f, g)()`` becomes ``if c: … else: …``. Non-tail calls call the callee's own
function. Programs with arrays, grad environments or calls through unknown function values
are left to FinalVM (:func:`compile_python` returns None).

Entry point: :func:`compile_python`.
"""

from __future__ import annotations

import math
from typing import Any

from kiln.jit import structural as S
from kiln.jit.abstract import Array, Env, Scalar, Tuple
from kiln.jit.compile import schedule_applies
from kiln.jit.ir import Apply, Constant, Graph, GraphManager, Node, Parameter
from kiln.jit.primitives import Primitive


class Unsupported(Exception):
    """The program needs FinalVM (arrays, environments, dynamic calls)."""


def _scalar_program(mng: GraphManager) -> bool:
    def ok(a) -> bool:
        if isinstance(a, Tuple):
            return all(ok(e) for e in a.elements)
        return not isinstance(a, (Array, Env)) and not (
            isinstance(a, Scalar) and a.dtype not in ("bool", "int64", "float64", "str",
                                                      "index", "dtype"))
    return all(ok(n.abstract) for g in mng.graphs for n in mng.nodes(g)
               if n.abstract is not None)


class PyProgram:
    """Generated source and the function it defines; calling it runs the program."""

    def __init__(self, source: str, env: dict, entry: str):
        self.source = source
        exec(compile(source, "<kiln.jit python backend>", "exec"), env)  # noqa: S102
        self.fn = env[entry]

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def run(self, args: tuple) -> Any:
        return self.fn(*args)


def _is_function_value(n: Apply) -> bool:
    fn = n.inputs[0]
    if isinstance(fn, Constant) and fn.value in (S.partial,):
        return True
    if isinstance(fn, Constant) and fn.value is S.switch:
        return any(isinstance(a, Constant) and isinstance(a.value, Graph) or
                   (isinstance(a, Apply) and isinstance(a.inputs[0], Constant)
                    and a.inputs[0].value is S.partial) for a in n.inputs[2:])
    return False


class _Gen:
    def __init__(self, root: Graph, mng: GraphManager):
        self.root, self.mng = root, mng
        self.env: dict[str, Any] = {"math": math}
        self.functions: dict[Graph, str] = {}
        self.pending: list[Graph] = []
        self.uses: dict[Graph, int] = {}
        for g in mng.graphs:
            for n in mng.nodes(g):
                for i in n.inputs:
                    if isinstance(i, Constant) and isinstance(i.value, Graph):
                        self.uses[i.value] = self.uses.get(i.value, 0) + 1
        self.out: list[str] = []
        self.skipped: set[Node] = set()
        self.alias: dict[Node, str] = {}  # parameters of blocks emitted inline

    # -- names ------------------------------------------------------------------------------
    def name(self, node: Node) -> str:
        if isinstance(node, Constant):
            v = node.value
            if isinstance(v, Graph):
                raise Unsupported("a function used as a value")
            if isinstance(v, (bool, int)) or v is None or (isinstance(v, float)
                                                             and math.isfinite(v)):
                return repr(v)
            key = f"c{node.id}"
            self.env[key] = v
            return key
        if node in self.skipped:
            raise Unsupported("a function value stored or returned")
        if node in self.alias:
            return self.alias[node]
        return f"{'p' if isinstance(node, Parameter) else 'v'}{node.id}"

    def function_for(self, g: Graph) -> str:
        if g not in self.functions:
            self.functions[g] = f"f{g.id}"
            self.pending.append(g)
        return self.functions[g]

    # -- emission ---------------------------------------------------------------------------
    def emit_function(self, g: Graph) -> list[str]:
        states: dict[Graph, int] = {g: 0}
        body: list[str] = []
        self.states, self.state_code = states, {}
        self.emit_body(g, 3, body)
        lines = [f"def {self.functions[g]}({', '.join(self.name(p) for p in g.parameters)}):",
                 "    state = 0", "    while True:", "        if state == 0:"] + body
        done = {g}
        while len(done) < len(states):
            for h, k in list(states.items()):
                if h in done:
                    continue
                done.add(h)
                code: list[str] = []
                self.emit_body(h, 3, code)
                lines += [f"        elif state == {k}:"] + code
        return lines

    def emit_body(self, g: Graph, depth: int, out: list[str]) -> None:
        pad = "    " * depth
        order = schedule_applies(g, self.mng)
        for n in order:
            if n is g.output and self.is_call(n):
                self.emit_jump(n, depth, out)
                return
            if _is_function_value(n):
                self.skipped.add(n)  # read where it is called (static jumps and calls)
                continue
            out.append(pad + f"{self.name(n)} = {self.expr(n)}")
        out.append(pad + f"return {self.name(g.output)}")

    def is_call(self, n: Apply) -> bool:
        fn = n.inputs[0]
        return not (isinstance(fn, Constant) and isinstance(fn.value, Primitive))

    def expr(self, n: Apply) -> str:
        fn, *args = n.inputs
        if isinstance(fn, Constant) and isinstance(fn.value, Primitive):
            prim = fn.value
            names = [self.name(a) for a in args]
            if prim is S.make_tuple:
                return "(" + "".join(x + ", " for x in names) + ")"
            if prim is S.tuple_getitem:
                return f"{names[0]}[{names[1]}]"
            if prim is S.raise_:
                self.env["_raise"] = S.raise_.impl
                return f"_raise({names[0]})"
            if prim is S.switch:
                if any(isinstance(a.abstract, type(None)) for a in args):
                    raise Unsupported("switch")
                if "fn" in repr(n.abstract):
                    raise Unsupported("switch between functions used as a value")
                return f"({names[1]} if {names[0]} else {names[2]})"
            if prim.py is None or prim.vm is not None:
                raise Unsupported(prim.name)
            return prim.py.format(*names)
        # a non-tail call: the callee's own function
        return self.call_expr(fn, [self.name(a) for a in args])

    def target(self, fn: Node) -> tuple[Graph, list[Node]]:
        if isinstance(fn, Constant) and isinstance(fn.value, Graph):
            return fn.value, []
        if isinstance(fn, Apply) and isinstance(fn.inputs[0], Constant) \
                and fn.inputs[0].value is S.partial and isinstance(fn.inputs[1], Constant) \
                and isinstance(fn.inputs[1].value, Graph):
            return fn.inputs[1].value, fn.inputs[2:]
        raise Unsupported("a call through a function value")

    def call_expr(self, fn: Node, args: list[str]) -> str:
        if isinstance(fn, Apply) and isinstance(fn.inputs[0], Constant) \
                and fn.inputs[0].value is S.switch:
            c, a, b = fn.inputs[1:]
            return (f"({self.call_expr(a, args)} if {self.name(c)} "
                    f"else {self.call_expr(b, args)})")
        g, bound = self.target(fn)
        allargs = [self.name(x) for x in bound] + args
        return f"{self.function_for(g)}({', '.join(allargs)})"

    def emit_jump(self, n: Apply, depth: int, out: list[str]) -> None:
        fn, *args = n.inputs
        self.jump_to(fn, [self.name(a) for a in args], depth, out)

    def jump_to(self, fn: Node, args: list[str], depth: int, out: list[str]) -> None:
        pad = "    " * depth
        if isinstance(fn, Apply) and isinstance(fn.inputs[0], Constant) \
                and fn.inputs[0].value is S.switch:
            c, a, b = fn.inputs[1:]
            out.append(pad + f"if {self.name(c)}:")
            self.jump_to(a, args, depth + 1, out)
            out.append(pad + "else:")
            self.jump_to(b, args, depth + 1, out)
            return
        g, bound = self.target(fn)
        allargs = [self.name(x) for x in bound] + args
        if self.uses.get(g, 0) == 1 and g is not self.root and g not in self.functions \
                and g not in self.states:
            # its only caller: emit it here, its parameters read as the argument names
            self.alias.update(zip(g.parameters, allargs))
            self.emit_body(g, depth, out)
            return
        pairs = [(self.name(p), a) for p, a in zip(g.parameters, allargs)
                 if self.name(p) != a]
        targets = {t for t, _ in pairs}
        if any(a in targets for _, a in pairs):  # a swap: assign all at once
            out.append(pad + f"{', '.join(t for t, _ in pairs)} = "
                       f"{', '.join(a for _, a in pairs)}")
        else:
            out.extend(pad + f"{t} = {a}" for t, a in pairs)
        if g not in self.states:
            self.states[g] = len(self.states)
        out.append(pad + f"state = {self.states[g]}")
        out.append(pad + "continue")


def compile_python(root: Graph) -> PyProgram | None:
    """The program as generated Python, or None when it needs FinalVM."""
    mng = GraphManager(root)
    if not _scalar_program(mng):
        return None
    gen = _Gen(root, mng)
    try:
        gen.function_for(root)
        lines: list[str] = []
        while gen.pending:
            g = gen.pending.pop(0)
            lines += gen.emit_function(g) + [""]
    except Unsupported:
        return None
    return PyProgram("\n".join(lines), gen.env, gen.functions[root])
