"""Graph executor codegen: a fused, typed ``main`` → TVM's graph JSON + kernels + params.

Entry points: :func:`codegen` returning a :class:`GraphCodegenResult`; :func:`build_nodes`
(the node list and heads alone, which the AOT codegen walks too).

Walks ``main`` (graph normal form, lets allowed): parameters become ``"null"`` input nodes,
constants become ``"null"`` nodes ``p0, p1, …`` whose values go to the params dict, each call
of a primitive function becomes a ``"tvm_op"`` node calling its kernel (lowered by the
:class:`~kiln.relay.backend.te_compiler.TECompiler`; equal functions share a kernel, node
names get a numeric suffix), reshape-only primitives become ``__nop`` nodes sharing their
input's storage, and ``device_copy`` becomes ``__copy``. Then the static memory plan assigns
storage ids. The JSON layout is TVM's (``reference/tvm-relay-era.md`` §2.1).

Heterogeneous graphs (planned by :func:`~kiln.relay.transform.plan_devices.PlanDevices`): every
node runs on the virtual device :func:`~kiln.relay.transform.plan_devices.analyze_devices`
finds for it; a ``__copy`` node's output lives on the copy's destination device. Primitive
functions are lowered by the TE compiler of their device's type. When any node is off
``cpu(0)`` the graph carries TVM's ``device_index`` attribute (the device *type* of each entry)
and kiln's ``device_id`` attribute (the id of each entry's virtual device, a ``list_int`` that
TVM's loader skips), so two devices of one type (``cpu(0)``, ``cpu(1)``) stay apart: the
executor gives an entry the given device equal to ``(device_index, device_id)``, else the
first given device of its type, else the first device. Storage is never shared across
virtual devices.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kiln.ir.op import Op
from kiln.ir.type import TensorType, TupleType
from kiln.relay import expr as rx
from kiln.relay.backend.graph_plan_memory import MemoryPlan, PlanNode, plan_memory
from kiln.relay.backend.te_compiler import TECompiler, is_reshape_only
from kiln.relay.transform.plan_devices import DeviceMap, analyze_devices
from kiln.runtime.device import Device, cpu
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError

__all__ = ["codegen", "GraphCodegenResult", "build_nodes", "CodegenNode"]


@dataclass
class CodegenNode:
    """One graph node: ``"null"`` (input or param) or ``"tvm_op"`` with its attrs and types."""

    op: str
    name: str
    inputs: list[tuple[int, int]]
    attrs: dict[str, str] = field(default_factory=dict)
    types: list[TensorType] = field(default_factory=list)
    device: Device = field(default_factory=cpu)


@dataclass
class GraphCodegenResult:
    """The graph JSON text, the TE compilers (per device type) holding the kernels, params and
    the memory plan."""

    graph_json: str
    compilers: dict[int, TECompiler]
    params: dict[str, Any]
    memory_plan: MemoryPlan
    num_kernel_calls: int


def _flat_types(ty: Any) -> list[TensorType]:
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in _flat_types(f)]
    if isinstance(ty, TensorType):
        return [ty]
    raise TVMError(f"the graph executor supports only tensors and tuples of tensors, got {ty!r}")


def _nbytes(ty: TensorType) -> int:
    try:
        shape = ty.concrete_shape
    except TVMError:
        raise TVMError(f"Cannot allocate memory symbolic tensor shape {ty!r}: the graph "
                       "executor needs static shapes; use the VM for dynamic shapes") from None
    dtype = DataType(str(ty.dtype))
    return math.prod(shape) * ((dtype.bits * dtype.lanes + 7) // 8)


class _GraphBuilder:
    def __init__(self, compilers: Mapping[int, TECompiler], device_map: DeviceMap) -> None:
        self.compilers = compilers
        self.device_map = device_map
        self.nodes: list[CodegenNode] = []
        self.params: dict[str, Any] = {}
        self.memo: dict[int, list[tuple[int, int]]] = {}
        self.name_count: dict[str, int] = {}
        self.kernel_calls = 0

    def add(self, node: CodegenNode) -> list[tuple[int, int]]:
        self.nodes.append(node)
        nid = len(self.nodes) - 1
        return [(nid, i) for i in range(max(len(node.types), 1))]

    def node_name(self, base: str) -> str:
        count = self.name_count.get(base, 0)
        self.name_count[base] = count + 1
        return base if count == 0 else f"{base}{count}"

    def visit(self, node: Any) -> list[tuple[int, int]]:
        key = id(node)
        if key not in self.memo:
            method = getattr(self, "visit_" + type(node).__name__, None)
            if method is None:
                raise TVMError(f"the graph executor cannot run {type(node).__name__} "
                               "(control flow, closures and ADTs need the VM)")
            self.memo[key] = method(node)
        return self.memo[key]

    def visit_Var(self, node: rx.Var) -> list[tuple[int, int]]:
        raise TVMError(f"free variable %{node.name_hint} in main")

    def visit_Constant(self, node: rx.Constant) -> list[tuple[int, int]]:
        name = f"p{len(self.params)}"
        self.params[name] = node.data
        return self.add(CodegenNode("null", name, [], types=[node.checked_type],
                              device=self.device_map.device_of(node)))

    def visit_Tuple(self, node: rx.Tuple) -> list[tuple[int, int]]:
        return [e for f in node.fields for e in self.visit(f)]

    def visit_TupleGetItem(self, node: rx.TupleGetItem) -> list[tuple[int, int]]:
        entries = self.visit(node.tuple_value)
        sizes = [len(_flat_types(t)) for t in node.tuple_value.checked_type.fields]
        start = sum(sizes[: node.index])
        return entries[start: start + sizes[node.index]]

    def visit_Let(self, node: rx.Let) -> list[tuple[int, int]]:
        while isinstance(node, rx.Let):
            self.memo[id(node.var)] = self.visit(node.value)
            node = node.body
        return self.visit(node)

    def visit_Call(self, node: rx.Call) -> list[tuple[int, int]]:
        func = node.op
        if isinstance(func, Op) and func.name == "device_copy":
            inputs = self.visit(node.args[0])
            attrs = {"func_name": "__copy", "num_inputs": "1", "num_outputs": "1",
                     "flatten_data": "0"}
            return self.add(CodegenNode("tvm_op", self.node_name("__copy"), inputs, attrs,
                                  [node.checked_type], self.device_map.device_of(node)))
        if isinstance(func, Op):  # an unfused op: give it its own primitive function
            params = [rx.Var(f"p{i}", a.checked_type) for i, a in enumerate(node.args)]
            func = rx.Function(params, rx.Call(func, params, node.attrs)).with_attr(
                "Primitive", 1)
            from kiln.relay.type_infer import infer_expr

            infer_expr(func)
        if not isinstance(func, rx.Function) or not func.attrs or not func.attrs.get(
                "Primitive"):
            raise TVMError("the graph executor can only call primitive (fused) functions; "
                           "calls of other functions need the VM")
        inputs = [e for a in node.args for e in self.visit(a)]
        device = self.device_map.device_of(node)
        types = _flat_types(node.checked_type)
        for ty in types:
            _nbytes(ty)  # refuses symbolic shapes before lowering, with a hint
        if is_reshape_only(func) and len(inputs) == 1:
            attrs = {"func_name": "__nop", "num_inputs": "1", "num_outputs": "1",
                     "flatten_data": "0"}
            return self.add(CodegenNode("tvm_op", self.node_name("reshape_nop"), inputs, attrs,
                                  types, device))
        compiler = self.compilers.get(device.device_type)
        if compiler is None:
            raise TVMError(f"a kernel is planned on {device}, but relay.build has no target "
                           f"for device type {device.device_type}; targets are given for "
                           f"device types {sorted(self.compilers)}")
        lowered = compiler.lower(func)
        self.kernel_calls += 1
        attrs = {"num_outputs": str(len(types)), "num_inputs": str(len(inputs)),
                 "flatten_data": "0", "func_name": lowered.name, "hash": lowered.hash}
        return self.add(CodegenNode("tvm_op", self.node_name(lowered.name), inputs, attrs, types,
                              device))


def build_nodes(main: rx.Function, compiler: TECompiler | Mapping[int, TECompiler],
                default_device: Device | None = None
                ) -> tuple[list[CodegenNode], list[tuple[int, int]], dict[str, Any], int]:
    """``(nodes, heads, params, kernel calls)`` of a fused, typed ``main``: inputs first, then
    constants and kernel calls in evaluation order (each kernel lowered by its compiler)."""
    from kiln.ir.module import IRModule
    from kiln.relay.base import deep_recursion

    compilers = {1: compiler} if isinstance(compiler, TECompiler) else dict(compiler)
    device_map = analyze_devices(IRModule.from_expr(main), default_device)
    builder = _GraphBuilder(compilers, device_map)
    for param in main.params:
        types = _flat_types(param.checked_type)
        for ty in types:
            _nbytes(ty)
        if len(types) != 1:
            raise TVMError(f"graph input %{param.name_hint} must be a tensor, got "
                           f"{param.checked_type!r}")
        builder.memo[id(param)] = builder.add(CodegenNode("null", param.name_hint, [],
                                                          types=types,
                                                          device=device_map.device_of(param)))
    with deep_recursion():
        heads = builder.visit(main.body)
    return builder.nodes, heads, builder.params, builder.kernel_calls


def codegen(main: rx.Function, compiler: TECompiler | Mapping[int, TECompiler],
            default_device: Device | None = None) -> GraphCodegenResult:
    """Generate the graph for a fused, typed ``main`` function.

    ``compiler`` lowers the kernels: one TECompiler, or one per device type (heterogeneous
    builds). ``default_device`` is where unplanned expressions run (default ``cpu(0)``).
    """
    compilers = {1: compiler} if isinstance(compiler, TECompiler) else dict(compiler)
    nodes, heads, params, kernel_calls = build_nodes(main, compilers, default_device)

    plan_nodes = [PlanNode("input" if n.op == "null" else
                           "alias" if n.attrs.get("func_name") == "__nop" else "op",
                           [_nbytes(t) for t in n.types], n.inputs, n.device)
                  for n in nodes]
    plan = plan_memory(plan_nodes, heads)

    row_ptr = [0]
    for n in nodes:
        row_ptr.append(row_ptr[-1] + len(n.types))
    entry_types = [t for n in nodes for t in n.types]
    graph = {
        "nodes": [_node_json(n) for n in nodes],
        "arg_nodes": [i for i, n in enumerate(nodes) if n.op == "null"],
        "heads": [[nid, idx, 0] for nid, idx in heads],
        "attrs": {
            "dltype": ["list_str", [str(t.dtype) for t in entry_types]],
            "shape": ["list_shape", [list(t.concrete_shape) for t in entry_types]],
            "storage_id": ["list_int", plan.storage_ids],
        },
        "node_row_ptr": row_ptr,
    }
    if any(n.device != cpu(0) for n in nodes):
        graph["attrs"]["device_index"] = ["list_int", [n.device.device_type for n in nodes
                                                       for _ in n.types]]
        graph["attrs"]["device_id"] = ["list_int", [n.device.device_id for n in nodes
                                                    for _ in n.types]]
    return GraphCodegenResult(graph_json_text(graph), compilers, params, plan, kernel_calls)


_FLAT_LIST = re.compile(r"\[[^\[\]{}]*\]")


def graph_json_text(graph: dict) -> str:
    """Indented JSON with innermost lists on one line (``[0, 0, 0]``), as TVM prints graphs."""
    text = json.dumps(graph, indent=2)
    return _FLAT_LIST.sub(lambda m: json.dumps(json.loads(m.group())), text)


def _node_json(node: CodegenNode) -> dict:
    out: dict[str, Any] = {"op": node.op, "name": node.name}
    if node.op != "null":
        out["attrs"] = node.attrs
    out["inputs"] = [[nid, idx, 0] for nid, idx in node.inputs]
    return out
