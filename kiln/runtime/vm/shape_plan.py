"""Per-shape plans: a straight-line VM function run as one C call list for known input shapes.

Entry points: :class:`PlanCache` (one per function: ``run(inputs)``), :func:`plannable`
(whether a function's instructions allow plans at all) and :data:`MAX_PLANS`.

Why. A function with dynamic shapes (``relay.Any``) runs its shape functions, allocates
storage and makes tensor views in Python on every call, between its kernels: for a 2-layer
LSTM of symbolic length that is ~130 instructions and about four times the kernels' own time
at length 1. In a function without control flow all of that depends only on the shapes and
dtypes of the arguments, as long as every size and shape comes from ``ShapeOf``,
``LoadConsti`` and kernels reading only those (shape functions that read shapes, not data).
So for one argument signature the VM can *plan* the function once: walk its instructions with
the concrete shapes, run the shape functions, lay every storage out in one block (a storage
whose last holder was killed gives its bytes to a later one of the same size, as the pooled
allocator would) and record the remaining kernels as a call list over that block
(:mod:`kiln.runtime.call_list`). A run of the plan writes the arguments' ``DLTensor``
addresses and makes one C call, as the graph executor does; it returns the same result
objects every time (the VM's ownership contract: a result is valid until the next run of its
function, which may overwrite it).

When. A signature's plan is built the second time the signature is seen (a one-off shape
just runs the bytecode); a function keeps up to :data:`MAX_PLANS` plans, dropping the least
recently used (its block goes back to the pool once no result of it is held).

Fallback: the bytecode runs instead, with the same results and errors, when

- the function has an instruction other than straight-line tensor work (control flow, calls,
  closures, tags, device copies) -- decided once per function;
- a storage size or a shape depends on tensor data (a data-dependent shape function) --
  decided on the first plan attempt, for the function;
- the walk finds something the instructions would refuse (a view outside its storage, a
  reshape changing the element count, a failing shape function, storage on a device or an
  allocator other than pooled host memory): that signature runs the bytecode, which raises;
- at run time an argument is not a host tensor, lies in the plan's own block (a result passed
  back in) or is not contiguous where the plan reshapes it.

A kernel failing during a plan run raises :class:`~kiln.runtime.vm.segment.SegmentError`
naming its instruction.
"""

from __future__ import annotations

import ctypes
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln.runtime import ndarray as _nd
from kiln.runtime.call_list import OpRecord, c_loop
from kiln.runtime.container import ADT
from kiln.runtime.dlpack import DLTensor
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.runtime.packed_func import get_last_error
from kiln.runtime.vm import bytecode as bc
from kiln.runtime.vm.segment import SegmentError

__all__ = ["PlanCache", "ShapePlan", "plannable", "MAX_PLANS", "PLAN_AT_CALL"]

MAX_PLANS = 8  # plans kept per function (one per argument signature)
PLAN_AT_CALL = 2  # a signature is planned on its second call (1: on its first)
_MAX_SEEN = 256  # signatures remembered while waiting for their PLAN_AT_CALL-th call
_DLTENSOR_HANDLE = 7  # kTVMDLTensorHandle
_ALIGN = 64

# Opcodes of straight-line tensor work: a function made only of these can be planned.
_PLANNABLE = frozenset({
    bc.Opcode.Move, bc.Opcode.Ret, bc.Opcode.InvokePacked, bc.Opcode.AllocTensor,
    bc.Opcode.AllocTensorReg, bc.Opcode.AllocADT, bc.Opcode.GetField, bc.Opcode.LoadConst,
    bc.Opcode.LoadConsti, bc.Opcode.AllocStorage, bc.Opcode.ShapeOf, bc.Opcode.ReshapeTensor,
    bc.Opcode.KillRegister,
})


def plannable(instructions: Sequence[bc.Instruction]) -> bool:
    """Whether a function's instructions are straight-line tensor work ending in a Ret."""
    return (bool(instructions) and isinstance(instructions[-1], bc.Ret)
            and all(instr.opcode in _PLANNABLE for instr in instructions))


class _Unplannable(Exception):
    """The walk cannot plan this signature; ``data_dependent``: nor any other."""

    def __init__(self, reason: str, data_dependent: bool = False) -> None:
        super().__init__(reason)
        self.data_dependent = data_dependent


# Symbolic register values of the walk.


class _Store:
    """An AllocStorage: its size, and where the layout put it in the plan's block."""

    __slots__ = ("nbytes", "alignment", "holders", "region")

    def __init__(self, nbytes: int, alignment: int) -> None:
        self.nbytes, self.alignment, self.holders, self.region = nbytes, alignment, 0, -1


class _Buf:
    """A tensor viewing a storage; ``known``: its value, when a shape function wrote it."""

    __slots__ = ("store", "offset", "shape", "dtype", "known", "spec")

    def __init__(self, store: _Store, offset: int, shape: tuple[int, ...],
                 dtype: DataType) -> None:
        self.store, self.offset, self.shape, self.dtype = store, offset, shape, dtype
        self.known: np.ndarray | None = None
        self.spec: Any = None  # its ViewSpec in the block, once laid out


class _Known:
    """A tensor whose value the walk knows: a LoadConsti scalar or a ShapeOf result.
    ``tensor`` is an NDArray holding it (made when a kernel or the result needs one)."""

    __slots__ = ("value", "tensor")

    def __init__(self, value: np.ndarray, tensor: Any = None) -> None:
        self.value, self.tensor = value, tensor


class _Arg:
    """Argument ``index`` of the function, or a reshaped view of it (``view``: a DLTensor
    the plan owns, whose data pointer each run sets)."""

    __slots__ = ("index", "shape", "view")

    def __init__(self, index: int, shape: tuple[int, ...], view: Any = None) -> None:
        self.index, self.shape, self.view = index, shape, view


class _Const:
    """A LoadConst tensor (host memory), or a reshaped view of one."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor


class _Tup:
    """An AllocADT of symbolic values."""

    __slots__ = ("tag", "fields")

    def __init__(self, tag: int, fields: list[Any]) -> None:
        self.tag, self.fields = tag, fields


def _known_value(value: Any) -> np.ndarray | None:
    """The value of a tensor the walk knows, else None."""
    if isinstance(value, _Known):
        return value.value
    if isinstance(value, _Buf):
        return value.known
    return None


def _shape_of(value: Any) -> tuple[int, ...]:
    if isinstance(value, _Buf | _Arg):
        return value.shape
    if isinstance(value, _Known):
        return value.value.shape
    if isinstance(value, _Const):
        return tuple(value.tensor.shape)
    raise _Unplannable(f"a tensor operand is a {type(value).__name__}")


class _Walk:
    """Runs a function's instructions symbolically for one argument signature."""

    def __init__(self, instructions: Sequence[bc.Instruction], num_regs: int,
                 sites: dict[int, Any], scalar: Callable[[int], Any],
                 constant: Callable[[bc.LoadConst], Any | None],
                 host_pooled: Callable[[int], bool]) -> None:
        self.instructions = instructions
        self.regs: list[Any] = [None] * num_regs
        self.sites, self.scalar, self.constant, self.host_pooled = (
            sites, scalar, constant, host_pooled)
        self.kernels: list[tuple[int, Any, list[Any]]] = []  # (pc, call site, flat args)
        self.free: dict[tuple[int, int], list[int]] = {}  # (size, alignment) -> free regions
        self.end = 0  # bytes of the block laid out so far
        self.alignment = 4096  # the block's: the largest a storage asked for (at least a page)
        self.result: Any = None
        self.args: list[Any] = []

    # -- storage holders: a storage's bytes are free once no register holds it ---------------

    def _holds(self, value: Any, delta: int) -> None:
        if isinstance(value, _Buf):
            value = value.store
        if isinstance(value, _Store):
            value.holders += delta
            if value.holders == 0 and delta < 0:
                size = -(-value.nbytes // _ALIGN) * _ALIGN
                self.free.setdefault((size, value.alignment), []).append(value.region)
        elif isinstance(value, _Tup):
            for field in value.fields:
                self._holds(field, delta)

    def set(self, reg: int, value: Any) -> None:
        self._holds(value, 1)
        old, self.regs[reg] = self.regs[reg], value
        self._holds(old, -1)

    def _place(self, store: _Store) -> None:
        size = -(-store.nbytes // _ALIGN) * _ALIGN
        free = self.free.get((size, store.alignment))
        if free:
            store.region = free.pop()
            return
        self.end = -(-self.end // store.alignment) * store.alignment
        store.region, self.end = self.end, self.end + size

    # -- operands ------------------------------------------------------------------------------

    def _read(self, reg: int) -> np.ndarray | None:
        """The value of a size or shape operand, when it does not depend on tensor data."""
        value = self.regs[reg]
        if isinstance(value, _Const):  # e.g. a static reshape's shape, a LoadConst
            return value.tensor.numpy()
        return _known_value(value)

    def scalar_int(self, reg: int) -> int:
        value = self._read(reg)
        if value is None:
            raise _Unplannable(f"register ${reg} (a size or offset) depends on tensor data",
                               data_dependent=True)
        if value.size < 1 or value.dtype.kind not in "iub":
            raise _Unplannable(f"register ${reg} is not an integer scalar")
        return int(value.reshape(-1)[0])

    def shape(self, reg: int) -> tuple[int, ...]:
        value = self._read(reg)
        if value is None:
            raise _Unplannable(f"register ${reg} (a shape) depends on tensor data",
                               data_dependent=True)
        if value.ndim != 1 or value.dtype.kind not in "iu" or (value < 0).any():
            raise _Unplannable(f"register ${reg} is not a shape")
        return tuple(int(d) for d in value)

    # -- one method per opcode -----------------------------------------------------------------

    def run(self, args: list[Any]) -> None:
        self.args = args
        for index, tensor in enumerate(args):
            self.set(index, _Arg(index, tuple(tensor.shape)))
        for pc, instr in enumerate(self.instructions):
            if isinstance(instr, bc.Ret):
                self.result = self.regs[instr.result]
                return
            _STEPS[instr.opcode](self, pc, instr)

    def move(self, pc: int, instr: bc.Move) -> None:
        self.set(instr.dst, self.regs[instr.src])

    def kill(self, pc: int, instr: bc.KillRegister) -> None:
        self.set(instr.dst, None)

    def load_consti(self, pc: int, instr: bc.LoadConsti) -> None:
        tensor = self.scalar(instr.val)
        self.set(instr.dst, _Known(tensor.numpy(), tensor))

    def load_const(self, pc: int, instr: bc.LoadConst) -> None:
        tensor = self.constant(instr)
        if tensor is None:
            raise _Unplannable("a constant lives in device memory")
        self.set(instr.dst, _Const(tensor))

    def alloc_storage(self, pc: int, instr: bc.AllocStorage) -> None:
        if not self.host_pooled(instr.device_index):
            raise _Unplannable("storage outside pooled host memory")
        if instr.shape:
            nbytes = math.prod(instr.shape) * DataType.from_fields(*instr.dtype_hint).itemsize
        else:
            nbytes = self.scalar_int(instr.allocation_size)
        alignment = instr.alignment
        if nbytes < 0 or alignment <= 0 or alignment & (alignment - 1):
            raise _Unplannable("a storage size or alignment the allocator refuses")
        store = _Store(nbytes, max(alignment, _ALIGN))
        self.alignment = max(self.alignment, store.alignment)
        self._place(store)
        self.set(instr.dst, store)

    def _view(self, reg: int, offset: int, shape: tuple[int, ...],
              dtype_fields: tuple[int, int, int]) -> _Buf:
        store = self.regs[reg]
        if not isinstance(store, _Store):
            raise _Unplannable("AllocTensor of something other than a storage")
        dtype = DataType.from_fields(*dtype_fields)
        nbytes = math.prod(shape) * dtype.itemsize
        if offset < 0 or offset + nbytes > store.nbytes or min(shape, default=0) < 0:
            raise _Unplannable("a tensor does not fit its storage")
        return _Buf(store, offset, tuple(shape), dtype)

    def alloc_tensor(self, pc: int, instr: bc.AllocTensor) -> None:
        offset = self.scalar_int(instr.offset)
        self.set(instr.dst, self._view(instr.storage, offset, tuple(instr.shape), instr.dtype))

    def alloc_tensor_reg(self, pc: int, instr: bc.AllocTensorReg) -> None:
        offset = self.scalar_int(instr.offset)
        shape = self.shape(instr.shape_register)
        self.set(instr.dst, self._view(instr.storage, offset, shape, instr.dtype))

    def alloc_adt(self, pc: int, instr: bc.AllocADT) -> None:
        self.set(instr.dst, _Tup(instr.tag, [self.regs[r] for r in instr.datatype_fields]))

    def get_field(self, pc: int, instr: bc.GetField) -> None:
        value = self.regs[instr.object]
        if not isinstance(value, _Tup) or instr.field_index >= len(value.fields):
            raise _Unplannable("GetField of something other than a tuple with that field")
        self.set(instr.dst, value.fields[instr.field_index])

    def shape_of(self, pc: int, instr: bc.ShapeOf) -> None:
        shape = _shape_of(self.regs[instr.tensor])
        self.set(instr.dst, _Known(np.array(shape, dtype="int64")))

    def reshape_tensor(self, pc: int, instr: bc.ReshapeTensor) -> None:
        value = self.regs[instr.tensor]
        shape = self.shape(instr.newshape)
        if math.prod(shape) != math.prod(_shape_of(value)):
            raise _Unplannable("a reshape changes the element count")
        if isinstance(value, _Buf):
            view = _Buf(value.store, value.offset, shape, value.dtype)
            view.known = None if value.known is None else value.known.reshape(shape)
        elif isinstance(value, _Arg):
            view = _Arg(value.index, shape, _ArgView(shape, self.args[value.index]))
        elif isinstance(value, _Known):
            view = _Known(value.value.reshape(shape))
        else:
            view = _Const(value.tensor._create_view(shape))
        self.set(instr.dst, view)

    def invoke_packed(self, pc: int, instr: bc.InvokePacked) -> None:
        regs = [self.regs[r] for r in instr.args]
        split = len(regs) - instr.output_size
        ins = [f for v in regs[:split] for f in (v.fields if isinstance(v, _Tup) else [v])]
        outs = [f for v in regs[split:] for f in (v.fields if isinstance(v, _Tup) else [v])]
        for value in ins + outs:
            if not isinstance(value, _Buf | _Known | _Arg | _Const):
                raise _Unplannable("a kernel operand is not a tensor")
        for out in outs:
            if not isinstance(out, _Buf) or out.known is not None:
                raise _Unplannable("a kernel writes something other than a fresh tensor")
        if not outs:
            raise _Unplannable("a kernel without outputs")  # called for its side effects
        if instr.output_size == 1 and 0 in outs[-1].shape:
            return  # an empty output: nothing to compute (the VM skips the call too)
        site = self.sites[pc]
        if ins and all(_known_value(v) is not None for v in ins):
            self._run_shape_kernel(site, instr, split)
        else:
            if site.kernel is None:
                raise _Unplannable("a kernel is not a C function")
            self.kernels.append((pc, site, ins + outs))

    def _run_shape_kernel(self, site: Any, instr: bc.InvokePacked, split: int) -> None:
        """A kernel reading only known values (a shape function): run it now, called as the
        VM calls it, on NDArrays holding the values and fresh outputs."""
        made: dict[int, Any] = {}  # register -> NDArray or ADT, as the call site reads them
        written: list[tuple[_Buf, Any]] = []
        for position, reg in enumerate(instr.args):
            value = self.regs[reg]
            fields = value.fields if isinstance(value, _Tup) else [value]
            if position < split:
                tensors = [_nd.array(_known_value(f)) for f in fields]
            else:
                tensors = [_nd.empty(f.shape, f.dtype) for f in fields]
                written += zip(fields, tensors)
            made[reg] = ADT(value.tag, tensors) if isinstance(value, _Tup) else tensors[0]
        try:
            site.call(made)
        except TVMError as err:
            raise _Unplannable(f"kernel {site.name!r} failed: {err}") from None
        for buf, tensor in written:
            buf.known = tensor.numpy()


_STEPS: dict[bc.Opcode, Callable[[_Walk, int, Any], None]] = {
    bc.Opcode.Move: _Walk.move,
    bc.Opcode.KillRegister: _Walk.kill,
    bc.Opcode.LoadConsti: _Walk.load_consti,
    bc.Opcode.LoadConst: _Walk.load_const,
    bc.Opcode.AllocStorage: _Walk.alloc_storage,
    bc.Opcode.AllocTensor: _Walk.alloc_tensor,
    bc.Opcode.AllocTensorReg: _Walk.alloc_tensor_reg,
    bc.Opcode.AllocADT: _Walk.alloc_adt,
    bc.Opcode.GetField: _Walk.get_field,
    bc.Opcode.ShapeOf: _Walk.shape_of,
    bc.Opcode.ReshapeTensor: _Walk.reshape_tensor,
    bc.Opcode.InvokePacked: _Walk.invoke_packed,
}


class _ArgView:
    """A DLTensor for a reshaped argument: shape fixed, data pointer set per run."""

    __slots__ = ("dltensor", "shape_array")

    def __init__(self, shape: tuple[int, ...], source: Any) -> None:
        self.shape_array = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.dltensor = DLTensor()
        self.dltensor.ndim = len(shape)
        self.dltensor.shape = ctypes.cast(self.shape_array, ctypes.POINTER(ctypes.c_int64))
        # device and dtype are part of the plan's signature: take them from this argument
        self.dltensor.device = source.handle.contents.device
        self.dltensor.dtype = source.handle.contents.dtype


class ShapePlan:
    """One signature's plan: the block, the call list, the argument slots, the result."""

    __slots__ = ("block", "low", "high", "values", "codes", "records", "address", "count",
                 "arg_slots", "arg_views", "pinned", "pcs", "names", "failed", "result",
                 "static_result", "result_value")

    def __init__(self, walk: _Walk, allocator: Any) -> None:
        self.block = allocator.alloc(max(walk.end, 1), walk.alignment)
        self.low = self.block.address
        self.high = self.low + max(walk.end, 1)
        self.pinned: list[Any] = []  # NDArrays of known values that kernels read
        self.arg_slots: dict[int, list[int]] = {}
        self.arg_views: dict[int, list[_ArgView]] = {}
        total = max(sum(len(args) for _, _, args in walk.kernels), 1)
        self.values = (ctypes.c_void_p * total)()
        self.codes = (ctypes.c_int * total)(*([_DLTENSOR_HANDLE] * total))
        self.records = (OpRecord * max(len(walk.kernels), 1))()
        self.address = ctypes.addressof(self.records)
        self.count = len(walk.kernels)
        self.pcs = [pc for pc, _, _ in walk.kernels]
        self.names = [site.name for _, site, _ in walk.kernels]
        self.failed = ctypes.c_int64(-1)
        value_size, code_size = ctypes.sizeof(ctypes.c_void_p), ctypes.sizeof(ctypes.c_int)
        pos = 0
        for record, (_, site, args) in zip(self.records, walk.kernels):
            record.fn = site.func.c_address
            record.args = ctypes.addressof(self.values) + pos * value_size
            record.type_codes = ctypes.addressof(self.codes) + pos * code_size
            record.num_args = len(args)
            record.resource_handle = site.resource
            for arg in args:
                self.values[pos] = self._address(arg, pos)
                pos += 1
        self.result_value = walk.result
        self.static_result = _is_static(walk.result)
        self.result = self._materialize(walk.result, None) if self.static_result else None

    def _address(self, value: Any, pos: int) -> int | None:
        """The DLTensor* of a kernel operand, or None for an argument (filled per run)."""
        if isinstance(value, _Arg):
            if value.view is None:
                self.arg_slots.setdefault(value.index, []).append(pos)
                return None
            self.arg_views.setdefault(value.index, []).append(value.view)
            return ctypes.addressof(value.view.dltensor)
        if isinstance(value, _Buf) and value.known is None:
            return ctypes.addressof(self._spec(value).dltensor)
        if isinstance(value, _Const):
            tensor = value.tensor
        elif isinstance(value, _Known) and value.tensor is not None:
            tensor = value.tensor
        else:  # a known value (a shape) that a kernel reads: one NDArray holds it
            tensor = _nd.array(_known_value(value))
            self.pinned.append(tensor)
        return ctypes.addressof(tensor.handle.contents)

    def _spec(self, buf: _Buf) -> Any:
        """The block's ViewSpec of a tensor the kernels write."""
        if buf.spec is None:
            buf.spec = self.block.view_spec(buf.store.region + buf.offset, buf.shape, buf.dtype)
        return buf.spec

    def _materialize(self, value: Any, args: list[Any] | None) -> Any:
        """The run-time result for a symbolic value (``args``: this run's arguments)."""
        if isinstance(value, _Tup):
            return ADT(value.tag, [self._materialize(f, args) for f in value.fields])
        if isinstance(value, _Arg):
            tensor = args[value.index]
            return tensor if value.view is None else tensor._create_view(value.shape)
        if isinstance(value, _Const):
            return value.tensor
        return self._spec(value).lease(self.block)

    def run(self, args: list[Any]) -> Any:
        """The result on ``args`` (host tensors of the plan's signature), or None when the
        bytecode must run instead (module docstring)."""
        values, low, high = self.values, self.low, self.high
        for index, slots in self.arg_slots.items():
            dltensor = _dltensor_of(args[index])
            if low <= (dltensor.data or 0) < high:
                return None
            address = ctypes.addressof(dltensor)
            for slot in slots:
                values[slot] = address
        for index, views in self.arg_views.items():
            dltensor = _dltensor_of(args[index])
            data = dltensor.data or 0
            if low <= data < high or dltensor.strides:
                return None
            for view in views:
                view.dltensor.data = data
        if self.count:
            rc = c_loop().run(self.address, 0, self.count, ctypes.byref(self.failed))
            if rc != 0:
                index = self.failed.value
                message = get_last_error() or f"returned {rc}"
                raise SegmentError(f"kernel {self.names[index]!r} failed: {message}",
                                   self.pcs[index])
        if self.static_result:
            return self.result
        return self._materialize(self.result_value, args)


def _dltensor_of(tensor: Any) -> DLTensor:
    """A host NDArray's DLTensor (built on first use)."""
    dltensor = tensor._dltensor
    if dltensor is None:
        tensor._build_dltensor()
        dltensor = tensor._dltensor
    return dltensor


def _plain_result(value: Any) -> bool:
    """Whether a result is tensors (or tuples of them) the plan can hand out as the bytecode
    would: not storage, and not a shape or scalar (the VM returns its one read-only tensor
    per value)."""
    if isinstance(value, _Tup):
        return all(_plain_result(f) for f in value.fields)
    return isinstance(value, _Arg | _Const) or (isinstance(value, _Buf) and value.known is None)


def _is_static(value: Any) -> bool:
    """Whether a result is the same objects every run (block views and constants)."""
    if isinstance(value, _Tup):
        return all(_is_static(f) for f in value.fields)
    return isinstance(value, _Const) or (isinstance(value, _Buf) and value.known is None)


class PlanCache:
    """The plans of one function, per argument signature (module docstring)."""

    def __init__(self, instructions: Sequence[bc.Instruction], num_regs: int,
                 sites: dict[int, Any], scalar: Callable[[int], Any],
                 constant: Callable[[bc.LoadConst], Any | None], host_index: int) -> None:
        self.instructions, self.num_regs, self.sites = instructions, num_regs, sites
        self.scalar, self.constant = scalar, constant
        self.host_index = host_index  # the allocator whose pooled host memory holds the blocks
        self.plans: OrderedDict[tuple, ShapePlan | None] = OrderedDict()
        self.seen: dict[tuple, int] = {}  # calls of signatures not planned yet
        self.disabled = False  # a data-dependent shape: no signature can be planned
        self.built = 0  # plans built so far (for tests)

    def run(self, args: list[Any], allocators: list[Any]) -> Any:
        """The result on ``args``, or None when the bytecode must run this call;
        ``allocators``: the VM's, per virtual device."""
        key = []
        for tensor in args:
            if type(tensor) is not _nd.NDArray:
                return None
            key.append((tensor._np.shape, tensor._dtype))
        key = tuple(key)
        plans = self.plans
        plan = plans.get(key)
        if plan is None:
            if key in plans or self.disabled:
                return None  # this signature cannot be planned
            calls = self.seen.get(key, 0) + 1
            if calls < PLAN_AT_CALL:
                if len(self.seen) >= _MAX_SEEN:
                    self.seen.clear()
                self.seen[key] = calls
                return None
            self.seen.pop(key, None)
            plan = self._build(args, allocators)
            plans[key] = plan
            if len(plans) > MAX_PLANS:
                plans.popitem(last=False)
            if plan is None:
                return None
        else:
            plans.move_to_end(key)
        return plan.run(args)

    def _build(self, args: list[Any], allocators: list[Any]) -> ShapePlan | None:
        def host_pooled(device_index: int) -> bool:
            return (0 <= device_index < len(allocators)
                    and allocators[device_index].fusable)

        walk = _Walk(self.instructions, self.num_regs, self.sites, self.scalar,
                     self.constant, host_pooled)
        try:
            walk.run(args)
            if not _plain_result(walk.result):
                raise _Unplannable("the result is not made of tensors the kernels wrote, "
                                   "arguments and constants")
        except _Unplannable as err:
            self.disabled = err.data_dependent
            return None
        except TVMError:  # e.g. a view of a constant that does not fit: the bytecode says so
            return None
        self.built += 1
        return ShapePlan(walk, allocators[self.host_index])
