"""Fused segments: the VM's super-instruction, straight kernel work run as one C call list.

Entry points: :func:`find_segments` (the VM compiler's last step: which instruction ranges of
a function are super-instructions), :func:`check_segments` (the Executable's validation of
those ranges), :class:`FusedSegment` (a range bound to a VM: ``run(regs, allocators)``),
:class:`SegmentPlan` (a segment's call list over one storage block), :class:`DirectFunction`
(a whole function that is one segment and a ``Ret``, run without a frame) and
:class:`SegmentError`.

A segment is a range ``[start, end)`` of ``LoadConsti``/``LoadConst``/``AllocStorage``/
``AllocTensor``/``AllocADT``/``InvokePacked``/``KillRegister`` whose tensors all view one
storage at static offsets and shapes, and whose kernels are C functions. The compiler records
the ranges in ``VMFunction.segments`` (serialized with the function, validated by the loader);
the instructions inside stay ordinary bytecode, so ``Executable.bytecode`` still lists them and
the profiler can time them one by one. Because the kernels' ``DLTensor`` arguments then depend
only on the storage's block, the argument arrays are built once per pooled block
(:class:`SegmentPlan`, run by :mod:`kiln.runtime.call_list`) and a run only writes the input
tensors' addresses and makes one C call.

Before it touches anything a run checks its operands: when an input register holds something
other than a host tensor (a tuple passed to a kernel, a device array) or the storage taken
from a register is not pooled host memory, the VM runs the range's instructions instead. A
failing kernel or allocation raises :class:`SegmentError` naming the instruction's pc.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

from kiln.runtime.call_list import OpRecord, c_loop
from kiln.runtime.container import ADT
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.runtime.ndarray import NDArray as _NDArray
from kiln.runtime.packed_func import get_last_error
from kiln.runtime.vm import bytecode as bc
from kiln.runtime.vm.memory import Storage
from kiln.runtime.vm.packed_call import PackedCallSite

__all__ = ["FusedSegment", "SegmentPlan", "DirectFunction", "SegmentError", "find_segments",
           "check_segments"]

_DLTENSOR_HANDLE = 7  # kTVMDLTensorHandle

# Opcodes a fused segment may contain: straight-line, static-shape kernel work.
_FUSIBLE = frozenset({bc.Opcode.LoadConsti, bc.Opcode.LoadConst, bc.Opcode.AllocStorage,
                      bc.Opcode.AllocTensor, bc.Opcode.AllocADT, bc.Opcode.InvokePacked,
                      bc.Opcode.KillRegister})


class SegmentError(TVMError):
    """A kernel or the storage allocation of a fused segment failed at instruction ``pc``."""

    def __init__(self, message: str, pc: int = -1) -> None:
        super().__init__(message)
        self.pc = pc


# Symbolic register values while a segment is analysed. A register the segment reads before
# writing it is an *input*: a tensor made outside, checked at run time.


class _Value:
    """A LoadConsti scalar (``int_value``) or LoadConst tensor (``const``: its instruction);
    ``tensor`` is the VM's tensor for it once the segment is bound."""

    __slots__ = ("int_value", "const", "tensor")

    def __init__(self, int_value: int | None = None, const: bc.LoadConst | None = None) -> None:
        self.int_value, self.const, self.tensor = int_value, const, None


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


_DTYPES: dict[tuple[int, int, int], DataType] = {}


def _dtype_of(fields: tuple[int, int, int]) -> DataType:
    dtype = _DTYPES.get(fields)
    if dtype is None:
        dtype = _DTYPES[fields] = DataType.from_fields(*fields)
    return dtype


class FusedSegment:
    """The instructions ``[start, end)`` of a function run as one C call list.

    Every tensor it allocates views one storage (allocated in the segment or held by a
    register on entry) at a static offset and shape, so the kernels' ``DLTensor`` arguments
    depend only on the storage's block: a :class:`SegmentPlan` is built per block and kept on
    it (``storage.plans``). Per run only the input registers' ``DLTensor`` addresses are
    written. Afterwards the registers hold what the instructions would have left: the
    storage, leased views for tensors still live, tuples of them, the scalar and constant
    tensors, and ``None`` for killed registers. Tensors allocated and killed inside never
    exist in Python.
    """

    __slots__ = ("start", "end", "alloc", "alloc_pc", "alloc_nbytes", "storage_reg", "views",
                 "input_regs", "kernels", "kernel_pcs", "output_views", "out_values",
                 "out_views", "out_storage", "out_tuples", "failed")

    def __init__(self, start: int) -> None:
        self.start = self.end = start
        self.alloc: bc.AllocStorage | None = None  # the in-segment AllocStorage, if any
        self.alloc_pc = -1
        self.alloc_nbytes = -1
        self.storage_reg = -1  # register of the storage (set on entry when alloc is None)
        self.views: list[tuple[int, tuple[int, ...], Any]] = []  # (offset, shape, dtype)
        self.input_regs: list[int] = []
        # (call site, flattened symbolic arguments) per kernel call; the site is the
        # InvokePacked instruction until the segment is bound to a VM.
        self.kernels: list[tuple[Any, list[Any]]] = []
        self.kernel_pcs: list[int] = []
        self.output_views: list[list[int]] = []  # per kernel: the views it writes
        # Registers on exit: (reg, value or None), (reg, view index), storage registers,
        # (reg, tag, symbolic fields).
        self.out_values: list[tuple[int, Any]] = []
        self.out_views: list[tuple[int, int]] = []
        self.out_storage: list[int] = []
        self.out_tuples: list[tuple[int, int, list[Any]]] = []
        self.failed = ctypes.c_int64(-1)  # where the C loop names a failing call

    @classmethod
    def bind(cls, instructions: Sequence[bc.Instruction], start: int, end: int,
             sites: dict[int, PackedCallSite], scalar: Callable[[int], Any],
             constant: Callable[[bc.LoadConst], Any]) -> FusedSegment:
        """The recorded segment ``[start, end)`` bound to a VM's kernels and tensors.

        ``sites`` maps a pc to its InvokePacked call site, ``scalar(value)`` gives the VM's
        LoadConsti tensor and ``constant(instr)`` a LoadConst tensor. The range was checked
        when the Executable was made (:func:`check_segments`).
        """
        seg = _analyse(instructions, start, end, lambda instr: True)
        assert seg is not None and seg.end == end, "check_segments accepted the range"
        seg.kernels = [(sites[pc], args) for pc, (_, args) in zip(seg.kernel_pcs, seg.kernels)]
        for value in _symbolic_values(seg):
            if value.const is not None:
                value.tensor = constant(value.const)
            elif value.int_value is not None:
                value.tensor = scalar(value.int_value)
        seg.out_values = [(reg, None if v is None else v.tensor) for reg, v in seg.out_values]
        return seg

    def plan_for(self, storage: Storage) -> SegmentPlan:
        """The call list for ``storage``'s block (built on first use, kept on the block)."""
        plans = storage.plans
        plan = plans.get(self)
        if plan is None:
            plan = plans[self] = SegmentPlan(self, storage)
        return plan

    def run(self, regs: list, allocators: list[Any], seconds: Any = None) -> bool:
        """Run the segment on the register file ``regs``; False, having changed nothing, when
        its operands ask for the instructions instead (module docstring). ``seconds`` (a ctypes
        double array, one per kernel) asks for each kernel's time, measured in C."""
        inputs = [regs[reg] for reg in self.input_regs]
        if not _host_tensors(inputs):
            return False
        if self.alloc is None:
            storage = regs[self.storage_reg]
            if type(storage) is not Storage or not storage.fusable:
                return False
            try:
                self.plan_for(storage)
            except TVMError:  # a view does not fit: the AllocTensor instruction says which
                return False
        else:
            storage = self.new_storage(allocators)
        specs = self.launch(inputs, storage, seconds).specs
        for reg, value in self.out_values:
            regs[reg] = value
        for reg in self.out_storage:
            regs[reg] = storage
        for reg, index in self.out_views:
            regs[reg] = specs[index].lease(storage)
        for reg, tag, fields in self.out_tuples:
            regs[reg] = ADT(tag, [_tuple_field(f, inputs, specs, storage) for f in fields])
        return True

    def output_shapes(self, kernel: int) -> list[tuple[int, ...]]:
        """Shapes of the tensors kernel number ``kernel`` of the segment writes."""
        return [self.views[index][1] for index in self.output_views[kernel]]

    def new_storage(self, allocators: list[Any]) -> Storage:
        """The segment's own AllocStorage from its (pooled host) allocator."""
        alloc = self.alloc
        try:
            return allocators[alloc.device_index].alloc(self.alloc_nbytes, alloc.alignment)
        except TVMError as err:
            raise SegmentError(str(err), self.alloc_pc) from None

    def launch(self, inputs: list[Any], storage: Storage, seconds: Any = None) -> SegmentPlan:
        """Run the kernels over ``storage`` on ``inputs`` (host tensors); the plan used.
        ``seconds``: as in :meth:`run`. A failing kernel raises :class:`SegmentError`."""
        plan = self.plan_for(storage)
        values = plan.values
        for tensor, slots in zip(inputs, plan.input_slots):
            dltensor = tensor._dltensor
            if dltensor is None:
                tensor._build_dltensor()
                dltensor = tensor._dltensor
            address = ctypes.addressof(dltensor)
            for slot in slots:
                values[slot] = address
        failed = ctypes.byref(self.failed)
        if seconds is None:
            rc = c_loop().run(plan.address, 0, plan.count, failed)
        else:
            rc = c_loop().run_timed(plan.address, plan.count, 1, seconds, failed)
        if rc != 0:
            index = self.failed.value
            message = get_last_error() or f"returned {rc}"
            raise SegmentError(f"kernel {self.kernels[index][0].name!r} failed: {message}",
                               self.kernel_pcs[index])
        return plan


def _host_tensors(values: list[Any]) -> bool:
    for value in values:
        if type(value) is not _NDArray:
            return False
    return True


def _symbolic_values(seg: FusedSegment) -> list[_Value]:
    """Every LoadConsti/LoadConst value the bound segment hands to kernels or registers."""
    values = [a for _, args in seg.kernels for a in args if isinstance(a, _Value)]
    values += [v for _, v in seg.out_values if isinstance(v, _Value)]
    values += [f for _, _, fields in seg.out_tuples for f in fields if isinstance(f, _Value)]
    return values


class DirectFunction:
    """A function whose whole body is one fused segment that allocates its storage, then a
    ``Ret`` of a tensor or tuple of tensors the segment made (a static model's ``main``).

    ``VirtualMachine.invoke`` runs it straight from the arguments: no frame, no register
    file, no instruction dispatch. It owns one storage block and its result objects, and each
    run computes into that block and returns the same result (TVM's contract: a result is
    valid until the next run of its function; copy it, or ``set_outputs``, to keep it), so a
    run allocates nothing. The one exception is an input that lies in the owned block (the
    last result passed back in): the run then takes a new block and gives up the old one to
    whoever holds its tensors.
    """

    __slots__ = ("segment", "result_tag", "result_views", "storage", "result", "low", "high")

    def __init__(self, segment: FusedSegment, result_tag: int | None,
                 result_views: list[int]) -> None:
        self.segment = segment
        self.result_tag = result_tag  # None: a single tensor; else the tuple's ADT tag
        self.result_views = result_views  # the segment's view index of each result tensor
        self.storage: Storage | None = None  # the owned block, its result, its address range
        self.result: Any = None
        self.low = self.high = 0

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

    def run(self, args: list[Any], allocators: list[Any]) -> Any:
        """The function's result on its arguments ``args``, or None when the VM must run the
        bytecode instead (an input is not a host tensor)."""
        # Argument i lives in register i; the segment numbers its inputs in the order its
        # kernels first read them, which need not be the parameters' order.
        inputs = [args[reg] for reg in self.segment.input_regs]
        if not _host_tensors(inputs):
            return None
        storage = self.storage
        if storage is None or self._reads_own_block(inputs):
            storage = self.segment.new_storage(allocators)
            plan = self.segment.launch(inputs, storage)
            leases = [plan.specs[index].lease(storage) for index in self.result_views]
            self.result = leases[0] if self.result_tag is None else ADT(self.result_tag, leases)
            self.storage, self.low = storage, storage.address
            self.high = self.low + storage.nbytes
        else:
            self.segment.launch(inputs, storage)
        return self.result

    def _reads_own_block(self, inputs: list[Any]) -> bool:
        """Whether an input's data lies in the owned block (kernels would overwrite it)."""
        low, high = self.low, self.high
        for tensor in inputs:
            dltensor = tensor._dltensor
            if dltensor is None:
                tensor._build_dltensor()
                dltensor = tensor._dltensor
            if low <= (dltensor.data or 0) < high:
                return True
        return False


def _tuple_field(field: Any, inputs: list[Any], specs: list[Any], storage: Any) -> Any:
    """The run-time value of one symbolic tuple field."""
    if isinstance(field, _View):
        return specs[field.index].lease(storage)
    if isinstance(field, _Input):
        return inputs[field.index]
    return field.tensor


def find_segments(instructions: Sequence[bc.Instruction],
                  fusable_const: Callable[[bc.LoadConst], bool],
                  native: Callable[[int], bool]) -> tuple[tuple[int, int], ...]:
    """The super-instructions of a function: its longest fusable ranges, left to right.

    ``fusable_const(instr)`` says whether a LoadConst's tensor is host memory (its virtual
    device is a CPU); ``native(packed_index)`` whether a kernel is a C function.
    """
    found = []
    pc = 0
    while pc < len(instructions):
        seg = _analyse(instructions, pc, len(instructions), fusable_const, native)
        if seg is None:
            pc += 1
            continue
        found.append((pc, seg.end))
        pc = seg.end
    return tuple(found)


def check_segments(instructions: Sequence[bc.Instruction],
                   segments: Sequence[tuple[int, int]],
                   fusable_const: Callable[[bc.LoadConst], bool]) -> str | None:
    """Why ``segments`` are not valid super-instructions of ``instructions``, or None."""
    last = 0
    for start, end in segments:
        if not (last <= start < end <= len(instructions)):
            return f"segment [{start}, {end}) is out of order or out of range"
        seg = _analyse(instructions, start, end, fusable_const)
        if seg is None:
            return f"segment [{start}, {end}) calls no kernel it can fuse"
        if seg.end != end:
            return (f"segment [{start}, {end}): instruction {seg.end} "
                    f"({instructions[seg.end].opcode.name}) cannot be part of it")
        last = end
    return None


def _analyse(instructions: Sequence[bc.Instruction], start: int, stop: int,
             fusable_const: Callable[[bc.LoadConst], bool],
             native: Callable[[int], bool] | None = None) -> FusedSegment | None:
    """The longest fusable segment in ``[start, stop)`` starting at ``start`` (at least one
    kernel), unbound, or None. ``native``: as in :func:`find_segments` (None: any kernel)."""
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
    while pc < stop:
        instr = instructions[pc]
        op = instr.opcode
        if op not in _FUSIBLE:
            break
        if op == bc.Opcode.LoadConsti:
            sym[instr.dst] = _Value(int_value=instr.val)
        elif op == bc.Opcode.LoadConst:
            if not fusable_const(instr):  # device memory: kernels here read host memory
                break
            sym[instr.dst] = _Value(const=instr)
        elif op == bc.Opcode.KillRegister:
            sym[instr.dst] = None
        elif op == bc.Opcode.AllocStorage:
            size = sym.get(instr.allocation_size)
            if (seg.alloc is not None or seg.storage_reg >= 0 or instr.shape
                    or not isinstance(size, _Value) or size.int_value is None):
                break
            seg.alloc, seg.alloc_pc, seg.alloc_nbytes = instr, pc, size.int_value
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
            dtype = _dtype_of(instr.dtype)
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
            if native is not None and not native(instr.packed_index):
                break
            if _unfusable_call(regs, instr.output_size):
                break
            args = []
            for value in regs:
                args.extend(value.fields if isinstance(value, _Tuple) else [value])
            args = [commit(a) for a in args]
            last = args[-1]
            if not (instr.output_size == 1 and 0 in seg.views[last.index][1]):
                seg.kernels.append((instr, args))  # (an empty output: no call, as TVM)
                seg.kernel_pcs.append(pc)
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
            seg.out_values.append((reg, value))
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


def _unfusable_call(regs: list[Any], output_size: int) -> bool:
    """Whether an InvokePacked cannot join a segment: a non-tensor operand, or an output that
    is not a tensor (or tuple of tensors) the segment allocated."""
    if any(r is None for r in regs) or output_size < 1:
        return True
    for out in regs[len(regs) - output_size:]:
        fields = out.fields if isinstance(out, _Tuple) else [out]
        if not all(isinstance(f, _View) for f in fields):
            return True
    return False


class SegmentPlan:
    """A segment's kernel call list over one block: :class:`~kiln.runtime.call_list.OpRecord`
    records, their argument values and type codes, and the input slots to fill."""

    __slots__ = ("specs", "values", "codes", "records", "address", "count", "input_slots")

    def __init__(self, seg: FusedSegment, storage: Any) -> None:
        self.specs = [storage.view_spec(offset, shape, dtype)
                      for offset, shape, dtype in seg.views]
        total = max(sum(len(args) for _, args in seg.kernels), 1)
        self.values = values = (ctypes.c_void_p * total)()
        self.codes = (ctypes.c_int * total)(*([_DLTENSOR_HANDLE] * total))
        self.records = (OpRecord * len(seg.kernels))()
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
