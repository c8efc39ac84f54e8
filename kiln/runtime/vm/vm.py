"""The Relay VM interpreter: frames of registers, a dispatch table, kernels called through C.

Entry points: :class:`VirtualMachine` (``invoke``/``run``/``set_input``/``get_output``/
``benchmark``/``profile``), :class:`VMClosure`.

How it runs. Each function's bytecode is *prepared* once, when the VM is created, into a list
of ``(handler, operand)`` pairs: ``handler`` is the bound method for the opcode (one small
method per opcode, looked up in a table, never an if-chain) and ``operand`` is the
instruction, or for ``InvokePacked`` a call site with the kernel already resolved and its
argument arrays already built. The loop is then::

    handler, operand = code[pc]; pc = handler(regs, operand, pc)

where ``code``/``regs``/``pc`` belong to the top frame and are reloaded only when a call or
return switches frames. A frame holds the function's register file, its return pc, and the
caller register that receives its result. ``Invoke`` pushes a frame and ``Ret`` pops one,
so VM recursion never recurses in Python.

**Tail calls**: an ``Invoke``/``InvokeClosure`` whose result reaches a ``Ret`` unchanged —
directly, or through ``Move``, ``Goto`` and unrelated ``KillRegister`` steps, as a compiled
``if`` branch does — is marked at preparation time and reuses the current frame, so a
tail-recursive loop runs in constant frame depth whatever the compiler emitted; a function
tail-calling itself just refills its register file and jumps to pc 0.

Scalars: ``LoadConsti`` and ``GetTag`` tensors are created once per value and treated as
read-only constants (as TVM treats LoadConst tensors), which keeps counter loops cheap.

**Fused segments** (super-instructions): the VM compiler records in ``VMFunction.segments``
the straight runs of ``LoadConsti``/``LoadConst``/``AllocStorage``/``AllocTensor``/
``AllocADT``/``InvokePacked``/``KillRegister`` with static shapes, one storage and C kernels
(:meth:`Executable.fuse_segments`, :mod:`kiln.runtime.vm.segment`). Each becomes one entry at
its first pc that runs its kernels in one C call (:mod:`kiln.runtime.call_list`) from a call
list prebuilt per pooled storage block, then sets the registers as the instructions would
have; a failing kernel raises naming its own instruction. With a naive allocator, or when an
input register holds something other than a host tensor (a tuple, a device array), the
instructions run one by one. A function that is nothing but one segment and a ``Ret`` (a
static model) is invoked *directly* (:class:`~kiln.runtime.vm.segment.DirectFunction`): no
frame, and every run computes into the same block.

**Per-shape plans**: a function without control flow that is not direct (e.g. a model with a
symbolic sequence length) gets a :class:`~kiln.runtime.vm.shape_plan.PlanCache`: the second
call with the same argument shapes and dtypes plans the function for them (shape functions
run once, every storage laid out in one block) and from then on each such call is one C call
list, as for a static model; anything a plan cannot honour runs the bytecode
(:mod:`kiln.runtime.vm.shape_plan` lists the cases). :meth:`VirtualMachine.plan_stats` tells.

**Ownership** (TVM's contract): a result is valid until the next ``invoke``/``run`` (or
``set_input``) of the same function; the VM may then overwrite it in place. Copy it
(``.numpy()``, ``.copyto``) to keep it, or give the VM destination tensors with
:meth:`VirtualMachine.set_outputs`. Inputs made from NumPy arrays belong to the VM: the next
``set_input`` of the same shape and dtype copies into them.

**Devices**: virtual device ``i`` of the executable runs on ``devices[i]``, each with its own
allocator; a non-CPU device's storage is memory of its device API (e.g. OpenCL buffers), its
tensors are ``DeviceNDArray`` views. Inputs are copied to their parameter's device,
constants to their device once, ``DeviceCopy`` moves tensors between devices, and a result
on a device comes back as a device array (``.numpy()`` copies it to the host). Segments
touching device memory (a device allocator, a device constant, a device input) run unfused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.runtime import ndarray as _nd
from kiln.runtime import thread_pool
from kiln.runtime.container import ADT
from kiln.runtime.device import Device, cpu
from kiln.runtime.device_api import DeviceNDArray
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.runtime.vm import bytecode as bc
from kiln.runtime.vm.executable import Executable, VMFunction
from kiln.runtime.vm.memory import make_allocators
from kiln.runtime.vm.packed_call import PackedCallSite
from kiln.runtime.vm.segment import DirectFunction, FusedSegment, SegmentError
from kiln.runtime.vm.shape_plan import PlanCache, plannable
from kiln.runtime.vm.values import (
    ConvertedInputs,
    VMClosure,
    as_storage,
    as_tensor,
    check_argument,
    convert_argument,
    load_shape,
)

__all__ = ["VirtualMachine", "VMClosure"]

_NDArray = _nd.NDArray
# Handler results below zero: the frame changed (reload it), or the entry frame returned.
_SWITCH_FRAME, _EXIT = -1, -2
_MAX_SHAPE_TENSORS = 1024  # ShapeOf tensors kept; a program seeing ever-new shapes starts over


class _Frame:
    """One activation: function, code, pc, registers, and the caller register for the result."""

    __slots__ = ("func_index", "code", "pc", "regs", "caller_dst")

    def __init__(self, func_index: int, code: list, regs: list, caller_dst: int) -> None:
        self.func_index = func_index
        self.code = code
        self.pc = 0
        self.regs = regs
        self.caller_dst = caller_dst


def _tail_position(instructions: Sequence[bc.Instruction], pc: int, dst: int) -> bool:
    """Whether the value written to ``dst`` at ``pc`` is returned unchanged by the function.

    Follows fall-through, ``Goto``, ``Move`` of the tracked register, and ``KillRegister`` of
    other registers until a ``Ret``; any other instruction means the call is not a tail call.
    """
    tracked = dst
    for _ in range(len(instructions)):
        pc += 1
        if not 0 <= pc < len(instructions):
            return False
        instr = instructions[pc]
        if isinstance(instr, bc.Ret):
            return instr.result == tracked
        if isinstance(instr, bc.Goto):
            pc += instr.pc_offset - 1
        elif isinstance(instr, bc.Move) and instr.src == tracked:
            tracked = instr.dst
        elif not (isinstance(instr, bc.KillRegister) and instr.dst != tracked):
            return False
    return False


def _host_scalar_array(value: int, dtype: str) -> Any:
    return _nd.array(np.array([value], dtype=dtype))


class VirtualMachine:
    """Runs an :class:`Executable` (TVM's ``tvm.runtime.vm.VirtualMachine``).

    Parameters
    ----------
    exe : Executable
        The program (``relay.vm.compile`` output or hand-assembled).
    device : Device or list of Device
        Physical devices; virtual device ``i`` of the executable maps to the device with the
        same type and id if given, else the first of the same type.
    memory_cfg : str or dict, optional
        ``"naive"``, ``"pooled"`` (default), or ``{device: kind}`` per device.

    Notes
    -----
    Ownership follows TVM: a result (``invoke``, ``run``, ``get_output``) is valid until the
    next ``invoke``/``run`` or ``set_input`` of the same function, which may overwrite it in
    place (a static model's ``main`` always does, and so does a planned shape: each computes
    into one block it owns). Copy a result (``.numpy()``, ``.copyto``) to keep it, or pass
    destination tensors to :meth:`set_outputs`. NumPy arguments are copied into NDArrays the
    VM owns.

    Example
    -------
    >>> import kiln
    >>> from kiln.runtime.vm.bytecode import LoadConsti, Ret
    >>> from kiln.runtime.vm.executable import Executable, VMFunction
    >>> exe = Executable([VMFunction("main", [], [LoadConsti(42, 0), Ret(0)], 1)])
    >>> VirtualMachine(exe, kiln.cpu(0)).run().numpy()
    array([42])
    """

    def __init__(self, exe: Executable, device: Any = None,
                 memory_cfg: str | dict | None = None) -> None:
        if getattr(exe, "type_key", None) == "VMExecutable":
            exe = exe.executable  # a VMExecutable Module, e.g. from load_module
        if not isinstance(exe, Executable):
            raise TVMError(f"VirtualMachine needs an Executable, got {type(exe).__name__}")
        unbound = exe.unbound_constants()
        if unbound:
            raise TVMError(
                f"constants {unbound} are late-bound and not loaded; call "
                "exe.load_late_bound_consts(path) before creating the VirtualMachine"
            )
        self.exe = exe
        self.devices = self._map_devices(exe, device)
        self.allocators = make_allocators(self.devices, memory_cfg)
        self.host_device = self.devices[exe.host_device_index]
        self._functions: list[VMFunction] = exe.functions
        self._packed_funcs = self._resolve_kernels(exe)
        self._dispatch = {
            bc.Opcode.Move: self._op_move,
            bc.Opcode.Ret: self._op_ret,
            bc.Opcode.Invoke: self._op_invoke,
            bc.Opcode.InvokeClosure: self._op_invoke_closure,
            bc.Opcode.InvokePacked: self._op_invoke_packed,
            bc.Opcode.AllocTensor: self._op_alloc_tensor,
            bc.Opcode.AllocTensorReg: self._op_alloc_tensor_reg,
            bc.Opcode.AllocADT: self._op_alloc_adt,
            bc.Opcode.AllocClosure: self._op_alloc_closure,
            bc.Opcode.GetField: self._op_get_field,
            bc.Opcode.If: self._op_if,
            bc.Opcode.LoadConst: self._op_load_const,
            bc.Opcode.Goto: self._op_goto,
            bc.Opcode.GetTag: self._op_get_tag,
            bc.Opcode.LoadConsti: self._op_load_consti,
            bc.Opcode.Fatal: self._op_fatal,
            bc.Opcode.AllocStorage: self._op_alloc_storage,
            bc.Opcode.ShapeOf: self._op_shape_of,
            bc.Opcode.ReshapeTensor: self._op_reshape_tensor,
            bc.Opcode.DeviceCopy: self._op_device_copy,
            bc.Opcode.KillRegister: self._op_kill_register,
        }
        assert len(self._dispatch) == len(bc.Opcode)
        self._tail_dispatch = {
            bc.Opcode.Invoke: self._op_tail_invoke,
            bc.Opcode.InvokeClosure: self._op_tail_invoke_closure,
        }
        # Scalar tensors made by LoadConsti/GetTag, and the int each holds (by id).
        self._scalar_tensors: dict[tuple[str, int], Any] = {}
        self._scalar_values: dict[Any, int] = {}  # keyed by the tensor (identity hash)
        self._tag_tensors: dict[int, Any] = {}
        self._shape_tensors: dict[tuple[int, ...], Any] = {}  # ShapeOf results, per shape
        self._const_pool: dict[tuple[int, int], Any] = {}
        self._dtypes: dict[tuple[int, int, int], DataType] = {}
        self._fault_pc = -1  # set by a fused segment's fallback: the pc that raised
        self._code = [self._prepare(i, f) for i, f in enumerate(self._functions)]
        self._direct = [self._direct_form(f, code) for f, code in zip(self._functions, self._code)]
        self._plans = [None if direct is not None else self._plan_cache(f)
                       for f, direct in zip(self._functions, self._direct)]
        self._frames: list[_Frame] = []
        self._entry_depth = 0
        self._return_value: Any = None
        self._inputs: dict[str, list[Any]] = {}
        self._converted_inputs = ConvertedInputs()
        self._outputs: dict[str, list[Any]] = {}
        self._last_result: Any = None

    # -- setup ---------------------------------------------------------------------------

    @staticmethod
    def _map_devices(exe: Executable, device: Any) -> list[Device]:
        given = list(device) if isinstance(device, list | tuple) else [device or cpu(0)]
        for dev in given:
            if not isinstance(dev, Device):
                raise TVMError(f"VirtualMachine devices must be Device objects, got {dev!r}")
        mapped = []
        for virtual in exe.virtual_devices:
            exact = [d for d in given if d == virtual]
            same_type = [d for d in given if d.device_type == virtual.device_type]
            if not (exact or same_type):
                raise TVMError(
                    f"the executable needs a {virtual} device but the VM was given {given}"
                )
            mapped.append((exact or same_type)[0])
        return mapped

    @staticmethod
    def _resolve_kernels(exe: Executable) -> list[Any]:
        if not exe.primitive_names:
            return []
        if exe.lib is None:
            raise TVMError(
                f"the executable calls kernels {exe.primitive_names} but has no kernel library"
            )
        funcs = []
        for name in exe.primitive_names:
            try:
                funcs.append(exe.lib.get_function(name, query_imports=True))
            except AttributeError:
                raise TVMError(
                    f"kernel {name!r} is not in the executable's kernel library {exe.lib!r}"
                ) from None
        return funcs

    def _prepare(self, func_index: int, func: VMFunction) -> list[tuple[Any, Any]]:
        """The function's instructions as (handler, operand) pairs (module docstring)."""
        code = []
        for pc, instr in enumerate(func.instructions):
            opcode = instr.opcode
            handler, operand = self._dispatch[opcode], instr
            if opcode in self._tail_dispatch and _tail_position(func.instructions, pc, instr.dst):
                handler = self._tail_dispatch[opcode]
                if opcode == bc.Opcode.Invoke and instr.func_index == func_index:
                    # A loop written as self-recursion: restart this frame in place.
                    tail = [None] * (func.register_file_size - len(instr.args))
                    handler, operand = self._op_self_tail_invoke, (instr.args, tail)
            elif opcode == bc.Opcode.InvokePacked:
                name = self.exe.primitive_names[instr.packed_index]
                operand = PackedCallSite(instr, name, self._packed_funcs[instr.packed_index])
            elif opcode == bc.Opcode.LoadConsti:
                operand = (instr.dst, self._scalar_tensor(instr.val, "int64"))
            code.append(self._wrap(handler, operand, instr))
        for start, end in func.segments:
            self._bind_segment(func.instructions, start, end, code)
        return code

    def _bind_segment(self, instructions: Sequence[bc.Instruction], start: int, end: int,
                      code: list[tuple[Any, Any]]) -> None:
        """Make the recorded super-instruction ``[start, end)`` the entry at ``start``, unless
        a kernel of it is not a C function or its storage's allocator is not pooled host
        memory (then its instructions run one by one)."""
        sites = {pc: operand for pc, (_, operand) in enumerate(code[start:end], start)
                 if isinstance(operand, PackedCallSite)}
        if any(site.kernel is None for site in sites.values()):
            return
        segment = FusedSegment.bind(
            instructions, start, end, sites, lambda v: self._scalar_tensor(v, "int64"),
            lambda instr: self._constant(instr.const_index, instr.device_index))
        if segment.alloc is not None and not self.allocators[segment.alloc.device_index].fusable:
            return
        code[start] = (self._op_fused, (segment, code[start:end]))

    def _direct_form(self, func: VMFunction, code: list[tuple[Any, Any]]) -> Any:
        """The function as a :class:`DirectFunction` if it is one fused segment and a Ret."""
        if not code or code[0][0] != self._op_fused:
            return None
        return DirectFunction.of(func.instructions, code[0][1][0], func.arity)

    def _plan_cache(self, func: VMFunction) -> PlanCache | None:
        """Per-shape plans of a straight-line function (:mod:`.shape_plan`), if it is one and
        host memory is pooled."""
        host = self.exe.host_device_index
        if not (self.allocators[host].fusable and plannable(func.instructions)):
            return None
        sites = {pc: PackedCallSite(instr, self.exe.primitive_names[instr.packed_index],
                                    self._packed_funcs[instr.packed_index])
                 for pc, instr in enumerate(func.instructions)
                 if isinstance(instr, bc.InvokePacked)}
        return PlanCache(func.instructions, func.register_file_size, sites,
                         lambda v: self._scalar_tensor(v, "int64"), self._host_constant, host)

    def _host_constant(self, instr: bc.LoadConst) -> Any:
        """A LoadConst's tensor if it is host memory, else None."""
        if not self.devices[instr.device_index].is_cpu:
            return None
        const = self._constant(instr.const_index, instr.device_index)
        return const if type(const) is _NDArray else None

    def _wrap(self, handler: Any, operand: Any, instr: bc.Instruction) -> tuple[Any, Any]:
        """Hook for subclasses (the profiler) to instrument a prepared instruction."""
        return handler, operand

    def _scalar_tensor(self, value: int, dtype: str) -> Any:
        key = (dtype, value)
        tensor = self._scalar_tensors.get(key)
        if tensor is None:
            tensor = _host_scalar_array(value, dtype)
            tensor._np.flags.writeable = False  # shared by every run: never written
            self._scalar_tensors[key] = tensor
            self._scalar_values[tensor] = value
        return tensor

    def _dtype(self, fields: tuple[int, int, int]) -> DataType:
        dtype = self._dtypes.get(fields)
        if dtype is None:
            dtype = self._dtypes[fields] = DataType.from_fields(*fields)
        return dtype

    # -- the loop ------------------------------------------------------------------------

    def _invoke_global(self, func_index: int, args: list[Any]) -> Any:
        func = self._functions[func_index]
        regs = [None] * func.register_file_size
        regs[: len(args)] = args
        frames = self._frames
        saved_depth = self._entry_depth
        self._entry_depth = len(frames)
        frames.append(_Frame(func_index, self._code[func_index], regs, -1))
        try:
            self._run_loop()
        except Exception as err:
            frame = frames[-1]
            instr = self._functions[frame.func_index].instructions[frame.pc]
            where = (f"in @{self._functions[frame.func_index].name} instruction {frame.pc} "
                     f"({instr.opcode.name})")
            if isinstance(err, TVMError):
                raise type(err)(f"{err}\n  {where}") from err
            raise TVMError(f"VM error {where}: {type(err).__name__}: {err}") from err
        finally:
            del frames[self._entry_depth:]  # after an error (or Ctrl-C) the stack is clean
            self._entry_depth = saved_depth
        result, self._return_value = self._return_value, None
        return result

    def _run_loop(self) -> None:
        """Run until the entry frame returns.

        Handlers take ``(regs, operand, pc)`` and return the next pc of the same frame, or
        ``_SWITCH_FRAME`` after pushing/popping/reusing a frame (the loop reloads code,
        registers and pc from ``frames[-1]``), or ``_EXIT`` when the entry frame returned.
        """
        frames = self._frames
        frame = frames[-1]
        code, regs, pc = frame.code, frame.regs, frame.pc
        try:
            while True:
                handler, operand = code[pc]
                pc = handler(regs, operand, pc)
                if pc < 0:
                    if pc == _EXIT:
                        return
                    frame = frames[-1]
                    code, regs, pc = frame.code, frame.regs, frame.pc
        except BaseException:
            if pc >= 0:  # where the fault happened, for the error message
                frames[-1].pc = pc if self._fault_pc < 0 else self._fault_pc
            self._fault_pc = -1
            raise

    # -- one handler per opcode: (regs, operand, pc) -> next pc ---------------------------

    def _op_move(self, regs: list, instr: bc.Move, pc: int) -> int:
        regs[instr.dst] = regs[instr.src]
        return pc + 1

    def _op_ret(self, regs: list, instr: bc.Ret, pc: int) -> int:
        value = regs[instr.result]
        frames = self._frames
        frame = frames.pop()
        if len(frames) == self._entry_depth:
            self._return_value = value
            return _EXIT
        frames[-1].regs[frame.caller_dst] = value
        return _SWITCH_FRAME

    def _push(self, pc: int, func_index: int, args: list[Any], caller_dst: int) -> int:
        """Call: remember our return pc, push the callee's frame."""
        frames = self._frames
        frames[-1].pc = pc + 1
        func = self._functions[func_index]
        regs = [None] * func.register_file_size
        regs[: len(args)] = args
        frames.append(_Frame(func_index, self._code[func_index], regs, caller_dst))
        return _SWITCH_FRAME

    def _reuse_frame(self, func_index: int, args: list[Any]) -> int:
        """A tail call: the callee takes over this frame and returns to our caller."""
        frame = self._frames[-1]
        regs = [None] * self._functions[func_index].register_file_size
        regs[: len(args)] = args
        frame.func_index = func_index
        frame.code = self._code[func_index]
        frame.regs = regs
        frame.pc = 0
        return _SWITCH_FRAME

    def _op_invoke(self, regs: list, instr: bc.Invoke, pc: int) -> int:
        return self._push(pc, instr.func_index, [regs[r] for r in instr.args], instr.dst)

    def _op_tail_invoke(self, regs: list, instr: bc.Invoke, pc: int) -> int:
        return self._reuse_frame(instr.func_index, [regs[r] for r in instr.args])

    def _op_self_tail_invoke(self, regs: list, operand: tuple[tuple[int, ...], list],
                             pc: int) -> int:
        """Tail call of the running function: new arguments, other registers cleared, pc 0."""
        arg_regs, tail = operand
        args = [regs[r] for r in arg_regs]
        regs[:len(args)] = args
        regs[len(args):] = tail
        return 0

    def _closure_args(self, regs: list, instr: bc.InvokeClosure) -> tuple[int, list[Any]]:
        closure = regs[instr.closure]
        if not isinstance(closure, VMClosure):
            raise TVMError(f"InvokeClosure: register ${instr.closure} holds "
                           f"{type(closure).__name__}, not a closure")
        args = [*closure.free_vars, *(regs[r] for r in instr.args)]
        callee = self._functions[closure.func_index]
        if len(args) != callee.arity:
            raise TVMError(f"closure of @{callee.name} takes {callee.arity} values, got "
                           f"{len(closure.free_vars)} captured + {len(instr.args)} arguments")
        return closure.func_index, args

    def _op_invoke_closure(self, regs: list, instr: bc.InvokeClosure, pc: int) -> int:
        func_index, args = self._closure_args(regs, instr)
        return self._push(pc, func_index, args, instr.dst)

    def _op_tail_invoke_closure(self, regs: list, instr: bc.InvokeClosure, pc: int) -> int:
        func_index, args = self._closure_args(regs, instr)
        return self._reuse_frame(func_index, args)

    def _op_invoke_packed(self, regs: list, site: PackedCallSite, pc: int) -> int:
        site.call(regs)
        return pc + 1

    def _op_fused(self, regs: list, operand: tuple[FusedSegment, list], pc: int) -> int:
        """A fused segment (module docstring): one C call, then the registers it leaves."""
        segment = operand[0]
        try:
            if segment.run(regs, self.allocators):
                return segment.end
        except SegmentError as err:
            self._fault_pc = err.pc
            raise
        return self._run_unfused(regs, operand)

    def _run_unfused(self, regs: list, operand: tuple[FusedSegment, list]) -> int:
        """Run a segment's original instructions one by one (the fused path's fallback)."""
        segment, steps = operand
        pc = segment.start
        try:
            for handler, step_operand in steps:
                handler(regs, step_operand, pc)
                pc += 1
        except BaseException:
            self._fault_pc = pc
            raise
        return segment.end

    def _op_alloc_tensor(self, regs: list, instr: bc.AllocTensor, pc: int) -> int:
        storage = as_storage(regs[instr.storage])
        offset = self._load_scalar_int(regs[instr.offset])
        regs[instr.dst] = storage.alloc_tensor(offset, instr.shape, self._dtype(instr.dtype))
        return pc + 1

    def _op_alloc_tensor_reg(self, regs: list, instr: bc.AllocTensorReg, pc: int) -> int:
        storage = as_storage(regs[instr.storage])
        offset = self._load_scalar_int(regs[instr.offset])
        shape = load_shape(regs[instr.shape_register])
        regs[instr.dst] = storage.alloc_tensor(offset, shape, self._dtype(instr.dtype))
        return pc + 1

    def _op_alloc_adt(self, regs: list, instr: bc.AllocADT, pc: int) -> int:
        regs[instr.dst] = ADT(instr.tag, [regs[r] for r in instr.datatype_fields])
        return pc + 1

    def _op_alloc_closure(self, regs: list, instr: bc.AllocClosure, pc: int) -> int:
        regs[instr.dst] = VMClosure(instr.func_index, [regs[r] for r in instr.free_vars])
        return pc + 1

    def _op_get_field(self, regs: list, instr: bc.GetField, pc: int) -> int:
        value = regs[instr.object]
        if not isinstance(value, ADT):
            raise TVMError(f"GetField: register ${instr.object} holds {type(value).__name__}, "
                           "not an ADT")
        if instr.field_index >= len(value.fields):
            raise TVMError(f"GetField: field {instr.field_index} of an ADT with "
                           f"{len(value.fields)} fields")
        regs[instr.dst] = value.fields[instr.field_index]
        return pc + 1

    def _op_if(self, regs: list, instr: bc.If, pc: int) -> int:
        known = self._scalar_values
        test, target = regs[instr.test], regs[instr.target]
        test_value = known.get(test)
        if test_value is None:
            test_value = self._load_scalar_int(test)
        target_value = known.get(target)
        if target_value is None:
            target_value = self._load_scalar_int(target)
        return pc + (instr.true_offset if test_value == target_value else instr.false_offset)

    def _op_load_const(self, regs: list, instr: bc.LoadConst, pc: int) -> int:
        const = self._const_pool.get((instr.const_index, instr.device_index))
        if const is None:
            const = self._constant(instr.const_index, instr.device_index)
        regs[instr.dst] = const
        return pc + 1

    def _constant(self, const_index: int, device_index: int) -> Any:
        """Constant ``const_index`` on virtual device ``device_index`` (copied once)."""
        key = (const_index, device_index)
        const = self._const_pool.get(key)
        if const is None:
            const = self.exe._constants[const_index]
            target = self.devices[device_index]
            if const.device != target:
                const = const.copyto(target)
            self._const_pool[key] = const
        return const

    def _op_goto(self, regs: list, instr: bc.Goto, pc: int) -> int:
        return pc + instr.pc_offset

    def _op_get_tag(self, regs: list, instr: bc.GetTag, pc: int) -> int:
        value = regs[instr.object]
        if not isinstance(value, ADT):
            raise TVMError(f"GetTag: register ${instr.object} holds {type(value).__name__}, "
                           "not an ADT")
        tensor = self._tag_tensors.get(value.tag)
        if tensor is None:
            tensor = self._tag_tensors[value.tag] = self._scalar_tensor(value.tag, "int32")
        regs[instr.dst] = tensor
        return pc + 1

    def _op_load_consti(self, regs: list, operand: tuple[int, Any], pc: int) -> int:
        dst, tensor = operand
        regs[dst] = tensor
        return pc + 1

    def _op_fatal(self, regs: list, instr: bc.Fatal, pc: int) -> int:
        raise TVMError("VM encountered fatal error")

    def _op_alloc_storage(self, regs: list, instr: bc.AllocStorage, pc: int) -> int:
        if instr.shape:
            count = 1
            for dim in instr.shape:
                count *= dim
            nbytes = count * self._dtype(instr.dtype_hint).itemsize
        else:
            nbytes = self._load_scalar_int(regs[instr.allocation_size])
        allocator = self.allocators[instr.device_index]
        regs[instr.dst] = allocator.alloc(nbytes, instr.alignment)
        return pc + 1

    def _op_shape_of(self, regs: list, instr: bc.ShapeOf, pc: int) -> int:
        # Shape tensors only feed shape functions and ReshapeTensor, which read them: one
        # read-only tensor per shape, like the LoadConsti scalars.
        tensor = regs[instr.tensor]
        shape = tensor.shape if isinstance(tensor, _NDArray) else as_tensor(tensor, "ShapeOf")
        shape_tensor = self._shape_tensors.get(shape)
        if shape_tensor is None:
            if len(self._shape_tensors) >= _MAX_SHAPE_TENSORS:
                self._shape_tensors.clear()
            shape_tensor = _nd.array(np.array(shape, dtype="int64"), self.host_device)
            shape_tensor._np.flags.writeable = False
            self._shape_tensors[shape] = shape_tensor
        regs[instr.dst] = shape_tensor
        return pc + 1

    def _op_reshape_tensor(self, regs: list, instr: bc.ReshapeTensor, pc: int) -> int:
        tensor = as_tensor(regs[instr.tensor], "ReshapeTensor")
        shape = load_shape(regs[instr.newshape])
        # math.prod of Python ints: exact (no int64 wrap-around) and 30x cheaper than np.prod
        if math.prod(shape) != math.prod(tensor.shape):
            raise TVMError(f"ReshapeTensor: cannot view a tensor of shape {tensor.shape} as "
                           f"shape {shape}")
        regs[instr.dst] = tensor._create_view(shape)
        return pc + 1

    def _op_device_copy(self, regs: list, instr: bc.DeviceCopy, pc: int) -> int:
        tensor = as_tensor(regs[instr.src], "DeviceCopy")
        expected = self.devices[instr.src_device_index]
        if tensor.device != expected:
            raise TVMError(f"DeviceCopy: source tensor is on {tensor.device}, the "
                           f"instruction says {expected}")
        regs[instr.dst] = tensor.copyto(self.devices[instr.dst_device_index])
        return pc + 1

    def _op_kill_register(self, regs: list, instr: bc.KillRegister, pc: int) -> int:
        regs[instr.dst] = None
        return pc + 1

    # -- value helpers ---------------------------------------------------------------------

    def _load_scalar_int(self, value: Any) -> int:
        """The integer in a scalar tensor (TVM's ``LoadScalarInt``: any int/bool width)."""
        # A cached scalar tensor (keyed by identity: register values define no __eq__).
        known = self._scalar_values.get(value)
        if known is not None:
            return known
        tensor = as_tensor(value, "scalar operand")
        data = tensor.numpy() if isinstance(tensor, DeviceNDArray) else tensor._np
        if data.size < 1:
            raise TVMError(f"expected a scalar tensor, got shape {tensor.shape}")
        if data.dtype.kind not in "iub":
            raise TVMError(f"expected an integer scalar tensor, got {tensor.dtype}")
        return int(data.item(0))

    # -- the Python API (TVM's runtime.vm.VirtualMachine) ------------------------------------

    def _function_index(self, func_name: str) -> int:
        index = self.exe.global_map.get(func_name)
        if index is None:
            raise TVMError(f"Cannot find function {func_name!r} in the executable; it has "
                           f"{self.exe.globals}")
        return index

    def set_input(self, func_name: str, *args: Any, **kwargs: Any) -> None:
        """Convert and store the arguments of ``func_name`` for :meth:`invoke_stateful`.

        Positional arguments fill parameters in order; keyword arguments by parameter name.
        """
        func = self._functions[self._function_index(func_name)]
        if len(args) + len(kwargs) != func.arity:
            raise TVMError(f"@{func_name} takes {func.arity} arguments {list(func.params)}, got "
                           f"{len(args) + len(kwargs)}")
        values: list[Any] = list(args) + [None] * (func.arity - len(args))
        for name, value in kwargs.items():
            if name not in func.params:
                raise TVMError(f"@{func_name} has no parameter {name!r}; its parameters are "
                               f"{list(func.params)}")
            index = func.params.index(name)
            if index < len(args):
                raise TVMError(f"@{func_name} got parameter {name!r} twice")
            values[index] = value
        stored = self._inputs.get(func_name)
        converted = self._converted_inputs
        self._inputs[func_name] = stored = [
            converted.reusable(func_name, stored, i, value) or self._set_arg(func, i, value)
            for i, value in enumerate(values)
        ]
        for i, value in enumerate(values):
            converted.note(func_name, stored, i, value)

    def _set_arg(self, func: VMFunction, index: int, value: Any) -> Any:
        device = self.devices[func.param_device_indexes[index]]
        converted = convert_argument(value, device)
        if isinstance(converted, _NDArray) and converted.device != device:
            converted = converted.copyto(device)  # as TVM's SetInput does
        check_argument(func, index, converted)
        return converted

    def set_one_input(self, func_name: str, index_or_name: int | str, tensor: Any) -> None:
        """Set one argument of ``func_name`` by position or parameter name."""
        func = self._functions[self._function_index(func_name)]
        if isinstance(index_or_name, str):
            index = self.get_input_index(index_or_name, func_name)
            if index < 0:
                raise TVMError(f"@{func_name} has no parameter {index_or_name!r}; its "
                               f"parameters are {list(func.params)}")
        else:
            index = int(index_or_name)
            if not 0 <= index < func.arity:
                raise TVMError(f"@{func_name} has {func.arity} parameters, no input {index}")
        inputs = self._inputs.setdefault(func_name, [None] * func.arity)
        inputs[index] = self._set_arg(func, index, tensor)

    def set_outputs(self, func_name: str, *outputs: Any) -> None:
        """Give ``func_name`` destination tensors: each run copies its results into them and
        returns them. They stay the caller's: set new ones to keep one run's results."""
        self._function_index(func_name)
        for out in outputs:
            if not isinstance(out, _NDArray):
                raise TVMError(f"set_outputs takes NDArrays, got {type(out).__name__}")
        self._outputs[func_name] = list(outputs)

    def get_input_index(self, input_name: str, func_name: str = "main") -> int:
        """Position of parameter ``input_name`` of ``func_name``, or -1 if it has none."""
        params = self._functions[self._function_index(func_name)].params
        return params.index(input_name) if input_name in params else -1

    def invoke_stateful(self, func_name: str) -> None:
        """Run ``func_name`` on the inputs given by set_input; read results with get_output."""
        self._last_result = self._call(func_name)

    def invoke(self, func_name: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``func_name`` (on ``args`` if given, else on the stored inputs); return the result.

        A single tensor comes back as an NDArray, several as an ADT; it is valid until the next
        run of ``func_name`` (class notes).
        """
        if args or kwargs:
            self.set_input(func_name, *args, **kwargs)
        self._last_result = self._call(func_name)
        return self._last_result

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """``invoke("main", *args, **kwargs)``."""
        return self.invoke("main", *args, **kwargs)

    def _call(self, func_name: str) -> Any:
        # The last result is about to be replaced: drop it first, so its storage (unless the
        # caller still holds it) goes back to the pool for this run to reuse.
        self._last_result = None
        index = self._function_index(func_name)
        func = self._functions[index]
        inputs = self._inputs.get(func_name)
        if inputs is None and func.arity:
            raise TVMError(f"@{func_name} takes {func.arity} arguments {list(func.params)}; "
                           "pass them to invoke/run or call set_input first")
        inputs = inputs or []
        if None in inputs:
            missing = [func.params[i] for i, v in enumerate(inputs) if v is None]
            raise TVMError(f"@{func_name}: inputs {missing} were never set")
        fast = self._direct[index] or self._plans[index]
        result = None
        if fast is not None:  # one C call list, which holds the thread pool itself
            try:
                result = fast.run(inputs, self.allocators)
            except SegmentError as err:
                instr = func.instructions[err.pc]
                raise type(err)(f"{err}\n  in @{func_name} instruction {err.pc} "
                                f"({instr.opcode.name})", err.pc) from err
        if result is None:
            if self._packed_funcs:
                # the workers keep polling between this run's parallel kernels
                with thread_pool.hot():
                    result = self._invoke_global(index, inputs)
            else:
                result = self._invoke_global(index, inputs)
        outputs = self._outputs.get(func_name)
        if outputs:
            self._copy_to_outputs(func_name, result, outputs)
            return outputs[0] if len(outputs) == 1 else ADT(0, outputs)
        return result

    @staticmethod
    def _copy_to_outputs(func_name: str, result: Any, outputs: list[Any]) -> None:
        results = list(result.fields) if isinstance(result, ADT) else [result]
        if len(results) != len(outputs):
            raise TVMError(f"@{func_name} returned {len(results)} values but set_outputs gave "
                           f"{len(outputs)} tensors")
        for value, out in zip(results, outputs):
            out.copyfrom(value)

    def get_output(self, index: int) -> Any:
        """Output ``index`` of the last invoke (a single result is output 0)."""
        result = self._last_result
        if result is None:
            raise TVMError("no outputs: run invoke or invoke_stateful first")
        if isinstance(result, ADT):
            if not 0 <= index < len(result.fields):
                raise TVMError(f"output {index} out of range; there are {len(result.fields)}")
            return result.fields[index]
        if index != 0:
            raise TVMError(f"output {index} out of range; there is 1")
        return result

    def get_outputs(self) -> list[Any]:
        """Every output of the last invoke, in order."""
        return [self.get_output(i) for i in range(self.get_num_outputs())]

    def get_num_outputs(self) -> int:
        result = self._last_result
        if result is None:
            raise TVMError("no outputs: run invoke or invoke_stateful first")
        return len(result.fields) if isinstance(result, ADT) else 1

    def benchmark(self, device: Any, *args: Any, func_name: str = "main", repeat: int = 5,
                  number: int = 5, min_repeat_ms: float | None = None,
                  end_to_end: bool = False, **kwargs: Any) -> Any:
        """Time ``func_name``: ``repeat`` measurements, each the mean of ``number`` runs.

        Returns a :class:`~kiln.runtime.profiling.BenchmarkResult` (seconds). With
        ``end_to_end``, argument conversion is part of each timed run.
        """
        from kiln.runtime.profiling import time_repeats

        if args or kwargs:
            self.set_input(func_name, *args, **kwargs)

        def run_many(n: int) -> None:
            for _ in range(n):
                if end_to_end and (args or kwargs):
                    self.set_input(func_name, *args, **kwargs)
                self.invoke_stateful(func_name)
            if device is not None and hasattr(device, "sync"):
                device.sync()

        return time_repeats(run_many, repeat, number, min_repeat_ms)

    def profile(self, *args: Any, func_name: str = "main", **kwargs: Any) -> Any:
        """Run once under :class:`~kiln.runtime.vm.profiler.VirtualMachineProfiler`;
        returns its per-instruction-kind and per-kernel time table."""
        from kiln.runtime.vm.profiler import VirtualMachineProfiler

        profiler = VirtualMachineProfiler(self.exe, self.devices, self._memory_kinds())
        return profiler.profile(*args, func_name=func_name, **kwargs)

    def _memory_kinds(self) -> dict[Device, str]:
        return {dev: alloc.kind for dev, alloc in zip(self.devices, self.allocators)}

    def plan_stats(self, func_name: str = "main") -> dict[str, Any] | None:
        """kiln's own: the per-shape plans of ``func_name`` (:mod:`.shape_plan`), or None
        when it never runs through one (control flow, naive memory, a static direct form):
        ``plans`` kept now, ``built`` so far, ``disabled`` (a data-dependent shape)."""
        cache = self._plans[self._function_index(func_name)]
        if cache is None:
            return None
        return {"plans": sum(p is not None for p in cache.plans.values()),
                "built": cache.built, "disabled": cache.disabled}

    @property
    def frame_depth(self) -> int:
        """Frames on the stack right now (for tests of tail calls and recursion)."""
        return len(self._frames)

    def memory_in_use(self) -> int:
        """Bytes held by live storage across all allocators."""
        return sum(a.used_bytes for a in {id(a): a for a in self.allocators}.values())
