"""The graph executor: runs a static graph of packed kernels over a planned storage pool.

Entry points: :func:`parse_graph_json` (graph JSON -> validated :class:`Graph`),
:class:`GraphExecutor` (the ``"GraphExecutor"`` Module), :func:`create` (also registered as
the globals ``tvm.graph_executor.create`` and ``tvm.graph_executor_debug.create``).

Setup does all the work, once: the JSON is parsed and checked, one pool buffer per storage id
is allocated on its device (a float32 array of ``ceil(max_bytes / 4)`` elements, as TVM does),
every entry becomes a view on its pool buffer, and every ``tvm_op`` node becomes an op record
``{kernel pointer, TVMValue[] of DLTensor*, type codes, nargs}`` for the C call-list loop
(:mod:`kiln.runtime.call_list`, shared with the VM's fused segments).
:meth:`GraphExecutor.run` is then a single ctypes call; it allocates and converts nothing.
Each op argument is the executor's own DLTensor copy, so zero-copy
inputs/outputs and shared params rebind pointers in place.
"""

from __future__ import annotations

import ctypes
import json
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kiln.runtime.call_list import OpRecord, c_loop, record_address
from kiln.runtime.device import Device, cpu
from kiln.runtime.dlpack import DLTensor
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.runtime.module import Module
from kiln.runtime.ndarray import NDArray, empty
from kiln.runtime.packed_func import (
    KERNEL_PROTOTYPE,
    TVMValue,
    TypeCode,
    get_last_error,
    set_last_error,
)
from kiln.runtime.params import load_param_dict
from kiln.runtime.registry import register_func
from kiln.runtime.serialization import read_json

__all__ = [
    "Graph",
    "GraphNode",
    "GraphEntry",
    "GraphExecutor",
    "parse_graph_json",
    "create",
    "resolve_devices",
]

_ALIGNMENT = 64
_REQUIRED_KEYS = ("nodes", "arg_nodes", "heads", "attrs", "node_row_ptr")
_REQUIRED_OP_ATTRS = ("func_name", "num_inputs", "num_outputs", "flatten_data")
_NOP, _COPY = "__nop", "__copy"


# ---- graph JSON -----------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphNode:
    """One node: an input (``op == "null"``) or a kernel call (``op == "tvm_op"``)."""

    op: str
    name: str
    inputs: tuple[tuple[int, int], ...]  # (node id, output index)
    attrs: Mapping[str, str]
    num_outputs: int

    @property
    def func_name(self) -> str:
        return self.attrs.get("func_name", "")

    @property
    def flatten_data(self) -> bool:
        return self.attrs.get("flatten_data", "0") not in ("0", "")


@dataclass(frozen=True)
class GraphEntry:
    """One node output: its dtype, shape, storage id, device type (TVM's ``device_index``)
    and device id (kiln's ``device_id`` attribute, which tells two devices of a type apart)."""

    dtype: DataType
    shape: tuple[int, ...]
    storage_id: int
    device_type: int | None
    device_id: int | None = None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * ((self.dtype.bits * self.dtype.lanes + 7) // 8)


@dataclass(frozen=True)
class Graph:
    """A parsed and validated graph JSON (TVM's ``GraphExecutor::Load``)."""

    nodes: tuple[GraphNode, ...]
    arg_nodes: tuple[int, ...]
    heads: tuple[tuple[int, int], ...]
    node_row_ptr: tuple[int, ...]
    entries: tuple[GraphEntry, ...]

    def entry_id(self, node_id: int, index: int = 0) -> int:
        return self.node_row_ptr[node_id] + index


def _fail(message: str) -> TVMError:
    return TVMError(f"invalid graph JSON: {message}")


def _int(value: Any, what: str, minimum: int = 0) -> int:
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise _fail(f"{what} must be an integer, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def _list(value: Any, what: str) -> list:
    if not isinstance(value, list):
        raise _fail(f"{what} must be a list, got {type(value).__name__}")
    return value


def _parse_node(nid: int, raw: Any) -> GraphNode:
    if not isinstance(raw, dict):
        raise _fail(f"nodes[{nid}] must be an object")
    for key in ("op", "name"):
        if not isinstance(raw.get(key), str):
            raise _fail(f"nodes[{nid}] needs a string {key!r}")
    op, name = raw["op"], raw["name"]
    attrs = raw.get("attrs", raw.get("attr", {}))
    if not isinstance(attrs, dict):
        raise _fail(f"node {name!r}: attrs must be an object")
    attrs = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in attrs.items()}
    inputs = []
    for i, edge in enumerate(_list(raw.get("inputs", []), f"node {name!r} inputs")):
        if not isinstance(edge, list) or len(edge) not in (2, 3):
            raise _fail(f"node {name!r} input {i} must be [node_id, index, version]")
        src = _int(edge[0], f"node {name!r} input {i} node id")
        if src >= nid:
            raise _fail(
                f"node {name!r} input {i} refers to node {src}, which is not an earlier node"
            )
        inputs.append((src, _int(edge[1], f"node {name!r} input {i} output index")))
    if op == "null":
        if inputs:
            raise _fail(f"input node {name!r} cannot have inputs")
        return GraphNode(op, name, (), attrs, 1)
    if op != "tvm_op":
        raise _fail(f"node {name!r} has unknown op {op!r} (expected 'null' or 'tvm_op')")
    for key in _REQUIRED_OP_ATTRS:
        if key not in attrs:
            raise _fail(f"tvm_op node {name!r} lacks the attribute {key!r}")
    num_inputs = _int(attrs["num_inputs"], f"node {name!r} num_inputs")
    num_outputs = _int(attrs["num_outputs"], f"node {name!r} num_outputs", minimum=1)
    if num_inputs != len(inputs):
        raise _fail(f"node {name!r} says num_inputs={num_inputs} but has {len(inputs)} inputs")
    return GraphNode(op, name, tuple(inputs), attrs, num_outputs)


def _attr_list(attrs: dict, key: str, tag: str, count: int, required: bool) -> list | None:
    value = attrs.get(key)
    if value is None:
        if required:
            raise _fail(f"attrs lacks {key!r}")
        return None
    if not isinstance(value, list) or len(value) != 2 or value[0] != tag:
        raise _fail(f"attrs[{key!r}] must be [{tag!r}, [...]]")
    items = _list(value[1], f"attrs[{key!r}]")
    if len(items) != count:
        raise _fail(f"attrs[{key!r}] has {len(items)} items but the graph has {count} entries")
    return items


def parse_graph_json(text: str) -> Graph:
    """Parse and validate a graph executor JSON string (TVM's layout, section 2.1).

    Every index, count and cross-reference is checked, so a malformed graph raises a
    :class:`TVMError` naming the problem instead of crashing later in C.

    Example
    -------
    >>> g = parse_graph_json('''{"nodes": [{"op": "null", "name": "x", "inputs": []}],
    ...   "arg_nodes": [0], "heads": [[0, 0, 0]], "node_row_ptr": [0, 1],
    ...   "attrs": {"dltype": ["list_str", ["float32"]], "shape": ["list_shape", [[2]]],
    ...             "storage_id": ["list_int", [0]]}}''')
    >>> g.nodes[0].name, g.entries[0].shape
    ('x', (2,))
    """
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise TVMError(f"graph JSON must be a string, got {type(text).__name__}")
    raw = read_json(text, "invalid graph JSON: the document")
    if not isinstance(raw, dict):
        raise _fail("the top level must be an object")
    for key in _REQUIRED_KEYS:
        if key not in raw:
            raise _fail(f"missing required key {key!r}")

    nodes = tuple(_parse_node(i, n) for i, n in enumerate(_list(raw["nodes"], "nodes")))
    raw_row_ptr = _list(raw["node_row_ptr"], "node_row_ptr")
    row_ptr = tuple(_int(v, "node_row_ptr item") for v in raw_row_ptr)
    if len(row_ptr) != len(nodes) + 1 or (row_ptr and row_ptr[0] != 0):
        raise _fail(
            f"node_row_ptr must have {len(nodes) + 1} items starting at 0, got {list(row_ptr)}"
        )
    for nid, node in enumerate(nodes):
        if row_ptr[nid + 1] - row_ptr[nid] != node.num_outputs:
            raise _fail(
                f"node_row_ptr is inconsistent at node {nid} ({node.name!r}): "
                f"{row_ptr[nid + 1] - row_ptr[nid]} entries but num_outputs={node.num_outputs}"
            )
        for i, (src, index) in enumerate(node.inputs):
            if index >= nodes[src].num_outputs:
                raise _fail(
                    f"node {node.name!r} input {i} uses output {index} of node {src} "
                    f"({nodes[src].name!r}), which has {nodes[src].num_outputs} outputs"
                )

    def node_id(value: Any, what: str) -> int:
        nid = _int(value, what)
        if nid >= len(nodes):
            raise _fail(f"{what} is {nid}, but the graph has {len(nodes)} nodes")
        return nid

    arg_nodes = tuple(node_id(v, "arg_nodes item") for v in _list(raw["arg_nodes"], "arg_nodes"))
    for nid in arg_nodes:
        if nodes[nid].op != "null":
            raise _fail(f"arg_nodes lists node {nid} ({nodes[nid].name!r}), which is not an input")
    heads = []
    for i, head in enumerate(_list(raw["heads"], "heads")):
        if not isinstance(head, list) or len(head) not in (2, 3):
            raise _fail(f"heads[{i}] must be [node_id, index, version]")
        nid = node_id(head[0], f"heads[{i}] node id")
        index = _int(head[1], f"heads[{i}] output index")
        if index >= nodes[nid].num_outputs:
            raise _fail(f"heads[{i}] uses output {index} of node {nid}, which has fewer outputs")
        heads.append((nid, index))

    entries = _parse_entries(raw["attrs"], row_ptr[-1])
    graph = Graph(nodes, arg_nodes, tuple(heads), row_ptr, entries)
    _check_nops(graph)
    return graph


def _parse_entries(attrs: Any, count: int) -> tuple[GraphEntry, ...]:
    if not isinstance(attrs, dict):
        raise _fail("attrs must be an object")
    known = {"dltype", "shape", "storage_id", "device_index", "device_id", "storage_scope"}
    for key, value in attrs.items():
        skippable = isinstance(value, list) and value and value[0] in ("list_int", "size_t")
        if key not in known and not skippable:
            raise _fail(f"cannot skip unknown graph attribute {key!r}")
    dltypes = _attr_list(attrs, "dltype", "list_str", count, True)
    shapes = _attr_list(attrs, "shape", "list_shape", count, True)
    storage_ids = _attr_list(attrs, "storage_id", "list_int", count, True)
    device_types = _attr_list(attrs, "device_index", "list_int", count, False)
    device_ids = _attr_list(attrs, "device_id", "list_int", count, False)
    entries = []
    for eid in range(count):
        try:
            dtype = DataType(dltypes[eid])
        except (TVMError, TypeError, ValueError) as err:
            raise _fail(f"entry {eid} has a bad dltype {dltypes[eid]!r}: {err}") from None
        shape = tuple(_int(d, f"entry {eid} shape dim") for d in _list(shapes[eid], "shape"))
        sid = _int(storage_ids[eid], f"entry {eid} storage_id")
        if sid >= count:
            raise _fail(f"entry {eid} storage_id {sid} is out of range (graph has {count} entries)")
        device_type = device_id = None
        if device_types is not None:
            device_type = _int(device_types[eid], f"entry {eid} device_index", minimum=1)
        if device_ids is not None:
            device_id = _int(device_ids[eid], f"entry {eid} device_id")
        entries.append(GraphEntry(dtype, shape, sid, device_type, device_id))
    return tuple(entries)


def _check_nops(graph: Graph) -> None:
    """A ``__nop`` (reshape) makes no call, so its outputs must alias its input's storage."""
    for nid, node in enumerate(graph.nodes):
        if node.op != "tvm_op" or node.func_name != _NOP:
            continue
        if not node.inputs:
            raise _fail(f"__nop node {node.name!r} needs an input")
        src = graph.entries[graph.entry_id(*node.inputs[0])]
        for index in range(node.num_outputs):
            out = graph.entries[graph.entry_id(nid, index)]
            if out.storage_id != src.storage_id or out.nbytes > src.nbytes:
                raise _fail(f"__nop node {node.name!r} must share its input's storage")


# ---- devices --------------------------------------------------------------------------------


def resolve_devices(device: Device | Sequence[Any]) -> list[Device]:
    """Normalise a device, a list of devices or a flat ``(type, id, type, id, ...)`` list."""
    if isinstance(device, Device):
        return [device]
    items = list(device)
    if not items:
        raise TVMError("the graph executor needs at least one device")
    if all(isinstance(d, Device) for d in items):
        return items
    if len(items) % 2 == 0 and all(isinstance(v, int) for v in items):
        return [Device(items[i], items[i + 1]) for i in range(0, len(items), 2)]
    raise TVMError(f"expected Device objects or (device_type, device_id) pairs, got {device!r}")


def _device_for(device_type: int | None, device_id: int | None,
                devices: list[Device]) -> Device:
    """The given device equal to ``(device_type, device_id)``; else TVM's rule: the first
    given device of that type, else the first device."""
    if device_type is not None:
        if device_id is not None and Device(device_type, device_id) in devices:
            return Device(device_type, device_id)
        for dev in devices:
            if dev.device_type == device_type:
                return dev
    return devices[0]


# ---- the executor ---------------------------------------------------------------------------


# The functions a GraphExecutor offers as a Module, by TVM's names.
_MODULE_FUNCTIONS = frozenset({
    "set_input", "set_input_zero_copy", "set_output_zero_copy", "get_input", "get_output",
    "get_num_inputs", "get_num_outputs", "get_input_index", "get_output_index",
    "get_input_info", "get_output_info", "run", "run_from_inputs", "load_params",
    "share_params",
})


@dataclass
class _OpExec:
    """What the executor keeps per kernel call (the record's arrays must stay alive)."""

    node_id: int
    name: str
    func_name: str
    input_eids: list[int]
    output_eids: list[int]
    address: int  # the kernel's C entry point
    resource_handle: int | None
    tensors: list[Any]  # the DLTensor copies the record points to
    keepalive: list[Any]


class GraphExecutor(Module):
    """A graph executor instance (TVM's ``GraphExecutor`` module).

    Parameters
    ----------
    graph_json : str
        The graph in TVM's graph executor JSON format.
    lib : Module
        The module whose functions implement the graph's ``func_name`` s.
    devices : Device or list of Device
        Devices; an entry goes to the device equal to its ``(device_index, device_id)``,
        else the first device of its type, else the first device.

    Example
    -------
    ``GraphExecutor(graph_json, lib, [cpu(0)])`` is what ``lib["default"](cpu(0))`` returns
    for a built model; wrap it in ``kiln.contrib.graph_executor.GraphModule`` to use it.
    """

    type_key = "GraphExecutor"

    def __init__(self, graph_json: str, lib: Module, devices: Device | Sequence[Any]) -> None:
        super().__init__()
        if not isinstance(lib, Module):
            raise TVMError(f"the graph executor needs a kernel Module, got {type(lib).__name__}")
        graph = parse_graph_json(graph_json)
        self.graph = graph
        self.graph_json = graph_json
        self.lib = lib
        self.devices = resolve_devices(devices)
        self._bound: dict[int, NDArray] = {}  # entry id -> zero-copy / shared array
        self._param_names: set[str] = set()
        self._failed = ctypes.c_int64(-1)
        self._input_index = {graph.nodes[nid].name: i for i, nid in enumerate(graph.arg_nodes)}
        self._output_names = [f"{graph.nodes[nid].name}:{index}" for nid, index in graph.heads]
        self._setup_storage()
        self._setup_op_execs()

    def _get_function(self, name: str) -> Callable[..., Any] | None:
        """TVM's executor functions by name (``module["run"]``); kiln calls the methods."""
        if name in _MODULE_FUNCTIONS:
            return getattr(self, name)
        return None

    # -- setup --------------------------------------------------------------------------------

    def _setup_storage(self) -> None:
        graph = self.graph
        pool_bytes: dict[int, int] = {}
        pool_device: dict[int, tuple[int | None, int | None]] = {}
        for entry in graph.entries:
            sid = entry.storage_id
            where = (entry.device_type, entry.device_id)
            if sid in pool_device and pool_device[sid] != where:
                raise _fail(
                    f"storage_id {sid} is used on devices (type, id) {pool_device[sid]} and "
                    f"{where}; a storage pool entry cannot span devices"
                )
            pool_device[sid] = where
            pool_bytes[sid] = max(pool_bytes.get(sid, 0), entry.nbytes)
        pool = {}
        for sid, nbytes in sorted(pool_bytes.items()):
            device = _device_for(*pool_device[sid], self.devices)
            try:
                pool[sid] = empty(((nbytes + 3) // 4,), "float32", device)
            except (MemoryError, ValueError, OverflowError) as err:
                raise TVMError(
                    f"cannot allocate storage_id {sid} ({nbytes} bytes) on {device}: {err}"
                ) from None
        entries = [
            pool[entry.storage_id]._create_view(entry.shape, str(entry.dtype))
            for entry in graph.entries
        ]
        self._pool = pool
        self._entries = entries

    def _setup_op_execs(self) -> None:
        graph = self.graph
        copy_address = c_loop().copy_address
        ops: list[_OpExec] = []
        uses: dict[int, list[Any]] = {}
        aliases: dict[int, list[int]] = {}
        for nid, node in enumerate(graph.nodes):
            if node.op == "null":
                continue
            input_eids = [graph.entry_id(src, index) for src, index in node.inputs]
            output_eids = [graph.entry_id(nid, i) for i in range(node.num_outputs)]
            if node.func_name == _NOP:
                aliases.setdefault(input_eids[0], []).extend(output_eids)
                continue
            keepalive: list[Any] = []
            if node.func_name == _COPY:
                self._check_copy(node, input_eids, output_eids)
                address, resource = copy_address, None
                if not (self._entries[input_eids[0]].device.is_cpu
                        and self._entries[output_eids[0]].device.is_cpu):
                    address = self._device_copy_function(input_eids[0], output_eids[0],
                                                         keepalive)
            else:
                func = self._find_kernel(node)
                keepalive.append(func)
                address, resource = func.c_address, func.resource_handle
            tensors = []
            for eid in input_eids + output_eids:
                tensor = self._arg_tensor(eid, node.flatten_data, keepalive)
                tensors.append(tensor)
                uses.setdefault(eid, []).append(tensor)
            ops.append(_OpExec(nid, node.name, node.func_name, input_eids, output_eids,
                               address, resource, tensors, keepalive))
        records = (OpRecord * max(len(ops), 1))()
        for record, op in zip(records, ops):
            n = len(op.tensors)
            values = (TVMValue * n)(*(TVMValue(v_handle=ctypes.addressof(t)) for t in op.tensors))
            codes = (ctypes.c_int * n)(*([TypeCode.DLTENSOR_HANDLE] * n))
            op.keepalive += [values, codes]
            record.fn = op.address
            record.resource_handle = op.resource_handle
            record.args = ctypes.addressof(values)
            record.type_codes = ctypes.addressof(codes)
            record.num_args = n
        self._ops = ops
        self._records = records
        self._records_address = ctypes.addressof(records)
        self._uses = uses  # entry id -> the op-argument DLTensors that reference it
        self._aliases = aliases  # entry id -> entries of __nop nodes reading it

    def _device_copy_function(self, src: int, dst: int, keepalive: list[Any]) -> int:
        """A packed C entry point copying entry ``src`` into ``dst`` through the device API
        of their devices (``NDArray.copyfrom``), for ``__copy`` nodes off the CPU."""

        def copy(args: Any, codes: Any, num_args: int, ret: Any, ret_code: Any,
                 resource: Any) -> int:
            try:
                self._array(dst).copyfrom(self._array(src))
            except Exception as err:  # the C loop reports it through the last error
                set_last_error(f"__copy: {err}")
                return -1
            return 0

        trampoline = KERNEL_PROTOTYPE(copy)
        keepalive.append(trampoline)
        return ctypes.cast(trampoline, ctypes.c_void_p).value

    def _find_kernel(self, node: GraphNode) -> Any:
        try:
            func = self.lib.get_function(node.func_name, query_imports=True)
        except AttributeError:
            raise TVMError(
                f"cannot find function {node.func_name!r} (graph node {node.name!r}) "
                f"in module {self.lib.type_key!r} or its imports"
            ) from None
        if not getattr(func, "c_address", None):
            raise TVMError(
                f"function {node.func_name!r} (graph node {node.name!r}) has no C entry point"
            )
        return func

    def _check_copy(self, node: GraphNode, input_eids: list[int], output_eids: list[int]) -> None:
        if len(input_eids) != 1 or len(output_eids) != 1:
            raise _fail(f"__copy node {node.name!r} must have one input and one output")
        src, dst = (self.graph.entries[e] for e in (input_eids[0], output_eids[0]))
        if src.nbytes != dst.nbytes:
            raise _fail(f"__copy node {node.name!r} copies {src.nbytes} bytes into {dst.nbytes}")

    def _arg_tensor(self, eid: int, flatten: bool, keepalive: list[Any]) -> DLTensor:
        """A private DLTensor copy of entry ``eid`` (1-D when the node flattens its data)."""
        tensor = DLTensor.from_buffer_copy(self._entries[eid].handle.contents)
        if flatten:
            shape = (ctypes.c_int64 * 1)(math.prod(self.graph.entries[eid].shape))
            keepalive.append(shape)
            tensor.ndim = 1
            tensor.shape = ctypes.cast(shape, type(tensor.shape))
        return tensor

    # -- inputs and outputs -------------------------------------------------------------------

    def get_num_inputs(self) -> int:
        """Number of graph inputs (``arg_nodes``: data inputs and params)."""
        return len(self.graph.arg_nodes)

    def get_num_outputs(self) -> int:
        return len(self.graph.heads)

    def get_input_index(self, name: str) -> int:
        """Position of input ``name`` among the graph inputs, or -1 (as TVM)."""
        return self._input_index.get(name, -1)

    def get_output_index(self, name: str) -> int:
        """Position of output ``"<node>:<i>"`` (or ``"<node>"`` for output 0), or -1."""
        for i, output_name in enumerate(self._output_names):
            if name in (output_name, output_name.removesuffix(":0")):
                return i
        return -1

    def _input_eid(self, key: int | str) -> int:
        if isinstance(key, str):
            index = self._input_index.get(key)
            if index is None:
                raise TVMError(f"Could not find '{key}' in graph's inputs")
        else:
            try:
                index = operator.index(key)
            except TypeError:
                raise TVMError(f"an input key is a name or an index, got {key!r}") from None
            if not 0 <= index < len(self.graph.arg_nodes):
                raise TVMError(
                    f"input index {index} is out of range: the graph has "
                    f"{len(self.graph.arg_nodes)} inputs"
                )
        return self.graph.entry_id(self.graph.arg_nodes[index])

    def _output_eid(self, index: int) -> int:
        try:
            index = operator.index(index)
        except TypeError:
            raise TVMError(f"an output index must be an int, got {index!r}") from None
        if not 0 <= index < len(self.graph.heads):
            raise TVMError(
                f"output index {index} is out of range: the graph has {len(self.graph.heads)} "
                "outputs"
            )
        return self.graph.entry_id(*self.graph.heads[index])

    def _array(self, eid: int) -> NDArray:
        """The array currently behind entry ``eid`` (a zero-copy binding or the pool view)."""
        bound = self._bound.get(eid)
        return self._entries[eid] if bound is None else bound

    def _describe(self, eid: int) -> str:
        entry = self.graph.entries[eid]
        return f"shape {entry.shape}, dtype {entry.dtype}"

    def set_input(self, key: int | str, value: Any) -> None:
        """Copy ``value`` (NDArray, NumPy array, list) into input ``key`` (name or index)."""
        eid = self._input_eid(key)
        try:
            self._array(eid).copyfrom(value)
        except TVMError as err:
            raise TVMError(f"set_input({key!r}): expected {self._describe(eid)}; {err}") from None

    def get_input(self, key: int | str, out: NDArray | None = None) -> NDArray:
        """The array of input ``key``; copied into ``out`` when given."""
        array = self._array(self._input_eid(key))
        return array if out is None else out.copyfrom(array)

    def get_output(self, index: int, out: NDArray | None = None) -> NDArray:
        """The array of output ``index`` (valid until the next run); copied into ``out``."""
        array = self._array(self._output_eid(index))
        return array if out is None else out.copyfrom(array)

    def get_input_info(self) -> dict[str, dict[str, Any]]:
        """``{"shape": {name: shape}, "dtype": {name: dtype}}`` of inputs that are not params."""
        shapes, dtypes = {}, {}
        for nid in self.graph.arg_nodes:
            name = self.graph.nodes[nid].name
            if name in self._param_names:
                continue
            entry = self.graph.entries[self.graph.entry_id(nid)]
            shapes[name], dtypes[name] = entry.shape, str(entry.dtype)
        return {"shape": shapes, "dtype": dtypes}

    def get_output_info(self) -> dict[str, dict[str, Any]]:
        """``{"shape": {node name: shape}, "dtype": {node name: dtype}}`` of the outputs."""
        shapes, dtypes = {}, {}
        for nid, index in self.graph.heads:
            name = self.graph.nodes[nid].name
            entry = self.graph.entries[self.graph.entry_id(nid, index)]
            shapes[name], dtypes[name] = entry.shape, str(entry.dtype)
        return {"shape": shapes, "dtype": dtypes}

    # -- zero copy ----------------------------------------------------------------------------

    def _check_bindable(self, eid: int, value: Any, what: str) -> None:
        entry = self.graph.entries[eid]
        if not isinstance(value, NDArray):
            raise TVMError(f"{what} needs an NDArray, got {type(value).__name__}")
        problems = []
        if value.device.is_cpu and value.data_ptr % _ALIGNMENT:  # device memory: a handle
            problems.append(f"data is not {_ALIGNMENT}-byte aligned")
        if tuple(value.shape) != entry.shape:
            problems.append(f"shape {tuple(value.shape)} != {entry.shape}")
        if value.dtype != str(entry.dtype):
            problems.append(f"dtype {value.dtype} != {entry.dtype}")
        if value.device != self._entries[eid].device:
            problems.append(f"device {value.device} != {self._entries[eid].device}")
        if not value.is_contiguous():
            problems.append("data is not contiguous")
        if problems:
            raise TVMError(f"{what}: " + "; ".join(problems))

    def _rebind(self, eid: int, value: NDArray) -> None:
        """Point every op argument reading or writing entry ``eid`` (and its __nop aliases)."""
        address = value.data_ptr
        offset = value.handle.contents.byte_offset  # nonzero only for a device-memory view
        for alias in [eid, *self._aliases.get(eid, ())]:
            self._bound[alias] = value if alias == eid else value._create_view(
                self.graph.entries[alias].shape, str(self.graph.entries[alias].dtype))
            for tensor in self._uses.get(alias, ()):
                tensor.data = address
                tensor.byte_offset = offset

    def set_input_zero_copy(self, key: int | str, value: NDArray) -> None:
        """Make input ``key`` use ``value``'s memory directly (no copy per run)."""
        eid = self._input_eid(key)
        self._check_bindable(eid, value, f"set_input_zero_copy({key!r})")
        self._rebind(eid, value)

    def set_output_zero_copy(self, index: int, value: NDArray) -> None:
        """Make output ``index`` be written straight into ``value``."""
        eid = self._output_eid(index)
        self._check_bindable(eid, value, f"set_output_zero_copy({index})")
        self._rebind(eid, value)

    # -- params -------------------------------------------------------------------------------

    def load_params(self, params_bytes: bytes | bytearray) -> None:
        """Copy the params in a params blob into the inputs of the same names."""
        for name, value in load_param_dict(bytes(params_bytes)).items():
            if name in self._input_index:
                self.set_input(name, value)
                self._param_names.add(name)

    def share_params(self, other: GraphExecutor, params_bytes: bytes | bytearray) -> None:
        """Use ``other``'s param arrays (named by the blob) instead of copies of them."""
        if not isinstance(other, GraphExecutor):
            raise TVMError(f"share_params needs a GraphExecutor, got {type(other).__name__}")
        for name in load_param_dict(bytes(params_bytes)):
            if name not in self._input_index:
                continue
            if name not in other._input_index:
                raise TVMError(f"share_params: the other executor has no input {name!r}")
            eid = self._input_eid(name)
            shared = other._array(other._input_eid(name))
            self._check_bindable(eid, shared, f"share_params({name!r})")
            self._rebind(eid, shared)
            self._param_names.add(name)

    # -- running ------------------------------------------------------------------------------

    def _raise_op_failure(self, rc: int) -> None:
        op = self._ops[self._failed.value]
        message = get_last_error() or f"returned {rc}"
        raise TVMError(
            f"graph executor: operator {op.name!r} (function {op.func_name!r}) failed: {message}"
        )

    def run(self) -> None:
        """Run every operator once, in graph order (one call into the C loop)."""
        rc = c_loop().run(self._records_address, 0, len(self._ops), ctypes.byref(self._failed))
        if rc:
            self._raise_op_failure(rc)

    def run_repeated(self, number: int) -> None:
        """Run the whole graph ``number`` times back to back in C (for benchmarking)."""
        try:
            count = operator.index(number)
        except TypeError:
            count = -1
        if isinstance(number, bool) or not 0 <= count < 1 << 63:
            raise TVMError(f"run_repeated: number must be an integer in [0, 2**63), got "
                           f"{number!r}")
        rc = c_loop().run_repeated(self._records_address, 0, len(self._ops), count,
                                    ctypes.byref(self._failed))
        if rc:
            self._raise_op_failure(rc)

    def _check_op_index(self, index: int) -> int:
        index = int(index)
        if not 0 <= index < len(self._ops):
            raise TVMError(f"operator index {index} is out of range ({len(self._ops)} operators)")
        return index

    def run_op(self, index: int) -> None:
        """Run operator ``index`` (position in :attr:`op_execs`) alone, for the debugger."""
        index = self._check_op_index(index)
        rc = c_loop().run(self._records_address, index, index + 1, ctypes.byref(self._failed))
        if rc:
            self._raise_op_failure(rc)

    def time_op(self, index: int, number: int = 1) -> float:
        """Mean seconds of operator ``index`` over ``number`` calls, measured in C."""
        index = self._check_op_index(index)
        seconds = ctypes.c_double()
        record = record_address(self._records, index)
        rc = c_loop().run_timed(record, 1, int(number), ctypes.byref(seconds),
                                 ctypes.byref(self._failed))
        if rc:
            self._failed.value = index
            self._raise_op_failure(rc)
        return seconds.value

    def time_ops(self, number: int = 1) -> list[float]:
        """Mean seconds per operator over ``number`` calls each, measured in C."""
        seconds = (ctypes.c_double * max(len(self._ops), 1))()
        rc = c_loop().run_timed(self._records_address, len(self._ops), int(number), seconds,
                                 ctypes.byref(self._failed))
        if rc:
            self._raise_op_failure(rc)
        return list(seconds[: len(self._ops)])

    def run_from_inputs(self, *inputs: Any) -> list[NDArray]:
        """Set inputs 0..n-1 from ``inputs``, run, and return copies of all outputs."""
        for i, value in enumerate(inputs):
            self.set_input(i, value)
        self.run()
        outputs = self.get_num_outputs()
        return [self.get_output(i).copyto(self.get_output(i).device) for i in range(outputs)]

    @property
    def op_execs(self) -> list[_OpExec]:
        """The kernel calls in run order (node id, name, function, entry ids)."""
        return list(self._ops)

    def entry_array(self, eid: int) -> NDArray:
        """The array behind node entry ``eid`` (any node output, not only graph outputs)."""
        if not 0 <= eid < len(self.graph.entries):
            raise TVMError(f"entry id {eid} is out of range ({len(self.graph.entries)} entries)")
        return self._array(eid)


def create(graph_json: str, lib: Module, *devices: Any) -> GraphExecutor:
    """Create a :class:`GraphExecutor` (the global ``tvm.graph_executor.create``).

    ``devices`` are Device objects, one list of them, or ``device_type, device_id`` pairs.
    """
    if not devices:
        devices = (cpu(0),)
    elif len(devices) == 1 and not isinstance(devices[0], int):
        devices = devices[0]
    return GraphExecutor(graph_json, lib, devices)


register_func("tvm.graph_executor.create", create, override=True)
# Every executor can run op by op (run_op / time_ops), so the debug flavour is the same one.
register_func("tvm.graph_executor_debug.create", create, override=True)
