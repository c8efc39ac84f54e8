"""Type inference per argument signature, and specialization into monomorphic graphs.

Inference evaluates a graph on abstract values in a :class:`Context` (graph, argument types,
the context of the enclosing graph for closures). A recursive call that is still being
inferred returns the provisional result (``BOTTOM`` at first); the caller's context is re-run
until its result stops changing, so ``if n == 0: return 1 else: return n * f(n - 1)`` types
from its base case. :func:`specialize` then clones one graph per context, with every node's
``abstract`` set, calls bound to the callee's clone, constant-valued nodes (shapes, ``len``)
folded to constants and ``getitem`` resolved to tuple or array indexing.

Entry points: :func:`infer`, :func:`specialize`.
"""

from __future__ import annotations

from typing import Any

from kiln.jit import primitives as P
from kiln.jit import structural as S
from kiln.jit.abstract import (
    ANY,
    BOTTOM,
    Abstract,
    Array,
    Env,
    Func,
    GraphFn,
    PartialFn,
    PrimFn,
    Scalar,
    Tuple,
    broaden,
    constant_abstract,
    join,
)
from kiln.jit.errors import JitError
from kiln.jit.ir import Apply, Constant, Graph, GraphManager, Node, Parameter, toposort
from kiln.jit.primitives import Primitive

MAX_ITERATIONS = 12
MAX_UNROLL = 64


class Context:
    """One graph inferred for one argument signature inside one parent context."""

    def __init__(self, graph: Graph, args: tuple, parent: Context | None):
        self.graph, self.args, self.parent = graph, args, parent
        self.types: dict[Node, Abstract] = {}
        self.calls: dict[Apply, list] = {}
        self.result: Abstract = BOTTOM
        self.running = False
        self.used_provisional = False

    def lookup(self, graph: Graph) -> Context:
        c = self
        while c is not None and c.graph is not graph:
            c = c.parent
        assert c is not None, f"no context for {graph} above {self.graph}"
        return c

    def __repr__(self) -> str:
        return f"<{self.graph!r} {self.args}>"


class _NoUnroll(Exception):
    """A loop being unrolled branches on data: infer again with that loop kept a loop."""

    def __init__(self, header: Graph):
        self.header = header


class Inferrer:
    """Infers a root graph and everything it calls; keeps the contexts for specialize."""

    def __init__(self, root: Graph):
        self.mng = GraphManager(root)
        self.cache: dict[tuple, Context] = {}
        self.order: list[tuple] = []
        self.origin_calls: dict[tuple, list[Context]] = {}

    def run(self, root: Graph, argspec: tuple) -> Context:
        if len(argspec) != len(root.parameters):
            raise JitError(f"{root.name}() takes {len(root.parameters)} arguments but "
                           f"{len(argspec)} were given", root.loc)
        self.call_graph(root, tuple(argspec), None, None)
        ctx = self.cache[(root, tuple(argspec), None)]
        if ctx.result is BOTTOM:
            raise JitError(f"{root.name}: no path returns a value (infinite recursion, or "
                           "every path raises)", root.loc)
        return ctx

    # -- graphs ---------------------------------------------------------------------------------
    def call_graph(self, g: Graph, args: tuple, parent: Context | None, node) -> Abstract:
        if len(args) != len(g.parameters):
            raise JitError(f"{g.name}() takes {len(g.parameters)} arguments but {len(args)} "
                           "were given", getattr(node, "loc", None))
        key = (g, args, parent)
        ctx = self.cache.get(key)
        if ctx is not None:
            if ctx.running:
                ctx.used_provisional = True
            return ctx.result
        ctx = Context(g, args, parent)
        self.cache[key] = ctx
        self.order.append(key)
        ctx.running = True
        for _ in range(MAX_ITERATIONS):
            mark = len(self.order)
            ctx.used_provisional = False
            out = self.eval_graph(ctx)
            new = join(ctx.result, out, f"the result of {g.name}")
            if not ctx.used_provisional or new == ctx.result:
                ctx.result = new
                break
            ctx.result = new
            for k in self.order[mark:]:  # built on a stale provisional result: redo
                self.cache.pop(k, None)
            del self.order[mark:]
        else:
            raise JitError(f"the type of {g.name}'s result does not settle (it keeps "
                           "changing through recursion)", g.loc)
        ctx.running = False
        return ctx.result

    def eval_graph(self, ctx: Context) -> Abstract:
        ctx.types = {p: a for p, a in zip(ctx.graph.parameters, ctx.args)}
        ctx.calls = {}
        for node in toposort(ctx.graph, self.mng):
            if isinstance(node, Apply) and node.graph is ctx.graph:
                ctx.types[node] = self.eval_apply(ctx, node)
        return self.type_of(ctx, ctx.graph.output)

    def type_of(self, ctx: Context, node: Node) -> Abstract:
        if isinstance(node, Constant):
            return self.constant_type(ctx, node.value, node)
        owner = ctx.lookup(node.graph)
        return owner.types[node]

    def constant_type(self, ctx: Context, value: Any, node: Node | None = None) -> Abstract:
        if isinstance(value, Graph):
            parent = self.mng.parent(value)
            return Func([GraphFn(value, ctx.lookup(parent) if parent is not None else None,
                                 node)])
        if isinstance(value, Primitive):
            return Func([PrimFn(value)])
        return constant_abstract(value)

    # -- applications ---------------------------------------------------------------------------
    def eval_apply(self, ctx: Context, node: Apply) -> Abstract:
        fn, *args = [self.type_of(ctx, i) for i in node.inputs]
        if isinstance(fn, Func) and len(fn.options) == 1:
            (opt,) = fn.options
            if isinstance(opt, PrimFn) and opt.prim in (S.switch,):
                if isinstance(args[0], Scalar) and args[0].value is ANY:
                    self.check_unrolled(ctx)
                return opt.prim.infer(node, *args)  # joins its branches itself
        if any(a is BOTTOM for a in args) or fn is BOTTOM:
            return BOTTOM
        S.check_callable(fn, node)
        result: Abstract = BOTTOM
        calls = []
        for opt in sorted(fn.options, key=repr):
            out, callee = self.call_option(opt, tuple(args), node, ctx)
            calls.append((opt, callee))
            result = join(result, out, f"the result of calling {fn}")
        ctx.calls[node] = calls
        return result

    def call_option(self, opt, args: tuple, node: Apply, ctx: Context):
        if isinstance(opt, PrimFn):
            prim = opt.prim
            if prim.nparams is not None and len(args) != prim.nparams:
                raise JitError(f"{prim.name} takes {prim.nparams} arguments, got {len(args)}",
                               node.loc)
            try:
                out = prim.infer(node, *args)
            except TypeError as err:
                raise JitError(f"{prim.name}: wrong number of arguments ({err})",
                               node.loc) from None
            return _fold_scalar(prim, args, out), None
        if isinstance(opt, PartialFn):
            return self.call_option(opt.fn, tuple(opt.args) + args, node, ctx)
        if not opt.graph.flags.get("keep_constants") and not self.unrolls(opt, args):
            args = tuple(broaden(a) for a in args)
        out = self.call_graph(opt.graph, args, opt.parent, node)
        callee = self.cache.get((opt.graph, args, opt.parent))
        if callee is not None:
            calls = self.origin_calls.setdefault((opt.origin, opt.parent), [])
            if callee not in calls:
                calls.append(callee)
        return out, callee


    def check_unrolled(self, ctx: Context) -> None:
        """A branch on data inside the body of a loop being unrolled: unrolling would keep
        one segment per iteration instead of giving straight-line code, so stop it."""
        c, in_body = ctx, False
        while c is not None:
            in_body = in_body or bool(c.graph.flags.get("loop_body"))
            if in_body and c.graph.flags.get("loop_header") and any(
                    isinstance(a, Scalar) and a.dtype == "int64" and a.value is not ANY
                    for a in c.args):
                raise _NoUnroll(c.graph)
            c = c.parent

    def unrolls(self, opt, args: tuple) -> bool:
        """Whether a loop header keeps its constant arguments: when every integer argument
        (counter, bound, step) is known, each iteration is its own context, the condition is
        known, and opt turns the loop into straight-line code (as tracing does in JAX).
        Bounded by MAX_UNROLL iterations per loop."""
        if not opt.graph.flags.get("loop_header") or opt.graph.flags.get("no_unroll"):
            return False
        ints = [a for a in args if isinstance(a, Scalar) and a.dtype == "int64"]
        if not ints or any(a.value is ANY for a in ints):
            return False
        n = sum(1 for k in self.cache if k[0] is opt.graph and k[2] is opt.parent)
        return n < MAX_UNROLL


def _fold_scalar(prim: Primitive, args: tuple, out: Abstract) -> Abstract:
    """A scalar primitive on known values has a known value (constant propagation)."""
    if not isinstance(out, Scalar) or prim.py is None or prim.vm is not None or not args:
        return out
    if not all(isinstance(a, Scalar) and a.value is not ANY
               and a.dtype in ("int64", "float64", "bool") for a in args):
        return out
    try:
        value = prim.impl(*[a.value for a in args])
    except (ArithmeticError, ValueError, TypeError):
        return out  # let it fail at run time, where Python would
    if hasattr(value, "item"):
        value = value.item()
    if not isinstance(value, (bool, int, float)):
        return out
    return Scalar(out.dtype, value)


def infer(graph: Graph, argspec: tuple) -> tuple[Inferrer, Context]:
    """Infer ``graph`` called with abstract arguments ``argspec``."""
    while True:
        inf = Inferrer(graph)
        try:
            return inf, inf.run(graph, argspec)
        except _NoUnroll as stop:
            stop.header.flags["no_unroll"] = True  # a property of the loop: kept


# -- specialization -----------------------------------------------------------------------------

def _known_value(a: Abstract) -> Any:
    if isinstance(a, Scalar) and a.value is not ANY and a.dtype not in ("dtype",):
        return a.value
    if isinstance(a, Tuple):
        vals = [_known_value(e) for e in a.elements]
        return ANY if any(v is ANY for v in vals) else tuple(vals)
    return ANY


def specialize(inf: Inferrer, root_ctx: Context) -> Graph:
    """Clone one monomorphic graph per context reachable from ``root_ctx``."""
    by_fn: dict[tuple, list[Context]] = {}
    for ctx in inf.cache.values():
        by_fn.setdefault((ctx.graph, ctx.parent), []).append(ctx)
    clones: dict[Context, Graph] = {}
    maps: dict[Context, dict] = {}
    todo = [root_ctx]

    def graph_for(ctx: Context) -> Graph:
        if ctx not in clones:
            g = Graph(ctx.graph.name, ctx.graph.loc)
            g.flags = dict(ctx.graph.flags)
            maps[ctx] = {}
            for p, a in zip(ctx.graph.parameters, ctx.args):
                np_ = g.add_parameter(p.name, p.loc)
                np_.abstract = a
                value = _known_value(a)
                if value is not ANY:  # a constant argument (keys, indices): uses see it
                    np_ = Constant(value, p.loc)
                    np_.abstract = a
                maps[ctx][p] = np_
            clones[ctx] = g
            todo.append(ctx)
        return clones[ctx]

    valid = set(inf.cache.values())

    def fn_constant(ctx: Context, node: Constant, callees) -> Node:
        g = node.value
        parent = inf.mng.parent(g)
        pctx = ctx.lookup(parent) if parent is not None else None
        if callees is None:  # a function value: the contexts it was called in, from here
            callees = [c for c in inf.origin_calls.get((node, pctx), []) if c in valid]
        if not callees:
            callees = by_fn.get((g, pctx), [])
        if not callees:
            return Constant(None)  # a function that is never called (a dead branch)
        if len(callees) > 1:
            raise JitError(f"function {g.name} is used with several argument types "
                           f"({', '.join(str(c.args) for c in callees)}) through a variable; "
                           "kiln.jit needs one signature per function value", node.loc)
        c = Constant(graph_for(callees[0]), node.loc)
        c.abstract = Func([GraphFn(graph_for(callees[0]), None)])
        return c

    graph_for(root_ctx)
    while todo:
        ctx = todo.pop()
        new_g, eq = clones[ctx], maps[ctx]

        def ref(node: Node, user: Apply | None, index: int, ctx: Context = ctx) -> Node:
            if isinstance(node, Constant):
                if isinstance(node.value, Graph):
                    callees = None
                    if user is not None and index == 0 and user in ctx.calls:
                        callees = [c for _, c in ctx.calls[user] if c is not None] or None
                    return fn_constant(ctx, node, callees)
                c = Constant(node.value, node.loc)
                c.abstract = inf.constant_type(ctx, node.value)
                return c
            owner = ctx.lookup(node.graph)
            if owner is not ctx:
                graph_for(owner)
            return maps[owner][node]

        for node in toposort(ctx.graph, inf.mng):
            if not (isinstance(node, Apply) and node.graph is ctx.graph):
                continue
            a = ctx.types[node]
            value = _known_value(a)
            if value is not ANY:
                new: Node = Constant(value, node.loc)
            else:
                new = Apply([ref(i, node, k) for k, i in enumerate(node.inputs)], new_g,
                            node.loc, node.name)
                _rewrite_getitem(new)
                new = _static_zeros(new)
            new.abstract = a
            eq[node] = new
        out = ctx.graph.output
        new_g.output = ref(out, None, -1) if not isinstance(out, (Apply, Parameter)) or \
            out.graph is not ctx.graph else eq[out]
        if isinstance(out, (Apply, Parameter)) and out.graph is not ctx.graph:
            new_g.output = ref(out, None, -1)
    return clones[root_ctx]


def _zero_value(a: Abstract) -> Any:
    if isinstance(a, (Func, Env)):
        return {}
    if isinstance(a, Tuple):
        return tuple(_zero_value(e) for e in a.elements)
    if isinstance(a, Scalar):
        return {"bool": 0, "int64": 0, "float64": 0.0}.get(a.dtype, None)
    return None


def _static_zeros(node: Apply) -> Node:
    """``zeros_like(x)`` of a scalar, tuple or function is a constant of x's type (at run time
    a function is a code address, which the NumPy implementation cannot tell from an int)."""
    fn = node.inputs[0]
    if isinstance(fn, Constant) and fn.value is P.zeros_like:
        a = node.inputs[1].abstract
        value = _zero_value(a)
        if value is not None and not _has_array(a):
            c = Constant(value, node.loc)
            return c
    return node


def _has_array(a: Abstract) -> bool:
    if isinstance(a, Array):
        return True
    if isinstance(a, Tuple):
        return any(_has_array(e) for e in a.elements)
    if isinstance(a, Scalar):
        return a.dtype not in ("bool", "int64", "float64")
    return False


def _rewrite_getitem(node: Apply) -> None:
    fn = node.inputs[0]
    if isinstance(fn, Constant) and fn.value is S.getitem:
        base = node.inputs[1].abstract
        index = node.inputs[2].abstract
        dynamic = isinstance(index, Scalar) and index.value is ANY and index.dtype != "index"
        node.inputs[0] = Constant(S.tuple_getitem if isinstance(base, Tuple)
                                  else S.array_take if dynamic else S.array_getitem)
        if isinstance(base, Array) and isinstance(node.inputs[2], Constant):
            node.inputs[2].abstract = Scalar("index", node.inputs[2].value)
