"""AOT executor codegen, planning half: a fused ``main`` -> the call list and the pools.

Entry points: :func:`plan_aot` -> :class:`AotPlan`; :class:`TensorSpec`, :class:`Ref`.

TVM's ``AOTExecutorCodegen`` lowers ``main`` to a TIR PrimFunc ``tvmgen_<mod>___tvm_main__``
that calls every fused kernel in order. kiln walks the same node list the graph codegen
builds (:func:`~kiln.relay.backend.graph_executor_codegen.build_nodes`) and records, per
kernel call, where each argument lives (:class:`Ref`):

* ``input``/``output`` -- the caller's buffers (a kernel whose result is a model output
  writes straight into the caller's output buffer);
* ``pool`` -- an intermediate at a compile-time offset of the workspace pool, placed by
  USMP (:mod:`kiln.relay.backend.aot.usmp`, ``tir.usmp.algorithm``);
* ``const`` -- a constant at an offset of the constant pool (``link-params``).

Reshape-only groups (``__nop``) alias their input; an output that is a model input, a
constant or another output is filled by a byte copy at the end of ``main``. With
``tir.usmp.use_workspace_io`` the inputs and outputs are pool buffers too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.relay.backend.aot.usmp import BufferInfo, PoolAllocation, align_up, plan_pool
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError

__all__ = ["plan_aot", "AotPlan", "TensorSpec", "Ref", "sanitize_name"]


def sanitize_name(name: str) -> str:
    """TVM's ``runtime::SanitizeName``: every character that is not alphanumeric becomes
    ``_`` (so ``input.1`` is the C identifier ``input_1``)."""
    return re.sub(r"[^0-9A-Za-z]", "_", name)


@dataclass(frozen=True)
class TensorSpec:
    """A main-function input or output: name, shape, dtype and size in bytes."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        dtype = DataType(self.dtype)
        return math.prod(self.shape) * ((dtype.bits * dtype.lanes + 7) // 8)


@dataclass(frozen=True)
class Ref:
    """Where a kernel argument lives: ``kind`` is input/output/pool/const, ``index`` the
    input/output position or the byte offset in the pool."""

    kind: str
    index: int
    dtype: str
    pool: int = 0  # which workspace pool (kind "pool")


@dataclass
class AotCall:
    """One kernel call of main: the kernel and its arguments (inputs then outputs)."""

    kernel: Any  # LoweredFunc
    args: list[Ref]
    source: str  # the node name, for the comment in the generated C
    scratch: Ref | None = None  # the kernel's scratch block in the pool (bare-metal dialect)


@dataclass
class AotPlan:
    """Everything the emitter needs to write ``__tvm_main__``, the entry point and header."""

    mod_name: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    calls: list[AotCall]
    copies: list[tuple[Ref, Ref, int]]  # (source, destination output, bytes) after the calls
    constants: list[tuple[str, Any, int]]  # (name, NDArray, byte offset in the const pool)
    constant_pool_size: int
    workspace: PoolAllocation
    buffers: list[BufferInfo] = field(default_factory=list)
    # use_workspace_io: I/O tensor name -> (workspace pool index, byte offset)
    io_offsets: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        return f"tvmgen_{self.mod_name}"


def _entry_spec(node: Any, index: int, name: str) -> TensorSpec:
    ty = node.types[index]
    return TensorSpec(name, tuple(int(d) for d in ty.concrete_shape), str(ty.dtype))


def _unique_names(names: list[str], what: str) -> None:
    seen: dict[str, str] = {}
    for name in names:
        c_name = sanitize_name(name)
        if c_name in seen:
            raise TVMError(f"AOT: {what} {seen[c_name]!r} and {name!r} have the same C name "
                           f"{c_name!r}; rename one of them")
        seen[c_name] = name


def plan_aot(nodes: list[Any], heads: list[tuple[int, int]], num_params: int,
             params: dict[str, Any], kernels: dict[str, Any], mod_name: str, *,
             link_params: bool = True,
             algorithm: str = "greedy_by_size", workspace_alignment: int = 16,
             constant_alignment: int = 16, use_workspace_io: bool = False,
             scratch: dict[str, int] | None = None,
             pool_limits: Sequence[int | None] = (None,),
             output_names: Sequence[str] | None = None) -> AotPlan:
    """Plan the AOT main of a graph node list (from ``build_nodes``, whose first
    ``num_params`` nodes are ``main``'s parameters); ``params`` holds the constants' values by
    node name (with ``link_params`` False they are inputs the caller sets instead),
    ``kernels`` the LoweredFuncs by kernel name, ``scratch``
    the bytes of scratch a kernel takes from the pool while it runs (by kernel name),
    ``pool_limits`` the size limit (or None) of each workspace pool, filled in order,
    ``output_names`` the outputs' names (``main``'s ``output_tensor_names``; by default
    ``output``, or ``output0, output1, ...``)."""
    scratch = scratch or {}
    inputs: list[TensorSpec] = []
    constants: list[tuple[str, Any, int]] = []
    const_offset = 0
    root: dict[tuple[int, int], tuple[int, int]] = {}  # entry -> entry owning its storage
    kind_of: dict[tuple[int, int], tuple[str, int]] = {}  # root entry -> (kind, index)
    producer: dict[tuple[int, int], int] = {}  # root entry -> call index
    kernel_nodes: list[int] = []
    for nid, node in enumerate(nodes):
        if node.op == "null":
            entry = (nid, 0)
            root[entry] = entry
            if nid < num_params or not link_params:
                kind_of[entry] = ("input", len(inputs))
                inputs.append(_entry_spec(node, 0, node.name))
            else:
                const_offset = align_up(const_offset, constant_alignment)
                kind_of[entry] = ("const", len(constants))
                constants.append((f"fused_constant_{len(constants)}", node, const_offset))
                const_offset += _entry_spec(node, 0, node.name).nbytes
            continue
        func_name = node.attrs.get("func_name")
        if func_name == "__copy":
            raise TVMError("the AOT executor runs on one device; this program copies between "
                           "devices (device_copy). Use the graph executor or the VM for "
                           "heterogeneous execution")
        if func_name == "__nop":
            root[(nid, 0)] = root[node.inputs[0]]
            continue
        for i in range(len(node.types)):
            root[(nid, i)] = (nid, i)
            kind_of[(nid, i)] = ("buffer", 0)
            producer[(nid, i)] = len(kernel_nodes)
        kernel_nodes.append(nid)

    # outputs: a kernel result goes straight into the caller's buffer, anything else is copied
    if output_names is None:
        output_names = ["output"] if len(heads) == 1 else [f"output{k}" for k in
                                                          range(len(heads))]
    if len(output_names) != len(heads):
        raise TVMError(f"AOT: output_tensor_names has {len(output_names)} names for "
                       f"{len(heads)} outputs")
    outputs = [_entry_spec(nodes[nid], idx, output_names[k])
               for k, (nid, idx) in enumerate(heads)]
    copies_from: list[tuple[tuple[int, int], int]] = []
    for k, head in enumerate(heads):
        owner = root[head]
        if kind_of[owner][0] == "buffer":
            kind_of[owner] = ("output", k)
        else:
            copies_from.append((owner, k))

    # lifetimes of the kernel-made buffers that stay in the workspace
    last_use = dict(producer)
    for call, nid in enumerate(kernel_nodes):
        for entry in nodes[nid].inputs:
            owner = root[entry]
            if owner in last_use:
                last_use[owner] = max(last_use[owner], call)
    end = len(kernel_nodes)
    for owner, _ in copies_from:
        if owner in last_use:
            last_use[owner] = end
    buffers = []
    names: dict[tuple[int, int], str] = {}
    for owner, first in producer.items():
        if kind_of[owner][0] != "buffer":
            continue
        names[owner] = f"sid_{len(names) + 1}"
        buffers.append(BufferInfo(names[owner], _entry_spec(nodes[owner[0]], owner[1], "")
                                  .nbytes, first, last_use[owner]))
    for call, nid in enumerate(kernel_nodes):
        size = scratch.get(nodes[nid].attrs["func_name"], 0)
        if size:
            buffers.append(BufferInfo(f"scratch_{call}", size, call, call))
    if use_workspace_io:
        # inputs live from before the first call to their last read, outputs from their
        # write to after the last call
        for k, spec in enumerate(inputs):
            owner = next(e for e, kind in kind_of.items() if kind == ("input", k))
            last = max((c for c, nid in enumerate(kernel_nodes)
                        for e in nodes[nid].inputs if root[e] == owner), default=-1)
            if any(o == owner for o, _ in copies_from):
                last = end
            buffers.append(BufferInfo(f"input:{spec.name}", spec.nbytes, -1, last))
        for k, spec in enumerate(outputs):
            writer = next((producer[e] for e, kind in kind_of.items()
                           if kind == ("output", k)), end)
            buffers.append(BufferInfo(f"output:{spec.name}", spec.nbytes, writer, end + 1))
    workspace = plan_pool(buffers, algorithm, workspace_alignment, pool_limits)

    def pool_ref(name: str, dtype: str) -> Ref:
        return Ref("pool", workspace.offsets[name], dtype, workspace.pool_of[name])

    def ref(entry: tuple[int, int]) -> Ref:
        owner = root[entry]
        dtype = str(nodes[entry[0]].types[entry[1]].dtype)
        kind, index = kind_of[owner]
        if kind == "buffer":
            return pool_ref(names[owner], dtype)
        if kind == "const":
            return Ref("const", constants[index][2], dtype)
        if use_workspace_io:
            spec = inputs[index] if kind == "input" else outputs[index]
            return pool_ref(f"{kind}:{spec.name}", dtype)
        return Ref(kind, index, dtype)

    calls = []
    for nid in kernel_nodes:
        node = nodes[nid]
        args = [ref(e) for e in node.inputs] + [ref((nid, i)) for i in range(len(node.types))]
        kernel = kernels[node.attrs["func_name"]]
        if kernel.num_inputs != len(node.inputs) or kernel.num_outputs != len(node.types):
            raise TVMError(f"AOT: kernel {kernel.name} takes {kernel.num_inputs} inputs and "
                           f"{kernel.num_outputs} outputs, the call passes {len(node.inputs)} "
                           f"and {len(node.types)}")
        block = None
        if scratch.get(kernel.name):
            block = pool_ref(f"scratch_{len(calls)}", "uint8")
        calls.append(AotCall(kernel, args, node.name, block))
    out_ref = (lambda k: pool_ref(f"output:{outputs[k].name}", outputs[k].dtype)) \
        if use_workspace_io else (lambda k: Ref("output", k, outputs[k].dtype))
    copies = [(ref(owner), out_ref(k), outputs[k].nbytes) for owner, k in copies_from]
    _unique_names([s.name for s in inputs], "inputs")
    _unique_names([s.name for s in outputs], "outputs")
    const_values = [(name, params[node.name], off) for name, node, off in constants]
    io_offsets = {}
    if use_workspace_io:
        for kind, specs in (("input", inputs), ("output", outputs)):
            for spec in specs:
                key = f"{kind}:{spec.name}"
                io_offsets[spec.name] = (workspace.pool_of[key], workspace.offsets[key])
    return AotPlan(mod_name, inputs, outputs, calls, copies, const_values, const_offset,
                   workspace, buffers, io_offsets)


def constant_bytes(value: Any) -> bytes:
    """The raw bytes of a constant (an NDArray or NumPy array), C order."""
    array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
    return np.ascontiguousarray(array).tobytes()
