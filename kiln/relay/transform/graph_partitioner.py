"""The dataflow analysis behind FuseOps: forward graph, post-dominator tree, fusion groups.

Entry points: :func:`build_forward_graph` (an :class:`IndexedForwardGraph` of a Relay
expression, nodes in post-DFS order), :func:`post_dominator_tree` and
:class:`GraphPartitioner` (``partition(graph) -> list[Group]``, one group per node).

The algorithm is TVM's (``graph_partitioner.cc``):

* every node has a pattern kind; an edge from a producer to a consumer carries the consumer's
  pattern, except that a BROADCAST consumer whose output shape equals the argument's shape
  makes an ELEMWISE edge;
* a node used outside plain dataflow (a function body, a let-bound value, an If branch …) is
  an *external reference*: nothing may fuse past it;
* the immediate post-dominator of a node is the least common ancestor, in the tree built so
  far, of all its consumers; the pattern attached to it is the max of the edge patterns met on
  the way;
* fusion runs in three phases over nodes in post-DFS order, merging a node's group into its
  post-dominator's group when every node on every path between them satisfies the phase's
  condition (see :meth:`GraphPartitioner.run_fuse`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.ir.adt import Constructor
from kiln.ir.expr import GlobalVar
from kiln.ir.op import Op
from kiln.ir.type import TensorType, TupleType, is_dynamic
from kiln.relay.adt import Match
from kiln.relay.expr import (
    Call,
    Constant,
    Function,
    If,
    Let,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from kiln.relay.expr_functor import children_of
from kiln.relay.op.op import OpPattern
from kiln.relay.transform.pass_util import op_pattern, type_of

__all__ = ["ForwardNode", "IndexedForwardGraph", "build_forward_graph", "DominatorNode",
           "post_dominator_tree", "Group", "GraphPartitioner"]

_SIMPLE_CONST_DTYPES = frozenset({"int32", "int64", "float32", "float64", "bool"})


class ForwardNode:
    """A node of the forward dataflow graph: its expression and its consumers."""

    __slots__ = ("ref", "index", "extern_ref", "pattern", "outputs")

    def __init__(self) -> None:
        self.ref: Any = None
        self.index = -1
        self.extern_ref = False
        self.pattern = OpPattern.OPAQUE
        self.outputs: list[tuple[ForwardNode, OpPattern]] = []

    def __repr__(self) -> str:
        return f"ForwardNode(#{self.index}, {self.pattern.name}, extern={self.extern_ref})"


class IndexedForwardGraph:
    """Nodes keyed by expression, and the same nodes in post-DFS order."""

    def __init__(self) -> None:
        self.node_map: dict[Any, ForwardNode] = {}
        self.post_dfs_order: list[ForwardNode] = []


class _GraphBuilder:
    """Walks an expression once (iteratively), children before parents, building the graph."""

    def __init__(self) -> None:
        self.graph = IndexedForwardGraph()

    def node(self, expr: Any) -> ForwardNode:
        found = self.graph.node_map.get(expr)
        if found is None:
            found = self.graph.node_map[expr] = ForwardNode()
        return found

    def update(self, expr: Any, parent: ForwardNode | None, pattern: OpPattern) -> None:
        """Record that ``parent`` consumes ``expr`` (None: ``expr`` escapes dataflow)."""
        if isinstance(expr, Op):
            return
        node = self.node(expr)
        if parent is not None:
            node.outputs.append((parent, pattern))
        else:
            node.extern_ref = True

    def add(self, expr: Any) -> None:
        node = self.node(expr)
        node.ref = expr
        node.index = len(self.graph.post_dfs_order)
        self.graph.post_dfs_order.append(node)

    def build(self, expr: Any) -> IndexedForwardGraph:
        self.update(expr, None, OpPattern.OPAQUE)
        visited: set[int] = set()
        stack: list[tuple[Any, bool]] = [(expr, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                self.add(node)
                continue
            if id(node) in visited or isinstance(node, Op):
                continue
            visited.add(id(node))
            if isinstance(node, Function) and (node.get_attr("Primitive") or
                                               node.get_attr("Compiler")):
                self.node(node)  # opaque leaf: never look inside a fused function
                stack.append((node, True))
                continue
            self.link_children(node)
            stack.append((node, True))
            for child in reversed(children_of(node)):
                if id(child) not in visited:
                    stack.append((child, False))
        return self.graph

    def link_children(self, node: Any) -> None:
        """Add the edges from ``node``'s children to ``node`` (before the children are walked)."""
        handler = _LINKERS.get(type(node))
        if handler is not None:
            handler(self, node)
        elif not isinstance(node, Var | GlobalVar | Constructor):
            for child in children_of(node):
                self.update(child, None, OpPattern.OPAQUE)

    def link_call(self, call: Call) -> None:
        node = self.node(call)
        if isinstance(call.op, Op):
            pattern = op_pattern(call.op)
            if is_dynamic_output(call) and call.op.get_attr("TShapeDataDependent"):
                # its output extents come from input values, known only to the VM's shape
                # function: the group must end here (its dims bound by the output buffer)
                pattern = OpPattern.OPAQUE
        else:
            pattern = OpPattern.OPAQUE
            self.update(call.op, node, OpPattern.OPAQUE)
        node.pattern = pattern
        out_type = type_of(call)
        for arg in call.args:
            edge = pattern
            arg_type = type_of(arg)
            if edge == OpPattern.BROADCAST and isinstance(arg_type, TensorType) and \
                    isinstance(out_type, TensorType) and _same_shape(arg_type, out_type):
                edge = OpPattern.ELEMWISE
            self.update(arg, node, edge)

    def link_tuple(self, tup: Tuple) -> None:
        node = self.node(tup)
        node.pattern = OpPattern.TUPLE
        for field in tup.fields:
            if isinstance(type_of(field), TensorType):
                self.update(field, node, OpPattern.INJECTIVE)
            else:
                self.update(field, None, OpPattern.OPAQUE)

    def link_tuple_getitem(self, item: TupleGetItem) -> None:
        tuple_type = type_of(item.tuple_value)
        fields = tuple_type.fields if isinstance(tuple_type, TupleType) else None
        if fields is None or not all(isinstance(f, TensorType) for f in fields):
            # lowering expects tensors (or tuples of tensors) only; don't fuse through this
            self.update(item.tuple_value, None, OpPattern.OPAQUE)
            return
        node = self.node(item)
        node.pattern = OpPattern.INJECTIVE
        self.update(item.tuple_value, node, OpPattern.INJECTIVE)

    def link_constant(self, const: Constant) -> None:
        node = self.node(const)
        data = const.data
        scalar = len(data.shape) == 0
        node.pattern = OpPattern.ELEMWISE if scalar and str(data.dtype) in \
            _SIMPLE_CONST_DTYPES else OpPattern.OPAQUE

    def link_function(self, func: Function) -> None:
        for param in func.params:
            self.update(param, None, OpPattern.OPAQUE)
        self.update(func.body, None, OpPattern.OPAQUE)


def _escape_all(builder: _GraphBuilder, node: Any) -> None:
    for child in children_of(node):
        builder.update(child, None, OpPattern.OPAQUE)


_LINKERS: dict[type, Callable[[_GraphBuilder, Any], None]] = {
    Call: _GraphBuilder.link_call,
    Tuple: _GraphBuilder.link_tuple,
    TupleGetItem: _GraphBuilder.link_tuple_getitem,
    Constant: _GraphBuilder.link_constant,
    Function: _GraphBuilder.link_function,
    Let: _escape_all,
    If: _escape_all,
    Match: _escape_all,
    RefCreate: _escape_all,
    RefRead: _escape_all,
    RefWrite: _escape_all,
}


def _same_shape(lhs: TensorType, rhs: TensorType) -> bool:
    return len(lhs.shape) == len(rhs.shape) and all(
        _dim_equal(a, b) for a, b in zip(lhs.shape, rhs.shape))


def _dim_equal(a: Any, b: Any) -> bool:
    value_a, value_b = getattr(a, "value", None), getattr(b, "value", None)
    if value_a is not None and value_b is not None:
        return value_a == value_b
    return a is b


def is_dynamic_output(call: Call) -> bool:
    ty = type_of(call)
    return ty is not None and is_dynamic(ty)


def build_forward_graph(expr: Any) -> IndexedForwardGraph:
    """The forward dataflow graph of ``expr`` (a type-checked Relay expression or function).

    Example
    -------
    >>> from kiln import relay
    >>> from kiln.relay.type_infer import infer_expr
    >>> x = relay.var("x", shape=(2,))
    >>> f = relay.Function([x], relay.exp(x))
    >>> _ = infer_expr(f)
    >>> [(type(n.ref).__name__, n.pattern.name) for n in build_forward_graph(f).post_dfs_order]
    [('Var', 'OPAQUE'), ('Call', 'ELEMWISE'), ('Function', 'OPAQUE')]
    """
    return _GraphBuilder().build(expr)


class DominatorNode:
    """A node of the post-dominator tree."""

    __slots__ = ("gnode", "parent", "depth", "pattern")

    def __init__(self, gnode: ForwardNode) -> None:
        self.gnode = gnode
        self.parent: DominatorNode | None = None
        self.depth = 1
        self.pattern = OpPattern.OPAQUE


def post_dominator_tree(graph: IndexedForwardGraph) -> list[DominatorNode]:
    """The immediate post-dominator of every node (same indices as ``post_dfs_order``)."""
    nodes: list[DominatorNode | None] = [None] * len(graph.post_dfs_order)
    for index in range(len(graph.post_dfs_order) - 1, -1, -1):
        gnode = graph.post_dfs_order[index]
        tnode = DominatorNode(gnode)
        if not gnode.extern_ref:
            parent, pattern = _lca_of_outputs(nodes, gnode.outputs)
            tnode.parent = parent
            tnode.depth = parent.depth + 1 if parent is not None else 1
            tnode.pattern = pattern
        nodes[index] = tnode
    return nodes  # type: ignore[return-value]


def _lca_of_outputs(nodes: list, outputs: list) -> tuple[DominatorNode | None, OpPattern]:
    if not outputs:
        return None, OpPattern.ELEMWISE
    pattern = OpPattern.ELEMWISE
    parent = None
    for position, (consumer, edge_pattern) in enumerate(outputs):
        if consumer.index < 0:
            return None, OpPattern.OPAQUE
        tnode = nodes[consumer.index]
        if position == 0:
            parent = tnode
        else:
            parent, pattern = _lca(parent, tnode, pattern)
        pattern = max(pattern, edge_pattern)
    return parent, pattern


def _lca(lhs: DominatorNode | None, rhs: DominatorNode | None,
         pattern: OpPattern) -> tuple[DominatorNode | None, OpPattern]:
    while lhs is not rhs:
        if lhs is None or rhs is None:
            return None, pattern
        if lhs.depth < rhs.depth:
            pattern = max(pattern, rhs.pattern)
            rhs = rhs.parent
        elif rhs.depth < lhs.depth:
            pattern = max(pattern, lhs.pattern)
            lhs = lhs.parent
        else:
            pattern = max(pattern, lhs.pattern, rhs.pattern)
            lhs, rhs = lhs.parent, rhs.parent
    return lhs, pattern


class Group:
    """A union-find set of nodes that become one fused function."""

    __slots__ = ("parent", "pattern", "root_ref", "anchor_ref", "num_nodes")

    def __init__(self, pattern: OpPattern, root_ref: Any) -> None:
        self.parent: Group | None = None
        self.pattern = pattern
        self.root_ref = root_ref
        self.anchor_ref = root_ref if pattern == OpPattern.OUT_ELEMWISE_FUSABLE else None
        self.num_nodes = 1

    def find_root(self) -> Group:
        root = self
        while root.parent is not None:
            root = root.parent
        node = self
        while node.parent is not None and node.parent is not root:  # path compression
            node.parent, node = root, node.parent
        return root


def _at_most_injective(kind: OpPattern, is_sink: bool) -> bool:
    return kind <= OpPattern.INJECTIVE


def _at_most_broadcast(kind: OpPattern, is_sink: bool) -> bool:
    return kind <= OpPattern.BROADCAST


def _broadcast_path(kind: OpPattern, is_sink: bool) -> bool:
    # injective ops on parallel branches may join an elemwise/broadcast anchor; the sink may
    # already be fused with a conv-like (out-elemwise-fusable) or a reduction group
    if not is_sink:
        return kind <= OpPattern.INJECTIVE
    return kind <= OpPattern.INJECTIVE or kind in (OpPattern.COMM_REDUCE,
                                                   OpPattern.OUT_ELEMWISE_FUSABLE)


class GraphPartitioner:
    """Assign every node of a forward graph to a fusion group (TVM's three-phase algorithm).

    Example
    -------
    >>> from kiln import relay
    >>> from kiln.relay.type_infer import infer_expr
    >>> x = relay.var("x", shape=(2,))
    >>> f = relay.Function([x], relay.exp(relay.negative(x)))
    >>> _ = infer_expr(f)
    >>> groups = GraphPartitioner(opt_level=2).partition(build_forward_graph(f))
    >>> groups[1].find_root() is groups[2].find_root()
    True
    """

    def __init__(self, opt_level: int, max_fuse_depth: int = 256) -> None:
        self.opt_level = opt_level
        self.max_fuse_depth = max_fuse_depth
        self.groups: list[Group] = []
        self._visited: set[int] = set()

    def partition(self, graph: IndexedForwardGraph) -> list[Group]:
        """One group per node of ``graph.post_dfs_order`` (call ``find_root`` for the set)."""
        self.groups = [Group(node.pattern, node.ref) for node in graph.post_dfs_order]
        if self.opt_level == 0:
            return self.groups
        tree = post_dominator_tree(graph)
        for phase in range(3):
            self.run_fuse(graph, tree, phase)
        return self.groups

    # -- path checks and merging ---------------------------------------------------------
    def _check_path_from(self, src: ForwardNode, sink: ForwardNode, cond: Callable) -> bool:
        stack = [src]
        while stack:
            node = stack.pop()
            if node.index in self._visited:
                continue
            self._visited.add(node.index)
            if not cond(self.groups[node.index].find_root().pattern, node is sink):
                return False
            if node is not sink:
                stack.extend(consumer for consumer, _ in node.outputs)
        return True

    def check_path(self, src: ForwardNode, sink: ForwardNode, cond: Callable) -> bool:
        """Whether every node on every path from ``src`` (exclusive) to ``sink`` meets cond."""
        self._visited = set()
        return all(self._check_path_from(consumer, sink, cond) for consumer, _ in src.outputs)

    def _merge(self, child: Group, parent: Group) -> None:
        child, parent = child.find_root(), parent.find_root()
        if child is parent:
            return
        parent.num_nodes += child.num_nodes
        child.parent = parent
        if child.anchor_ref is not None:
            parent.anchor_ref = child.anchor_ref
            parent.pattern = max(child.pattern, parent.pattern)

    def commit_fuse(self, src: ForwardNode, sink: ForwardNode) -> None:
        """Merge every group on the paths from ``src`` to ``sink`` into ``sink``'s group."""
        target = self.groups[sink.index]
        self._visited = set()
        stack = [src]
        while stack:
            node = stack.pop()
            if node is sink or node.index in self._visited:
                continue
            self._visited.add(node.index)
            self._merge(self.groups[node.index], target)
            stack.extend(consumer for consumer, _ in node.outputs)

    def count_fused_nodes(self, child: ForwardNode, dom_parent: ForwardNode,
                          limit: int) -> int:
        """The size of the group that fusing ``child`` into ``dom_parent`` would make.

        Counting stops once it passes ``limit`` (only the comparison matters), which keeps
        the walk short on graphs whose post-dominators are far away.
        """
        total = self.groups[dom_parent.index].find_root().num_nodes
        self._visited = set()
        stack = [child]
        while stack and total <= limit:
            node = stack.pop()
            if node is dom_parent or node.index in self._visited:
                continue
            self._visited.add(node.index)
            total += self.groups[node.index].num_nodes
            stack.extend(consumer for consumer, _ in node.outputs)
        return total

    # -- the three phases -----------------------------------------------------------------
    def run_fuse(self, graph: IndexedForwardGraph, tree: list[DominatorNode], phase: int) -> None:
        """Phase 0: conv-like ops take their elemwise epilogue, elemwise/broadcast ops fuse
        forward; phase 1: injective ops and tuples fuse forward; phase 2: injective ops fuse
        into tuples already fused into injective consumers."""
        for nid, graph_node in enumerate(graph.post_dfs_order):
            dom_node = tree[nid]
            group = self.groups[nid]
            if group.pattern == OpPattern.OPAQUE or dom_node.parent is None:
                continue
            dom_parent = dom_node.parent.gnode
            cond = self.fusion_condition(phase, group, self.groups[dom_parent.index], dom_node)
            # (TVM counts the group size first; asking the cheap questions first is the same)
            if cond is None or self.count_fused_nodes(
                    graph_node, dom_parent, self.max_fuse_depth) > self.max_fuse_depth:
                continue
            if self.check_path(graph_node, dom_parent, cond):
                self.commit_fuse(graph_node, dom_parent)

    @staticmethod
    def fusion_condition(phase: int, group: Group, parent_group: Group,
                         dom_node: DominatorNode) -> Callable | None:
        """The condition every node between a node and its post-dominator must meet for the
        node to fuse in this phase, or None when the node does not try to fuse."""
        if phase == 2:
            root = parent_group.find_root()
            if group.pattern > OpPattern.INJECTIVE or root.pattern == OpPattern.TUPLE:
                return None
            if parent_group.pattern == OpPattern.TUPLE and root.pattern <= OpPattern.INJECTIVE:
                return _at_most_injective
            return None
        if group.find_root() is parent_group.find_root() or \
                parent_group.pattern == OpPattern.TUPLE:
            return None
        if group.pattern == OpPattern.OUT_ELEMWISE_FUSABLE:
            if phase == 0 and dom_node.pattern == OpPattern.ELEMWISE:
                return _at_most_broadcast
            return None
        if group.pattern <= OpPattern.BROADCAST:
            if dom_node.pattern <= OpPattern.INJECTIVE or \
                    dom_node.pattern == OpPattern.COMM_REDUCE:
                return _broadcast_path
            return None
        if group.pattern in (OpPattern.INJECTIVE, OpPattern.TUPLE) and phase == 1:
            return _at_most_injective
        return None  # COMM_REDUCE never starts a fusion; it only absorbs its producers
