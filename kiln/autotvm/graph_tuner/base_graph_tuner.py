"""The graph tuner's model of a network: which config each tuned operator runs with, what
layouts that gives its input and output, and what converting between them costs.

Entry points: :class:`BaseGraphTuner` (subclassed by :class:`~.DPTuner` and
:class:`~.PBQPTuner`), :func:`register_infer_layout`, :data:`INFER_LAYOUT`.

TVM's design (``autotvm.graph_tuner``): per-operator tuning picks each convolution's fastest
config alone, but a config also fixes the layouts of the activations it reads and writes
(``NCHW{ic}c`` / ``NCHW{oc}c``); two neighbours that disagree need a ``layout_transform``
between them. The graph tuner takes the ``max_sch_num`` fastest records of every tuned
operator, times every layout transform the choices could need
(:meth:`BaseGraphTuner.benchmark_layout_transform`), and picks the choices minimizing the
operators' time plus the transforms' time (``run``, by the subclass's search).

Where kiln differs from TVM: nodes with the same workload share one choice (kiln compiles
one kernel per distinct workload, and ``apply_history_best`` applies one record per
workload), so the written records hold one line per workload rather than one per node; a
template's layouts come from :data:`INFER_LAYOUT` (TVM's ``infer_layout`` per TOPI op), and
kiln's ``conv2d_nchw.x86`` reads and writes NCHW whatever its blocks (it converts inside the
kernel, where the measurement sees it), so its records never need a transform; the
``conv2d_NCHWc.x86`` / ``depthwise_conv2d_NCHWc.x86`` records (what x86 convs are tuned as)
block the activations between operators, ``NCHW{tile_ic}c`` in and ``NCHW{tile_oc}c`` out.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kiln.autotvm.record import encode, load_from_file
from kiln.autotvm.topi_x86 import relay_task_specs
from kiln.runtime.error import TVMError

__all__ = ["BaseGraphTuner", "INFER_LAYOUT", "register_infer_layout", "layout_shape"]

logger = logging.getLogger("autotvm")

# template name -> infer(workload, cfg) -> (input activation layout, output layout)
INFER_LAYOUT: dict[str, Callable] = {}


def register_infer_layout(template: str) -> Callable:
    """Decorator: ``infer(workload, cfg) -> (in_layout, out_layout)`` gives the activation
    layouts (``"NCHW"``, ``"NCHW8c"`` ...) a config of ``template`` reads and writes."""
    def decorate(fn: Callable) -> Callable:
        INFER_LAYOUT[template] = fn
        return fn
    return decorate


@register_infer_layout("conv2d_nchw.x86")
def _conv2d_nchw_layouts(workload: tuple, cfg: Any) -> tuple[str, str]:
    # kiln's NCHW conv blocks channels inside the kernel: NCHW in and out for every config
    return "NCHW", "NCHW"


@register_infer_layout("conv2d_NCHWc.x86")
def _conv2d_nchwc_layouts(workload: tuple, cfg: Any) -> tuple[str, str]:
    # TVM's _conv2d_infer_layout: AlterOpLayout blocks the activations by tile_ic / tile_oc
    return f"NCHW{cfg['tile_ic'].size[-1]}c", f"NCHW{cfg['tile_oc'].size[-1]}c"


@register_infer_layout("depthwise_conv2d_NCHWc.x86")
def _depthwise_nchwc_layouts(workload: tuple, cfg: Any) -> tuple[str, str]:
    # kiln's blocked depthwise kernel reads and writes its tile_oc blocks
    block = cfg["tile_oc"].size[-1]
    return f"NCHW{block}c", f"NCHW{block}c"


_BLOCKED = re.compile(r"^NCHW(\d+)c$")


def layout_shape(nchw: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """The shape of an NCHW tensor of shape ``nchw`` in ``layout`` (``NCHW`` or
    ``NCHW{n}c``)."""
    if layout == "NCHW":
        return tuple(nchw)
    match = _BLOCKED.match(layout)
    n, c, h, w = nchw
    if match is None or c % int(match.group(1)):
        raise TVMError(f"graph tuner: layout {layout!r} does not apply to shape {nchw} "
                       "(NCHW or NCHW<n>c with n dividing the channels)")
    block = int(match.group(1))
    return n, c // block, h, w, block


class _Node:
    """One tuned operator call: its workload, its candidate records, its neighbours."""

    def __init__(self, index: int, call: Any, workload: tuple) -> None:
        self.index, self.call, self.workload = index, call, workload
        self.in_shape = tuple(int(d) for d in call.args[0].checked_type.shape)
        self.out_shape = tuple(int(d) for d in call.checked_type.shape)
        self.dtype = str(call.checked_type.dtype)
        self.producers: list[_Node] = []
        self.external_input = False   # reads the graph's input (or an untuned op's output)
        self.external_output = False  # its output reaches the graph's output or such an op
        self.records: list = []       # the candidates: (MeasureInput, MeasureResult)
        self.layouts: list[tuple[str, str]] = []


def _mean_cost(result: Any) -> float:
    return float(sum(result.costs) / len(result.costs))


class BaseGraphTuner:
    """Graph-level layout selection over per-operator tuning records (TVM's API).

    Parameters
    ----------
    graph : relay.Function or IRModule
        The network (``main`` of a module).
    input_shapes : dict
        Input name -> shape; every name must be a parameter of ``graph`` with that shape.
    records : str, Path or list
        A log file of per-operator tuning, or ``(MeasureInput, MeasureResult)`` pairs.
    target_ops : list
        The tuned ops (``[relay.op.get("nn.conv2d")]``).
    target : str or Target
        The target the records were measured on (transforms are timed there).
    max_sch_num : int
        Candidates kept per workload (its fastest records).
    """

    def __init__(self, graph: Any, input_shapes: dict, records: Any, target_ops: list,
                 target: Any, max_sch_num: int = 20, dtype: str = "float32",
                 verbose: bool = True, log_file: str = "graph_tuner.log",
                 log_level: int = logging.DEBUG, name: str = "graph_tuner") -> None:
        from kiln.target import Target

        if max_sch_num < 1:
            raise TVMError(f"graph tuner: max_sch_num must be at least 1, got {max_sch_num}")
        self._target = Target(target) if isinstance(target, str) else target
        self._max_sch_num, self._dtype, self._name = int(max_sch_num), dtype, name
        self._op_names = {op if isinstance(op, str) else op.name for op in target_ops}
        self._func = self._typed_function(graph, input_shapes)
        self._nodes: list[_Node] = []
        self._read_graph()
        self._attach_records(records)
        self._layout_costs: dict[tuple, float] = {}
        self._choice: list[int] | None = None

    # ---- the graph ------------------------------------------------------------------------
    @staticmethod
    def _typed_function(graph: Any, input_shapes: dict) -> Any:
        from kiln.ir.module import IRModule
        from kiln.relay import transform

        mod = graph if isinstance(graph, IRModule) else IRModule.from_expr(graph)
        mod = transform.InferType()(mod)
        func = mod["main"]
        params = {p.name_hint: p for p in func.params}
        for name, shape in input_shapes.items():
            if name not in params:
                raise TVMError(f"graph tuner: Could not find {name!r} in the graph's inputs "
                               f"{sorted(params)}")
            have = tuple(int(d) for d in params[name].checked_type.shape)
            if have != tuple(shape):
                raise TVMError(f"graph tuner: input {name!r} has shape {have} in the graph, "
                               f"input_shapes says {tuple(shape)}")
        return func

    def _read_graph(self) -> None:
        """The target-op calls in topological order and, through layout-agnostic ops
        (elementwise, broadcast, pooling), which of them feed which."""
        from kiln.relay import expr as rx
        from kiln.relay.expr_functor import post_order_visit

        order: list = []
        consumers: dict[int, list] = {}
        post_order_visit(self._func.body, order.append)
        for expr in order:
            for child in _children(expr):
                consumers.setdefault(id(child), []).append(expr)
        by_call: dict[int, _Node] = {}
        for expr in order:
            if isinstance(expr, rx.Call) and getattr(expr.op, "name", None) in self._op_names:
                node = _Node(len(self._nodes), expr, ())
                by_call[id(expr)] = node
                self._nodes.append(node)
        for node in self._nodes:
            sources = _trace_back(node.call.args[0], by_call)
            node.producers = [by_call[id(s)] for s in sources if s is not None]
            node.external_input = None in sources
            node.external_output = _reaches_outside(node.call, consumers, by_call,
                                                    self._func.body)
        if not self._nodes:
            raise TVMError(f"graph tuner: the graph has no call of {sorted(self._op_names)}")

    # ---- the candidates -------------------------------------------------------------------
    def _attach_records(self, records: Any) -> None:
        pairs = list(load_from_file(records)) if isinstance(records, str | Path) \
            else list(records)
        by_workload: dict[tuple, list] = {}
        for inp, res in pairs:
            if res.error_no == 0:
                by_workload.setdefault(inp.task.workload, []).append((inp, res))
        for node in self._nodes:
            node.workload = self._workload_of(node, by_workload)
            if node.workload is None:
                raise TVMError(f"graph tuner: no record for {node.call.op.name} #{node.index} "
                               f"(input {node.in_shape}); tune its task first")
            best = sorted(by_workload[node.workload], key=lambda r: _mean_cost(r[1]))
            unique: dict[str, tuple] = {}
            for inp, res in best:  # one candidate per config
                unique.setdefault(str(inp.config), (inp, res))
            node.records = list(unique.values())[:self._max_sch_num]
            infer = INFER_LAYOUT.get(node.workload[0])
            if infer is None:
                raise TVMError(f"graph tuner: template {node.workload[0]!r} has no layout "
                               "inference (register one with register_infer_layout)")
            node.layouts = [infer(node.workload, inp.config) for inp, _ in node.records]

    def _workload_of(self, node: _Node, by_workload: dict) -> tuple | None:
        """The workload of ``node`` under each tunable implementation its op's strategy
        offers on the target; the first with records."""
        from kiln import te
        from kiln.relay.op.strategy.registry import strategy_for

        call = node.call
        inputs = [te.placeholder(tuple(int(d) for d in a.checked_type.shape),
                                 str(a.checked_type.dtype)) for a in call.args]
        with self._target:
            impls = strategy_for(call.op, call.attrs, inputs, call.checked_type,
                                 self._target).implementations
        for impl in impls:
            for name, args in relay_task_specs(impl.name, call.attrs, inputs,
                                               call.checked_type):
                if (name, *args) in by_workload:
                    return (name, *args)
        return None

    # ---- layout transforms ----------------------------------------------------------------
    def _transforms_needed(self) -> set[tuple]:
        """Every ``(nchw shape, dtype, src, dst)`` some choice of candidates converts."""
        needed = set()
        for node in self._nodes:
            ins = {lay[0] for lay in node.layouts}
            outs = {lay[1] for lay in node.layouts}
            if node.external_input:
                needed |= {(node.in_shape, node.dtype, "NCHW", i) for i in ins}
            if node.external_output:
                needed |= {(node.out_shape, node.dtype, o, "NCHW") for o in outs}
            for producer in node.producers:
                needed |= {(node.in_shape, node.dtype, o, i) for lay in producer.layouts
                           for o in [lay[1]] for i in ins}
        return {t for t in needed if t[2] != t[3]}

    def benchmark_layout_transform(self, min_exec_num: int = 100, timeout: float = 10,
                                   use_rpc: bool = False, device_key: str | None = None,
                                   host: str = "127.0.0.1", port: int = 9190,
                                   n_parallel: int = 1, build_func: str = "default",
                                   layout_records: str | None = None, target_host: Any = None,
                                   infer_layout: bool = False, runner: Any = None) -> None:
        """Time every layout transform a choice of candidates may need, on this machine
        (``min_exec_num`` runs each). ``layout_records`` (a JSON-lines file) keeps the
        timings: those present are reused, new ones appended."""
        if use_rpc or runner is not None:
            raise TVMError("graph tuner: kiln times layout transforms on this machine; "
                           "use_rpc and runner are not supported")
        if "arm_cpu" in self._target.keys:
            raise TVMError(f"graph tuner: layout transforms are timed on this machine; target "
                           f"{self._target} runs elsewhere (its records need no transform: "
                           "apply them with apply_history_best)")
        if infer_layout:
            raise TVMError("graph tuner: kiln measures layout transforms (infer_layout=True, "
                           "TVM's flop estimate, is not supported)")
        known = _load_layout_records(layout_records)
        fresh = []
        for key in sorted(self._transforms_needed()):
            if key not in known:
                known[key] = self._time_transform(*key, min_exec_num)
                fresh.append(key)
        self._layout_costs = known
        if layout_records is not None and fresh:
            with open(layout_records, "a") as f:
                for key in fresh:
                    shape, dtype, src, dst = key
                    f.write(json.dumps({"shape": list(shape), "dtype": dtype, "src": src,
                                        "dst": dst, "cost": known[key]}) + "\n")

    def _time_transform(self, shape: tuple, dtype: str, src: str, dst: str,
                        number: int) -> float:
        from kiln import relay
        from kiln.contrib import graph_executor
        from kiln.ir.module import IRModule
        from kiln.ir.transform import PassContext
        from kiln.runtime import ndarray
        from kiln.runtime.device import cpu

        x = relay.var("x", shape=layout_shape(shape, src), dtype=dtype)
        mod = IRModule.from_expr(relay.Function([x], relay.layout_transform(x, src, dst)))
        with PassContext(opt_level=3):
            lib = relay.build(mod, target=self._target)
        module = graph_executor.GraphModule(lib["default"](cpu(0)))
        module.set_input("x", ndarray.array(np.zeros(layout_shape(shape, src), dtype)))
        timer = module.module.time_evaluator("run", cpu(0), number=max(1, number), repeat=3)
        return float(min(timer().results))

    # ---- the cost model -------------------------------------------------------------------
    def _transform_cost(self, shape: tuple, dtype: str, src: str, dst: str) -> float:
        if src == dst:
            return 0.0
        key = (shape, dtype, src, dst)
        if key not in self._layout_costs:
            raise TVMError("graph tuner: call benchmark_layout_transform() before run(): the "
                           f"transform {src} -> {dst} of {shape} is not timed")
        return self._layout_costs[key]

    def unary_costs(self, node: _Node) -> np.ndarray:
        """Per candidate of ``node``: its measured time plus its boundary transforms."""
        costs = []
        for (_, res), (lin, lout) in zip(node.records, node.layouts):
            cost = _mean_cost(res)
            if node.external_input:
                cost += self._transform_cost(node.in_shape, node.dtype, "NCHW", lin)
            if node.external_output:
                cost += self._transform_cost(node.out_shape, node.dtype, lout, "NCHW")
            costs.append(cost)
        return np.array(costs)

    def edge_costs(self, producer: _Node, consumer: _Node) -> np.ndarray:
        """``[i, j]``: the transform from ``producer``'s candidate ``i`` output to
        ``consumer``'s candidate ``j`` input."""
        return np.array([[self._transform_cost(consumer.in_shape, consumer.dtype, lp[1], lc[0])
                          for lc in consumer.layouts] for lp in producer.layouts])

    def problem(self) -> tuple[list[list[int]], list[np.ndarray], dict[tuple, np.ndarray]]:
        """The search problem over workloads (nodes of one workload share a choice):
        ``(nodes per variable, unary cost vectors, {(u, v): pairwise matrix, u < v})``."""
        variables: dict[tuple, int] = {}
        members: list[list[int]] = []
        for node in self._nodes:
            var = variables.setdefault(node.workload, len(variables))
            if var == len(members):
                members.append([])
            members[var].append(node.index)
        unary = [sum(self.unary_costs(self._nodes[i]) for i in group) for group in members]
        pairwise: dict[tuple, np.ndarray] = {}
        for node in self._nodes:
            v = variables[node.workload]
            for producer in node.producers:
                u = variables[producer.workload]
                matrix = self.edge_costs(producer, node)
                if u == v:  # one choice for both ends: the diagonal
                    unary[v] = unary[v] + np.diag(matrix)
                    continue
                key, m = ((u, v), matrix) if u < v else ((v, u), matrix.T)
                pairwise[key] = pairwise.get(key, 0) + m
        return members, unary, pairwise

    def total_cost(self, choice: list[int]) -> float:
        """The modelled time of the network with candidate ``choice[v]`` for variable ``v``
        (in :meth:`problem`'s order)."""
        _, unary, pairwise = self.problem()
        total = sum(float(u[c]) for u, c in zip(unary, choice))
        return total + sum(float(m[choice[u], choice[v]]) for (u, v), m in pairwise.items())

    def per_layer_best_choice(self) -> list[int]:
        """Each workload's fastest record alone (what per-operator tuning applies)."""
        return [0] * len(self.problem()[0])

    # ---- results --------------------------------------------------------------------------
    def run(self, **kwargs: Any) -> None:
        """Search the choices (the subclass's algorithm)."""
        raise NotImplementedError

    def _set_choice(self, choice: list[int]) -> None:
        self._choice = list(choice)
        logger.info("%s: modelled cost %.6g s (per-layer best %.6g s)", self._name,
                    self.total_cost(choice), self.total_cost(self.per_layer_best_choice()))

    def chosen_choice(self) -> list[int]:
        """The candidate :meth:`run` chose per variable (in :meth:`problem`'s order), for
        :meth:`total_cost`."""
        if self._choice is None:
            raise TVMError("graph tuner: call run() first")
        return list(self._choice)

    def get_optimal_records(self) -> list:
        """The chosen record of every tuned workload, in the graph's order."""
        choice = self.chosen_choice()
        members, _, _ = self.problem()
        return [self._nodes[group[0]].records[c] for group, c in zip(members, choice)]

    def write_opt_sch2record_file(self, record_file: str = "graph_opt_schedule.log") -> None:
        """Write the chosen records (TVM's log format), for ``autotvm.apply_graph_best``."""
        with open(record_file, "w") as f:
            for inp, res in self.get_optimal_records():
                f.write(encode(inp, res) + "\n")


def _children(expr: Any) -> list:
    from kiln.relay import expr as rx

    if isinstance(expr, rx.Call):
        return list(expr.args)
    if isinstance(expr, rx.Tuple):
        return list(expr.fields)
    if isinstance(expr, rx.TupleGetItem):
        return [expr.tuple_value]
    return []


def _agnostic(expr: Any) -> bool:
    """Whether ``expr`` passes activations through in any channel layout (elementwise,
    broadcast, pooling, a batch norm's tuple): the graph tuner looks through it."""
    from kiln.ir.op import Op
    from kiln.relay import expr as rx

    if isinstance(expr, rx.TupleGetItem):
        return _agnostic(expr.tuple_value)
    if not isinstance(expr, rx.Call) or not isinstance(expr.op, Op):
        return False
    name = expr.op.name
    if name in ("nn.max_pool2d", "nn.avg_pool2d", "nn.batch_norm", "nn.bias_add"):
        return True
    pattern = expr.op.get_attr("TOpPattern")
    return pattern is not None and int(pattern) <= 1  # elementwise or broadcast


def _trace_back(expr: Any, nodes: dict) -> set:
    """The tuned calls ``expr``'s activations come from (None for the graph's input or an
    op the tuner cannot see through); constants contribute nothing."""
    from kiln.relay import expr as rx

    if id(expr) in nodes:
        return {nodes[id(expr)].call}
    if isinstance(expr, rx.Constant):
        return set()
    if _agnostic(expr):
        found: set = set()
        for child in _children(expr):
            found |= _trace_back(child, nodes)
        return found
    return {None}


def _reaches_outside(call: Any, consumers: dict, nodes: dict, body: Any) -> bool:
    """Whether ``call``'s output reaches, through layout-agnostic ops, anything but a tuned
    call: the graph's output or an op that needs NCHW."""
    stack, seen = [call], set()
    while stack:
        expr = stack.pop()
        if id(expr) in seen:
            continue
        seen.add(id(expr))
        if expr is body:
            return True
        for user in consumers.get(id(expr), []):
            if id(user) in nodes:
                continue
            if not _agnostic(user):
                return True
            stack.append(user)
    return False


def _load_layout_records(path: str | None) -> dict[tuple, float]:
    known: dict[tuple, float] = {}
    if path is None or not Path(path).exists():
        return known
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key = (tuple(int(d) for d in row["shape"]), str(row["dtype"]), str(row["src"]),
                   str(row["dst"]))
            known[key] = float(row["cost"])
        except (ValueError, KeyError, TypeError) as err:
            raise TVMError(f"{path}:{number}: not a layout transform record ({err})") from None
    return known
