"""Reverse-mode automatic differentiation on the graph IR (Myia's J transform).

``J(g)`` turns a graph ``g`` (and the closures nested in it) into its *forward* graph: same
parameters, returning ``(value, bprop)`` where ``bprop(dout)`` is a closure returning
``(env, d_param_0, …)``. ``env`` maps each free variable of ``g`` (by the id of its node) to
its sensitivity: that is how gradients leave a closure and reach the values it captured.
Every application ``x = f(a, b)`` becomes ``(x, bx) = J(f)(a, b)`` in the forward graph, and
in the backward closure ``(d_f, d_a, d_b) = bx(d_x)`` adds ``d_a``/``d_b`` to the inputs'
sensitivities and ``d_f`` (an env when f is a closure) to the captured values'. Primitives are
differentiated by the ``bprop_*`` functions of :mod:`kiln.jit.bprops`, which are parsed
graphs themselves, so ``J`` applies to the result again: ``grad(grad(f))`` works.

J runs on resolved, untyped graphs (before inference); the opt step later inlines the
forward/backward closures of non-recursive code into straight-line graphs.

Entry points: :func:`grad`, :func:`value_and_grad`, :func:`J`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.jit import bprops
from kiln.jit import primitives as P
from kiln.jit import structural as S
from kiln.jit.errors import JitError
from kiln.jit.ir import Apply, Constant, Graph, GraphManager, Node, Parameter, clone, toposort
from kiln.jit.resolve import REQUIRED, parsed, register_macro

_J_GRAPHS: dict[Graph, Graph] = {}


def _bprop_graph(prim: P.Primitive) -> Graph:
    name = "bprop_" + prim.name
    for nd, names in bprops.NONDIFF.items():
        if prim.name in names:
            name = nd
    fn = getattr(bprops, name, None)
    if fn is None:
        raise JitError(f"grad: primitive {prim.name} has no derivative rule")
    # a copy per use: grad of grad differentiates the rule at each use's types, and a
    # closure J builds inside one shared copy would flow with several signatures
    g = clone(parsed(fn))
    for h in GraphManager(g).graphs:
        h.flags["keep_constants"] = True  # axes and indices must stay known inside
    return g


def _jprim(prim: P.Primitive, args: list[Node]) -> Graph:
    """``J(prim)``: ``(prim(args), λ dout: ({}, *bprop_prim(args, out, dout)))``.

    Constant arguments (tuple indices, env keys, axes, array_reduce's operand) are baked in
    rather than passed, so they stay constants for inference in the forward and backward
    code, and in grad of grad.
    """
    baked = [a if isinstance(a, Constant) and not isinstance(a.value, Graph) else None
             for a in args]
    g = Graph(f"J_{prim.name}")
    full = [b if b is not None else g.add_parameter(f"x{i}") for i, b in enumerate(baked)]
    out = Apply([Constant(prim), *full], g)
    b = Graph(f"bprop_{prim.name}_closure")
    dout = b.add_parameter("dout")
    if prim is S.make_tuple:
        sens = [Apply([Constant(S.tuple_getitem), dout, Constant(i)], b)
                for i in range(len(args))]
    else:
        call = Apply([Constant(_bprop_graph(prim)), *full, out, dout], b)
        sens = [Apply([Constant(S.tuple_getitem), call, Constant(i)], b)
                for i in range(len(args))]
    b.output = Apply([Constant(S.make_tuple), Constant({}), *sens], b)
    g.output = Apply([Constant(S.make_tuple), out, Constant(b)], g)
    g.flags["keep_constants"] = b.flags["keep_constants"] = True
    return g  # one per use: each use is typed on its own


def _gsum(graph: Graph, terms: list[Node]) -> Node:
    acc = terms[0]
    for t in terms[1:]:
        acc = Apply([Constant(P.gadd), acc, t], graph)
    return acc


def J(graph: Graph) -> Graph:
    """The forward graph of ``graph`` (cached): returns ``(value, bprop)``."""
    if graph in _J_GRAPHS:
        return _J_GRAPHS[graph]
    if graph.flags.get("grad"):
        # grad of a gradient: differentiate its inlined, folded form, not the J closures
        # and per-use rule copies it is made of (each order multiplied them: grad^3 took
        # 27 s, grad^4 never finished)
        _J_GRAPHS[graph] = J(flatten(graph))
        return _J_GRAPHS[graph]
    mng = GraphManager(graph)
    scope = [g for g in mng.graphs if graph in mng.scope_chain(g)]
    fwd: dict[Graph, Graph] = {g: Graph("J_" + g.name, g.loc) for g in scope}
    for g in scope:
        fwd[g].flags = {k: v for k, v in g.flags.items() if k in ("loop_header", "loop_body",
                                                          "keep_constants")}
    _J_GRAPHS[graph] = fwd[graph]
    value: dict[Node, Node] = {}   # primal node -> its forward value
    back: dict[Node, Node] = {}    # primal Apply -> its bprop closure (in the forward graph)
    for g in scope:
        for p in g.parameters:
            value[p] = fwd[g].add_parameter(p.name, p.loc)

    def jvalue(node: Node, jg: Graph) -> Node:
        if isinstance(node, Constant):
            v = node.value
            if isinstance(v, Graph):
                return Constant(fwd[v] if v in fwd else J(v), node.loc)
            return node  # data, or array_reduce's primitive operand (an attribute)
        if node in value:
            return value[node]
        if isinstance(node, (Apply, Parameter)) and node.graph not in fwd:
            return node  # captured from outside what is differentiated: a constant here
        raise AssertionError(f"J: {node} used before it is computed")

    for g in scope:
        jg = fwd[g]
        for node in toposort(g, mng):
            if not (isinstance(node, Apply) and node.graph is g):
                continue
            fn, args = _callee(node)
            if isinstance(fn, Constant) and isinstance(fn.value, P.Primitive):
                jf: Node = Constant(_jprim(fn.value, args))
                passed = [a for a in args if not isinstance(a, Constant)
                          or isinstance(a.value, Graph)]
            else:
                jf, passed = jvalue(fn, jg), args
            app = Apply([jf, *[jvalue(a, jg) for a in passed]], jg, node.loc)
            value[node] = Apply([Constant(S.tuple_getitem), app, Constant(0)], jg, node.loc)
            back[node] = Apply([Constant(S.tuple_getitem), app, Constant(1)], jg, node.loc)
    for g in scope:
        _build_bprop(g, fwd, value, back, mng, jvalue)
    return fwd[graph]


def flatten(graph: Graph) -> Graph:
    """A copy of ``graph`` with its non-recursive calls inlined and tuples, environments and
    partial applications folded (the opt step's rewrites, before inference)."""
    from kiln.jit.opt import optimize
    flat = clone(graph)
    flat.flags.pop("grad", None)
    return optimize(flat)


def _callee(node: Apply):
    """``array_map(prim, *xs)`` differentiates as ``prim(*xs)``: the same elementwise op."""
    fn, *args = node.inputs
    if isinstance(fn, Constant) and fn.value is S.array_map and \
            isinstance(args[0], Constant) and isinstance(args[0].value, P.Primitive):
        return args[0], args[1:]
    return fn, args


def _build_bprop(g: Graph, fwd, value, back, mng: GraphManager, jvalue) -> None:
    jg = fwd[g]
    b = Graph("bprop_" + g.name, g.loc)
    if g.flags.get("keep_constants"):
        b.flags["keep_constants"] = True  # a derivative rule's J keeps its indices known
    dout = b.add_parameter("dout")
    contrib: dict[Node, list[Node]] = {g.output: [dout]}
    order = [n for n in toposort(g, mng) if isinstance(n, Apply) and n.graph is g]

    def zeros(node: Node) -> Node:
        return Apply([Constant(P.zeros_like), jvalue(node, jg)], b)

    closures: list[Constant] = []
    envs: dict[Constant, Node] = {}

    def route(c: Constant, fv: Node) -> None:
        # a closure's sensitivity is an env: the captured value's entry goes to that value.
        # Called when fv is reached in the reverse sweep: every user of c comes later in the
        # forward order (c depends on fv), so c's contributions are complete by then.
        if c not in envs:
            envs[c] = _gsum(b, contrib[c])
        contrib.setdefault(fv, []).append(
            Apply([Constant(S.env_getitem), envs[c], Constant(fv.id), zeros(fv)], b))

    for node in reversed(order):
        for c in closures:
            if node in mng.free_variables_total(c.value):
                route(c, node)
        sens = _gsum(b, contrib[node]) if node in contrib else zeros(node)
        d = Apply([back[node], sens], b, node.loc)
        fn, args = _callee(node)
        targets = [fn, *args]
        for k, t in enumerate(targets):
            if isinstance(t, Constant) and not (isinstance(t.value, Graph)
                                                and mng.free_variables_total(t.value)):
                continue
            contrib.setdefault(t, []).append(
                Apply([Constant(S.tuple_getitem), d, Constant(k)], b))
            if isinstance(t, Constant) and t not in closures:
                closures.append(t)  # a closure's constant node may be called twice
    for c in closures:  # captured parameters and values of enclosing graphs
        for fv in mng.free_variables_total(c.value):
            if not (isinstance(fv, Apply) and fv.graph is g):
                route(c, fv)
    env: Node = Constant({})
    for fv in mng.free_variables_total(g):
        if fv in contrib:
            env = Apply([Constant(S.env_setitem), env, Constant(fv.id),
                         _gsum(b, contrib[fv])], b)
    params = [_gsum(b, contrib[p]) if p in contrib else zeros(p) for p in g.parameters]
    b.output = Apply([Constant(S.make_tuple), env, *params], b)
    jg.output = Apply([Constant(S.make_tuple), jvalue(g.output, jg), Constant(b)], jg)


class GradFunction:
    """``grad(f)``: usable inside a kiln.jit function, or called (compiled on first use)."""

    def __init__(self, fn, argnums: Any = 0, has_aux: bool = False, with_value: bool = False):
        if isinstance(argnums, bool) or not isinstance(argnums, (int, tuple, list)):
            raise JitError(f"grad: argnums must be an int or a tuple of ints, got {argnums!r}")
        self.fn, self.argnums, self.has_aux = fn, argnums, has_aux
        self.with_value = with_value
        self._graph: Graph | None = None
        self._compiled = None
        self.__name__ = ("value_and_grad_" if with_value else "grad_") + \
            getattr(fn, "__name__", "f")

    def __kiln_jit__(self) -> Graph:
        if self._graph is None:
            hook = getattr(self.fn, "__kiln_jit__", None)
            target = hook() if hook is not None else parsed(self.fn)
            self._graph = grad_graph(target, self.argnums, self.has_aux, self.with_value)
        return self._graph

    def __call__(self, *args):
        if self._compiled is None:
            from kiln.jit.pipeline import MyiaFunction
            self._compiled = MyiaFunction(self)
        return self._compiled(*args)


def grad_graph(f: Graph, argnums: Any, has_aux: bool, with_value: bool) -> Graph:
    """The graph computing ``grad(f, argnums, has_aux)`` (and the value, for
    value_and_grad)."""
    n = len(f.parameters)
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for k in nums:
        if not isinstance(k, int) or not -n <= k < n:
            raise JitError(f"grad: argnums {argnums!r} out of range for {f.name}() with {n} "
                           "parameters", f.loc)
    g = Graph(("value_and_grad_" if with_value else "grad_") + f.name, f.loc)
    g.flags["grad"] = True
    params = [g.add_parameter(p.name) for p in f.parameters]
    app = Apply([Constant(J(f)), *params], g)
    out = Apply([Constant(S.tuple_getitem), app, Constant(0)], g)
    value = Apply([Constant(S.tuple_getitem), out, Constant(0)], g) if has_aux else out
    bprop = Apply([Constant(S.tuple_getitem), app, Constant(1)], g)
    seed = Apply([Constant(S.grad_seed), value, Constant(f.name)], g, f.loc)
    if has_aux:
        aux = Apply([Constant(S.tuple_getitem), out, Constant(1)], g)
        seed = Apply([Constant(S.make_tuple), seed, Apply([Constant(P.zeros_like), aux], g)],
                     g)
    sens = Apply([bprop, seed], g)
    grads = [Apply([Constant(S.tuple_getitem), sens, Constant(k % n + 1)], g) for k in nums]
    result = grads[0] if isinstance(argnums, int) else \
        Apply([Constant(S.make_tuple), *grads], g)
    if has_aux:
        aux_out = Apply([Constant(S.tuple_getitem), out, Constant(1)], g)
        result = Apply([Constant(S.make_tuple), result, aux_out], g)
    if with_value:
        result = Apply([Constant(S.make_tuple), value, result], g)
        if has_aux:  # value_and_grad(has_aux=True) returns ((value, aux), grads)
            result = Apply([Constant(S.make_tuple), out,
                            Apply([Constant(S.tuple_getitem), sens, Constant(nums[0] % n + 1)],
                                  g) if isinstance(argnums, int) else
                            Apply([Constant(S.make_tuple), *grads], g)], g)
    g.output = result
    return g


def grad(fn: Callable, argnums: Any = 0, has_aux: bool = False) -> GradFunction:
    """The gradient of a scalar-valued ``fn`` with respect to argument(s) ``argnums``.

    Example
    -------
    >>> def square(x):
    ...     return x * x
    >>> grad(square)(3.0)
    6.0
    """
    return GradFunction(fn, argnums, has_aux)


def value_and_grad(fn: Callable, argnums: Any = 0, has_aux: bool = False) -> GradFunction:
    """``(fn(*args), grad(fn)(*args))`` computed together."""
    return GradFunction(fn, argnums, has_aux, with_value=True)


def _grad_macro(node: Apply, args: list[Node], with_value: bool) -> Node:
    """``grad(f, argnums, has_aux)`` inside a compiled function -> the gradient graph."""
    f, argnums, has_aux = args
    if not (isinstance(f, Constant) and isinstance(f.value, Graph)):
        raise JitError("grad(f): f must be a function known at compile time (a def, a lambda "
                       "or a global function)", node.loc)
    if not isinstance(argnums, Constant) or not isinstance(has_aux, Constant):
        raise JitError("grad: argnums and has_aux must be constants", node.loc)
    return Constant(grad_graph(f.value, argnums.value, has_aux.value, with_value), node.loc)


register_macro(grad, [("fn", REQUIRED), ("argnums", 0), ("has_aux", False)],
               lambda node, args: _grad_macro(node, args, False))
register_macro(value_and_grad, [("fn", REQUIRED), ("argnums", 0), ("has_aux", False)],
               lambda node, args: _grad_macro(node, args, True))
