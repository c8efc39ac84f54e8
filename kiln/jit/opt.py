"""The opt step: inlining and local folds on specialized (typed) graphs, to a fixpoint.

- ``inline``: a direct call ``@g(args)`` of a graph that is not (mutually) recursive is
  replaced by a copy of ``g``'s body (closures nested in ``g`` are copied along). This is what
  turns grad's forward/backward closures into straight-line code that fits in one segment.
- ``fold``: ``tuple_getitem(make_tuple(a, b), 1) -> b``; ``env_getitem`` of an
  ``env_setitem`` with a known key; ``switch`` on a constant; calls of ``partial(g, a)(b)`` ->
  ``g(a, b)``; ``gadd`` with a zero.
- ``cse``: two applications of the same primitive to the same inputs in one graph become one
  (run when inline and fold find nothing more; the derivative rules that grad inlines repeat
  ``zeros_like(x)``, ``mul(dout, y)`` … and grad of grad would repeat them again).

Entry point: :func:`optimize`.
"""

from __future__ import annotations

from kiln.jit import primitives as P
from kiln.jit import structural as S
from kiln.jit.ir import Apply, Constant, Graph, GraphManager, Node, clone, toposort

MAX_ROUNDS = 200


def _prim(node: Node, prim) -> bool:
    return isinstance(node, Apply) and isinstance(node.inputs[0], Constant) \
        and node.inputs[0].value is prim


def _recursive(mng: GraphManager) -> set[Graph]:
    """Graphs that can reach themselves through graph constants (loops, recursion)."""
    edges: dict[Graph, set[Graph]] = {}
    for g in mng.graphs:
        out = set()
        for n in mng.nodes(g):
            for i in n.inputs:
                if isinstance(i, Constant) and isinstance(i.value, Graph):
                    out.add(i.value)
            if isinstance(n, Constant) and isinstance(n.value, Graph):
                out.add(n.value)
        edges[g] = out
    # nested closures' references count for their parent (they run inside its scope)
    rec = set()
    for g in mng.graphs:
        seen, todo = set(), list(edges[g])
        while todo:
            h = todo.pop()
            if h is g:
                rec.add(g)
                break
            if h in seen:
                continue
            seen.add(h)
            todo.extend(edges.get(h, ()))
    return rec


def _fold(node: Apply) -> Node | None:
    fn = node.inputs[0]
    args = node.inputs[1:]
    if _prim(node, S.tuple_getitem) and _prim(args[0], S.make_tuple) \
            and isinstance(args[1], Constant):
        return args[0].inputs[1 + args[1].value]
    if _prim(node, S.env_getitem) and isinstance(args[1], Constant):
        env, key = args[0], args[1].value
        while _prim(env, S.env_setitem) and isinstance(env.inputs[2], Constant):
            if env.inputs[2].value == key:
                return env.inputs[3]
            env = env.inputs[1]
        if isinstance(env, Constant) and env.value == {}:
            return args[2]
        if env is not args[0]:
            return Apply([fn, env, args[1], args[2]], node.graph, node.loc)
    if _prim(node, P.truth) and getattr(args[0].abstract, "dtype", None) == "bool" \
            and not hasattr(args[0].abstract, "shape"):
        return args[0]  # bool(b) of a bool scalar
    if _prim(node, S.switch) and isinstance(args[0], Constant):
        return args[1] if args[0].value else args[2]
    if _prim(fn, S.partial):  # partial(g, a)(b) -> g(a, b)
        return Apply([*fn.inputs[1:], *args], node.graph, node.loc)
    if _prim(node, P.gadd):
        for a, b in ((args[0], args[1]), (args[1], args[0])):
            if _prim(b, P.zeros_like) and a.abstract == node.abstract:
                return a
    return None


def _constant_key(c: Constant) -> tuple:
    v = c.value
    if isinstance(v, (bool, int, str)) or v is None:
        return (type(v), v)
    if isinstance(v, float):
        return (float, repr(v))  # 0.0 and -0.0 differ; nan equals itself
    return ("object", id(v))  # primitives, graphs, arrays, environments: by identity


def _eliminate_common_subexpressions(mng: GraphManager) -> bool:
    """Replace repeated pure primitive applications in each graph by their first occurrence."""
    changed = False
    for g in mng.graphs:
        first: dict[tuple, Apply] = {}
        for node in toposort(g, mng):
            if not (isinstance(node, Apply) and node.graph is g) or \
                    not isinstance(node.inputs[0], Constant) or \
                    not isinstance(node.inputs[0].value, P.Primitive) or \
                    node.inputs[0].value is S.raise_:
                continue
            key = tuple(_constant_key(i) if isinstance(i, Constant) else id(i)
                        for i in node.inputs)
            seen = first.setdefault(key, node)
            if seen is not node:
                mng.replace(node, seen)
                changed = True
    return changed


def optimize(root: Graph, passes: tuple = ("inline", "fold", "cse")) -> Graph:
    """Run the passes until nothing changes (or MAX_ROUNDS)."""
    for _ in range(MAX_ROUNDS):
        mng = GraphManager(root)
        rec = _recursive(mng) if "inline" in passes else set()
        changed = False
        modified: set[Graph] = set()  # their nesting changed: inline them next round
        known = set(mng.graphs)  # graphs copied during this round are inlined next round
        # callees before callers: a callee inlined into its caller is already flat
        for g in reversed(list(mng.graphs)):
            for node in toposort(g, mng):
                if not (isinstance(node, Apply) and node.graph is g):
                    continue
                new = _fold(node) if "fold" in passes else None
                fn = node.inputs[0]
                if new is None and "inline" in passes and isinstance(fn, Constant) \
                        and isinstance(fn.value, Graph) and fn.value not in rec \
                        and fn.value is not g \
                        and len(fn.value.parameters) == len(node.inputs) - 1:
                    if fn.value not in known or fn.value in modified:
                        # made or edited in this round: inline it next round, when the new
                        # manager knows its nesting (a manager of its own per inline cost
                        # a fixpoint over everything it reaches: 25 of the RNN grad's 38 s)
                        changed = True
                        continue
                    new = clone(fn.value, mng, inline_into=g, param_values=node.inputs[1:])
                if new is not None and new is not node:
                    if new.abstract is None:
                        new.abstract = node.abstract
                    mng.replace(node, new)
                    modified.update(mng.scope_chain(g))  # their nested scopes changed
                    changed = True
        if not changed and "cse" in passes:
            changed = _eliminate_common_subexpressions(GraphManager(root))
        if not changed:
            break
    return root
