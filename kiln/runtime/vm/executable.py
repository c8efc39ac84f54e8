"""The VM Executable: functions of bytecode, a constant pool, kernel names and the kernel library.

Entry points: :class:`VMFunction`, :class:`Executable` (``save``/``load_exec``, ``bytecode``,
``stats``, late-bound constants), :func:`verify_executable`.

A compiler builds an Executable directly from Python objects::

    exe = Executable(functions=[VMFunction("main", ["x"], [...], register_file_size=4)],
                     constants=[weight], primitive_names=["fused_add"], lib=kernel_module)

``save()`` writes TVM's section layout (reference §1.9) with kiln's own version string:

1. ``u64 0xD225DE2F4214151D``, ``string "kiln-0.1.0"``;
2. virtual devices ``vector<pair<DLDevice, string memory_scope>>``, ``i32 host_device_index``;
3. globals ``vector<string>`` in function-index order;
4. constants: ``u64 n``, per constant ``u32 tag`` then an NDArray blob (tag 0) or the
   late-bound name ``"const_<i>"`` (tag 1); then ``vector<i64> const_device_indexes``;
5. primitive names ``vector<string>`` and per-primitive attrs ``map<u64, map<string,string>>``;
6. code: ``u64 num_functions``; per function ``vector<string>{name, str(register_file_size),
   str(num_instructions)}``, ``vector<string> params``, ``vector<i64> param_device_indexes``,
   then per instruction ``vector<i64>[hash, opcode, fields...]``. kiln's additions: when a
   function declares parameter types, its header vector has a 4th string, e.g.
   ``"float32[1,10];?"`` (``-1`` = dynamic dimension, ``?`` = unchecked parameter); when it
   has fused segments (super-instructions, :mod:`kiln.runtime.vm.segment`), a 5th string
   ``"0:9;12:20"`` (the 4th is then ``""`` if there are no parameter types).

:meth:`Executable.load_exec` reads that back and checks everything a running VM relies on
(:func:`verify_executable`): register, function, constant, kernel and device indices, jump
targets, field counts, instruction hashes and fused segments; a bad file raises
:class:`TVMError`.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kiln.runtime.binary import BinaryReader, BinaryWriter
from kiln.runtime.error import TVMError
from kiln.runtime.vm import bytecode as bc
from kiln.runtime.vm.segment import check_segments, find_segments

__all__ = ["VMFunction", "Executable", "verify_executable", "VM_MAGIC", "VM_VERSION"]

VM_MAGIC = 0xD225DE2F4214151D
VM_VERSION = "kiln-0.1.0"
# Sanity bound on a function's register file so a tampered file cannot request a huge frame.
MAX_REGISTERS = 1 << 20
_CONST_IMMEDIATE, _CONST_LATE_BOUND = 0, 1
_CPU_DEVICE_TYPE = 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# Instructions after which control never falls through to pc + 1.
_NO_FALLTHROUGH = (bc.Ret, bc.Goto, bc.Fatal, bc.If)


@dataclass(frozen=True, slots=True)
class VMFunction:
    """One function of bytecode (TVM's ``VMFunction``).

    Parameters
    ----------
    name : str
        Global name (``"main"``).
    params : sequence of str
        Parameter names; argument ``i`` arrives in register ``i``.
    instructions : sequence of Instruction
        The body.
    register_file_size : int
        Registers in one frame of this function.
    param_device_indexes : sequence of int, optional
        Virtual device index of each parameter (default: all 0).
    param_types : sequence, optional
        Per parameter, ``(shape, dtype)`` of the tensor it must be (``-1`` for a dynamic
        dimension) or ``None`` for no check (tuples, closures). The VM checks arguments
        against it. Serialized as a 4th entry of the function header (see :func:`_spec_text`).
    segments : sequence of (int, int), optional
        The function's super-instructions: instruction ranges ``[start, end)`` the VM runs as
        one C call list (:mod:`kiln.runtime.vm.segment`; the VM compiler finds them with
        :meth:`Executable.fuse_segments`). Serialized as a 5th header entry ``"0:9;12:20"``.

    Example
    -------
    >>> from kiln.runtime.vm.bytecode import Ret
    >>> VMFunction("identity", ["x"], [Ret(0)], 1).arity
    1
    """

    name: str
    params: tuple[str, ...]
    instructions: tuple[bc.Instruction, ...]
    register_file_size: int
    param_device_indexes: tuple[int, ...] = ()
    param_types: tuple[tuple[tuple[int, ...], str] | None, ...] = ()
    segments: tuple[tuple[int, int], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "instructions", tuple(self.instructions))
        devices = tuple(self.param_device_indexes) or (0,) * len(self.params)
        object.__setattr__(self, "param_device_indexes", devices)
        types = tuple(
            None if t is None else (tuple(int(d) for d in t[0]), str(t[1]))
            for t in self.param_types
        )
        object.__setattr__(self, "param_types", types)
        object.__setattr__(self, "segments", tuple((s, e) for s, e in self.segments))

    @property
    def arity(self) -> int:
        return len(self.params)


def _device_tuple(device: Any) -> tuple[int, int, str]:
    """``(device_type, device_id, memory_scope)`` from a Device, a pair, or a triple."""
    scope = ""
    if isinstance(device, tuple) and len(device) == 2 and isinstance(device[1], str):
        device, scope = device
    if hasattr(device, "device_type"):
        return int(device.device_type), int(device.device_id), scope
    if isinstance(device, tuple) and len(device) in (2, 3):
        return int(device[0]), int(device[1]), str(device[2]) if len(device) == 3 else scope
    raise TVMError(f"cannot use {device!r} as a virtual device")


class Executable:
    """Bytecode functions + constant pool + kernel names + kernel library; loadable by the VM.

    Parameters
    ----------
    functions : sequence of VMFunction
        Function ``i`` is function index ``i`` (used by Invoke / AllocClosure).
    constants : sequence of NDArray or None
        The constant pool (LoadConst). ``None`` marks a late-bound constant still to be
        loaded with :meth:`load_late_bound_consts`.
    primitive_names : sequence of str
        Kernel name for each packed index (InvokePacked), looked up in ``lib``.
    lib : Module, optional
        Kernel library; the VM resolves each primitive with
        ``lib.get_function(name, query_imports=True)``.
    virtual_devices : sequence, optional
        ``Device`` or ``(Device, memory_scope)`` per virtual device index; default ``[cpu(0)]``.
    host_device_index : int
        Virtual device used for shape tensors and scalars (LoadConsti, ShapeOf, GetTag).
    const_device_indexes : sequence of int, optional
        Virtual device of each constant (default: host).
    primitive_attrs : dict[int, dict[str, str]], optional
        String attributes per packed index.

    Example
    -------
    >>> from kiln.runtime.vm.bytecode import LoadConsti, Ret
    >>> exe = Executable([VMFunction("main", [], [LoadConsti(3, 0), Ret(0)], 1)])
    >>> exe.globals, exe.get_function_arity("main")
    (['main'], 0)
    """

    def __init__(
        self,
        functions: Sequence[VMFunction],
        constants: Sequence[Any] = (),
        primitive_names: Sequence[str] = (),
        lib: Any = None,
        virtual_devices: Sequence[Any] | None = None,
        host_device_index: int = 0,
        const_device_indexes: Sequence[int] | None = None,
        primitive_attrs: dict[int, dict[str, str]] | None = None,
    ) -> None:
        self.functions = list(functions)
        for func in self.functions:
            _check(isinstance(func, VMFunction), "functions", f"{func!r} is not a VMFunction")
        self._constants = list(constants)
        self.primitive_names = [str(n) for n in primitive_names]
        self.lib = lib
        self._virtual_devices = [_device_tuple(d) for d in (virtual_devices or [(1, 0)])]
        self.host_device_index = int(host_device_index)
        if const_device_indexes is None:
            const_device_indexes = [self.host_device_index] * len(self._constants)
        self.const_device_indexes = [int(i) for i in const_device_indexes]
        self.primitive_attrs = {int(k): dict(v) for k, v in (primitive_attrs or {}).items()}
        self.global_map = {f.name: i for i, f in enumerate(self.functions)}
        self._module = None
        verify_executable(self)

    def host_memory_constant(self, instr: bc.LoadConst) -> bool:
        """Whether the tensor a LoadConst loads is host memory (its virtual device is a CPU)."""
        return self._virtual_devices[instr.device_index][0] == _CPU_DEVICE_TYPE

    def fuse_segments(self) -> Executable:
        """Record every function's super-instructions (the VM compiler's last step).

        Each longest straight run of kernel work whose tensors view one storage at static
        offsets and whose kernels are C functions of :attr:`lib` becomes a ``segments`` range
        of its function (:func:`kiln.runtime.vm.segment.find_segments`). Returns ``self``.
        """
        native = [getattr(self._kernel(name), "is_native", False)
                  for name in self.primitive_names]
        self.functions = [
            replace(func, segments=find_segments(func.instructions, self.host_memory_constant,
                                                 native.__getitem__))
            for func in self.functions
        ]
        verify_executable(self)
        return self

    def _kernel(self, name: str) -> Any:
        if self.lib is None:
            return None
        try:
            return self.lib.get_function(name, query_imports=True)
        except AttributeError:
            return None

    # -- introspection (TVM's Python Executable surface) -------------------------------------

    @property
    def globals(self) -> list[str]:
        """Function names in function-index order."""
        return [f.name for f in self.functions]

    @property
    def primitive_ops(self) -> list[str]:
        """Kernel names in packed-index order."""
        return list(self.primitive_names)

    @property
    def constants(self) -> list[Any]:
        """The constant pool (``None`` for a late-bound constant not loaded yet)."""
        return list(self._constants)

    @property
    def virtual_devices(self) -> list[Any]:
        """``Device`` of each virtual device index."""
        from kiln.runtime.device import Device

        return [Device(t, i) for t, i, _ in self._virtual_devices]

    @property
    def memory_scopes(self) -> list[str]:
        return [scope for _, _, scope in self._virtual_devices]

    def function(self, name: str) -> VMFunction:
        """The function called ``name``; TVMError naming the known functions otherwise."""
        index = self.global_map.get(name)
        if index is None:
            raise TVMError(f"Cannot find function {name!r} in executable; it has {self.globals}")
        return self.functions[index]

    def get_lib(self) -> Any:
        """The kernel library (TVM's ``Executable.get_lib``)."""
        return self.lib

    def get_function_params(self, func_name: str) -> list[str]:
        return list(self.function(func_name).params)

    def get_function_arity(self, func_name: str) -> int:
        return self.function(func_name).arity

    def get_function_param_name(self, func_name: str, index: int) -> str:
        params = self.function(func_name).params
        if not 0 <= index < len(params):
            raise TVMError(f"{func_name!r} has {len(params)} parameters, no parameter {index}")
        return params[index]

    @property
    def bytecode(self) -> str:
        """A ``dis``-style listing of every function, separated by blank lines.

        Each function starts with ``fn @name(%param, ...) -> registers: R, instructions: N``,
        then ``fused segments: [0, 9) ...`` if it has super-instructions; each instruction
        line holds a ``>>`` marker when some If/Goto jumps there, the instruction index, the
        opcode name (15 columns) and its operands: ``$k`` is register k of the frame,
        ``a <- b`` means a receives b, jump offsets are relative with the absolute target
        after ``->``, and function/kernel indices are followed by their
        names in parentheses (see :func:`kiln.runtime.vm.bytecode.disassemble`).

        Example
        -------
        >>> from kiln.runtime.vm.bytecode import If, LoadConsti, Ret
        >>> f = VMFunction("main", ["x"], [LoadConsti(1, 1), If(0, 1, 1, 2), Ret(0), Ret(1)], 2)
        >>> print(Executable([f]).bytecode)
        fn @main(%x) -> registers: 2, instructions: 4
               0 LoadConsti     $1 <- 1
               1 If             $0 == $1 ? +1 : +2  -> 2 / 3
          >>   2 Ret            $0
          >>   3 Ret            $1
        <BLANKLINE>
        """
        names = {"functions": self.globals, "primitives": self.primitive_names}
        return "\n\n".join(_listing(f, names) for f in self.functions) + "\n"

    @property
    def stats(self) -> str:
        """Counts and sizes: constants, globals, kernels and instructions per opcode."""
        lines = ["Relay VM executable statistics:"]
        shapes = [
            "late-bound" if c is None else f"{tuple(c.shape)} {c.dtype}" for c in self._constants
        ]
        total = sum(_nbytes(c) for c in self._constants if c is not None)
        lines.append(f"  Constants (#{len(shapes)}, {total} bytes): [{', '.join(shapes)}]")
        lines.append(
            f"  Globals (#{len(self.functions)}): "
            f"[{', '.join(f'({f.name}, {i})' for i, f in enumerate(self.functions))}]"
        )
        lines.append(f"  Primitive ops (#{len(self.primitive_names)}): "
                     f"[{', '.join(self.primitive_names)}]")
        counts = Counter(i.opcode.name for f in self.functions for i in f.instructions)
        n_instr = sum(counts.values())
        per_op = ", ".join(f"{name}: {n}" for name, n in sorted(counts.items()))
        lines.append(f"  Instructions (#{n_instr}): {{{per_op}}}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Executable(globals={self.globals}, constants={len(self._constants)}, "
                f"primitives={len(self.primitive_names)})")

    # -- serialization -------------------------------------------------------------------

    def save(self) -> tuple[bytes, Any]:
        """Serialize the bytecode and constants; returns ``(code_bytes, lib)``.

        Example
        -------
        >>> from kiln.runtime.vm.bytecode import LoadConsti, Ret
        >>> exe = Executable([VMFunction("main", [], [LoadConsti(3, 0), Ret(0)], 1)])
        >>> code, lib = exe.save()
        >>> Executable.load_exec(code, lib).bytecode == exe.bytecode
        True
        """
        w = BinaryWriter()
        w.u64(VM_MAGIC)
        w.string(VM_VERSION)
        w.u64(len(self._virtual_devices))
        for device_type, device_id, scope in self._virtual_devices:
            w.device(device_type, device_id)
            w.string(scope)
        w.i32(self.host_device_index)
        w.string_vector(self.globals)
        self._save_constants(w)
        w.string_vector(self.primitive_names)
        w.u64(len(self.primitive_attrs))
        for index in sorted(self.primitive_attrs):
            w.u64(index)
            attrs = self.primitive_attrs[index]
            w.u64(len(attrs))
            for key in sorted(attrs):
                w.string(key)
                w.string(attrs[key])
        w.u64(len(self.functions))
        for func in self.functions:
            header = [func.name, str(func.register_file_size), str(len(func.instructions))]
            if func.param_types or func.segments:
                header.append(_spec_text(func.param_types) if func.param_types else "")
            if func.segments:
                header.append(";".join(f"{start}:{end}" for start, end in func.segments))
            w.string_vector(header)
            w.string_vector(func.params)
            w.i64_vector(func.param_device_indexes)
            for instr in func.instructions:
                fields = instr.fields()
                w.i64_vector([bc.instruction_hash(instr.opcode, fields), instr.opcode, *fields])
        return w.getvalue(), self.lib

    def _save_constants(self, w: BinaryWriter) -> None:
        w.u64(len(self._constants))
        for index, const in enumerate(self._constants):
            if const is None:
                w.u32(_CONST_LATE_BOUND)
                w.string(_late_bound_name(index))
            else:
                from kiln.runtime.params import save_ndarray

                w.u32(_CONST_IMMEDIATE)
                w.raw(save_ndarray(const))
        w.i64_vector(self.const_device_indexes)

    @classmethod
    def load_exec(cls, bytecode: bytes | bytearray, lib: Any = None) -> Executable:
        """Load an Executable saved by :meth:`save`; bad bytes raise :class:`TVMError`."""
        if not isinstance(bytecode, bytes | bytearray | memoryview):
            raise TVMError(f"load_exec expects bytes, got {type(bytecode).__name__}")
        r = BinaryReader(bytes(bytecode), what="VM executable")
        magic = r.u64("magic")
        if magic != VM_MAGIC:
            raise TVMError(
                f"VM executable has bad magic {magic:#x} (expected {VM_MAGIC:#x}); "
                "not a VM executable"
            )
        version = r.string("version")
        if version != VM_VERSION:
            raise TVMError(
                f"VM executable version mismatch: file was written by {version!r}, "
                f"this runtime is {VM_VERSION!r}"
            )
        virtual_devices = []
        for i in range(r.count(16, "virtual devices")):
            device_type, device_id = r.device(f"virtual device {i}")
            virtual_devices.append((device_type, device_id, r.string(f"memory scope {i}")))
        host_device_index = r.i32("host device index")
        global_names = r.string_vector("globals")
        constants, const_device_indexes = _load_constants(r)
        primitive_names = r.string_vector("primitive names")
        primitive_attrs: dict[int, dict[str, str]] = {}
        for _ in range(r.count(16, "primitive attrs")):
            index = r.u64("primitive attr index")
            attrs = {}
            for _ in range(r.count(16, f"attrs of primitive {index}")):
                key = r.string("primitive attr key")
                attrs[key] = r.string("primitive attr value")
            primitive_attrs[index] = attrs
        functions = [_load_function(r, i) for i in range(r.count(40, "functions"))]
        r.expect_end()
        if [f.name for f in functions] != global_names:
            raise TVMError(
                f"VM executable is corrupt: globals {global_names} do not match the code "
                f"section's functions {[f.name for f in functions]}"
            )
        return cls(functions, constants, primitive_names, lib, virtual_devices,
                   host_device_index, const_device_indexes, primitive_attrs)

    # -- late-bound constants ------------------------------------------------------------

    def move_late_bound_consts(self, path: str, byte_limit: int) -> None:
        """Move constants of at least ``byte_limit`` bytes into a params file at ``path``.

        The saved executable then holds only their names (``const_<i>``); call
        :meth:`load_late_bound_consts` with the same file before creating a VM.
        """
        from kiln.runtime.params import save_param_dict

        moved = {
            _late_bound_name(i): c
            for i, c in enumerate(self._constants)
            if c is not None and _nbytes(c) >= byte_limit
        }
        with open(path, "wb") as f:
            f.write(save_param_dict(moved))
        for name in moved:
            self._constants[int(name[len("const_"):])] = None

    def load_late_bound_consts(self, path: str) -> None:
        """Fill late-bound constants from a params file written by move_late_bound_consts."""
        from kiln.runtime.params import load_param_dict

        with open(path, "rb") as f:
            params = load_param_dict(f.read())
        for index, const in enumerate(self._constants):
            if const is None:
                name = _late_bound_name(index)
                if name not in params:
                    raise TVMError(
                        f"late-bound constant {name!r} is missing from {path!r} "
                        f"(it has {sorted(params)})"
                    )
                self._constants[index] = params[name]

    def unbound_constants(self) -> list[int]:
        """Indices of late-bound constants that have not been loaded."""
        return [i for i, c in enumerate(self._constants) if c is None]

    # -- Module view ---------------------------------------------------------------------

    @property
    def mod(self) -> Any:
        """This executable as a binary-serializable runtime Module (type key ``VMExecutable``)
        whose single import is the kernel library, so ``exe.mod.export_library(path)`` packs
        bytecode and kernels into one shared library."""
        if self._module is None:
            from kiln.runtime.vm.module import VMExecutableModule

            self._module = VMExecutableModule(self)
        return self._module


def _listing(func: VMFunction, names: dict[str, Sequence[str]]) -> str:
    """One function's ``dis``-style listing, its super-instructions after the header."""
    text = bc.disassemble(func.name, func.params, func.instructions, func.register_file_size,
                          names)
    if not func.segments:
        return text
    header, _, body = text.partition("\n")
    ranges = " ".join(f"[{start}, {end})" for start, end in func.segments)
    return f"{header}\n  fused segments: {ranges}\n{body}"


def _late_bound_name(index: int) -> str:
    return f"const_{index}"


def _nbytes(array: Any) -> int:
    size = 1
    for dim in array.shape:
        size *= int(dim)
    return size * ((_dtype_bits(array.dtype) + 7) // 8)


def _dtype_bits(dtype: Any) -> int:
    code_bits_lanes = bc.normalize_dtype(str(dtype) if not hasattr(dtype, "bits") else dtype)
    return code_bits_lanes[1] * code_bits_lanes[2]


def _load_constants(r: BinaryReader) -> tuple[list[Any], list[int]]:
    constants: list[Any] = []
    for i in range(r.count(4, "constants")):
        tag = r.u32(f"constant {i} tag")
        if tag == _CONST_IMMEDIATE:
            from kiln.runtime.params import load_ndarray

            try:
                constants.append(load_ndarray(r))
            # The blob reader should only raise TVMError; a bad shape can still reach NumPy.
            except (TVMError, ValueError, OverflowError, MemoryError) as err:
                raise TVMError(f"VM executable constant {i} is corrupt: {err}") from None
        elif tag == _CONST_LATE_BOUND:
            name = r.string(f"constant {i} name")
            if name != _late_bound_name(i):
                raise TVMError(f"VM executable is corrupt: late-bound constant {i} is {name!r}")
            constants.append(None)
        else:
            raise TVMError(f"VM executable is corrupt: constant {i} has unknown tag {tag}")
    return constants, r.i64_vector("constant device indexes")


_INT_TEXT = re.compile(r"[0-9]{1,19}")


def _load_function(r: BinaryReader, index: int) -> VMFunction:
    header = r.string_vector(f"function {index} header")
    if len(header) not in (3, 4, 5) or not all(_INT_TEXT.fullmatch(h) for h in header[1:3]):
        raise TVMError(
            f"VM executable is corrupt: function {index} header {header!r} is not "
            "[name, register_file_size, num_instructions(, param types(, segments))]"
        )
    name, register_file_size, num_instructions = header[0], int(header[1]), int(header[2])
    param_types = _parse_spec_text(header[3], name) if len(header) >= 4 and header[3] else ()
    segments = _parse_segments_text(header[4], name) if len(header) == 5 else ()
    params = r.string_vector(f"function {name!r} params")
    param_device_indexes = r.i64_vector(f"function {name!r} param device indexes")
    if num_instructions * 24 > r.remaining:
        raise TVMError(
            f"VM executable is truncated or corrupt: function {name!r} claims "
            f"{num_instructions} instructions but only {r.remaining} bytes remain"
        )
    instructions = []
    for pc in range(num_instructions):
        words = r.i64_vector(f"instruction {pc} of {name!r}")
        if len(words) < 2:
            raise TVMError(f"VM executable is corrupt: instruction {pc} of {name!r} is empty")
        stored_hash, opcode, fields = words[0], words[1], words[2:]
        if bc.instruction_hash(opcode, fields) != stored_hash:
            raise TVMError(
                f"VM executable is corrupt: hash mismatch in instruction {pc} of {name!r}"
            )
        try:
            instructions.append(bc.decode_instruction([opcode, *fields]))
        except TVMError as err:
            raise TVMError(f"VM executable instruction {pc} of {name!r}: {err}") from None
    return VMFunction(name, params, instructions, register_file_size, param_device_indexes,
                      param_types, segments)


def _spec_text(param_types: Sequence[Any]) -> str:
    """Param types as text: ``;``-separated ``dtype[d0,d1]`` entries, ``?`` for unchecked."""
    return ";".join(
        "?" if t is None else f"{t[1]}[{','.join(str(d) for d in t[0])}]" for t in param_types
    )


_SPEC = re.compile(r"([a-z]+[0-9]*(?:x[0-9]+)?)\[((?:-?[0-9]{1,18}(?:,-?[0-9]{1,18})*)?)\]")


def _parse_spec_text(text: str, name: str) -> tuple:
    specs = []
    for entry in text.split(";"):
        match = _SPEC.fullmatch(entry)
        if entry == "?":
            specs.append(None)
        elif match:
            dims = tuple(int(d) for d in match.group(2).split(",")) if match.group(2) else ()
            specs.append((dims, match.group(1)))
        else:
            raise TVMError(f"VM executable is corrupt: bad param type {entry!r} in {name!r}")
    return tuple(specs)


_SEGMENT = re.compile(r"([0-9]{1,19}):([0-9]{1,19})")


def _parse_segments_text(text: str, name: str) -> tuple[tuple[int, int], ...]:
    """``"0:9;12:20"`` as ``((0, 9), (12, 20))``; the ranges are checked by the verifier."""
    segments = []
    for entry in text.split(";"):
        match = _SEGMENT.fullmatch(entry)
        if not match:
            raise TVMError(f"VM executable is corrupt: bad fused segment {entry!r} in {name!r}")
        segments.append((int(match.group(1)), int(match.group(2))))
    return tuple(segments)


def _is_int64(value: Any) -> bool:
    try:
        return _INT64_MIN <= operator.index(value) <= _INT64_MAX
    except TypeError:
        return False


def _check(ok: bool, where: str, message: str) -> None:
    if not ok:
        raise TVMError(f"invalid VM executable: {where}: {message}")


def _check_index(value: int, limit: int, where: str, what: str) -> None:
    _check(0 <= value < limit, where, f"{what} {value} is out of range [0, {limit})")


def verify_executable(exe: Executable) -> None:
    """Check every index an instruction uses against what the executable holds.

    Raises :class:`TVMError` naming the function, instruction and operand at fault, so a
    running VM never meets an out-of-range register, function, constant, kernel, device or
    jump target.
    """
    n_devices = len(exe._virtual_devices)
    _check(n_devices > 0, "virtual devices", "an executable needs at least one device")
    _check_index(exe.host_device_index, n_devices, "executable", "host device index")
    _check(len(exe.const_device_indexes) == len(exe._constants), "constants",
           f"{len(exe.const_device_indexes)} device indexes for {len(exe._constants)} constants")
    for i, dev in enumerate(exe.const_device_indexes):
        _check_index(dev, n_devices, f"constant {i}", "device index")
    for index in exe.primitive_attrs:
        _check_index(index, len(exe.primitive_names), "primitive attrs", "packed index")
    _check(len(exe.global_map) == len(exe.functions), "globals", "duplicate function names")
    for func in exe.functions:
        _verify_function(exe, func, n_devices)


def _verify_function(exe: Executable, func: VMFunction, n_devices: int) -> None:
    where = f"function {func.name!r}"
    size = func.register_file_size
    _check(0 <= size <= MAX_REGISTERS, where, f"register file size {size} is out of range")
    _check(func.arity <= size, where, f"{func.arity} params but {size} registers")
    _check(len(func.param_types) in (0, func.arity), where,
           f"{len(func.param_types)} param types for {func.arity} params")
    for spec in func.param_types:
        if spec is not None:
            _check(all(d >= -1 for d in spec[0]), where, f"bad param shape {spec[0]}")
            _check_dtype_name(spec[1], where)
    _check(len(func.param_device_indexes) == func.arity, where,
           f"{len(func.param_device_indexes)} param device indexes for {func.arity} params")
    for i, dev in enumerate(func.param_device_indexes):
        _check_index(dev, n_devices, where, f"param {i} device index")
    n = len(func.instructions)
    _check(n > 0, where, "has no instructions")
    for pc, instr in enumerate(func.instructions):
        _check(isinstance(instr, bc.Instruction), f"{where} instruction {pc}",
               f"{instr!r} is not an instruction")
        at = f"{where} instruction {pc} ({instr.opcode.name})"
        for value in instr.fields():
            _check(_is_int64(value), at, f"operand {value!r} is not an int64")
        for reg in instr.registers():
            _check_index(reg, size, at, "register")
        for rule in _OPERAND_RULES.get(type(instr), ()):
            rule(exe, instr, at, n_devices)
        for target in _jump_targets(instr, pc):
            _check_index(target, n, at, "jump target")
        _check(pc + 1 < n or isinstance(instr, _NO_FALLTHROUGH), at,
               "the last instruction must be Ret, Goto, If or Fatal")
    if func.segments:
        problem = check_segments(func.instructions, func.segments, exe.host_memory_constant)
        _check(problem is None, where, f"fused {problem}")


def _check_dtype_name(name: str, where: str) -> None:
    from kiln.runtime.dtype import DataType

    try:
        DataType(name)
    except TVMError as err:
        raise TVMError(f"invalid VM executable: {where}: {err}") from None


def _jump_targets(instr: bc.Instruction, pc: int) -> Iterable[int]:
    if isinstance(instr, bc.If):
        _check(instr.true_offset != 0 and instr.false_offset != 0, f"If at {pc}",
               "jump offsets must be non-zero")
        return (pc + instr.true_offset, pc + instr.false_offset)
    if isinstance(instr, bc.Goto):
        _check(instr.pc_offset != 0, f"Goto at {pc}", "a zero offset loops forever")
        return (pc + instr.pc_offset,)
    return ()


def _rule_callee(exe, instr, at, n_devices):
    _check_index(instr.func_index, len(exe.functions), at, "function index")
    arity = exe.functions[instr.func_index].arity
    if isinstance(instr, bc.Invoke):
        _check(len(instr.args) == arity, at,
               f"passes {len(instr.args)} args to {exe.functions[instr.func_index].name!r} "
               f"which takes {arity}")
    else:
        _check(len(instr.free_vars) <= arity, at,
               f"captures {len(instr.free_vars)} values but the function takes {arity}")


def _rule_packed(exe, instr, at, n_devices):
    _check_index(instr.packed_index, len(exe.primitive_names), at, "packed index")
    _check(0 <= instr.output_size <= len(instr.args), at,
           f"output_size {instr.output_size} exceeds arity {len(instr.args)}")


def _rule_const(exe, instr, at, n_devices):
    _check_index(instr.const_index, len(exe._constants), at, "constant index")
    _check_index(instr.device_index, n_devices, at, "device index")


def _rule_device(exe, instr, at, n_devices):
    _check_index(instr.device_index, n_devices, at, "device index")
    _check(instr.alignment > 0, at, f"alignment {instr.alignment} must be positive")
    _rule_dtype(exe, instr, at, n_devices, instr.dtype_hint)
    _check(all(d >= 0 for d in instr.shape), at, f"negative dimension in {instr.shape}")


def _rule_copy(exe, instr, at, n_devices):
    _check_index(instr.src_device_index, n_devices, at, "source device index")
    _check_index(instr.dst_device_index, n_devices, at, "destination device index")


def _rule_dtype(exe, instr, at, n_devices, dtype=None):
    from kiln.runtime.dtype import DataType

    try:
        DataType.from_fields(*(dtype or instr.dtype))
    except TVMError as err:
        raise TVMError(f"invalid VM executable: {at}: {err}") from None


def _rule_shape(exe, instr, at, n_devices):
    _rule_dtype(exe, instr, at, n_devices)
    _check(all(d >= 0 for d in instr.shape), at, f"negative dimension in {instr.shape}")


def _rule_field_index(exe, instr, at, n_devices):
    _check(instr.field_index >= 0, at, f"field index {instr.field_index} is negative")


def _rule_tag(exe, instr, at, n_devices):
    _check(-(1 << 31) <= instr.tag < (1 << 31), at, f"constructor tag {instr.tag} is not int32")


_OPERAND_RULES = {
    bc.Invoke: (_rule_callee,),
    bc.AllocClosure: (_rule_callee,),
    bc.InvokePacked: (_rule_packed,),
    bc.LoadConst: (_rule_const,),
    bc.AllocStorage: (_rule_device,),
    bc.DeviceCopy: (_rule_copy,),
    bc.AllocTensor: (_rule_shape,),
    bc.AllocTensorReg: (_rule_dtype,),
    bc.GetField: (_rule_field_index,),
    bc.AllocADT: (_rule_tag,),
}
