"""Myia's graph IR: graphs of Apply/Parameter/Constant nodes, free variables as nesting.

A :class:`Graph` is a function: its ``parameters`` and its ``output`` node. An :class:`Apply`
calls ``inputs[0]`` on ``inputs[1:]``; a :class:`Constant` holds a value (a primitive, a
``Graph``, a number, a tuple …). A node may be used by a graph other than the one that owns it:
that is a *free variable*, and it makes the user graph a closure nested in the owner. Nesting
is never stored; :class:`GraphManager` derives it (``parent``, ``free_variables``, ``children``)
from the edges it keeps up to date.

Entry points: :class:`Graph`, :func:`toposort`, :class:`GraphManager`, :func:`clone`,
:func:`print_graph`.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

_ids = itertools.count(1)


class Location:
    """Where a node came from in the user's source: file, line and the source line's text."""

    __slots__ = ("filename", "lineno", "text")

    def __init__(self, filename: str, lineno: int, text: str = ""):
        self.filename, self.lineno, self.text = filename, lineno, text

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"


class Node:
    """Base of the three node kinds; ``abstract`` is the inferred type (set by specialize)."""

    __slots__ = ("id", "abstract", "loc", "name")

    def __init__(self, loc: Location | None = None, name: str | None = None):
        self.id = next(_ids)
        self.abstract: Any = None
        self.loc, self.name = loc, name

    @property
    def inputs(self) -> list:
        return []


class Apply(Node):
    """``inputs[0](*inputs[1:])`` evaluated in ``graph``; ``kwnames`` names trailing kwargs."""

    __slots__ = ("_inputs", "graph", "kwnames")

    def __init__(self, inputs: list, graph: Graph, loc: Location | None = None,
                 name: str | None = None, kwnames: tuple = ()):
        super().__init__(loc, name)
        self._inputs, self.graph, self.kwnames = list(inputs), graph, tuple(kwnames)

    @property
    def inputs(self) -> list:
        return self._inputs

    def __repr__(self) -> str:
        return f"%{self.name or ''}{self.id}"


class Parameter(Node):
    """A graph parameter; the parser also uses them as phi nodes of loop headers and joins."""

    __slots__ = ("graph",)

    def __init__(self, graph: Graph, name: str | None = None, loc: Location | None = None):
        super().__init__(loc, name)
        self.graph = graph

    def __repr__(self) -> str:
        return f"%{self.name or 'p'}{self.id}"


class Constant(Node):
    """A literal value; a ``Graph`` value is a function constant (a closure if it is nested)."""

    __slots__ = ("value",)

    def __init__(self, value: Any, loc: Location | None = None):
        super().__init__(loc)
        self.value = value

    def __repr__(self) -> str:
        return describe_value(self.value)


class Graph:
    """A function: ``parameters`` and the ``output`` node they compute."""

    def __init__(self, name: str = "g", loc: Location | None = None):
        self.id = next(_ids)
        self.name = name
        self.loc = loc
        self.parameters: list[Parameter] = []
        self.output: Node | None = None
        self.flags: dict[str, Any] = {}

    def add_parameter(self, name: str | None = None, loc: Location | None = None) -> Parameter:
        """Append a new parameter (used for phis by the parser)."""
        p = Parameter(self, name, loc)
        self.parameters.append(p)
        return p

    def apply(self, fn: Any, *args: Any, loc: Location | None = None) -> Apply:
        """A new Apply in this graph; non-node arguments become Constants."""
        nodes = [a if isinstance(a, Node) else Constant(a) for a in (fn, *args)]
        return Apply(nodes, self, loc)

    def __repr__(self) -> str:
        return f"@{self.name}.{self.id}"


def describe_value(value: Any) -> str:
    """A short printable form of a constant's value."""
    if isinstance(value, Graph):
        return repr(value)
    name = getattr(value, "name", None)
    if isinstance(name, str) and not isinstance(value, (str, type)):
        return name
    if hasattr(value, "shape") and getattr(value, "ndim", 0) > 0:
        return f"array{tuple(value.shape)}"
    return repr(value)


def graph_constants(node: Node) -> Iterable[Graph]:
    """The graphs a node refers to directly (a Constant whose value is a Graph)."""
    if isinstance(node, Constant) and isinstance(node.value, Graph):
        yield node.value


def toposort(graph: Graph, manager: GraphManager | None = None) -> list[Node]:
    """Nodes that ``graph`` evaluates, inputs first: its Applies, with constants and
    parameters, in an order where each node comes after what it uses.

    A constant closure depends on the free variables it captures from ``graph`` (they must be
    computed before the closure is built), which is why the manager is consulted.
    """
    mng = manager or manage(graph)
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(graph.output, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node.id in seen:
            continue
        seen.add(node.id)
        stack.append((node, True))
        deps: list[Node] = []
        if isinstance(node, Apply) and node.graph is graph:
            deps = list(node.inputs)
        elif isinstance(node, Constant) and isinstance(node.value, Graph):
            deps = [fv for fv in mng.free_variables_total(node.value)
                    if getattr(fv, "graph", None) is graph]
        for dep in reversed(deps):
            if dep.id in seen:
                continue
            if isinstance(dep, (Apply, Parameter)) and dep.graph is not graph:
                continue  # a free variable: computed by the graph that owns it
            stack.append((dep, False))
    return order


class GraphManager:
    """Keeps ``uses`` (node -> {(user, index)}) current under edits, and derives nesting.

    Edits go through :meth:`set_edge` and :meth:`replace`; both update ``uses`` in place, and
    the derived tables (graph set, free variables, parents) are recomputed on next access.
    """

    def __init__(self, *roots: Graph):
        self.roots = list(roots)
        self._uses: dict[Node, set] | None = None  # built on first use: many managers
        self._derived: dict | None = None          # are made only to read nesting
        self.stale = False

    @property
    def uses(self) -> dict[Node, set]:
        """node -> {(user, input index)} over every graph."""
        if self._uses is None:
            self._uses = defaultdict(set)
            self._rebuild_uses()
        return self._uses

    # -- edges ------------------------------------------------------------------------------
    def _rebuild_uses(self) -> None:
        uses = self._uses
        uses.clear()
        for g in self.graphs:
            for node in self.nodes(g):
                for i, inp in enumerate(node.inputs):
                    uses[inp].add((node, i))

    def set_edge(self, node: Apply, index: int, value: Node) -> None:
        """Make ``node.inputs[index]`` be ``value``, keeping ``uses`` exact."""
        old = node.inputs[index]
        self.uses[old].discard((node, index))
        node.inputs[index] = value
        self.uses[value].add((node, index))
        self.stale = True

    def replace(self, old: Node, new: Node) -> None:
        """Redirect every use of ``old`` to ``new`` (and graph outputs that are ``old``).

        Edits keep ``uses`` exact but leave the derived tables (graph list, free variables)
        as they were (``stale``): a pass makes a new manager when it needs them again.
        """
        for user, index in list(self.uses.get(old, ())):
            self.set_edge(user, index, new)
        for g in self.graphs:
            if g.output is old:
                g.output = new
        self.stale = True

    def invalidate(self) -> None:
        """Forget derived tables after edits made outside set_edge/replace."""
        self._derived = None
        self._uses = None

    # -- derived tables ---------------------------------------------------------------------
    def _derive(self) -> dict:
        if self._derived is not None:
            return self._derived
        graphs: list[Graph] = []
        nodes: dict[Graph, list[Node]] = {}
        seen_g: set[Graph] = set()
        todo = list(self.roots)
        while todo:
            while todo:
                g = todo.pop()
                if g in seen_g:
                    continue
                seen_g.add(g)
                graphs.append(g)
                found = _graph_nodes(g)
                nodes[g] = found
                for n in found:
                    for inp in n.inputs:
                        todo.extend(graph_constants(inp))
                    todo.extend(graph_constants(n))
            # nodes only closures use can refer to graphs not seen yet: scan them too
            for n in _add_captured_nodes(graphs, nodes):
                for inp in n.inputs:
                    todo.extend(c for c in graph_constants(inp) if c not in seen_g)
        fv_direct: dict[Graph, list[Node]] = {}
        for g in graphs:
            fvs: dict[int, Node] = {}
            for n in nodes[g]:
                if isinstance(n, Apply) and n.graph is g:
                    for inp in n.inputs:
                        if isinstance(inp, (Apply, Parameter)) and inp.graph is not g:
                            fvs[inp.id] = inp
            if isinstance(g.output, (Apply, Parameter)) and g.output.graph is not g:
                fvs[g.output.id] = g.output
            fv_direct[g] = list(fvs.values())
        self._derived = {"graphs": graphs, "nodes": nodes, "fv_direct": fv_direct,
                         "fv_total": {}}
        return self._derived

    @property
    def graphs(self) -> list[Graph]:
        """Every graph reachable from the roots through graph constants."""
        return self._derive()["graphs"]

    def nodes(self, graph: Graph) -> list[Node]:
        """The Applies owned by ``graph`` and the constants/parameters they use."""
        d = self._derive()
        if graph not in d["nodes"]:
            d["nodes"][graph] = _graph_nodes(graph)
        return d["nodes"][graph]

    def free_variables_total(self, graph: Graph) -> list[Node]:
        """Nodes of other graphs that ``graph`` or the closures it builds refer to."""
        d = self._derive()
        if not d["fv_total"]:
            d["fv_total"] = self._fv_fixpoint(d)
        if graph not in d["fv_total"]:
            # a graph made after the tables were derived (a pass is editing): compute its
            # free variables from its own reachable world instead of re-deriving everything
            d["fv_total"][graph] = GraphManager(graph).free_variables_total(graph)
            d.pop("owners", None)
        return d["fv_total"][graph]

    def _fv_fixpoint(self, d: dict) -> dict:
        # A closure needs what the closures it builds need (minus its own nodes); with
        # recursion (loops) that is a fixpoint, not a single pass.
        total = {g: dict((fv.id, fv) for fv in d["fv_direct"][g]) for g in d["graphs"]}
        refs = {g: [c for n in d["nodes"][g] for c in graph_constants(n) if c is not g]
                for g in d["graphs"]}
        changed = True
        while changed:
            changed = False
            for g in d["graphs"]:
                mine = total[g]
                for child in refs[g]:
                    for fid, fv in list(total.get(child, {}).items()):
                        if fv.graph is not g and fid not in mine:
                            mine[fid] = fv
                            changed = True
        return {g: list(v.values()) for g, v in total.items()}

    def parent(self, graph: Graph) -> Graph | None:
        """The innermost graph that owns one of ``graph``'s free variables (None: top level).

        Free variables come from the chain of enclosing graphs, so the innermost owner is the
        deepest one (depth = length of its own chain of owners).
        """
        owners = {fv.graph for fv in self.free_variables_total(graph)} - {graph}
        if not owners:
            return None
        return max(owners, key=lambda g: (self._depth(g, set()), g.id))

    def _depth(self, graph: Graph, visiting: set) -> int:
        depths = self._derive().setdefault("depth", {})
        if graph in depths:
            return depths[graph]
        if graph in visiting:
            return 0  # inconsistent nesting while a pass is editing: break the cycle
        visiting.add(graph)
        owners = {fv.graph for fv in self.free_variables_total(graph)} - {graph}
        d = 1 + max((self._depth(o, visiting) for o in owners), default=-1)
        depths[graph] = d
        return d

    def scope_chain(self, graph: Graph) -> list[Graph]:
        """``graph`` and its enclosing graphs, innermost first."""
        chain = [graph]
        p = self.parent(graph)
        while p is not None and p not in chain:
            chain.append(p)
            p = self.parent(p)
        return chain

    def scope(self, graph: Graph) -> list[Graph]:
        """``graph`` and every graph nested in it, at any depth (what clone copies): those
        using a node owned inside the scope (lexical nesting makes that exact)."""
        d = self._derive()
        if not d["fv_total"]:
            d["fv_total"] = self._fv_fixpoint(d)
        owners = d.get("owners")
        if owners is None:
            owners = d["owners"] = {g: {fv.graph for fv in fvs}
                                    for g, fvs in d["fv_total"].items() if fvs}
        out, inside = [graph], {graph}
        changed = True
        while changed:
            changed = False
            for g, own in owners.items():
                if g not in inside and own & inside:
                    out.append(g)
                    inside.add(g)
                    changed = True
        return out

    def children(self, graph: Graph) -> list[Graph]:
        """Graphs whose parent is ``graph``."""
        return [g for g in self.graphs if g is not graph and self.parent(g) is graph]


def _add_captured_nodes(graphs: list[Graph], nodes: dict) -> list[Node]:
    """Add to each graph the nodes it owns that only its closures use (free variables);
    returns the nodes added."""
    ids = {g: {n.id for n in nodes[g]} for g in graphs}
    outputs = [g.output for g in graphs if g.output is not None]
    todo = [n for g in graphs for n in nodes[g]] + outputs
    output_ids = {n.id for n in outputs}
    added = []
    while todo:
        n = todo.pop()
        for inp in ([n] if n.id in output_ids else []) + list(n.inputs):
            owner = getattr(inp, "graph", None)
            if isinstance(inp, Apply) and owner in ids and inp.id not in ids[owner]:
                ids[owner].add(inp.id)
                nodes[owner].append(inp)
                added.append(inp)
                todo.append(inp)
    return added


def _graph_nodes(graph: Graph) -> list[Node]:
    """Applies reachable from the output that belong to ``graph``, plus their leaf inputs."""
    out: list[Node] = []
    seen: set[int] = set()
    todo = [graph.output, *graph.parameters]
    while todo:
        n = todo.pop()
        if n is None or n.id in seen:
            continue
        seen.add(n.id)
        if isinstance(n, Apply) and n.graph is not graph:
            continue
        out.append(n)
        todo.extend(n.inputs)
    return out


def manage(*graphs: Graph) -> GraphManager:
    """A manager over ``graphs`` and everything they reach."""
    return GraphManager(*graphs)


def clone(graph: Graph, manager: GraphManager | None = None,
          relation: str = "", inline_into: Graph | None = None,
          param_values: list[Node] | None = None,
          equiv: dict | None = None) -> Any:
    """Copy ``graph`` with the graphs nested in it (free variables of outer graphs stay shared).

    With ``inline_into``, ``graph``'s nodes are copied into that graph, its parameters replaced
    by ``param_values``; the copied output node is returned instead of a new graph.
    """
    scope = (manager or GraphManager(graph)).scope(graph)
    eq: dict = {} if equiv is None else equiv
    for g in scope:
        if g is graph and inline_into is not None:
            eq[g] = None
            continue
        ng = Graph(g.name + relation, g.loc)
        ng.flags = dict(g.flags)
        eq[g] = ng
    if inline_into is not None:
        assert param_values is not None and len(param_values) == len(graph.parameters)
        for p, v in zip(graph.parameters, param_values):
            eq[p] = v
    for g in scope:
        if g is graph and inline_into is not None:
            continue
        for p in g.parameters:
            np_ = eq[g].add_parameter(p.name, p.loc)
            np_.abstract = p.abstract
            eq[p] = np_

    def copy(node: Node) -> Node:
        if node in eq:
            return eq[node]
        if isinstance(node, Constant):
            if isinstance(node.value, Graph) and node.value in eq:
                c = Constant(eq[node.value] if eq[node.value] is not None else node.value,
                             node.loc)
                c.abstract = node.abstract
                eq[node] = c
                return c
            return node
        if isinstance(node, Parameter) or node.graph not in eq:
            return node  # a free variable from outside the copied scope
        owner = eq[node.graph] if eq[node.graph] is not None else inline_into
        new = Apply([], owner, node.loc, node.name, node.kwnames)
        new.abstract = node.abstract
        eq[node] = new
        new.inputs.extend(copy(i) for i in node.inputs)
        return new

    def copy_iter(root: Node) -> Node:
        # Iterative post-order so deep graphs (long loops unrolled by grad) don't hit the
        # recursion limit.
        stack = [root]
        while stack:
            n = stack[-1]
            if n in eq or not isinstance(n, Apply) or n.graph not in eq:
                stack.pop()
                continue
            pending = [i for i in n.inputs if i not in eq and isinstance(i, Apply)
                       and i.graph in eq]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            copy(n)
        return copy(root)

    for g in scope:
        out = copy_iter(g.output)
        if eq[g] is not None:
            eq[g].output = out
    if inline_into is not None:
        return eq[graph.output] if graph.output in eq else copy(graph.output)
    return eq[graph]


def print_graph(graph: Graph, manager: GraphManager | None = None,
                show_types: bool = True) -> str:
    """A readable listing of ``graph`` and every graph it reaches, one node per line."""
    mng = manager or manage(graph)
    lines: list[str] = []
    for g in mng.graphs:
        params = ", ".join(_fmt_param(p, show_types) for p in g.parameters)
        parent = mng.parent(g)
        nest = f"  # closure in {parent!r}" if parent is not None else ""
        lines.append(f"graph {g!r}({params}){nest} {{")
        for n in toposort(g, mng):
            if isinstance(n, Apply) and n.graph is g:
                fn, *args = n.inputs
                t = f" : {n.abstract}" if show_types and n.abstract is not None else ""
                kw = f"  # kw {n.kwnames}" if n.kwnames else ""
                loc = f"  # line {n.loc.lineno}" if n.loc is not None else ""
                lines.append(f"  {n!r} = {fn!r}({', '.join(map(repr, args))}){t}{kw}{loc}")
        lines.append(f"  return {g.output!r}")
        lines.append("}")
    return "\n".join(lines)


def _fmt_param(p: Parameter, show_types: bool) -> str:
    return f"{p!r}: {p.abstract}" if show_types and p.abstract is not None else repr(p)


def map_nodes(mng: GraphManager, fn: Callable[[Node], Node | None]) -> bool:
    """Apply ``fn`` to every Apply of every graph; a returned node replaces the old one."""
    changed = False
    for g in list(mng.graphs):
        for n in list(toposort(g, mng)):
            if isinstance(n, Apply) and n.graph is g:
                new = fn(n)
                if new is not None and new is not n:
                    mng.replace(n, new)
                    changed = True
    return changed
