"""Python source -> graph IR by SSA construction (Braun et al., as Myia's parser does).

Each basic block is a graph; a jump is a tail call of the target block's graph; a variable
with several reaching definitions becomes a parameter of the block (a phi), whose argument each
predecessor's jump supplies. A block with one predecessor reads the predecessor's variables
directly, which makes it a closure nested in it (``if`` branches, loop bodies). Loops are tail
recursion through their header block.

Globals and attributes of modules are left as ``resolve``/``getattr`` applications for the
resolve step. Constructs that cannot be compiled raise :class:`JitError` with file:line.

Entry point: :func:`parse`.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
from typing import Any

from kiln.jit import primitives as P
from kiln.jit import structural as S
from kiln.jit.errors import JitError
from kiln.jit.ir import Apply, Constant, Graph, Location, Node


class Namespace:
    """The names a function sees: its globals, closure cells and the builtins."""

    def __init__(self, fn):
        self.fn = fn
        self.values: dict[str, Any] = {}
        builtins = fn.__globals__.get("__builtins__", {})
        self.values.update(builtins if isinstance(builtins, dict) else vars(builtins))
        self.values.update(fn.__globals__)
        code = fn.__code__
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                self.values[name] = cell.cell_contents
            except ValueError:
                pass  # a cell not filled yet: resolving it raises the unknown-name error

    def __repr__(self) -> str:
        return f"ns({self.fn.__qualname__})"


class GlobalRef:
    """A global (or closure-cell) name of a namespace, replaced by the resolve step."""

    __slots__ = ("ns", "name")

    def __init__(self, ns: Namespace, name: str):
        self.ns, self.name = ns, name

    def __repr__(self) -> str:
        return f"resolve({self.name})"


class GetAttr:
    """Marker primitive: ``getattr(value, name)``; resolve folds modules and methods."""

    name = "getattr"

    def __repr__(self) -> str:
        return "getattr"


GETATTR = GetAttr()

BINOPS = {ast.Add: P.add, ast.Sub: P.sub, ast.Mult: P.mul, ast.Div: P.truediv,
          ast.FloorDiv: P.floordiv, ast.Mod: P.mod, ast.Pow: P.pow_, ast.MatMult: P.matmul}
CMPOPS = {ast.Lt: P.lt, ast.Gt: P.gt, ast.LtE: P.le, ast.GtE: P.ge, ast.Eq: P.eq,
          ast.NotEq: P.ne}

UNSUPPORTED_STMT = {
    ast.Try: "try/except", ast.With: "with", ast.Raise: "raise (use assert)",
    ast.Global: "global", ast.Nonlocal: "nonlocal", ast.Delete: "del",
    ast.ClassDef: "class definitions", ast.Import: "import", ast.ImportFrom: "import",
    ast.AsyncFunctionDef: "async functions", ast.AsyncFor: "async for",
    ast.AsyncWith: "async with",
}
if hasattr(ast, "TryStar"):
    UNSUPPORTED_STMT[ast.TryStar] = "try/except*"
if hasattr(ast, "Match"):
    UNSUPPORTED_STMT[ast.Match] = "match"


class Block:
    """A basic block under construction: its graph, local definitions and predecessors."""

    def __init__(self, fp: FunctionParser, name: str, matured: bool = True):
        self.fp = fp
        self.graph = Graph(name, fp.loc)
        self.variables: dict[str, Node] = {}
        self.preds: list[Block] = []
        self.matured = matured
        self.pending: list[tuple[Any, str]] = []  # phis created before the block matured
        self.jumps: dict[Block, Apply] = {}

    def read(self, var: str, loc: Location | None = None) -> Node:
        """The node bound to ``var`` here (creating phis where definitions meet)."""
        if var in self.variables:
            return self.variables[var]
        if var not in self.fp.local_names:
            return self.fp.read_outer(var, loc)  # Python scoping: not assigned here
        if self.matured and len(self.preds) == 1:
            node = self.preds[0].read(var, loc)
        elif self.matured and not self.preds:
            node = self.fp.read_outer(var, loc)
        else:
            phi = self.graph.add_parameter(var.lstrip("$"))
            self.variables[var] = phi
            if self.matured:
                self._set_phi_arguments(phi, var, loc)
            else:
                self.pending.append((phi, var))
            return phi
        self.variables[var] = node
        return node

    def _set_phi_arguments(self, phi, var: str, loc) -> None:
        for pred in self.preds:
            pred.jumps[self].inputs.append(pred.read(var, loc))

    def mature(self) -> None:
        """All predecessors are known: give the pending phis their arguments."""
        self.matured = True
        for phi, var in self.pending:
            self._set_phi_arguments(phi, var, None)
        self.pending = []

    def jump(self, target: Block, loc=None) -> None:
        """End this block with a tail call to ``target``."""
        call = Apply([Constant(target.graph)], self.graph, loc)
        self.graph.output = call
        self.jumps[target] = call
        target.preds.append(self)

    def apply(self, fn: Any, *args: Any, loc=None, kwnames: tuple = ()) -> Apply:
        nodes = [a if isinstance(a, Node) else Constant(a) for a in (fn, *args)]
        return Apply(nodes, self.graph, loc, kwnames=kwnames)


class FunctionParser:
    """Parses one ``def``/``lambda`` (nested ones recursively) into a graph."""

    def __init__(self, ctx: ParseContext, node: ast.AST, outer: Block | None, name: str):
        self.ctx, self.node, self.outer, self.name = ctx, node, outer, name
        self.loc = ctx.loc(node)
        self.loops: list[tuple[Block, Block]] = []
        self.counter = itertools.count()
        self.local_names = _local_names(node)

    def read_outer(self, var: str, loc) -> Node:
        """A name not bound in the function: the enclosing function's, else a global."""
        if self.outer is not None:
            return self.outer.read(var, loc)
        return Constant(GlobalRef(self.ctx.ns, var), loc)

    def parse(self, graph: Graph | None = None) -> Graph:
        entry = Block(self, self.name)
        if graph is not None:
            entry.graph = graph
        args = self.node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            raise JitError("*args, **kwargs and keyword-only parameters are not supported",
                           self.loc)
        for a in args.args:
            entry.variables[a.arg] = entry.graph.add_parameter(a.arg, self.ctx.loc(a))
        defaults = []
        for d in args.defaults:
            if not isinstance(d, ast.Constant):
                raise JitError("parameter defaults must be literal constants", self.ctx.loc(d))
            defaults.append(d.value)
        entry.graph.flags["defaults"] = dict(zip([a.arg for a in args.args][-len(defaults):],
                                                 defaults)) if defaults else {}
        if isinstance(self.node, ast.Lambda):
            self.ctx.current_graph = entry.graph
            entry.graph.output = self.expr(entry, self.node.body)
            return entry.graph
        end = self.stmts(entry, self.node.body)
        if end is not None:
            end.graph.output = Constant(None)
        return entry.graph

    # -- statements ---------------------------------------------------------------------------
    def stmts(self, block: Block | None, body: list) -> Block | None:
        for stmt in body:
            if block is None:
                break  # code after return/break/continue never runs
            block = self.stmt(block, stmt)
        return block

    def stmt(self, block: Block, node: ast.stmt) -> Block | None:
        self.ctx.current_graph = block.graph
        loc = self.ctx.loc(node)
        kind = type(node)
        if kind in UNSUPPORTED_STMT:
            raise JitError(f"{UNSUPPORTED_STMT[kind]} is not supported inside a kiln.jit "
                           "function", loc)
        method = getattr(self, "stmt_" + kind.__name__, None)
        if method is None:
            raise JitError(f"{kind.__name__} statements are not supported", loc)
        return method(block, node, loc)

    def stmt_Return(self, block, node, loc):
        block.graph.output = self.expr(block, node.value) if node.value else Constant(None)
        return None

    def stmt_Pass(self, block, node, loc):
        return block

    def stmt_Expr(self, block, node, loc):
        v = node.value
        if isinstance(v, ast.Constant) and isinstance(v.value, str):
            return block  # docstring
        if isinstance(v, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise JitError("generators (yield) are not supported", loc)
        what = "print(...)" if (isinstance(v, ast.Call) and isinstance(v.func, ast.Name)
                                and v.func.id == "print") else ast.unparse(v)
        raise JitError(f"{what} is a statement whose value is unused: kiln.jit functions are "
                       "pure (no print or other side effects inside)", loc)

    def stmt_Assign(self, block, node, loc):
        value = self.expr(block, node.value)
        for target in node.targets:
            self.assign(block, target, value, loc)
        return block

    def stmt_AnnAssign(self, block, node, loc):
        if node.value is not None:
            self.assign(block, node.target, self.expr(block, node.value), loc)
        return block

    def stmt_AugAssign(self, block, node, loc):
        if not isinstance(node.target, ast.Name):
            raise JitError(f"in-place update of {ast.unparse(node.target)} (mutation) is not "
                           "supported; rebind a name instead", loc)
        op = BINOPS.get(type(node.op))
        if op is None:
            raise JitError(f"operator {type(node.op).__name__} is not supported", loc)
        cur = block.read(node.target.id, loc)
        block.variables[node.target.id] = block.apply(op, cur, self.expr(block, node.value),
                                                      loc=loc)
        return block

    def assign(self, block: Block, target: ast.AST, value: Node, loc) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, Apply) and value.name is None:
                value.name = target.id
            block.variables[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in target.elts):
                raise JitError("starred assignment is not supported", loc)
            for i, elt in enumerate(target.elts):
                self.assign(block, elt, block.apply(S.getitem, value, i, loc=loc), loc)
        elif isinstance(target, ast.Subscript):
            raise JitError(f"assignment to {ast.unparse(target)} mutates an array, which "
                           "kiln.jit does not support (build a new array instead)", loc)
        else:
            raise JitError(f"assignment to {ast.unparse(target)} is not supported", loc)

    def stmt_FunctionDef(self, block, node, loc):
        if node.decorator_list:
            raise JitError("decorators on nested functions are not supported", loc)
        g = Graph(node.name, loc)
        block.variables[node.name] = Constant(g)  # bound first so the body can recurse
        FunctionParser(self.ctx, node, block, node.name).parse(g)
        self.ctx.current_graph = block.graph
        return block

    def stmt_If(self, block, node, loc):
        cond = block.apply(P.truth, self.expr(block, node.test), loc=loc)
        tb, fb = self.new_block("if_true", block), self.new_block("if_false", block)
        block.graph.output = block.apply(block.apply(S.switch, cond, Constant(tb.graph),
                                                     Constant(fb.graph), loc=loc), loc=loc)
        ends = [b for b in (self.stmts(tb, node.body), self.stmts(fb, node.orelse)) if b]
        if not ends:
            return None
        after = Block(self, "if_after", matured=False)
        for b in ends:
            b.jump(after, loc)
        after.mature()
        return after

    def stmt_Assert(self, block, node, loc):
        cond = block.apply(P.truth, self.expr(block, node.test), loc=loc)
        ok, fail = self.new_block("assert_ok", block), self.new_block("assert_fail", block)
        msg = self.expr(fail, node.msg) if node.msg is not None else \
            Constant(f"assertion failed: {ast.unparse(node.test)} ({loc})")
        fail.graph.output = fail.apply(S.raise_, msg, loc=loc)
        block.graph.output = block.apply(block.apply(S.switch, cond, Constant(ok.graph),
                                                     Constant(fail.graph), loc=loc), loc=loc)
        return ok

    def loop(self, block, test_fn, body_prelude, node, loc):
        if node.orelse:
            raise JitError("else clauses on loops are not supported", loc)
        header = Block(self, "loop_header", matured=False)
        header.graph.flags["loop_header"] = True  # infer may unroll it (constant bounds)
        block.jump(header, loc)
        self.ctx.current_graph = header.graph
        cond = test_fn(header)
        body, exit_ = self.new_block("loop_body", header), self.new_block("loop_exit", header)
        body.graph.flags["loop_body"] = True
        header.graph.output = header.apply(header.apply(S.switch, cond, Constant(body.graph),
                                                        Constant(exit_.graph), loc=loc), loc=loc)
        after = Block(self, "loop_after", matured=False)
        self.loops.append((header, after))
        self.ctx.current_graph = body.graph
        body_prelude(body)
        end = self.stmts(body, node.body)
        self.loops.pop()
        if end is not None:
            end.jump(header, loc)
        header.mature()
        exit_.jump(after, loc)
        after.mature()
        return after

    def stmt_While(self, block, node, loc):
        return self.loop(block, lambda h: h.apply(P.truth, self.expr(h, node.test), loc=loc),
                         lambda b: None, node, loc)

    def stmt_For(self, block, node, loc):
        it = node.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                and it.func.id == "range" and not it.keywords and 1 <= len(it.args) <= 3):
            raise JitError("for loops must iterate over range(...)", loc)
        args = [self.expr(block, a) for a in it.args]
        start, stop, step = (Constant(0), args[0], Constant(1)) if len(args) == 1 else \
            (args[0], args[1], args[2] if len(args) == 3 else Constant(1))
        n = next(self.counter)
        iv, sv, tv = f"$i{n}", f"$stop{n}", f"$step{n}"
        self.local_names |= {iv, sv, tv}
        block.variables.update({iv: start, sv: stop, tv: step})

        def test(h):
            return h.apply(S.range_continue, h.read(iv), h.read(sv), h.read(tv), loc=loc)

        def prelude(body):
            i = body.read(iv)
            self.assign(body, node.target, i, loc)
            body.variables[iv] = body.apply(P.add, i, body.read(tv), loc=loc)

        return self.loop(block, test, prelude, node, loc)

    def stmt_Break(self, block, node, loc):
        if not self.loops:
            raise JitError("break outside a loop", loc)
        block.jump(self.loops[-1][1], loc)
        return None

    def stmt_Continue(self, block, node, loc):
        if not self.loops:
            raise JitError("continue outside a loop", loc)
        block.jump(self.loops[-1][0], loc)
        return None

    def new_block(self, name: str, pred: Block) -> Block:
        b = Block(self, name)
        b.preds.append(pred)
        return b

    # -- expressions --------------------------------------------------------------------------
    def expr(self, block: Block, node: ast.expr) -> Node:
        self.ctx.current_graph = block.graph
        method = getattr(self, "expr_" + type(node).__name__, None)
        loc = self.ctx.loc(node)
        if method is None:
            what = {"ListComp": "list comprehensions", "GeneratorExp": "generators",
                    "Yield": "generators (yield)", "DictComp": "dict comprehensions",
                    "SetComp": "set comprehensions", "Dict": "dicts", "Set": "sets",
                    "JoinedStr": "f-strings", "Starred": "starred expressions",
                    "NamedExpr": "assignment expressions"}.get(type(node).__name__,
                                                                type(node).__name__)
            raise JitError(f"{what} are not supported inside a kiln.jit function", loc)
        return method(block, node, loc)

    def expr_Constant(self, block, node, loc):
        return Constant(node.value, loc)

    def expr_Name(self, block, node, loc):
        return block.read(node.id, loc)

    def expr_BinOp(self, block, node, loc):
        op = BINOPS.get(type(node.op))
        if op is None:
            raise JitError(f"operator {type(node.op).__name__} is not supported", loc)
        return block.apply(op, self.expr(block, node.left), self.expr(block, node.right),
                           loc=loc)

    def expr_UnaryOp(self, block, node, loc):
        if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
                and isinstance(node.operand.value, (int, float)):
            return Constant(-node.operand.value, loc)  # a negative literal stays a constant
        x = self.expr(block, node.operand)
        if isinstance(node.op, ast.USub):
            return block.apply(P.neg, x, loc=loc)
        if isinstance(node.op, ast.UAdd):
            return x
        if isinstance(node.op, ast.Not):
            return block.apply(P.not_, block.apply(P.truth, x, loc=loc), loc=loc)
        raise JitError(f"operator {type(node.op).__name__} is not supported", loc)

    def expr_Compare(self, block, node, loc):
        parts, left = [], node.left
        for op, right in zip(node.ops, node.comparators):
            prim = CMPOPS.get(type(op))
            if prim is None:
                raise JitError(f"comparison {type(op).__name__} is not supported", loc)
            parts.append(ast.Call(func=ast.Constant(prim), args=[left, right], keywords=[]))
            left = right
        if len(parts) == 1:
            return block.apply(parts[0].func.value, self.expr(block, parts[0].args[0]),
                               self.expr(block, parts[0].args[1]), loc=loc)
        return self.expr(block, ast.copy_location(ast.BoolOp(ast.And(), parts), node))

    def expr_Call(self, block, node, loc):
        if isinstance(node.func, ast.Constant):  # a primitive planted by expr_Compare
            return block.apply(node.func.value, *[self.expr(block, a) for a in node.args],
                               loc=loc)
        fn = self.expr(block, node.func)
        args = [self.expr(block, a) for a in node.args if not isinstance(a, ast.Starred)]
        if len(args) != len(node.args) or any(k.arg is None for k in node.keywords):
            raise JitError("*args and **kwargs in calls are not supported", loc)
        kw = [self.expr(block, k.value) for k in node.keywords]
        return block.apply(fn, *args, *kw, loc=loc,
                           kwnames=tuple(k.arg for k in node.keywords))

    def expr_Attribute(self, block, node, loc):
        return block.apply(GETATTR, self.expr(block, node.value), node.attr, loc=loc)

    def expr_Tuple(self, block, node, loc):
        elts = [self.expr(block, e) for e in node.elts]
        if all(isinstance(e, Constant) and isinstance(e.value, (int, float, bool, str,
                                                                 type(None), tuple))
               for e in elts):
            return Constant(tuple(e.value for e in elts), loc)  # (0, 1), shapes, argnums
        return block.apply(S.make_tuple, *elts, loc=loc)

    expr_List = expr_Tuple

    def expr_Subscript(self, block, node, loc):
        value = self.expr(block, node.value)
        idx = _static_index(node.slice)
        if idx is _DYNAMIC:
            if isinstance(node.slice, (ast.Slice, ast.Tuple)):
                raise JitError("slice bounds must be constants", loc)
            index: Node = self.expr(block, node.slice)
        else:
            index = Constant(idx)
        return block.apply(S.getitem, value, index, loc=loc)

    def expr_IfExp(self, block, node, loc):
        cond = block.apply(P.truth, self.expr(block, node.test), loc=loc)
        return self.branches(block, cond, node.body, node.orelse, loc)

    def branches(self, block, cond, body, orelse, loc) -> Node:
        """``switch(cond, λ: body, λ: orelse)()`` in a non-tail position."""
        tb, fb = self.new_block("ifexp_true", block), self.new_block("ifexp_false", block)
        tb.graph.output = body if isinstance(body, Node) else self.expr(tb, body)
        fb.graph.output = orelse if isinstance(orelse, Node) else self.expr(fb, orelse)
        self.ctx.current_graph = block.graph
        return block.apply(block.apply(S.switch, cond, Constant(tb.graph),
                                       Constant(fb.graph), loc=loc), loc=loc)

    def expr_BoolOp(self, block, node, loc):
        # a and b: b if a else a;  a or b: a if a else b (short-circuit, as Python)
        first = self.expr(block, node.values[0])
        if len(node.values) == 1:
            return first
        rest = ast.copy_location(ast.BoolOp(node.op, node.values[1:]), node) \
            if len(node.values) > 2 else node.values[1]
        cond = block.apply(P.truth, first, loc=loc)
        if isinstance(node.op, ast.And):
            return self.branches(block, cond, rest, first, loc)
        return self.branches(block, cond, first, rest, loc)

    def expr_Lambda(self, block, node, loc):
        self.ctx.lambdas += 1
        g = FunctionParser(self.ctx, node, block, f"lambda{self.ctx.lambdas}").parse()
        self.ctx.current_graph = block.graph
        return Constant(g, loc)


_DYNAMIC = object()


def _local_names(fn: ast.AST) -> set[str]:
    """Names local to a function by Python's rule: parameters and names it assigns."""
    names = {a.arg for a in fn.args.args}
    todo = list(fn.body) if isinstance(fn.body, list) else [fn.body]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        todo.extend(ast.iter_child_nodes(node))
    return names


def _static_index(node: ast.AST) -> Any:
    """The constant value of an index expression (ints, slices, tuples), or _DYNAMIC."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, type(None))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
            and isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, int):
        return -node.operand.value
    if isinstance(node, ast.Slice):
        parts = [None if p is None else _static_index(p) for p in (node.lower, node.upper,
                                                                   node.step)]
        return _DYNAMIC if _DYNAMIC in parts else slice(*parts)
    if isinstance(node, ast.Tuple):
        parts = [_static_index(e) for e in node.elts]
        return _DYNAMIC if _DYNAMIC in parts else tuple(parts)
    return _DYNAMIC


class ParseContext:
    """Source text and namespace of one Python function being parsed."""

    def __init__(self, fn):
        self.fn = fn
        try:
            lines, start = inspect.getsourcelines(fn)
        except (OSError, TypeError) as err:
            raise JitError(f"cannot read the source of {fn!r}: {err}") from None
        self.filename = inspect.getsourcefile(fn) or "<unknown>"
        self.lines = lines
        self.start = start
        self.ns = Namespace(fn)
        self.current_graph: Graph | None = None
        self.lambdas = 0
        if fn.__name__ == "<lambda>":
            self.node = self._find_lambda(fn)
            return
        tree = ast.parse(textwrap.dedent("".join(lines)))
        defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        if not defs:
            raise JitError(f"{fn!r}: cannot find its def in its source")
        self.node = defs[0]

    def _find_lambda(self, fn) -> ast.Lambda:
        """The lambda's node in its whole file (its own lines may not parse alone): the one
        on its first line with its parameters, the column telling several apart."""
        import linecache
        self.lines = linecache.getlines(self.filename)
        self.start = 1
        tree = ast.parse("".join(self.lines))
        code = fn.__code__
        names = list(code.co_varnames[:code.co_argcount])
        found = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)
                 and n.lineno == code.co_firstlineno and [a.arg for a in n.args.args] == names]
        if len(found) > 1:  # the one whose body holds the code's instruction columns
            cols = [p[2] for p in code.co_positions() if p[0] == code.co_firstlineno
                    and p[2] is not None]

            def inside(n: ast.Lambda) -> int:
                end = n.body.end_col_offset or 10 ** 9
                return sum(n.body.col_offset <= c < end for c in cols)

            best = max(inside(n) for n in found)
            found = [n for n in found if inside(n) == best]
        if len(found) != 1:
            raise JitError(f"cannot tell which lambda on line {code.co_firstlineno} of "
                           f"{self.filename} is {fn!r}; define it with def")
        return found[0]

    def loc(self, node: ast.AST) -> Location:
        lineno = getattr(node, "lineno", 1)
        text = self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""
        return Location(self.filename, lineno + self.start - 1, text)


def parse(fn) -> Graph:
    """Parse the Python function ``fn`` into a graph (globals still unresolved)."""
    if not inspect.isfunction(fn):
        raise JitError(f"kiln.jit compiles Python functions, got {type(fn).__name__}")
    ctx = ParseContext(fn)
    name = "lambda" if fn.__name__ == "<lambda>" else fn.__name__
    graph = FunctionParser(ctx, ctx.node, None, name).parse()
    graph.flags["pyfunc"] = fn
    return graph
