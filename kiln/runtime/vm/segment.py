"""Fused segments: straight runs of VM kernel work executed as one C call list.

Entry points: :func:`find_segment` (analysis at VM creation), :class:`FusedSegment`
(``run(regs, allocators)``, the VM's super-instruction), :class:`SegmentPlan` (a segment's
call list over one storage block) and :class:`DirectFunction` (a whole function that is one
segment and a ``Ret``, run without a frame).

A segment is a run of ``LoadConsti``/``LoadConst``/``AllocStorage``/``AllocTensor``/
``AllocADT``/``InvokePacked``/``KillRegister`` whose tensors all view one storage at static
offsets and shapes. Its kernels' ``DLTensor`` arguments then depend only on the storage's
block, so the argument arrays are built once per pooled block (:class:`SegmentPlan`) and a run
only writes the input tensors' addresses and calls the graph executor's C loop. The bytecode
is unchanged: whatever a segment was not built for runs the original instructions.
"""

from __future__ import annotations

import ctypes
import sys
import weakref
from collections.abc import Sequence
from typing import Any

from kiln.runtime.container import ADT
from kiln.runtime.error import TVMError
from kiln.runtime.graph_executor import _c_loop, _OpRecord  # its C loop runs the call lists
from kiln.runtime.ndarray import NDArray as _NDArray
from kiln.runtime.vm import bytecode as bc
from kiln.runtime.vm.memory import Storage
from kiln.runtime.vm.packed_call import PackedCallSite

__all__ = ["FusedSegment", "SegmentPlan", "DirectFunction", "find_segment"]

_DLTENSOR_HANDLE = 7  # kTVMDLTensorHandle


# Opcodes a fused segment may contain: straight-line, static-shape kernel work.
_FUSIBLE = frozenset({bc.Opcode.LoadConsti, bc.Opcode.LoadConst, bc.Opcode.AllocStorage,
                      bc.Opcode.AllocTensor, bc.Opcode.AllocADT, bc.Opcode.InvokePacked,
                      bc.Opcode.KillRegister})

# Symbolic register values while a segment is analysed. A register the segment reads before
# writing it is an *input*: a tensor made outside, checked at run time.


class _Value:
    """A value known when the VM is built: a LoadConsti scalar or LoadConst tensor."""

    __slots__ = ("tensor", "int_value")

    def __init__(self, tensor: Any, int_value: int | None = None) -> None:
        self.tensor, self.int_value = tensor, int_value


class _View:
    """A tensor the segment allocates in its storage: index into ``FusedSegment.views``."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Input:
    """Input register number ``index`` of the segment (``FusedSegment.input_regs``)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Tuple:
    """An AllocADT of tensors (views, constants, inputs)."""

    __slots__ = ("tag", "fields")

    def __init__(self, tag: int, fields: list[Any]) -> None:
        self.tag, self.fields = tag, fields


_STORAGE = object()  # symbolic value of the register holding the segment's storage


class FusedSegment:
    """A run of LoadConsti/LoadConst/AllocStorage/AllocTensor/AllocADT/InvokePacked/
    KillRegister instructions ``[start, end)`` whose kernels run from one C call list.

    Every tensor it allocates views one storage (allocated in the segment or held by a
    register on entry) at a static offset and shape, so the kernels' ``DLTensor`` arguments
    depend only on the storage's block: a :class:`SegmentPlan` is built per block and kept
    on it (``block.plans``). Per run only the input registers' ``DLTensor`` addresses are
    written. Afterwards the registers hold what the instructions would have left: the
    storage, leased views for tensors still live, tuples of them, the scalar and constant
    tensors, and ``None`` for killed registers. Tensors allocated and killed inside never
    exist in Python.
    """

    __slots__ = ("start", "end", "alloc", "alloc_nbytes", "storage_reg", "views", "input_regs",
                 "kernels", "output_views", "out_values", "out_views", "out_storage",
                 "out_tuples")

    def __init__(self, start: int) -> None:
        self.start = self.end = start
        self.alloc: bc.AllocStorage | None = None  # the in-segment AllocStorage, if any
        self.alloc_nbytes = -1
        self.storage_reg = -1  # register of the storage (set on entry when alloc is None)
        self.views: list[tuple[int, tuple[int, ...], Any]] = []  # (offset, shape, dtype)
        self.input_regs: list[int] = []
        # (call site, flattened symbolic arguments) per kernel call
        self.kernels: list[tuple[PackedCallSite, list[Any]]] = []
        self.output_views: list[list[int]] = []  # per kernel: the views it writes
        # Registers on exit: (reg, value or None), (reg, view index), storage registers,
        # (reg, tag, symbolic fields).
        self.out_values: list[tuple[int, Any]] = []
        self.out_views: list[tuple[int, int]] = []
        self.out_storage: list[int] = []
        self.out_tuples: list[tuple[int, int, list[Any]]] = []

    def plan_for(self, storage: Any) -> SegmentPlan:
        """The call list for ``storage``'s block (built on first use, kept on the block)."""
        plans = storage._block.plans
        plan = plans.get(self)
        if plan is None:
            plan = plans[self] = SegmentPlan(self, storage)
        return plan

    def run(self, regs: list, allocators: list[Any], seconds: Any = None) -> bool:
        """Run the segment fused on the register file ``regs``; False (having changed
        nothing the instructions would not) when it must run unfused instead: an input is
        not a plain host tensor, the storage is not pooled host memory, a view does not fit,
        a kernel failed. ``seconds`` (a ctypes double array, one per kernel) asks for each
        kernel's time, measured in C (the profiler).
        """
        inputs = [regs[reg] for reg in self.input_regs]
        if self.alloc is not None:
            storage = self.new_storage(allocators)
        else:
            storage = regs[self.storage_reg]
            if type(storage) is not Storage or not storage._allocator.fusable:
                return False
        if storage is None:
            return False
        plan = self.launch(inputs, storage, seconds)
        if plan is None:
            return False
        for reg, value in self.out_values:
            regs[reg] = value
        for reg in self.out_storage:
            regs[reg] = storage
        specs = plan.specs
        for reg, index in self.out_views:
            regs[reg] = specs[index].lease(storage)
        for reg, tag, fields in self.out_tuples:
            regs[reg] = ADT(tag, [_tuple_field(f, inputs, specs, storage) for f in fields])
        return True

    def output_shapes(self, kernel: int) -> list[tuple[int, ...]]:
        """Shapes of the tensors kernel number ``kernel`` of the segment writes."""
        return [self.views[index][1] for index in self.output_views[kernel]]

    def new_storage(self, allocators: list[Any]) -> Storage | None:
        """The segment's own AllocStorage from its pooled host allocator, or None when the
        allocator is not one (naive: a fresh block per run; or device memory) or the memory
        cannot be had (the unfused AllocStorage then raises, naming its instruction)."""
        alloc = self.alloc
        allocator = allocators[alloc.device_index]
        if not allocator.fusable:
            return None
        try:
            return allocator.alloc(self.alloc_nbytes, alloc.alignment)
        except TVMError:
            return None

    def launch(self, inputs: list[Any], storage: Storage,
               seconds: Any = None) -> SegmentPlan | None:
        """Run the kernels over ``storage`` on ``inputs``; the plan used, or None if an input
        is not a plain host tensor, a view does not fit, or a kernel failed. ``seconds``: as
        in :meth:`run`."""
        plan = storage._block.plans.get(self)
        if plan is None:
            try:
                plan = self.plan_for(storage)
            except TVMError:  # a view does not fit this storage: the unfused path says so
                return None
        values = plan.values
        for tensor, slots in zip(inputs, plan.input_slots):
            if type(tensor) is not _NDArray:
                return None
            dltensor = tensor._dltensor
            if dltensor is None:
                tensor._build_dltensor()
                dltensor = tensor._dltensor
            address = ctypes.addressof(dltensor)
            for slot in slots:
                values[slot] = address
        if seconds is None:
            rc = _c_loop().run(plan.address, 0, plan.count, _FAILED_OP_REF)
        else:
            rc = _c_loop().run_timed(plan.address, plan.count, 1, seconds, _FAILED_OP_REF)
        if rc != 0:
            return None  # the unfused run raises with the failing instruction's context
        return plan


_FAILED_OP_REF = ctypes.byref(ctypes.c_int64(-1))  # where the C loop names a failing call


class DirectFunction:
    """A function whose whole body is one fused segment that allocates its storage, then a
    ``Ret`` of a tensor or tuple of tensors the segment made (a static model's ``main``).

    ``VirtualMachine.invoke`` runs it straight from the arguments: no frame, no register
    file, no instruction dispatch. It is also handed the VM's previous result (which the VM
    has just let go of): when that is this function's last result and nothing else holds it,
    the run computes into the same block and returns the same NDArray object, so a run
    allocates nothing. "Nothing else holds it" is decided by CPython reference counts (as
    NumPy's ``resize`` decides whether an array is shared): every path to the block's memory
    from Python goes through a result NDArray (or a tuple result's field tuple), its NumPy
    array (views of which reference it) or that array's buffer object, so if none of their
    counts is above what they were when the result was made, nobody can observe the block.
    Otherwise the run takes a block from the pool, as the instructions would. Only a weak
    reference to the result is kept, so memory goes back to the pool exactly when it would
    without this path.
    """

    __slots__ = ("segment", "result_tag", "result_views", "last", "baseline")

    def __init__(self, segment: FusedSegment, result_tag: int | None,
                 result_views: list[int]) -> None:
        self.segment = segment
        self.result_tag = result_tag  # None: a single tensor; else the tuple's ADT tag
        self.result_views = result_views  # the segment's view index of each result tensor
        self.last: Any = None  # weak reference to the last result made
        self.baseline: list[int] = []  # its reference counts then (see _holders)

    @classmethod
    def of(cls, instructions: Sequence[bc.Instruction], segment: FusedSegment,
           arity: int) -> DirectFunction | None:
        """The direct form of a function whose code starts with ``segment``, or None."""
        if (segment.start != 0 or segment.alloc is None or segment.end >= len(instructions)
                or any(reg >= arity for reg in segment.input_regs)):
            return None
        ret = instructions[segment.end]
        if not isinstance(ret, bc.Ret):
            return None
        views = dict(segment.out_views)
        if ret.result in views:
            return cls(segment, None, [views[ret.result]])
        for reg, tag, fields in segment.out_tuples:
            if reg == ret.result and fields and all(isinstance(f, _View) for f in fields):
                return cls(segment, tag, [f.index for f in fields])
        return None

    def run(self, args: list[Any], allocators: list[Any], previous: Any) -> Any:
        """The function's result on its arguments ``args``, or None when the VM must run the
        bytecode instead (as :meth:`FusedSegment.run` returns False). ``previous`` is the
        VM's last result, no longer referenced by the VM itself."""
        # Argument i lives in register i; the segment numbers its inputs in the order its
        # kernels first read them, which need not be the parameters' order.
        inputs = [args[reg] for reg in self.segment.input_regs]
        reuse = (previous is not None and self.last is not None and self.last() is previous
                 and self._holders(previous) == self.baseline)
        if reuse:
            first = previous if self.result_tag is None else previous.fields[0]
            storage = first._np.base.storage
        else:
            storage = self.segment.new_storage(allocators)
            if storage is None:
                return None
        plan = self.segment.launch(inputs, storage)
        if plan is None:
            return None
        if reuse:
            return previous
        leases = [plan.specs[index].lease(storage) for index in self.result_views]
        result = leases[0] if self.result_tag is None else ADT(self.result_tag, leases)
        del leases  # the counts below must see only what the check in a later run sees
        self.last = weakref.ref(result)
        self.baseline = self._baseline(result)
        return result

    def _baseline(self, previous: Any) -> list[int]:
        """``_holders(previous)`` through the same frames as the check in :meth:`run`: the
        caller's local ``result`` stands for ``VirtualMachine._call``'s local ``previous``,
        this parameter for :meth:`run`'s. Each reference is then made the same way in both
        (a local, a call argument, a parameter), so the counts agree on interpreters whose
        arguments and parameters borrow references (CPython 3.14) as on those where they
        count; a stand-in local here would count where the borrowed parameter does not,
        and a user's one reference could then hide in its place."""
        return self._holders(previous)

    def _holders(self, result: Any) -> list[int]:
        """Reference counts of ``result``, of a tuple's field tuple (what ``out.fields``,
        ``iter(out)`` and ``copy.copy(out)`` keep), and of each of its tensors, their NumPy
        arrays and the arrays' buffer objects."""
        tensors = [result] if self.result_tag is None else result.fields
        counts = [sys.getrefcount(result), sys.getrefcount(tensors)]
        for tensor in tensors:
            array = tensor._np
            counts += (sys.getrefcount(tensor), sys.getrefcount(array),
                       sys.getrefcount(array.base))
        return counts


def _tuple_field(field: Any, inputs: list[Any], specs: list[Any], storage: Any) -> Any:
    """The run-time value of one symbolic tuple field."""
    if isinstance(field, _View):
        return specs[field.index].lease(storage)
    if isinstance(field, _Input):
        return inputs[field.index]
    return field.tensor


def find_segment(instructions: Sequence[bc.Instruction], start: int, sites: dict[int, Any],
                 scalar: Any, constant: Any, dtype_of: Any) -> FusedSegment | None:
    """The longest fusable segment starting at ``start`` (at least one kernel), or None.

    ``sites`` maps a pc to its InvokePacked call site; ``scalar(value)`` gives the VM's
    LoadConsti tensor, ``constant(instr)`` a LoadConst tensor, ``dtype_of(fields)`` a DataType.
    """
    seg = FusedSegment(start)
    sym: dict[int, Any] = {}
    inputs: dict[int, _Input] = {}

    def operand(reg: int) -> Any:
        """A tensor operand: its symbolic value, the register number for an input, or None."""
        if reg not in sym:
            return inputs.get(reg, reg)
        value = sym[reg]
        if isinstance(value, _View | _Tuple) or (isinstance(value, _Value)
                                                 and value.int_value is None):
            return value
        return None

    def commit(value: Any) -> Any:
        """Record an accepted operand; a register number becomes (or is) an input."""
        if not isinstance(value, int):
            return value
        if value not in inputs:
            inputs[value] = _Input(len(seg.input_regs))
            seg.input_regs.append(value)
        return inputs[value]

    pc = start
    while pc < len(instructions):
        instr = instructions[pc]
        op = instr.opcode
        if op not in _FUSIBLE:
            break
        if op == bc.Opcode.LoadConsti:
            sym[instr.dst] = _Value(scalar(instr.val), instr.val)
        elif op == bc.Opcode.LoadConst:
            tensor = constant(instr)
            if type(tensor) is not _NDArray:  # device memory: kernels here read host memory
                break
            sym[instr.dst] = _Value(tensor)
        elif op == bc.Opcode.KillRegister:
            sym[instr.dst] = None
        elif op == bc.Opcode.AllocStorage:
            size = sym.get(instr.allocation_size)
            if (seg.alloc is not None or seg.storage_reg >= 0 or instr.shape
                    or not isinstance(size, _Value) or size.int_value is None):
                break
            seg.alloc, seg.alloc_nbytes = instr, size.int_value
            sym[instr.dst] = _STORAGE
        elif op == bc.Opcode.AllocTensor:
            offset = sym.get(instr.offset)
            if not isinstance(offset, _Value) or offset.int_value is None or offset.int_value < 0:
                break
            if instr.storage not in sym and seg.alloc is None and seg.storage_reg < 0:
                seg.storage_reg = instr.storage  # the storage comes from a register on entry
                sym[instr.storage] = _STORAGE
            elif sym.get(instr.storage) is not _STORAGE:
                break
            dtype = dtype_of(instr.dtype)
            nbytes = dtype.itemsize
            for dim in instr.shape:
                nbytes *= dim
            if seg.alloc is not None and offset.int_value + nbytes > seg.alloc_nbytes:
                break  # the unfused AllocTensor raises the error
            sym[instr.dst] = _View(len(seg.views))
            seg.views.append((offset.int_value, tuple(instr.shape), dtype))
        elif op == bc.Opcode.AllocADT:
            fields = [operand(reg) for reg in instr.datatype_fields]
            if any(f is None or isinstance(f, _Tuple) for f in fields):
                break
            sym[instr.dst] = _Tuple(instr.tag, [commit(f) for f in fields])
        else:  # InvokePacked
            regs = [operand(reg) for reg in instr.args]
            if _site_unfusable(sites[pc], regs, instr.output_size):
                break
            args = []
            for value in regs:
                args.extend(value.fields if isinstance(value, _Tuple) else [value])
            args = [commit(a) for a in args]
            last = args[-1]
            if not (instr.output_size == 1 and 0 in seg.views[last.index][1]):
                seg.kernels.append((sites[pc], args))  # (an empty output: no call, as TVM)
                outputs = regs[len(regs) - instr.output_size:]
                seg.output_views.append([f.index for out in outputs
                                         for f in (out.fields if isinstance(out, _Tuple)
                                                   else [out])])
        pc += 1
    if not seg.kernels:
        return None
    seg.end = pc
    read_later = _registers_read_outside(instructions, start, pc)
    for reg, value in sym.items():
        if read_later is not None and reg not in read_later and reg not in inputs:
            value = None  # nothing reads it again: no need to build it (a killed register)
        if value is _STORAGE:
            seg.out_storage.append(reg)
        elif isinstance(value, _View):
            seg.out_views.append((reg, value.index))
        elif isinstance(value, _Tuple):
            seg.out_tuples.append((reg, value.tag, value.fields))
        else:
            seg.out_values.append((reg, None if value is None else value.tensor))
    return seg


def _registers_read_outside(instructions: Sequence[bc.Instruction], start: int,
                            end: int) -> set[int] | None:
    """Registers read by an instruction outside ``[start, end)``; None if a jump lands
    strictly inside the range (then instructions inside may read anything left there)."""
    read: set[int] = set()
    for pc, instr in enumerate(instructions):
        targets = ()
        if isinstance(instr, bc.If):
            targets = (pc + instr.true_offset, pc + instr.false_offset)
        elif isinstance(instr, bc.Goto):
            targets = (pc + instr.pc_offset,)
        if any(start < target < end for target in targets):
            return None
        if start <= pc < end:
            continue
        read.update(getattr(instr, name) for name in instr._reg_fields if name != "dst")
        for name in instr._reg_list_fields:
            read.update(getattr(instr, name))
    return read


def _site_unfusable(site: PackedCallSite, regs: list[Any], output_size: int) -> bool:
    """Whether an InvokePacked cannot join a segment: a Python kernel, a non-tensor operand,
    or an output that is not a tensor (or tuple of tensors) the segment allocated."""
    if site.kernel is None or any(r is None for r in regs) or output_size < 1:
        return True
    for out in regs[len(regs) - output_size:]:
        fields = out.fields if isinstance(out, _Tuple) else [out]
        if not all(isinstance(f, _View) for f in fields):
            return True
    return False


class SegmentPlan:
    """A segment's kernel call list over one block: ``KilnGraphOp`` records (run by the graph
    executor's C loop), their argument values and type codes, and the input slots to fill."""

    __slots__ = ("specs", "values", "codes", "records", "address", "count", "input_slots")

    def __init__(self, seg: FusedSegment, storage: Any) -> None:
        self.specs = [storage.view_spec(offset, shape, dtype)
                      for offset, shape, dtype in seg.views]
        total = max(sum(len(args) for _, args in seg.kernels), 1)
        self.values = values = (ctypes.c_void_p * total)()
        self.codes = (ctypes.c_int * total)(*([_DLTENSOR_HANDLE] * total))
        self.records = (_OpRecord * len(seg.kernels))()
        self.address = ctypes.addressof(self.records)
        self.count = len(seg.kernels)
        self.input_slots: list[list[int]] = [[] for _ in seg.input_regs]
        value_size, code_size = ctypes.sizeof(ctypes.c_void_p), ctypes.sizeof(ctypes.c_int)
        pos = 0
        for record, (site, args) in zip(self.records, seg.kernels):
            record.fn = site.func.c_address
            record.args = ctypes.addressof(values) + pos * value_size
            record.type_codes = ctypes.addressof(self.codes) + pos * code_size
            record.num_args = len(args)
            record.resource_handle = site.resource
            for arg in args:
                if isinstance(arg, _View):
                    values[pos] = ctypes.addressof(self.specs[arg.index].dltensor)
                elif isinstance(arg, _Value):
                    values[pos] = ctypes.addressof(arg.tensor.handle.contents)
                else:
                    self.input_slots[arg.index].append(pos)
                pos += 1
