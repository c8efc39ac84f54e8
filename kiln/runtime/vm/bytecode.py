"""Relay VM instruction set: the 21 opcodes, one frozen record per opcode, and a disassembler.

Entry points: :class:`Opcode`, the instruction records (:class:`Move` … :class:`KillRegister`),
:func:`decode_instruction`, :func:`instruction_hash`, :func:`format_instruction`,
:func:`disassemble`.

Every record knows its serialized field order (TVM's ``SerializeInstruction`` order, where
``dst`` moves around per opcode) through :meth:`Instruction.fields` and
:meth:`Instruction.from_fields`, which registers it reads and writes (used by the loader's
checks), and how it prints. Register operands are plain ``int`` register indices of the
current frame; ``dtype`` operands are ``(type_code, bits, lanes)`` tuples (a dtype string such
as ``"float32"`` is accepted and converted).

Example
-------
>>> from kiln.runtime.vm.bytecode import Move, Ret, decode_instruction
>>> Move(src=0, dst=1).fields()
(0, 1)
>>> decode_instruction([1, 2])
Ret(result=2)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar

from kiln.runtime.dtype import FLOAT8_CODES, DataType
from kiln.runtime.error import TVMError

__all__ = [
    "Opcode",
    "Instruction",
    "Move",
    "Ret",
    "Invoke",
    "InvokeClosure",
    "InvokePacked",
    "AllocTensor",
    "AllocTensorReg",
    "AllocADT",
    "AllocClosure",
    "GetField",
    "If",
    "LoadConst",
    "Goto",
    "GetTag",
    "LoadConsti",
    "Fatal",
    "AllocStorage",
    "ShapeOf",
    "ReshapeTensor",
    "DeviceCopy",
    "KillRegister",
    "INSTRUCTION_CLASSES",
    "decode_instruction",
    "instruction_hash",
    "format_instruction",
    "disassemble",
    "jump_targets",
    "normalize_dtype",
    "dtype_str",
]


class Opcode(IntEnum):
    """TVM's VM opcodes, numbered as in ``bytecode.h``."""

    Move = 0
    Ret = 1
    Invoke = 2
    InvokeClosure = 3
    InvokePacked = 4
    AllocTensor = 5
    AllocTensorReg = 6
    AllocADT = 7
    AllocClosure = 8
    GetField = 9
    If = 10
    LoadConst = 11
    Goto = 12
    GetTag = 13
    LoadConsti = 14
    Fatal = 15
    AllocStorage = 16
    ShapeOf = 17
    ReshapeTensor = 18
    DeviceCopy = 19
    KillRegister = 20


_DTYPE_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "handle", 4: "bfloat"}


def normalize_dtype(dtype: Any) -> tuple[int, int, int]:
    """``(code, bits, lanes)`` from a tuple, a dtype string or a DataType-like object."""
    if isinstance(dtype, tuple) and len(dtype) == 3:
        code, bits, lanes = (int(v) for v in dtype)
    elif hasattr(dtype, "type_code"):
        code, bits, lanes = int(dtype.type_code), int(dtype.bits), int(dtype.lanes)
    elif isinstance(dtype, str):
        code, bits, lanes = _parse_dtype_string(dtype)
    else:
        raise TVMError(f"cannot use {dtype!r} as an instruction dtype")
    if not (0 <= code < 256 and 0 <= bits < 256 and 0 <= lanes < 65536):
        raise TVMError(f"dtype (code={code}, bits={bits}, lanes={lanes}) is out of range")
    return code, bits, lanes


def _parse_dtype_string(text: str) -> tuple[int, int, int]:
    try:
        return DataType(text).as_tuple()
    except TVMError:
        raise TVMError(f"unknown dtype string {text!r}") from None


def dtype_str(dtype: tuple[int, int, int]) -> str:
    """Printable name of a ``(code, bits, lanes)`` dtype: ``float32``, ``bool``, ``int8x4``."""
    code, bits, lanes = dtype
    if code in FLOAT8_CODES and bits == 8 and lanes >= 1:  # printed by name, not code + bits
        return str(DataType.from_fields(code, bits, lanes))
    if (code, bits) == (1, 1):
        name = "bool"
    else:
        name = f"{_DTYPE_CODE_NAMES.get(code, f'custom{code}_')}{bits}"
    return name if lanes == 1 else f"{name}x{lanes}"


class Instruction:
    """Base of the instruction records.

    Subclasses are frozen slotted dataclasses that set ``opcode``, list their register
    operands in ``_reg_fields`` (single registers) / ``_reg_list_fields`` (register tuples),
    and implement :meth:`fields` / :meth:`_from_fields` in TVM's serialized order.
    """

    __slots__ = ()
    opcode: ClassVar[Opcode]
    _reg_fields: ClassVar[tuple[str, ...]] = ()
    _reg_list_fields: ClassVar[tuple[str, ...]] = ()
    # Register written by the instruction (None when it writes none).
    _dst_field: ClassVar[str | None] = "dst"

    def fields(self) -> tuple[int, ...]:
        """Operands in TVM's serialized order (without hash and opcode)."""
        raise NotImplementedError

    @classmethod
    def from_fields(cls, fields: Sequence[int]) -> Instruction:
        """Rebuild from serialized operands; raises TVMError on a wrong field count."""
        try:
            return cls._from_fields(list(fields))
        except (IndexError, ValueError, TypeError) as err:
            raise TVMError(
                f"malformed {cls.__name__} instruction fields {list(fields)}: {err}"
            ) from None

    @classmethod
    def _from_fields(cls, fields: list[int]) -> Instruction:
        raise NotImplementedError

    def registers(self) -> list[int]:
        """Every register the instruction reads or writes."""
        regs = [getattr(self, name) for name in self._reg_fields]
        for name in self._reg_list_fields:
            regs.extend(getattr(self, name))
        return regs

    @property
    def dst_register(self) -> int | None:
        return None if self._dst_field is None else getattr(self, self._dst_field)


def _exact(fields: list[int], count: int, name: str) -> list[int]:
    if len(fields) != count:
        raise ValueError(f"{name} takes {count} fields, got {len(fields)}")
    return fields


def _with_tail(fields: list[int], head: int, count_at: int, name: str) -> tuple[list, list]:
    """Split ``fields`` into a fixed head and a tail whose length is ``fields[count_at]``."""
    if len(fields) < head:
        raise ValueError(f"{name} needs at least {head} fields, got {len(fields)}")
    count = fields[count_at]
    if count < 0 or len(fields) != head + count:
        raise ValueError(f"{name} declares {count} trailing operands but has {len(fields) - head}")
    return fields[:head], fields[head:]


def _record(cls):
    return dataclass(frozen=True, slots=True)(cls)


@_record
class Move(Instruction):
    """``reg[dst] = reg[src]``."""

    src: int
    dst: int
    opcode: ClassVar[Opcode] = Opcode.Move
    _reg_fields: ClassVar[tuple[str, ...]] = ("src", "dst")

    def fields(self):
        return (self.src, self.dst)

    @classmethod
    def _from_fields(cls, f):
        return cls(*_exact(f, 2, "Move"))


@_record
class Ret(Instruction):
    """Return ``reg[result]`` to the caller's destination register."""

    result: int
    opcode: ClassVar[Opcode] = Opcode.Ret
    _reg_fields: ClassVar[tuple[str, ...]] = ("result",)
    _dst_field: ClassVar[str | None] = None

    def fields(self):
        return (self.result,)

    @classmethod
    def _from_fields(cls, f):
        return cls(*_exact(f, 1, "Ret"))


@_record
class Invoke(Instruction):
    """Call global function ``func_index`` with ``args`` registers; result into ``dst``."""

    func_index: int
    args: tuple[int, ...]
    dst: int
    opcode: ClassVar[Opcode] = Opcode.Invoke
    _reg_fields: ClassVar[tuple[str, ...]] = ("dst",)
    _reg_list_fields: ClassVar[tuple[str, ...]] = ("args",)

    def fields(self):
        return (self.func_index, len(self.args), self.dst, *self.args)

    @classmethod
    def _from_fields(cls, f):
        (func_index, _, dst), args = _with_tail(f, 3, 1, "Invoke")
        return cls(func_index, tuple(args), dst)


@_record
class InvokeClosure(Instruction):
    """Call the closure in ``closure`` with its captured values followed by ``args``."""

    closure: int
    args: tuple[int, ...]
    dst: int
    opcode: ClassVar[Opcode] = Opcode.InvokeClosure
    _reg_fields: ClassVar[tuple[str, ...]] = ("closure", "dst")
    _reg_list_fields: ClassVar[tuple[str, ...]] = ("args",)

    def fields(self):
        return (self.closure, len(self.args), self.dst, *self.args)

    @classmethod
    def _from_fields(cls, f):
        (closure, _, dst), args = _with_tail(f, 3, 1, "InvokeClosure")
        return cls(closure, tuple(args), dst)


@_record
class InvokePacked(Instruction):
    """Call kernel ``packed_index``; the last ``output_size`` of ``args`` are outputs (DPS)."""

    packed_index: int
    output_size: int
    args: tuple[int, ...]
    opcode: ClassVar[Opcode] = Opcode.InvokePacked
    _reg_list_fields: ClassVar[tuple[str, ...]] = ("args",)
    _dst_field: ClassVar[str | None] = None

    @property
    def arity(self) -> int:
        return len(self.args)

    def fields(self):
        return (self.packed_index, len(self.args), self.output_size, *self.args)

    @classmethod
    def _from_fields(cls, f):
        (packed_index, _, output_size), args = _with_tail(f, 3, 1, "InvokePacked")
        if not 0 <= output_size <= len(args):
            raise ValueError(f"output_size {output_size} is not within arity {len(args)}")
        return cls(packed_index, output_size, tuple(args))


@_record
class AllocTensor(Instruction):
    """A tensor of constant ``shape`` viewing ``storage`` at byte offset ``reg[offset]``."""

    storage: int
    offset: int
    shape: tuple[int, ...]
    dtype: tuple[int, int, int]
    dst: int
    opcode: ClassVar[Opcode] = Opcode.AllocTensor
    _reg_fields: ClassVar[tuple[str, ...]] = ("storage", "offset", "dst")

    def __post_init__(self):
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    def fields(self):
        return (self.storage, self.offset, *self.dtype, len(self.shape), self.dst, *self.shape)

    @classmethod
    def _from_fields(cls, f):
        (storage, offset, code, bits, lanes, _, dst), shape = _with_tail(f, 7, 5, "AllocTensor")
        return cls(storage, offset, tuple(shape), (code, bits, lanes), dst)


@_record
class AllocTensorReg(Instruction):
    """Like AllocTensor, with the shape read from the 1-D integer tensor ``reg[shape_register]``."""

    storage: int
    offset: int
    shape_register: int
    dtype: tuple[int, int, int]
    dst: int
    opcode: ClassVar[Opcode] = Opcode.AllocTensorReg
    _reg_fields: ClassVar[tuple[str, ...]] = ("storage", "offset", "shape_register", "dst")

    def __post_init__(self):
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))

    def fields(self):
        return (self.storage, self.offset, self.shape_register, *self.dtype, self.dst)

    @classmethod
    def _from_fields(cls, f):
        storage, offset, shape_register, code, bits, lanes, dst = _exact(f, 7, "AllocTensorReg")
        return cls(storage, offset, shape_register, (code, bits, lanes), dst)


@_record
class AllocADT(Instruction):
    """``reg[dst] = ADT(tag, [reg[f] for f in fields])`` (tuples use tag 0)."""

    tag: int
    datatype_fields: tuple[int, ...]
    dst: int
    opcode: ClassVar[Opcode] = Opcode.AllocADT
    _reg_fields: ClassVar[tuple[str, ...]] = ("dst",)
    _reg_list_fields: ClassVar[tuple[str, ...]] = ("datatype_fields",)

    def fields(self):
        return (self.tag, len(self.datatype_fields), self.dst, *self.datatype_fields)

    @classmethod
    def _from_fields(cls, f):
        (tag, _, dst), field_regs = _with_tail(f, 3, 1, "AllocADT")
        return cls(tag, tuple(field_regs), dst)


@_record
class AllocClosure(Instruction):
    """``reg[dst] = VMClosure(func_index, [reg[v] for v in free_vars])``."""

    func_index: int
    free_vars: tuple[int, ...]
    dst: int
    opcode: ClassVar[Opcode] = Opcode.AllocClosure
    _reg_fields: ClassVar[tuple[str, ...]] = ("dst",)
    _reg_list_fields: ClassVar[tuple[str, ...]] = ("free_vars",)

    def fields(self):
        return (self.func_index, len(self.free_vars), self.dst, *self.free_vars)

    @classmethod
    def _from_fields(cls, f):
        (func_index, _, dst), free_vars = _with_tail(f, 3, 1, "AllocClosure")
        return cls(func_index, tuple(free_vars), dst)


@_record
class GetField(Instruction):
    """``reg[dst] = reg[object].fields[field_index]``."""

    object: int
    field_index: int
    dst: int
    opcode: ClassVar[Opcode] = Opcode.GetField
    _reg_fields: ClassVar[tuple[str, ...]] = ("object", "dst")

    def fields(self):
        return (self.object, self.field_index, self.dst)

    @classmethod
    def _from_fields(cls, f):
        return cls(*_exact(f, 3, "GetField"))


@_record
class If(Instruction):
    """``pc += true_offset if scalar(reg[test]) == scalar(reg[target]) else false_offset``."""

    test: int
    target: int
    true_offset: int
    false_offset: int
    opcode: ClassVar[Opcode] = Opcode.If
    _reg_fields: ClassVar[tuple[str, ...]] = ("test", "target")
    _dst_field: ClassVar[str | None] = None

    def fields(self):
        return (self.test, self.target, self.true_offset, self.false_offset)

    @classmethod
    def _from_fields(cls, f):
        return cls(*_exact(f, 4, "If"))


@_record
class LoadConst(Instruction):
    """``reg[dst] = constants[const_index]`` copied once to virtual device ``device_index``."""

    const_index: int
    device_index: int
    dst: int
    opcode: ClassVar[Opcode] = Opcode.LoadConst
    _reg_fields: ClassVar[tuple[str, ...]] = ("dst",)

    def fields(self):
        return (self.const_index, self.device_index, self.dst)

    @classmethod
    def _from_fields(cls, f):
        return cls(*_exact(f, 3, "LoadConst"))


@_record
class Goto(Instruction):
    """``pc += pc_offset``."""

    pc_offset: int
    opcode: ClassVar[Opcode] = Opcode.Goto
    _dst_field: ClassVar[str | None] = None

    def fields(self):
        return (self.pc_offset,)

    @classmethod
    def _from_fields(cls, f):
        return cls(*_exact(f, 1, "Goto"))


@_record
class GetTag(Instruction):
    """``reg[dst]`` = int32 tensor of shape (1,) on the host holding ``reg[object].tag``."""

    object: int
    dst: int
    opcode: ClassVar[Opcode] = Opcode.GetTag
    _reg_fields: ClassVar[tuple[str, ...]] = ("object", "dst")

    def fields(self):
        return (self.object, self.dst)

    @classmethod
    def _from_fields(cls, f):
        return cls(*_exact(f, 2, "GetTag"))


@_record
class LoadConsti(Instruction):
    """``reg[dst]`` = int64 tensor of shape (1,) on the host holding ``val``."""

    val: int
    dst: int
    opcode: ClassVar[Opcode] = Opcode.LoadConsti
    _reg_fields: ClassVar[tuple[str, ...]] = ("dst",)

    def fields(self):
        return (self.val, self.dst)

    @classmethod
    def _from_fields(cls, f):
        return cls(*_exact(f, 2, "LoadConsti"))


@_record
class Fatal(Instruction):
    """Stop with "VM encountered fatal error" (e.g. a non-exhaustive match)."""

    opcode: ClassVar[Opcode] = Opcode.Fatal
    _dst_field: ClassVar[str | None] = None

    def fields(self):
        return ()

    @classmethod
    def _from_fields(cls, f):
        _exact(f, 0, "Fatal")
        return cls()


@_record
class AllocStorage(Instruction):
    """Allocate ``reg[allocation_size]`` bytes on virtual device ``device_index``.

    ``shape`` (TVM's ndim > 0 form) records a shaped allocation; its byte size is then
    ``prod(shape) * itemsize(dtype_hint)``.
    """

    allocation_size: int
    alignment: int
    dtype_hint: tuple[int, int, int]
    device_index: int
    dst: int
    shape: tuple[int, ...] = ()
    opcode: ClassVar[Opcode] = Opcode.AllocStorage
    _reg_fields: ClassVar[tuple[str, ...]] = ("allocation_size", "dst")

    def __post_init__(self):
        object.__setattr__(self, "dtype_hint", normalize_dtype(self.dtype_hint))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    def fields(self):
        return (self.allocation_size, self.alignment, *self.dtype_hint, self.device_index,
                len(self.shape), self.dst, *self.shape)

    @classmethod
    def _from_fields(cls, f):
        head, shape = _with_tail(f, 8, 6, "AllocStorage")
        size, alignment, code, bits, lanes, device_index, _, dst = head
        return cls(size, alignment, (code, bits, lanes), device_index, dst, tuple(shape))


@_record
class ShapeOf(Instruction):
    """``reg[dst]`` = int64 1-D host tensor with the shape of ``reg[tensor]``."""

    tensor: int
    dst: int
    opcode: ClassVar[Opcode] = Opcode.ShapeOf
    _reg_fields: ClassVar[tuple[str, ...]] = ("tensor", "dst")

    def fields(self):
        return (self.tensor, self.dst)

    @classmethod
    def _from_fields(cls, f):
        return cls(*_exact(f, 2, "ShapeOf"))


@_record
class ReshapeTensor(Instruction):
    """``reg[dst]`` = zero-copy view of ``reg[tensor]`` with the shape held in ``reg[newshape]``."""

    tensor: int
    newshape: int
    dst: int
    opcode: ClassVar[Opcode] = Opcode.ReshapeTensor
    _reg_fields: ClassVar[tuple[str, ...]] = ("tensor", "newshape", "dst")

    def fields(self):
        return (self.tensor, self.newshape, self.dst)

    @classmethod
    def _from_fields(cls, f):
        return cls(*_exact(f, 3, "ReshapeTensor"))


@_record
class DeviceCopy(Instruction):
    """``reg[dst]`` = copy of ``reg[src]`` (on virtual device ``src_device_index``) to another."""

    src: int
    src_device_index: int
    dst_device_index: int
    dst: int
    opcode: ClassVar[Opcode] = Opcode.DeviceCopy
    _reg_fields: ClassVar[tuple[str, ...]] = ("src", "dst")

    def fields(self):
        return (self.src, self.src_device_index, self.dst_device_index, self.dst)

    @classmethod
    def _from_fields(cls, f):
        return cls(*_exact(f, 4, "DeviceCopy"))


@_record
class KillRegister(Instruction):
    """``reg[dst] = None``: drop the reference so the allocator can reclaim the memory."""

    dst: int
    opcode: ClassVar[Opcode] = Opcode.KillRegister
    _reg_fields: ClassVar[tuple[str, ...]] = ("dst",)

    def fields(self):
        return (self.dst,)

    @classmethod
    def _from_fields(cls, f):
        return cls(*_exact(f, 1, "KillRegister"))


INSTRUCTION_CLASSES: dict[Opcode, type[Instruction]] = {
    cls.opcode: cls
    for cls in (Move, Ret, Invoke, InvokeClosure, InvokePacked, AllocTensor, AllocTensorReg,
                AllocADT, AllocClosure, GetField, If, LoadConst, Goto, GetTag, LoadConsti, Fatal,
                AllocStorage, ShapeOf, ReshapeTensor, DeviceCopy, KillRegister)
}
assert len(INSTRUCTION_CLASSES) == len(Opcode)


def decode_instruction(words: Sequence[int]) -> Instruction:
    """Build an instruction from ``[opcode, fields...]`` (the serialized form without hash)."""
    if not words:
        raise TVMError("empty instruction")
    try:
        opcode = Opcode(words[0])
    except ValueError:
        raise TVMError(f"unknown VM opcode {words[0]}") from None
    return INSTRUCTION_CLASSES[opcode].from_fields(words[1:])


_MASK64 = (1 << 64) - 1


def instruction_hash(opcode: int, fields: Sequence[int]) -> int:
    """TVM's instruction checksum: fold ``HashCombine`` over the fields starting from opcode.

    ``HashCombine(key, v) = key ^ (v + 0x9e3779b9 + (key << 6) + (key >> 2))`` in 64-bit
    unsigned arithmetic; the result is returned as a signed int64 (how it is stored).
    """
    key = opcode & _MASK64
    for value in fields:
        key = (key ^ (((value & _MASK64) + 0x9E3779B9 + (key << 6) + (key >> 2)) & _MASK64))
        key &= _MASK64
    return key - (1 << 64) if key >= 1 << 63 else key


def _regs(regs: Sequence[int]) -> str:
    return "[" + ", ".join(f"${r}" for r in regs) + "]"


def _offset(value: int) -> str:
    return f"+{value}" if value >= 0 else str(value)


def _packed_operands(i: Any, ref: Any) -> str:
    n_in = len(i.args) - i.output_size
    return (f"packed {i.packed_index}{ref('primitives', i.packed_index)}"
            f" in={_regs(i.args[:n_in])} out={_regs(i.args[n_in:])}")


# Operand text per opcode: f(instr, ref) where ref(table, index) is " (name)" or "".
_OPERAND_TEXT = {
    Opcode.Move: lambda i, ref: f"${i.dst} <- ${i.src}",
    Opcode.Ret: lambda i, ref: f"${i.result}",
    Opcode.Invoke: lambda i, ref: (f"${i.dst} <- func {i.func_index}"
                                   f"{ref('functions', i.func_index)} {_regs(i.args)}"),
    Opcode.InvokeClosure: lambda i, ref: f"${i.dst} <- closure ${i.closure} {_regs(i.args)}",
    Opcode.InvokePacked: _packed_operands,
    Opcode.AllocTensor: lambda i, ref: (f"${i.dst} <- storage ${i.storage} offset ${i.offset}"
                                        f" shape={list(i.shape)} {dtype_str(i.dtype)}"),
    Opcode.AllocTensorReg: lambda i, ref: (f"${i.dst} <- storage ${i.storage} offset "
                                           f"${i.offset} shape=${i.shape_register} "
                                           f"{dtype_str(i.dtype)}"),
    Opcode.AllocADT: lambda i, ref: f"${i.dst} <- tag {i.tag} {_regs(i.datatype_fields)}",
    Opcode.AllocClosure: lambda i, ref: (f"${i.dst} <- func {i.func_index}"
                                         f"{ref('functions', i.func_index)} captures "
                                         f"{_regs(i.free_vars)}"),
    Opcode.GetField: lambda i, ref: f"${i.dst} <- ${i.object}[{i.field_index}]",
    Opcode.If: lambda i, ref: (f"${i.test} == ${i.target} ? {_offset(i.true_offset)} : "
                               f"{_offset(i.false_offset)}"),
    Opcode.LoadConst: lambda i, ref: (f"${i.dst} <- const {i.const_index} on device "
                                      f"{i.device_index}"),
    Opcode.Goto: lambda i, ref: _offset(i.pc_offset),
    Opcode.GetTag: lambda i, ref: f"${i.dst} <- tag of ${i.object}",
    Opcode.LoadConsti: lambda i, ref: f"${i.dst} <- {i.val}",
    Opcode.Fatal: lambda i, ref: "",
    Opcode.AllocStorage: lambda i, ref: (f"${i.dst} <- size ${i.allocation_size} align "
                                         f"{i.alignment} {dtype_str(i.dtype_hint)} on device "
                                         f"{i.device_index}"
                                         + (f" shape={list(i.shape)}" if i.shape else "")),
    Opcode.ShapeOf: lambda i, ref: f"${i.dst} <- shape of ${i.tensor}",
    Opcode.ReshapeTensor: lambda i, ref: f"${i.dst} <- ${i.tensor} reshaped to ${i.newshape}",
    Opcode.DeviceCopy: lambda i, ref: (f"${i.dst} <- ${i.src} from device "
                                       f"{i.src_device_index} to device {i.dst_device_index}"),
    Opcode.KillRegister: lambda i, ref: f"${i.dst}",
}
assert len(_OPERAND_TEXT) == len(Opcode)


def format_instruction(instr: Instruction, names: dict[str, Sequence[str]] | None = None) -> str:
    """One instruction as ``OpName  operands`` (see :func:`disassemble` for the notation).

    ``names`` may map ``"functions"`` and ``"primitives"`` to name lists, shown after the
    function and kernel indices they name.
    """
    names = names or {}

    def ref(table: str, index: int) -> str:
        known = names.get(table, ())
        return f" ({known[index]})" if 0 <= index < len(known) else ""

    return f"{instr.opcode.name:<15}{_OPERAND_TEXT[instr.opcode](instr, ref)}".rstrip()


def jump_targets(instructions: Sequence[Instruction]) -> set[int]:
    """Instruction indices reached by an If or Goto."""
    targets = set()
    for pc, instr in enumerate(instructions):
        if isinstance(instr, If):
            targets.update((pc + instr.true_offset, pc + instr.false_offset))
        elif isinstance(instr, Goto):
            targets.add(pc + instr.pc_offset)
    return targets


def disassemble(name: str, params: Sequence[str], instructions: Sequence[Instruction],
                register_file_size: int, names: dict[str, Sequence[str]] | None = None) -> str:
    """A ``dis``-style listing of one VM function.

    Format: a header ``fn @name(%p0, %p1) -> registers: R, instructions: N``, then one line
    per instruction: a ``>>`` marker when a jump lands there, the instruction index, the
    opcode name padded to 15 columns, and the operands. ``$k`` is register ``k`` of the
    frame; ``a <- b`` reads "a receives b"; jump offsets are relative (``+3``) with the
    absolute target after ``->``; callee and kernel names follow their indices in
    parentheses.

    Example
    -------
    >>> from kiln.runtime.vm.bytecode import LoadConsti, Ret
    >>> print(disassemble("main", [], [LoadConsti(7, 0), Ret(0)], 1))
    fn @main() -> registers: 1, instructions: 2
           0 LoadConsti     $0 <- 7
           1 Ret            $0
    """
    header = (f"fn @{name}({', '.join('%' + p for p in params)}) -> registers: "
              f"{register_file_size}, instructions: {len(instructions)}")
    targets = jump_targets(instructions)
    lines = [header]
    for pc, instr in enumerate(instructions):
        marker = ">>" if pc in targets else "  "
        text = format_instruction(instr, names)
        if isinstance(instr, If):
            text += f"  -> {pc + instr.true_offset} / {pc + instr.false_offset}"
        elif isinstance(instr, Goto):
            text += f"  -> {pc + instr.pc_offset}"
        lines.append(f"  {marker}{pc:>4} {text}")
    return "\n".join(lines)
