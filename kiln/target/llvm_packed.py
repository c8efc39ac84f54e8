"""The ``llvm`` target's packed-ABI wrappers and module glue, emitted as LLVM IR.

Entry points: :func:`packed_wrappers_ir` (a kernel's packed function, printed from the same
:mod:`~kiln.target.packed_checks` description the C target prints, as IR text that joins the
kernel's own LLVM module), :func:`module_glue_ir` (what a library needs once: ``__tvm_main__``,
``__tvm_module_ctx``, the system-lib constructor, ``call_extern`` trampolines and the error
helper the wrappers call).

With these an ``llvm`` build runs no C compiler before the link: the wrappers are optimized
and emitted with their kernels on kiln's LLVM thread. Only ``pragma_import_c`` sources (and
the trampolines that reach their ``static`` functions) still go through the C toolchain.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.runtime.dtype import DataType, DataTypeCode
from kiln.runtime.error import TVMError
from kiln.target.packed_checks import ARG_ERROR_MESSAGE_LIMIT, WrapperSpec

__all__ = ["ARG_ERROR_FUNCTION", "packed_wrappers_ir", "module_glue_ir"]

# The helper that formats a failed check's message and values (the C prelude's
# kiln_arg_error, ported line by line); hidden: one per library, called by every wrapper.
ARG_ERROR_FUNCTION = "__kiln_arg_error"

# DLTensor member -> index path in kiln's DLTensor struct type
_MEMBER_PATHS = {"data": (0,), "device.device_type": (1, 0), "ndim": (2,),
                 "dtype.code": (3, 0), "dtype.bits": (3, 1), "dtype.lanes": (3, 2),
                 "shape": (4,), "strides": (5,), "byte_offset": (6,)}
# Members whose C type is unsigned and 64 bits wide (C compares them unsigned)
_UNSIGNED_64 = frozenset({"byte_offset"})
_ARITHMETIC = {"+": ("add", "add"), "-": ("sub", "sub"), "*": ("mul", "mul"),
               "/": ("sdiv", "udiv"), "%": ("srem", "urem")}


# Expressions read from memory or arguments, computed once on the straight path.
_LEAVES = frozenset({"NumArgs", "TypeCode", "ArgValue", "Field", "ShapeAt", "StrideAt"})


def _cannot_fault(node: Any) -> bool:
    """Whether computing ``node`` is safe whatever the earlier terms said: it reads no
    ``strides[d]`` (NULL for compact tensors)."""
    kind = type(node).__name__
    if kind == "StrideAt":
        return False
    if kind in ("Binary", "Select"):
        return all(_cannot_fault(child) for child in
                   ((node.a, node.b) if kind == "Binary" else (node.cond, node.a, node.b)))
    return kind != "Cast" or _cannot_fault(node.value)


class _Value:
    """An SSA value (or constant) of the wrapper: its reference, LLVM type and C meaning
    (``int`` signed, ``uint``, ``float``, ``ptr``, ``bool``)."""

    __slots__ = ("ref", "type", "kind")

    def __init__(self, ref: str, ltype: str, kind: str) -> None:
        self.ref, self.type, self.kind = ref, ltype, kind

    def __str__(self) -> str:
        return f"{self.type} {self.ref}"


class _Types:
    """The LLVM spellings a wrapper uses, in the pointer style of the module's llvmlite
    (``i8*`` while it prints typed pointers, ``ptr`` after)."""

    def __init__(self, cg: Any) -> None:
        self.cg = cg
        self.typed = str(cg.void_ptr) != "ptr"
        # named once per module (packed_wrappers_ir defines it): the literal struct spelled
        # in every member access made the text, and LLVM's parsing, half again as long
        self.dltensor = "%kiln.DLTensor"
        self.dltensor_literal = str(cg.dltensor_type())
        self.i8p, self.i32p, self.i64p = (self.pointer(t) for t in ("i8", "i32", "i64"))
        self.dltensor_p = self.pointer(self.dltensor)
        self._scalars: dict[tuple[str, bool], str] = {}

    def pointer(self, pointee: str) -> str:
        return f"{pointee}*" if self.typed else "ptr"

    def of(self, dtype: str, storage: bool = False) -> str:
        """The LLVM type of a kiln dtype (``storage``: as it sits in memory)."""
        key = (dtype, storage)
        if key not in self._scalars:
            self._scalars[key] = str(self.cg.ltype(dtype, storage=storage))
        return self._scalars[key]


class _WrapperText:
    """Prints one :class:`WrapperSpec` as LLVM IR text (llvmlite's IR objects cost ~40 ms
    of Python per wrapper; text a few).

    The IR is kept small, since LLVM's time grows with it: a value read on the straight path
    of checks is read once (it dominates every later use), conditions that cannot fault are
    computed without branches, and every failed check jumps to one block that reports it.
    """

    def __init__(self, spec: WrapperSpec, types: _Types, unpacked_here: bool) -> None:
        self.spec, self.t = spec, types
        self.unpacked_here = unpacked_here
        self.lines: list[str] = []
        self.globals: list[str] = []
        self.count = 0
        self.block = "entry"
        self.locals: dict[str, _Value] = {}
        self.known: dict[str, _Value] = {}  # repr(leaf) -> its value on the straight path
        self.straight = True  # emitting on the path every later block is dominated by
        self.failures: list[tuple[str, str, list[str]]] = []  # block, message, values

    def fresh(self, prefix: str = "t") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def op(self, text: str) -> str:
        """Emit ``%tN = text``; return ``%tN``."""
        ref = "%" + self.fresh()
        self.lines.append(f"  {ref} = {text}")
        return ref

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.block = name

    def text(self) -> str:
        t, spec = self.t, self.spec
        most = max((len(s.values) for s in spec.steps if type(s).__name__ == "Check"),
                   default=0)
        self.lines.append(f"  %got = alloca [{max(most, 1)} x i64]")
        for step in spec.steps:
            getattr(self, f"step_{type(step).__name__}")(step)
        self.report_failures(most)
        params = (f"{t.i8p} %args, {t.i32p} %type_codes, i32 %num_args, {t.i8p} "
                  f"%out_ret_value, {t.i32p} %out_ret_tcode, {t.i8p} %resource_handle")
        # LLVM's O3 pipeline and instruction selection cost ~20 ms on a 4-tensor wrapper,
        # optnone ~6 ms, and the unoptimized checks cost ~2 ns more per call (measured
        # through the graph executor's C loop): not worth optimizing
        head = f'define i32 @"{spec.name}"({params}) noinline optnone {{'
        return "\n".join([*self.globals, head, "entry:", *self.lines, "}", ""])

    def unpacked_types(self) -> list[str]:
        return [self.t.pointer(self.t.of(dtype, storage=True)) if pointer else self.t.of(dtype)
                for dtype, pointer in self.spec.params]

    def declaration(self) -> str:
        """The declaration of ``<name>_unpacked`` when it lives in another module."""
        return (f'declare i32 @"{self.spec.name}_unpacked"'
                f'({", ".join(self.unpacked_types())})')

    # -- steps ---------------------------------------------------------------------------
    def step_Check(self, step: Any) -> None:
        failed = self.as_bool(self.eval(step.cond))
        bad, ok = self.fresh("bad_argument"), self.fresh("checked")
        self.lines.append(f"  br i1 {failed}, label %{bad}, label %{ok}")
        self.label(bad)
        self.straight = False
        values = [self.as_i64(self.eval(node)) for node in step.values]
        self.straight = True
        self.failures.append((self.block, self.message(step.message), values))
        self.lines.append("  br label %report")
        self.label(ok)

    def message(self, text: str) -> str:
        """A private constant C string; its address as an ``i8*`` constant."""
        line, ref = _string_constant(f"{self.spec.name}.message{len(self.globals)}", text,
                                     self.t)
        self.globals.append(line)
        return ref

    def report_failures(self, most: int) -> None:
        """The one block every failed check jumps to: the values go to the array the error
        helper formats, and the call returns its -1."""
        t = self.t
        if not self.failures:
            return
        self.label("report")

        def joined(ltype: str, pick) -> str:
            incoming = ", ".join(f"[ {pick(f)}, %{f[0]} ]" for f in self.failures)
            return self.op(f"phi {ltype} {incoming}")

        message = joined(t.i8p, lambda f: f[1])
        count = joined("i32", lambda f: str(len(f[2])))
        values = [joined("i64", lambda f, i=index: f[2][i] if i < len(f[2]) else "0")
                  for index in range(most)]
        for index, value in enumerate(values):
            slot = self.op(f"getelementptr [{most} x i64], {t.pointer(f'[{most} x i64]')} "
                           f"%got, i32 0, i32 {index}")
            self.lines.append(f"  store i64 {value}, {t.i64p} {slot}")
        got = self.op(f"bitcast {t.pointer(f'[{max(most, 1)} x i64]')} %got to {t.i64p}")
        result = self.op(f"call i32 @{ARG_ERROR_FUNCTION}({t.i8p} {message}, {t.i64p} {got}, "
                         f"i32 {count})")
        self.lines.append(f"  ret i32 {result}")

    def step_Let(self, step: Any) -> None:
        value = self.eval(step.value)
        if step.ctype == "DLTensor*":  # typed once: every member read starts from it
            t = self.t
            value = _Value(self.op(f"bitcast {value} to {t.dltensor_p}"), t.dltensor_p, "ptr")
        self.locals[step.name] = value

    def step_Return(self, step: Any) -> None:
        values = [self.eval(node) for node in step.args]
        args = ", ".join(f"{ltype} {v.ref}" for ltype, v in zip(self.unpacked_types(), values))
        result = self.op(f'tail call i32 @"{step.callee}"({args})')
        self.lines.append(f"  ret i32 {result}")

    # -- expressions ---------------------------------------------------------------------
    def eval(self, node: Any) -> _Value:
        kind = type(node).__name__
        if kind not in _LEAVES:
            return getattr(self, f"eval_{kind}")(node)
        key = repr(node)
        value = self.known.get(key)
        if value is None:
            value = getattr(self, f"eval_{kind}")(node)
            if self.straight:
                self.known[key] = value
        return value

    def eval_Const(self, node: Any) -> _Value:
        return _Value(str(node.value), "i64", "int")

    def eval_NumArgs(self, node: Any) -> _Value:
        return _Value("%num_args", "i32", "int")

    def eval_Local(self, node: Any) -> _Value:
        return self.locals[node.name]

    def eval_TypeCode(self, node: Any) -> _Value:
        t = self.t
        slot = self.op(f"getelementptr i32, {t.i32p} %type_codes, i64 {node.index}")
        return _Value(self.op(f"load i32, {t.i32p} {slot}"), "i32", "int")

    def eval_ArgValue(self, node: Any) -> _Value:
        ltype, kind = {"v_int64": ("i64", "int"), "v_float64": ("double", "float"),
                       "v_handle": (self.t.i8p, "ptr")}[node.member]
        t = self.t
        pointer = t.pointer(ltype)
        # a TVMValue is 8 bytes whatever the pointer size (a 32-bit target's handles too)
        slot = self.op(f"getelementptr i64, {t.i64p} {self.value_slots()}, i64 {node.index}")
        if ltype != "i64":
            slot = self.op(f"bitcast {t.i64p} {slot} to {pointer}")
        return _Value(self.op(f"load {ltype}, {pointer} {slot}"), ltype, kind)

    def value_slots(self) -> str:
        """``args`` as an ``i64*``: one slot per TVMValue."""
        if "args" not in self.known:
            self.known["args"] = _Value(self.op(f"bitcast {self.t.i8p} %args to {self.t.i64p}"),
                                        self.t.i64p, "ptr")
        return self.known["args"].ref

    def load_member(self, tensor: str, member: str) -> _Value:
        t = self.t
        path = ", ".join(f"i32 {i}" for i in (0, *_MEMBER_PATHS[member]))
        address = self.op(f"getelementptr {t.dltensor}, {self.locals[tensor]}, {path}")
        ltype = _member_type(t, member)
        return _Value(self.op(f"load {ltype}, {t.pointer(ltype)} {address}"), ltype,
                      "ptr" if member in ("data", "shape", "strides") else "int")

    def eval_Field(self, node: Any) -> _Value:
        value = self.load_member(node.tensor, node.member)
        if node.member.startswith("dtype."):  # uint8/uint16: C promotes them to int
            return _Value(self.op(f"zext {value} to i64"), "i64", "int")
        if node.member in _UNSIGNED_64:
            return _Value(value.ref, value.type, "uint")
        return value

    def _array_at(self, tensor: str, array: str, dim: int) -> _Value:
        t = self.t
        key = f"{tensor}->{array}"
        base = self.known.get(key)
        if base is None:
            base = self.load_member(tensor, array)
            if self.straight:
                self.known[key] = base
        slot = self.op(f"getelementptr i64, {base}, i64 {dim}")
        return _Value(self.op(f"load i64, {t.i64p} {slot}"), "i64", "int")

    def eval_ShapeAt(self, node: Any) -> _Value:
        return self._array_at(node.tensor, "shape", node.dim)

    def eval_StrideAt(self, node: Any) -> _Value:
        return self._array_at(node.tensor, "strides", node.dim)

    def eval_Binary(self, node: Any) -> _Value:
        if node.op in ("&&", "||"):
            return self.short_circuit(node)
        lhs, rhs = self.eval(node.a), self.eval(node.b)
        if lhs.kind == "ptr":  # only compared with NULL
            return _Value(self.op(f"icmp {_ICMP[node.op][0]} {lhs}, null"), "i1", "bool")
        unsigned = "uint" in (lhs.kind, rhs.kind)
        a, c = self.as_i64(lhs), self.as_i64(rhs)
        if node.op in _ICMP:
            predicate = _ICMP[node.op][1 if unsigned else 0]
            return _Value(self.op(f"icmp {predicate} i64 {a}, {c}"), "i1", "bool")
        opcode = _ARITHMETIC[node.op][1 if unsigned else 0]
        return _Value(self.op(f"{opcode} i64 {a}, {c}"), "i64", "uint" if unsigned else "int")

    def short_circuit(self, node: Any) -> _Value:
        first = self.as_bool(self.eval(node.a))
        if _cannot_fault(node.b):  # both sides computed, no branch
            second = self.as_bool(self.eval(node.b))
            return _Value(self.op(f"{'and' if node.op == '&&' else 'or'} i1 {first}, {second}"),
                          "i1", "bool")
        start, rhs, done = self.block, self.fresh("rhs"), self.fresh("joined")
        targets = (rhs, done) if node.op == "&&" else (done, rhs)
        self.lines.append(f"  br i1 {first}, label %{targets[0]}, label %{targets[1]}")
        self.label(rhs)
        straight, self.straight = self.straight, False
        second = self.as_bool(self.eval(node.b))
        self.straight = straight
        rhs_end = self.block
        self.lines.append(f"  br label %{done}")
        self.label(done)
        return _Value(self.op(f"phi i1 [ {first}, %{start} ], [ {second}, %{rhs_end} ]"), "i1",
                      "bool")

    def eval_Select(self, node: Any) -> _Value:
        cond = self.as_bool(self.eval(node.cond))
        then, other, done = self.fresh("then"), self.fresh("else"), self.fresh("selected")
        self.lines.append(f"  br i1 {cond}, label %{then}, label %{other}")
        straight, self.straight = self.straight, False
        arms = []
        for block, arm in ((then, node.a), (other, node.b)):
            self.label(block)
            value = self.eval(arm)
            if value.kind != "float":  # integer arms meet as int64 (C's conversions)
                value = _Value(self.as_i64(value), "i64", value.kind)
            arms.append((value, self.block))
            self.lines.append(f"  br label %{done}")
        self.straight = straight
        self.label(done)
        (a, a_end), (c, c_end) = arms
        kind = "float" if a.kind == "float" else ("uint" if "uint" in (a.kind, c.kind)
                                                  else "int")
        phi = self.op(f"phi {a.type} [ {a.ref}, %{a_end} ], [ {c.ref}, %{c_end} ]")
        return _Value(phi, a.type, kind)

    def eval_Cast(self, node: Any) -> _Value:
        return self.convert(self.eval(node.value), DataType(node.dtype))

    def eval_DataPointer(self, node: Any) -> _Value:
        t = self.t
        data = self.load_member(node.tensor, "data")
        if node.with_offset:
            offset = self.load_member(node.tensor, "byte_offset")
            data = _Value(self.op(f"getelementptr i8, {data}, {offset}"), t.i8p, "ptr")
        element = t.pointer(t.of(node.dtype, storage=True))
        return _Value(self.op(f"bitcast {data} to {element}"), element, "ptr")

    # -- conversions ---------------------------------------------------------------------
    def as_i64(self, value: _Value) -> str:
        """The value as C's ``(int64_t)`` of it (widened once on the straight path)."""
        key = f"i64 {value.ref}"
        known = self.known.get(key)
        if known is not None:
            return known.ref
        wide = self._widen(value)
        if self.straight:
            self.known[key] = _Value(wide, "i64", value.kind)
        return wide

    def _widen(self, value: _Value) -> str:
        if value.kind == "ptr":
            return self.op(f"ptrtoint {value} to i64")
        if value.kind == "float":
            return self.op(f"fptosi {value} to i64")
        if value.type == "i64":
            return value.ref
        extend = "zext" if value.kind in ("bool", "uint") else "sext"
        return self.op(f"{extend} {value} to i64")

    def as_bool(self, value: _Value) -> str:
        if value.kind == "bool":
            return value.ref
        return self.op(f"icmp ne i64 {self.as_i64(value)}, 0")

    def convert(self, value: _Value, dtype: DataType) -> _Value:
        """C's ``(T)value`` for the C type of kiln dtype ``dtype``."""
        target = self.t.of(str(dtype))
        if dtype.type_code == DataTypeCode.HANDLE:
            if value.kind == "ptr":
                return value
            return _Value(self.op(f"inttoptr {value} to {target}"), target, "ptr")
        if dtype.bits == 1 and dtype.type_code == DataTypeCode.UINT:  # C's bool: value != 0
            if value.kind == "float":
                return _Value(self.op(f"fcmp une {value}, 0.0"), "i1", "bool")
            return _Value(self.as_bool(value), "i1", "bool")
        if dtype.type_code == DataTypeCode.FLOAT:
            if value.kind == "float":
                if value.type == target:
                    return value
                change = "fptrunc" if _FLOAT_BITS[value.type] > dtype.bits else "fpext"
                return _Value(self.op(f"{change} {value} to {target}"), target, "float")
            to_float = "uitofp" if value.kind in ("uint", "bool") else "sitofp"
            return _Value(self.op(f"{to_float} {value} to {target}"), target, "float")
        signed = dtype.type_code == DataTypeCode.INT
        kind = "int" if signed else "uint"
        if value.kind == "float":
            return _Value(self.op(f"{'fptosi' if signed else 'fptoui'} {value} to {target}"),
                          target, kind)
        if not target.startswith("i") or value.kind == "ptr":
            raise TVMError(f"LLVM packed wrapper: cannot pass a scalar of dtype {dtype}")
        width, wanted = int(value.type[1:]), int(target[1:])
        if width == wanted:
            return _Value(value.ref, target, kind)
        if width > wanted:
            return _Value(self.op(f"trunc {value} to {target}"), target, kind)
        extend = "zext" if value.kind in ("uint", "bool") else "sext"
        return _Value(self.op(f"{extend} {value} to {target}"), target, kind)


def _string_constant(name: str, text: str, t: _Types) -> tuple[str, str]:
    """The definition of a private constant C string ``@name`` and its address as ``i8*``."""
    data = text.encode() + b"\0"
    chars = "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\{c:02X}"
                    for c in data)
    array = f"[{len(data)} x i8]"
    line = f'@"{name}" = private unnamed_addr constant {array} c"{chars}"'
    if not t.typed:
        return line, f'@"{name}"'
    return line, f'getelementptr ({array}, {array}* @"{name}", i64 0, i64 0)'


_ICMP = {"==": ("eq", "eq"), "!=": ("ne", "ne"), "<": ("slt", "ult"), ">": ("sgt", "ugt")}
_FLOAT_BITS = {"half": 16, "float": 32, "double": 64}


def _member_type(types: _Types, member: str) -> str:
    return {"data": types.i8p, "device.device_type": "i32", "ndim": "i32", "dtype.code": "i8",
            "dtype.bits": "i8", "dtype.lanes": "i16", "shape": types.i64p,
            "strides": types.i64p, "byte_offset": "i64"}[member]


def declare_arg_error(cg: Any):
    """The module's declaration of :data:`ARG_ERROR_FUNCTION`."""
    fn = cg.declare(ARG_ERROR_FUNCTION, cg.i32, [cg.void_ptr, cg.i64.as_pointer(), cg.i32])
    # llvmlite prints the linkage word where LLVM reads linkage and visibility: "hidden"
    # keeps the helper out of the library's exports and its calls direct (no PLT)
    fn.linkage = "hidden"
    return fn


def packed_wrappers_ir(cg: Any, specs: Sequence[WrapperSpec]) -> str:
    """LLVM IR text of the packed-ABI functions ``specs`` describe, to append to the text of
    ``cg``'s module: each checks a call's arguments as the C target's wrapper does (same
    messages) and calls ``<name>_unpacked`` (declared here when the module lacks it)."""
    if not specs:
        return ""
    types = _Types(cg)
    parts = [f"{types.dltensor} = type {types.dltensor_literal}"]
    if ARG_ERROR_FUNCTION not in cg.module.globals:
        parts.append(f"declare hidden i32 @{ARG_ERROR_FUNCTION}({types.i8p}, {types.i64p}, "
                     "i32)")
    for spec in specs:
        here = f"{spec.name}_unpacked" in cg.module.globals
        printer = _WrapperText(spec, types, here)
        parts.append(printer.text())
        if not here:
            parts.append(printer.declaration())
    return "\n" + "\n".join(parts) + "\n"


def module_glue_ir(cg: Any, names: Sequence[str], system_lib: bool, module_ctx: bool,
                   externs: dict[str, tuple[Any, list]],
                   wrappers: Sequence[WrapperSpec] = ()) -> str:
    """The IR text of ``cg``'s module with a library's one-off pieces added: the error
    helper, ``__tvm_main__`` (the entry function's name), ``__tvm_module_ctx`` (weak, set by
    the loader), the packed ``wrappers`` given, the constructor registering every function
    with the system library, and the trampolines ``__kiln_extern_<f>`` that ``call_extern``
    goes through (here: straight calls of ``f``; ``externs`` maps ``f`` to its LLVM
    (return type, argument types))."""
    ir, module = cg.ir, cg.module
    _define_arg_error(cg)
    if names:
        text = bytearray(names[0].encode() + b"\0")
        array = ir.ArrayType(cg.i8, len(text))
        main = ir.GlobalVariable(module, array, "__tvm_main__")
        main.linkage, main.global_constant = "weak", True
        main.initializer = ir.Constant(array, text)
    if module_ctx:
        ctx = module.globals.get("__tvm_module_ctx") or ir.GlobalVariable(
            module, cg.void_ptr, "__tvm_module_ctx")
        ctx.linkage = "weak"
        ctx.initializer = ir.Constant(cg.void_ptr, None)
    for name, (ret, arg_types) in externs.items():
        trampoline = cg.declare(f"__kiln_extern_{name}", ret, arg_types)
        b = ir.IRBuilder(trampoline.append_basic_block("entry"))
        result = b.call(cg.declare(name, ret, arg_types), list(trampoline.args))
        b.ret_void() if isinstance(ret, ir.VoidType) else b.ret(result)
    text = str(module) + packed_wrappers_ir(cg, wrappers)
    if system_lib:
        defined = {spec.name for spec in wrappers} | set(module.globals)
        text += _system_lib_constructor(_Types(cg), names, module_ctx, defined)
    return text


def _system_lib_constructor(t: _Types, names: Sequence[str], module_ctx: bool,
                            defined: set[str]) -> str:
    """A load-time constructor registering every packed function (and the module context)
    with the system library, as the C target's ``kiln_register_system_lib``."""
    packed = f"i32 ({t.i8p}, {t.i32p}, i32, {t.i8p}, {t.i32p}, {t.i8p})"
    lines = [f'declare i32 @"{name}"{packed[4:]}' for name in names if name not in defined]
    if "TVMBackendRegisterSystemLibSymbol" not in defined:
        lines.append(f"declare i32 @TVMBackendRegisterSystemLibSymbol({t.i8p}, {t.i8p})")
    symbols = [(name, f'@"{name}"', t.pointer(packed)) for name in names]
    if module_ctx:
        symbols.append(("__tvm_module_ctx", "@__tvm_module_ctx", t.pointer(t.i8p)))
    body = []
    for index, (name, ref, ltype) in enumerate(symbols):
        line, text = _string_constant(f"kiln.symbol{index}", name, t)
        lines.append(line)
        if t.typed:
            ref = f"bitcast ({ltype} {ref} to {t.i8p})"
        body.append(f"  call i32 @TVMBackendRegisterSystemLibSymbol({t.i8p} {text}, "
                    f"{t.i8p} {ref})")
    ctor = t.pointer("void ()")
    lines += ["define internal void @kiln_register_system_lib() {", "entry:", *body,
              "  ret void", "}",
              f"@llvm.global_ctors = appending global [1 x {{ i32, {ctor}, {t.i8p} }}] "
              f"[{{ i32, {ctor}, {t.i8p} }} {{ i32 65535, {ctor} @kiln_register_system_lib, "
              f"{t.i8p} null }}]"]
    return "\n".join(lines) + "\n"


def _define_arg_error(cg: Any) -> None:
    """``i32 __kiln_arg_error(i8* msg, i64* got, i32 count)``: the message (at most
    :data:`ARG_ERROR_MESSAGE_LIMIT` bytes), then the values in decimal joined by ``", "``, set
    as the last error; returns -1. The C prelude's ``kiln_arg_error`` step by step."""
    ir = cg.ir
    i8, i32, i64 = cg.i8, cg.i32, cg.i64
    fn = declare_arg_error(cg)
    fn.attributes.add("cold")
    # runs once per failed call: optimizing it would cost a build ~20 ms of LLVM
    fn.attributes.add("optnone")
    fn.attributes.add("noinline")
    msg, got, count = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    buf = b.alloca(ir.ArrayType(i8, 512), name="buf")
    digits = b.alloca(ir.ArrayType(i8, 24), name="digits")
    pos, index, n = (b.alloca(i32, name=name) for name in ("pos", "i", "n"))
    src, rest = b.alloca(cg.void_ptr, name="src"), b.alloca(i64, name="v")
    b.store(ir.Constant(i32, 0), pos)
    zero = ir.Constant(i32, 0)

    def at(array, index):
        return b.gep(array, [zero, index])

    def push(char):
        p = b.load(pos)
        b.store(char, at(buf, p))
        b.store(b.add(p, ir.Constant(i32, 1)), pos)

    def loop(name, cond_fn, body_fn):
        head, body, done = (fn.append_basic_block(f"{name}_{s}") for s in ("head", "body",
                                                                             "done"))
        b.branch(head)
        b.position_at_end(head)
        b.cbranch(cond_fn(), body, done)
        b.position_at_end(body)
        body_fn()
        b.branch(head)
        b.position_at_end(done)

    # while (*msg && pos < LIMIT) buf[pos++] = *msg++;
    b.store(msg, src)

    def message_left():
        more = b.icmp_unsigned("!=", b.load(b.load(src)), ir.Constant(i8, 0))
        room = b.icmp_signed("<", b.load(pos), ir.Constant(i32, ARG_ERROR_MESSAGE_LIMIT))
        return b.and_(more, room)

    def copy_char():
        s = b.load(src)
        push(b.load(s))
        b.store(b.gep(s, [ir.Constant(i32, 1)]), src)

    loop("message", message_left, copy_char)
    b.store(zero, index)

    def value_left():
        return b.and_(b.icmp_signed("<", b.load(index), count),
                      b.icmp_signed("<", b.load(pos), ir.Constant(i32, 480)))

    def write_value():
        i = b.load(index)
        value = b.load(b.gep(got, [i]))
        negative = b.icmp_signed("<", value, ir.Constant(i64, 0))
        # |value| as unsigned, right for INT64_MIN too: -(v + 1) + 1
        magnitude = b.select(negative, b.add(b.neg(b.add(value, ir.Constant(i64, 1))),
                                             ir.Constant(i64, 1)), value)
        b.store(magnitude, rest)
        b.store(zero, n)
        # do { digits[n++] = '0' + v % 10; v /= 10; } while (v);
        digit_block, after = fn.append_basic_block("digit"), fn.append_basic_block("digits")
        b.branch(digit_block)
        b.position_at_end(digit_block)
        v, k = b.load(rest), b.load(n)
        digit = b.trunc(b.urem(v, ir.Constant(i64, 10)), i8)
        b.store(b.add(digit, ir.Constant(i8, ord("0"))), at(digits, k))
        b.store(b.add(k, ir.Constant(i32, 1)), n)
        quotient = b.udiv(v, ir.Constant(i64, 10))
        b.store(quotient, rest)
        b.cbranch(b.icmp_unsigned("!=", quotient, ir.Constant(i64, 0)), digit_block, after)
        b.position_at_end(after)
        with b.if_then(b.icmp_signed("!=", i, zero)):
            push(ir.Constant(i8, ord(",")))
            push(ir.Constant(i8, ord(" ")))
        with b.if_then(negative):
            push(ir.Constant(i8, ord("-")))

        def pop_digit():
            k = b.sub(b.load(n), ir.Constant(i32, 1))
            b.store(k, n)
            push(b.load(at(digits, k)))

        loop("reverse", lambda: b.icmp_signed(">", b.load(n), zero), pop_digit)
        b.store(b.add(i, ir.Constant(i32, 1)), index)

    loop("values", value_left, write_value)
    b.store(ir.Constant(i8, 0), at(buf, b.load(pos)))
    set_error = cg.declare("TVMAPISetLastError", ir.VoidType(), [cg.void_ptr])
    b.call(set_error, [b.bitcast(buf, cg.void_ptr)])
    b.ret(ir.Constant(i32, -1))
