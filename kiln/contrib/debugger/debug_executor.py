"""TVM's debug graph executor: per-node timings and intermediate outputs.

Entry points: :func:`create`, :class:`GraphModuleDebug`.

:meth:`GraphModuleDebug.run` executes the graph one operator at a time, timing each call in C
and copying each node's outputs right after it runs (storage is reused, so later ops would
overwrite them). It prints a per-node table (node name, function, time in µs, percent,
output shapes) and, with ``dump_root``, saves every node output as a params file
``<dump_root>/_tvmdbg_device_<DEV>_<ID>/output_tensors.params`` keyed ``"<node>:<index>"``,
next to the graph JSON and a JSON execution trace.

Example
-------
>>> m = create(graph_json, lib, kiln.cpu(0), dump_root="/tmp/dbg")   # doctest: +SKIP
>>> m.set_input("x", x); m.run()                                    # doctest: +SKIP
>>> m.debug_get_output("fused_add").numpy()                         # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

from kiln.contrib.graph_executor import GraphModule
from kiln.runtime.device import Device
from kiln.runtime.error import TVMError
from kiln.runtime.graph_executor import GraphExecutor, resolve_devices
from kiln.runtime.module import Module
from kiln.runtime.ndarray import NDArray
from kiln.runtime.params import save_param_dict
from kiln.runtime.profiling import BenchmarkResult, Report, time_repeats
from kiln.runtime.registry import get_global_func

__all__ = ["create", "GraphModuleDebug"]

_DUMP_PREFIX = "_tvmdbg_"


def create(
    graph_json_str: str,
    libmod: Module,
    device: Device | Sequence[Device],
    dump_root: str | None = None,
) -> GraphModuleDebug:
    """Create a :class:`GraphModuleDebug` for ``graph_json_str`` with kernels from ``libmod``.

    ``dump_root`` is where :meth:`GraphModuleDebug.run` saves node outputs (a temporary
    directory when None).
    """
    if not isinstance(graph_json_str, str):
        raise TVMError(f"graph_json_str must be a str, got {type(graph_json_str).__name__}")
    executor = get_global_func("tvm.graph_executor_debug.create")(graph_json_str, libmod, device)
    return GraphModuleDebug(executor, device, graph_json_str, dump_root)


class GraphModuleDebug(GraphModule):
    """A :class:`GraphModule` whose ``run`` executes and times node by node.

    Parameters
    ----------
    module : GraphExecutor
        The executor (``create_executor(...)`` or a factory's ``debug_create``).
    device : Device or list of Device
        The devices it runs on (used to name the dump folder).
    graph_json_str : str
        The graph JSON (written into the dump folder).
    dump_root : str, optional
        Root folder for dumps; a fresh temporary folder when None.
    """

    def __init__(
        self,
        module: GraphExecutor,
        device: Device | Sequence[Device],
        graph_json_str: str,
        dump_root: str | None = None,
    ) -> None:
        super().__init__(module)
        self.devices = resolve_devices(device)
        self.graph_json = graph_json_str
        self._temporary_root = dump_root is None
        self.dump_root = dump_root or tempfile.mkdtemp(prefix="kiln_debug_")
        self.node_times_us: list[float] = []
        self._outputs: dict[str, NDArray] = {}

    # -- dumping ------------------------------------------------------------------------------

    @property
    def dump_folder(self) -> str:
        """``<dump_root>/_tvmdbg_device_<TYPE>_<ID>`` for the first device."""
        dev = self.devices[0]
        kind = Device.MASK2STR.get(dev.device_type, str(dev.device_type)).upper()
        return os.path.join(self.dump_root, f"{_DUMP_PREFIX}device_{kind}_{dev.device_id}")

    def _node_outputs(self, op: Any) -> list[tuple[str, NDArray]]:
        name = op.name
        return [(f"{name}:{i}", self.module.entry_array(eid)) for i, eid in
                enumerate(op.output_eids)]

    def _input_outputs(self) -> list[tuple[str, NDArray]]:
        graph = self.module.graph
        return [(f"{graph.nodes[nid].name}:0", self.module.entry_array(graph.entry_id(nid)))
                for nid in graph.arg_nodes]

    # -- running ------------------------------------------------------------------------------

    def run(self, **input_dict: Any) -> None:
        """Run node by node: time each, keep a copy of every output, print the table, dump."""
        if input_dict:
            self.set_input(**input_dict)
        outputs = {key: array.copyto(array.device) for key, array in self._input_outputs()}
        times = []
        for index, op in enumerate(self.module.op_execs):
            times.append(self.module.time_op(index))
            for key, array in self._node_outputs(op):
                outputs[key] = array.copyto(array.device)
        self._outputs = outputs
        self.node_times_us = [t * 1e6 for t in times]
        self._dump()
        print(self.profile_report().table(sort=False))

    def _dump(self) -> None:
        folder = self.dump_folder
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "output_tensors.params"), "wb") as f:
            f.write(save_param_dict(self._outputs))
        with open(os.path.join(folder, f"{_DUMP_PREFIX}graph_dump.json"), "w") as f:
            f.write(self.graph_json)
        trace = [
            {"name": op.name, "op": op.func_name, "time_us": t}
            for op, t in zip(self.module.op_execs, self.node_times_us)
        ]
        with open(os.path.join(folder, f"{_DUMP_PREFIX}execution_trace.json"), "w") as f:
            json.dump(trace, f, indent=1)

    def exit(self) -> None:
        """Remove the dump folder if it was a temporary one."""
        if self._temporary_root:
            shutil.rmtree(self.dump_root, ignore_errors=True)

    def _node_index(self, node: int | str) -> int:
        graph = self.module.graph
        if isinstance(node, str):
            for nid, graph_node in enumerate(graph.nodes):
                if graph_node.name == node:
                    return nid
            raise TVMError(f"Could not find node '{node}' in the graph")
        nid = int(node)
        if not 0 <= nid < len(graph.nodes):
            raise TVMError(f"node index {nid} is out of range ({len(graph.nodes)} nodes)")
        return nid

    def debug_get_output(self, node: int | str, out: NDArray | None = None) -> NDArray:
        """Output 0 of ``node`` (name or node index), computed by running the graph up to it.

        Returns a copy, or fills ``out``.
        """
        nid = self._node_index(node)
        for index, op in enumerate(self.module.op_execs):
            if op.node_id > nid:
                break
            self.module.run_op(index)
        array = self.module.entry_array(self.module.graph.entry_id(nid))
        return array.copyto(array.device) if out is None else out.copyfrom(array)

    def get_dumped_output(self, key: str) -> NDArray:
        """An output saved by the last :meth:`run`, keyed ``"<node>:<index>"``."""
        if key not in self._outputs:
            raise TVMError(f"no dumped output {key!r}; call run() first or check the name")
        return self._outputs[key]

    # -- timing -------------------------------------------------------------------------------

    def run_individual(self, number: int, repeat: int = 1, min_repeat_ms: float = 0) -> list[float]:
        """Mean seconds of each operator, each timed ``repeat`` x ``number`` calls in C."""
        if number < 1 or repeat < 1:
            raise TVMError(f"number and repeat must be >= 1, got {number}, {repeat}")
        if min_repeat_ms:
            # Grow `number` so one pass over all operators lasts about min_repeat_ms.
            one_pass_ms = max(sum(self.module.time_ops(number)) * number * 1e3, 1e-3)
            number = max(number, int(number * min_repeat_ms / one_pass_ms) + 1)
        totals = [0.0] * len(self.module.op_execs)
        for _ in range(repeat):
            for i, t in enumerate(self.module.time_ops(number)):
                totals[i] += t
        return [t / repeat for t in totals]

    def run_individual_node(
        self, index: int, number: int = 10, repeat: int = 1, min_repeat_ms: float = 0
    ) -> BenchmarkResult:
        """Benchmark operator ``index`` (position among the kernel calls) on its own."""
        ops = self.module.op_execs
        if not 0 <= index < len(ops):
            raise TVMError(f"operator index {index} is out of range ({len(ops)} operators)")

        def run(n: int) -> None:
            for _ in range(n):
                self.module.run_op(index)

        return time_repeats(run, repeat=repeat, number=number, min_repeat_ms=min_repeat_ms or None)

    def profile_report(self, times_us: list[float] | None = None) -> Report:
        """A :class:`Report` of the last run's node times (or of ``times_us``)."""
        times_us = self.node_times_us if times_us is None else times_us
        if not times_us:
            raise TVMError("no timings yet; call run() or profile() first")
        total = sum(times_us) or 1.0
        dev = str(self.devices[0])
        calls = []
        for op, t in zip(self.module.op_execs, times_us):
            shapes = [tuple(self.module.graph.entries[eid].shape) for eid in op.output_eids]
            calls.append({
                "Name": op.name, "Op": op.func_name, "Duration (us)": t,
                "Percent": 100.0 * t / total, "Count": 1, "Device": dev,
                "Output Shapes": str(shapes),
            })
        return Report(calls, {dev: {"Duration (us)": sum(times_us)}},
                      {"Executor": "Graph (debug)", "Dump folder": self.dump_folder})

    def profile(self, number: int = 1, **input_dict: Any) -> Report:
        """Time every operator (``number`` calls each) and return the per-op :class:`Report`."""
        if input_dict:
            self.set_input(**input_dict)
        times_us = [t * 1e6 for t in self.module.time_ops(number)]
        return self.profile_report(times_us)
