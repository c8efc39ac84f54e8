"""Operator fusion (TVM's ``relay.transform.FuseOps``).

Entry points: :func:`FuseOps` (the pass), :func:`fuse_ops` (the rewrite of one expression) and
:func:`fused_function_name` (``fused_nn_conv2d_add_nn_relu``, the name later codegen turns
into ``tvmgen_default_fused_nn_conv2d_add_nn_relu``).

The grouping is computed by :mod:`kiln.relay.transform.graph_partitioner`; this module turns
each group into a ``Function`` with attribute ``Primitive=1`` called where the group's root was.
Arguments coming from outside a group become parameters ``p0, p1 …`` (one per distinct
argument expression, in first-use order); scalar constants stay inside the group.
"""

from __future__ import annotations

import zlib
from typing import Any

from kiln.ir.op import Op
from kiln.ir.transform import PassContext
from kiln.relay.expr import Call, Function, Tuple, TupleGetItem, Var
from kiln.relay.expr_functor import ExprMutator, ExprVisitor
from kiln.relay.transform.graph_partitioner import (
    GraphPartitioner,
    Group,
    build_forward_graph,
)
from kiln.relay.transform.pass_util import relay_function_pass, type_of

__all__ = ["FuseOps", "fuse_ops", "fused_function_name", "MAX_FUSED_OPS"]

MAX_FUSED_OPS = 256
_MAX_FUNC_NAME_LENGTH = 80
_STOP_FUSION = "annotation.stop_fusion"


class _GroupInfo:
    """The parameters of a group's function and the outer expressions bound to them."""

    __slots__ = ("params", "arguments")

    def __init__(self) -> None:
        self.params: list[Var] = []
        self.arguments: list[Any] = []

    def param_for(self, expr: Any, ty: Any) -> Var:
        for index, argument in enumerate(self.arguments):
            if argument is expr:
                return self.params[index]
        param = Var(f"p{len(self.params)}", ty)
        self.params.append(param)
        self.arguments.append(expr)
        return param


class _FuseMutator(ExprMutator):
    """Rebuild an expression with every multi-node group outlined into a primitive function."""

    def __init__(self, group_of: dict[Any, Group]) -> None:
        super().__init__()
        self.group_of = group_of
        self.infos: dict[Group, _GroupInfo] = {}

    def root_group(self, expr: Any) -> Group | None:
        group = self.group_of.get(expr)
        return group.find_root() if group is not None else None

    def new_arguments(self, args: tuple, group: Group) -> list:
        new_args = []
        for arg in args:
            new_arg = self.visit(arg)
            if self.root_group(arg) is not group:
                info = self.infos.setdefault(group, _GroupInfo())
                new_arg = info.param_for(new_arg, type_of(arg))
            new_args.append(new_arg)
        return new_args

    def make_function(self, group: Group, body: Any) -> Call:
        info = self.infos.setdefault(group, _GroupInfo())
        func = Function(info.params, body).with_attr("Primitive", 1 if _has_call(body) else 0)
        return Call(func, info.arguments)

    def visit_function(self, node: Function) -> Any:
        if node.get_attr("Primitive") or node.get_attr("Compiler"):
            return node
        return super().visit_function(node)

    def visit_call(self, node: Call) -> Any:
        if not isinstance(node.op, Op):
            return super().visit_call(node)
        if node.op.name == _STOP_FUSION:
            return self.visit(node.args[0])
        group = self.root_group(node)
        if group is None or node.op.get_attr("TNonComputational"):
            return super().visit_call(node)
        new_call = Call(node.op, self.new_arguments(node.args, group), node.attrs,
                        node.type_args, node.span)
        if group.root_ref is node:
            return self.make_function(group, new_call)
        return new_call

    def visit_tuple(self, node: Tuple) -> Any:
        group = self.root_group(node)
        if group is None or group.root_ref is node:
            return super().visit_tuple(node)
        return Tuple(self.new_arguments(node.fields, group), node.span)

    def visit_tuple_getitem(self, node: TupleGetItem) -> Any:
        group = self.root_group(node)
        if group is None:
            return super().visit_tuple_getitem(node)
        if group.root_ref is node and self.root_group(node.tuple_value) is not group:
            return super().visit_tuple_getitem(node)  # isolated: the tuple is opaque
        new_tuple = self.new_arguments((node.tuple_value,), group)[0]
        new_node = TupleGetItem(new_tuple, node.index, node.span)
        if group.root_ref is node:
            return self.make_function(group, new_node)
        return new_node


def _has_call(body: Any) -> bool:
    finder = _CallFinder()
    finder.visit(body)
    return finder.found


class _CallFinder(ExprVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def visit_call(self, node: Call) -> None:
        self.found = True
        super().visit_call(node)


def fuse_ops(expr: Any, fuse_opt_level: int = 2, max_fuse_depth: int = MAX_FUSED_OPS) -> Any:
    """Fuse the operators of a type-checked expression or function into primitive functions.

    Example
    -------
    >>> from kiln import relay
    >>> from kiln.relay.type_infer import infer_expr
    >>> x = relay.var("x", shape=(4,))
    >>> f = relay.Function([x], relay.nn.relu(relay.exp(x)))
    >>> _ = infer_expr(f)
    >>> fused = fuse_ops(f)
    >>> fused_function_name(fused.body.op)
    'fused_exp_nn_relu'
    """
    graph = build_forward_graph(expr)
    groups = GraphPartitioner(fuse_opt_level, max_fuse_depth).partition(graph)
    group_of = {node.ref: groups[index] for index, node in enumerate(graph.post_dfs_order)}
    return _FuseMutator(group_of).visit(expr)


def FuseOps(fuse_opt_level: int = -1):  # noqa: N802 (TVM's name)
    """The pass fusing operators into ``Primitive`` functions.

    ``fuse_opt_level=-1`` takes the level from the current PassContext (0 disables fusion);
    the PassContext config ``relay.FuseOps.max_depth`` bounds a group's size (default 256).

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(4,))
    >>> mod = kiln.IRModule.from_expr(relay.Function([x], relay.exp(relay.negative(x))))
    >>> mod = FuseOps(fuse_opt_level=2)(mod)
    >>> mod["main"].body.op.attrs["Primitive"]
    1
    """

    def rewrite(func: Function, mod: Any, ctx: PassContext) -> Function:
        level = ctx.opt_level if fuse_opt_level == -1 else fuse_opt_level
        depth = int(ctx.config.get("relay.FuseOps.max_depth", MAX_FUSED_OPS))
        return fuse_ops(func, level, depth)

    return relay_function_pass("FuseOps", 0, rewrite, required=("InferType",),
                               needs_types=True, skip_primitive=True)


def fused_function_name(func: Function) -> str:
    """``"fused_"`` + the names of the operators a primitive function calls, in post-DFS order.

    Dots become underscores; a name longer than 80 characters is cut and given a hash suffix.

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(4,))
    >>> fused_function_name(relay.Function([x], relay.nn.relu(relay.add(x, x))))
    'fused_add_nn_relu'
    """
    names: list[str] = []

    class _Names(ExprVisitor):
        def visit_call(self, node: Call) -> None:
            super().visit_call(node)
            if isinstance(node.op, Op):
                names.append(node.op.name)

        def visit_function(self, node: Function) -> None:
            if node is func:
                super().visit_function(node)

    _Names().visit(func)
    candidate = "_".join(["fused", *names]).replace(".", "_")
    if len(candidate) > _MAX_FUNC_NAME_LENGTH:
        digest = zlib.crc32(candidate.encode()) & 0xFFFFFFFF
        candidate = f"{candidate[:_MAX_FUNC_NAME_LENGTH]}_{digest:x}_"
    return candidate

