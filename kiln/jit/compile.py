"""Closure conversion, SplitGraph, CompileGraph, OptimizeInstrs and LinkInstrs.

- :func:`closure_convert`: free variables become leading parameters; a closure used as a
  value becomes ``partial(g, captured…)``, a direct call passes the captured values itself.
- :func:`split_graph`: a graph's nodes in an order that keeps linear primitives together,
  cut into maximal linear runs (segments) and single control-flow nodes.
- :func:`compile_graph`: Myia's CompileGraph: simulates the frame height, encodes operands as
  offsets from ``sp``, emits ``external`` for segments and VM instructions for cuts.
- :func:`optimize_instrs`: peephole rewrites (adjacent scalar segments merge into one,
  ``dup r; return -1 h`` becomes ``return r h-1``).
- :func:`link`: ``push_graph g`` becomes ``push <address of g>``.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.jit import structural as S
from kiln.jit.abstract import Func, is_tensor
from kiln.jit.ir import Apply, Constant, Graph, GraphManager, Node, Parameter
from kiln.jit.primitives import Primitive
from kiln.jit.segments import PySegment
from kiln.jit.vm import Op

VM_OPS = {"switch": Op.SWITCH, "partial": Op.PARTIAL, "tuple": Op.TUPLE,
          "tuple_getitem": Op.TUPLE_GETITEM, "env_getitem": Op.ENV_GETITEM,
          "env_setitem": Op.ENV_SETITEM, "raise": Op.RAISE}


def closure_convert(root: Graph) -> Graph:
    """Make every graph closed: captured values become leading parameters."""
    mng = GraphManager(root)
    graphs = list(mng.graphs)
    fvs = {g: list(mng.free_variables_total(g)) for g in graphs}
    nodes = {g: [n for n in mng.nodes(g) if isinstance(n, Apply) and n.graph is g]
             for g in graphs}
    params: dict[Graph, dict[Node, Parameter]] = {}
    for g in graphs:
        new = []
        params[g] = {}
        for fv in fvs[g]:
            p = Parameter(g, f"fv_{fv.name or ''}{fv.id}")
            p.abstract = fv.abstract
            params[g][fv] = p
            new.append(p)
        g.parameters[:0] = new

    def local(g: Graph, node: Node) -> Node:
        if isinstance(node, (Apply, Parameter)) and node.graph is not g:
            return params[g][node]
        return node

    def closure_value(g: Graph, c: Constant) -> Node:
        target = c.value
        if not fvs.get(target):
            return c
        app = Apply([Constant(S.partial), c, *[local(g, fv) for fv in fvs[target]]], g)
        app.abstract = Func([])
        return app

    for g in graphs:
        for n in nodes[g]:
            fn = n.inputs[0]
            head: list[Node] = [fn]
            if isinstance(fn, Constant) and isinstance(fn.value, Graph) and fvs.get(fn.value):
                head = [fn, *[local(g, fv) for fv in fvs[fn.value]]]  # direct call
            else:
                head = [_value(g, fn, local, closure_value)]
            n.inputs[:] = head + [_value(g, i, local, closure_value) for i in n.inputs[1:]]
        g.output = _value(g, g.output, local, closure_value)
    return root


def _value(g, node, local, closure_value):
    if isinstance(node, Constant) and isinstance(node.value, Graph):
        return closure_value(g, node)
    return local(g, node)


def is_linear(node: Apply) -> bool:
    """Whether ``node`` belongs in a linear segment (a tensor-valued primitive application)."""
    fn = node.inputs[0]
    if not (isinstance(fn, Constant) and isinstance(fn.value, Primitive)):
        return False
    prim = fn.value
    return prim.vm is None and prim.relay is not None and prim.linear(node.abstract) and \
        all(is_tensor(i.abstract) or isinstance(i, Constant) for i in node.inputs[1:])


def schedule_applies(graph: Graph, mng: GraphManager) -> list[Apply]:
    """The graph's Applies in dependency order, linear ones as early as they can go, so each
    run of linear nodes is as long as possible (fewer, bigger segments)."""
    own = [n for n in mng.nodes(graph) if isinstance(n, Apply) and n.graph is graph]
    own_set = set(own)
    deps = {n: {i for i in n.inputs if i in own_set} for n in own}
    users: dict[Apply, list[Apply]] = {n: [] for n in own}
    for n, ds in deps.items():
        for d in ds:
            users[d].append(n)
    waiting = {n: len(ds) for n, ds in deps.items()}
    ready_lin = [n for n in own if waiting[n] == 0 and is_linear(n)]
    ready_cut = [n for n in own if waiting[n] == 0 and not is_linear(n)]
    order = []
    while ready_lin or ready_cut:
        if ready_lin:
            n = ready_lin.pop(0)
        else:
            # the output (a tail call) must come last
            ready_cut.sort(key=lambda x: x is graph.output)
            n = ready_cut.pop(0)
        order.append(n)
        for u in users[n]:
            waiting[u] -= 1
            if waiting[u] == 0:
                (ready_lin if is_linear(u) else ready_cut).append(u)
    return order


def split_graph(graph: Graph, mng: GraphManager) -> list:
    """SplitGraph: a list mixing linear segments (lists of Apply) and single cut Applies."""
    splits: list = []
    run: list[Apply] = []
    for n in schedule_applies(graph, mng):
        if is_linear(n):
            run.append(n)
        else:
            if run:
                splits.append(run)
                run = []
            splits.append(n)
    if run:
        splits.append(run)
    return splits


class CompileGraph:
    """Myia's CompileGraph: one graph's splits -> unlinked instructions."""

    def __init__(self, graph: Graph, lin_convert: Callable):
        self.graph, self.lin_convert = graph, lin_convert
        self.instrs: list[tuple] = []
        self.slots: dict[Node, int] = {}
        self.height = 0
        self.max_height = 0

    def push_slot(self, node: Node) -> None:
        self.slots[node] = self.height
        self.height += 1
        self.max_height = max(self.max_height, self.height)

    def emit(self, *instr) -> None:
        self.instrs.append(tuple(instr))

    def ref(self, node: Node) -> int:
        if node not in self.slots:
            assert isinstance(node, Constant), f"{node} used before it is computed"
            if isinstance(node.value, Graph):
                self.emit(Op.PUSH_GRAPH, node.value)
            else:
                self.emit(Op.PUSH, node.value)
            self.push_slot(node)
        return self.slots[node] - self.height

    def run(self, splits: list, uses: dict) -> list[tuple]:
        g = self.graph
        for p in reversed(g.parameters):
            self.push_slot(p)
        nparams = self.height
        self.max_height = self.height
        for split in splits:
            if isinstance(split, list):
                self.segment(split, uses)
            elif not self.cut(split):
                return self.finish(nparams)
        if g.output in self.slots or isinstance(g.output, Constant):
            out = self.ref(g.output)
            self.emit(Op.RETURN, out, self.height)
        return self.finish(nparams)

    def finish(self, nparams: int) -> list[tuple]:
        need = self.max_height - nparams
        if need > 0:
            self.instrs.insert(0, (Op.PAD_STACK, need))
        return self.instrs

    def segment(self, nodes: list[Apply], uses: dict) -> None:
        inside = set(nodes)
        inputs: list[Node] = []
        for n in nodes:
            for i in n.inputs[1:]:
                if not isinstance(i, Constant) and i not in inside and i not in inputs:
                    inputs.append(i)
        outputs = [n for n in nodes if n is self.graph.output or
                   any(u not in inside for u in uses.get(n, ()))]
        if not outputs:
            return
        for i in inputs:
            self.ref(i)
        fn = self.lin_convert(nodes, inputs, outputs)
        self.emit(Op.EXTERNAL, fn, tuple(self.ref(i) for i in inputs), len(outputs))
        for o in outputs:
            self.push_slot(o)

    def cut(self, node: Apply) -> bool:
        """Emit one control node; False when it ended the graph (a tail call)."""
        fn, *args = node.inputs
        if isinstance(fn, Constant) and isinstance(fn.value, Primitive):
            prim = fn.value
            for a in args:
                if not (prim.vm in ("tuple_getitem", "env_getitem", "env_setitem")
                        and a is args[1]):
                    self.ref(a)
            if prim.vm in ("tuple_getitem",):
                self.emit(Op.TUPLE_GETITEM, self.ref(args[0]), args[1].value)
            elif prim.vm in ("env_getitem", "env_setitem"):
                self.emit(VM_OPS[prim.vm], self.ref(args[0]), args[1].value,
                          self.ref(args[2]))
            elif prim.vm in ("tuple", "partial"):
                refs = tuple(self.ref(a) for a in args)
                if prim.vm == "tuple":
                    self.emit(Op.TUPLE, refs)
                else:
                    self.emit(Op.PARTIAL, refs[0], refs[1:])
            elif prim.vm is not None:
                self.emit(VM_OPS[prim.vm], *[self.ref(a) for a in args])
            else:  # a primitive on tuples/environments: one Python call
                self.emit(Op.EXTERNAL, prim.impl, tuple(self.ref(a) for a in args), 1)
            self.push_slot(node)
            if node is self.graph.output:
                self.emit(Op.RETURN, -1, self.height)
                return False
            return True
        self.ref(fn)
        for a in args:
            self.ref(a)
        for a in reversed(args):
            self.emit(Op.DUP, self.ref(a))
            self.height += 1
            self.max_height = max(self.max_height, self.height)
        if node is self.graph.output:
            self.emit(Op.TAILCALL, self.ref(fn), self.height, len(args))
            return False
        self.emit(Op.CALL, self.ref(fn))
        self.height -= len(args)
        self.push_slot(node)
        return True


def graph_uses(graph: Graph, mng: GraphManager) -> dict:
    """node -> list of its users among ``graph``'s Applies."""
    uses: dict = {}
    for n in mng.nodes(graph):
        if isinstance(n, Apply) and n.graph is graph:
            for i in n.inputs:
                uses.setdefault(i, []).append(n)
    return uses


def optimize_instrs(instrs: list[tuple]) -> list[tuple]:
    """Peephole rewrites on one graph's unlinked code (see the module docstring)."""
    out: list[tuple] = []
    for ins in instrs:
        prev = out[-1] if out else None
        if prev is not None and ins[0] == Op.RETURN and ins[1] == -1:
            if prev[0] == Op.DUP:
                out[-1] = (Op.RETURN, prev[1], ins[2] - 1)
                continue
        if prev is not None and ins[0] == Op.EXTERNAL and prev[0] == Op.EXTERNAL \
                and isinstance(ins[1], PySegment) and isinstance(prev[1], PySegment):
            out[-1] = _merge_externals(prev, ins)
            continue
        out.append(ins)
    return out


def _merge_externals(first: tuple, second: tuple) -> tuple:
    _, seg1, refs1, n1 = first
    _, seg2, refs2, n2 = second
    lines = list(seg1.lines)
    inputs, refs = list(seg1.inputs), list(refs1)
    for name, r in zip(seg2.inputs, refs2):
        if r >= -n1:  # one of seg1's outputs, still in a variable
            lines.append(f"{name} = {seg1.outputs[n1 + r]}")
        elif name in inputs:
            continue
        else:
            inputs.append(name)
            refs.append(r + n1)
    merged = PySegment(lines + seg2.lines, inputs, seg1.outputs + seg2.outputs,
                       {**seg1.consts, **seg2.consts})
    return (Op.EXTERNAL, merged, tuple(refs), n1 + n2)


def compile_graphs(root: Graph, lin_convert: Callable, optimize: bool = True):
    """CompileGraphs: every graph (root first) -> (mapping graph->pc, unlinked code)."""
    mng = GraphManager(root)
    graphs = [root] + [g for g in mng.graphs if g is not root]
    mapping: dict[Graph, int] = {}
    code: list[tuple] = []
    for g in graphs:
        splits = split_graph(g, mng)
        instrs = CompileGraph(g, lin_convert).run(splits, graph_uses(g, mng))
        if optimize:
            instrs = optimize_instrs(instrs)
        mapping[g] = len(code)
        code.extend(instrs)
    return mapping, code


def link(mapping: dict, code: list[tuple]) -> list[tuple]:
    """LinkInstrs: ``push_graph g`` -> ``push mapping[g]``."""
    return [(Op.PUSH, mapping[i[1]]) if i[0] == Op.PUSH_GRAPH else i for i in code]
